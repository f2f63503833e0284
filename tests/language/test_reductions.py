"""Free-axis reductions against NumPy, the (P,) broadcast rule, keepdims, masks and the
partition-axis error."""

from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nki
import nki.language as nl
from nki.errors import NKIShapeError

REF = {
    "sum": np.sum,
    "max": np.max,
    "min": np.min,
    "mean": np.mean,
    "prod": np.prod,
    "all": lambda x, axis, keepdims: np.all(x != 0, axis=axis, keepdims=keepdims),
    "var": np.var,
}


def _reduce_kernel(name, axis, keepdims):
    @nki.jit
    def kernel(a):
        x = nl.load(a)
        r = getattr(nl, name)(x, axis=axis, keepdims=keepdims)
        shape = r.shape if len(r.shape) > 1 else (r.shape[0], 1)
        out = nl.ndarray(shape, r.dtype, buffer=nl.shared_hbm)
        nl.store(out, r)
        return out

    return kernel


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", [1, [1, 2], 2, -1])
@pytest.mark.parametrize("dt", ["float32", "bfloat16", "int32"])
@pytest.mark.parametrize("name", sorted(REF))
def test_reduction_matches_numpy(name, dt, axis, keepdims):
    rng = np.random.default_rng(1)
    if dt == "int32":
        x = rng.integers(-4, 5, (8, 4, 6)).astype(np.int32)
        if name == "prod":
            x = rng.integers(1, 3, (8, 4, 6)).astype(np.int32)
    else:
        x = rng.uniform(0.5, 1.5, (8, 4, 6)).astype(np.float32).astype(dt)
    got = _reduce_kernel(name, axis, keepdims)(x)
    ax = tuple(a % 3 for a in (axis if isinstance(axis, list) else [axis]))
    want = REF[name](x.astype(np.float64), axis=ax, keepdims=keepdims)
    want = want.reshape(got.shape)
    if dt == "int32" and name in ("sum", "max", "min", "prod"):
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want)
    elif name == "all":
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, want.astype(np.bool_))
    else:
        tol = 2.0**-7 if dt == "bfloat16" else 1e-5  # one bf16 ulp of the rounded result
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=1e-6)


def test_row_reduction_is_a_partition_vector_that_broadcasts():
    @nki.jit
    def kernel(a):
        x = nl.load(a)
        m = nl.max(x, axis=1)
        assert m.shape == (128,)
        y = nl.exp(nl.subtract(x, m))
        s = nl.sum(y, axis=1)
        z = nl.divide(y, s)
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, z)
        return out

    x = np.random.default_rng(0).normal(size=(128, 512)).astype(np.float32)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(kernel(x), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-8)


def test_masked_reduction_only_reads_selected_elements():
    @nki.jit
    def kernel(a):
        i_p = nl.arange(8)[:, None]
        i_f = nl.arange(16)[None, :]
        x = nl.load(a)
        out = nl.ndarray((8, 1), nl.float32, buffer=nl.shared_hbm)
        r = nl.zeros((8, 1), nl.float32)
        r[...] = nl.sum(x[i_p, i_f], axis=1, keepdims=True, mask=(i_f < 10))
        nl.store(out, r)
        return out

    x = np.arange(128, dtype=np.float32).reshape(8, 16)
    np.testing.assert_array_equal(kernel(x)[:, 0], x[:, :10].sum(1))


def test_partition_axis_reduction_is_rejected():
    @nki.jit
    def kernel(a):
        x = nl.load(a)
        s = nl.sum(x, axis=0)
        out = nl.ndarray((1, 8), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, s)
        return out

    line = inspect.getsourcelines(kernel.fn)[1] + 3
    with pytest.raises(NKIShapeError) as ei:
        kernel(np.zeros((4, 8), np.float32))
    assert ei.value.code == "err_unsupported_reduction_axis"
    assert "partition axis" in str(ei.value)
    assert ei.value.loc.line == line


def test_mean_of_bf16_is_fp32_math():
    x = np.full((2, 256), 1.0 + 2**-7, dtype=ml_dtypes.bfloat16)
    x[:, 1::2] = 1.0
    got = _reduce_kernel("mean", 1, True)(x)
    assert float(got[0, 0]) == float(ml_dtypes.bfloat16(1.0 + 2**-8))


def test_partition_vector_broadcasts_over_every_free_axis_of_a_3d_tile():
    @nki.jit
    def kernel(a, c):
        x = nl.load(a)  # (P, 4, 6)
        m = nl.max(x, axis=[1, 2])  # (P,)
        col = nl.load(c)  # (P, 1)
        z = nl.add(nl.subtract(x, m), col)
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, z)
        return out

    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 4, 6)).astype(np.float32)
    c = rng.standard_normal((8, 1)).astype(np.float32)
    want = x - x.max(axis=(1, 2), keepdims=True) + c[:, :, None]
    np.testing.assert_allclose(kernel(x, c), want, rtol=1e-6)


def test_incompatible_tile_shapes_name_the_op():
    @nki.jit
    def kernel(a, b):
        nl.add(nl.load(a), nl.load(b))

    with pytest.raises(NKIShapeError) as ei:
        kernel(np.zeros((8, 4), np.float32), np.zeros((8, 6), np.float32))
    assert ei.value.code == "err_broadcast_shape_mismatch"
    assert "nl.add" in str(ei.value) and "[8, 4]" in str(ei.value)


def test_op_table_markdown_lists_every_row():
    from nki.optable import OPS, markdown

    text = markdown()
    for name in OPS:
        if name != "copy":
            assert f"| `{name}` |" in text


_PROP_KERNELS: dict = {}


@given(
    name=st.sampled_from(["sum", "max", "min", "mean", "prod"]),
    p=st.integers(1, 128),
    a=st.integers(1, 6),
    b=st.integers(1, 9),
    axes=st.sampled_from([(1,), (2,), (1, 2)]),
    keepdims=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_reduction_property(name, p, a, b, axes, keepdims, seed):
    key = (name, axes, keepdims)
    if key not in _PROP_KERNELS:
        _PROP_KERNELS[key] = _reduce_kernel(name, list(axes), keepdims)
    x = np.random.default_rng(seed).uniform(0.5, 1.5, (p, a, b)).astype(np.float32)
    got = _PROP_KERNELS[key](x)
    want = REF[name](x.astype(np.float64), axis=axes, keepdims=keepdims).reshape(got.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_pooling_reduces_non_contiguous_axes_of_a_5d_index():
    """2x2 max pooling the way classic kernels write it: one 5-D affine view of the input
    tile, then nl.max over the two window axes [2, 4]."""

    @nki.jit
    def maxpool(a):
        p, h, w = a.shape
        ho, wo = h // 2, w // 2
        out = nl.ndarray((p, ho, wo), a.dtype, buffer=nl.shared_hbm)
        x = nl.load(a)
        i0, i1, i2, i3, i4 = nl.mgrid[0:p, 0:ho, 0:2, 0:wo, 0:2]
        r = nl.max(x[i0, 2 * i1 + i2, 2 * i3 + i4], axis=[2, 4])
        nl.store(out, r)
        return out

    x = np.random.default_rng(4).standard_normal((128, 30, 14)).astype(np.float32)
    want = x.reshape(128, 15, 2, 7, 2).max(axis=(2, 4))
    np.testing.assert_array_equal(maxpool(x), want)


def test_sliding_window_max_with_a_partition_mask():
    @nki.jit
    def window_max(a):
        h, w = a.shape
        k = 3
        out = nl.ndarray((h, w - k + 1), a.dtype, buffer=nl.shared_hbm)
        i_h, i_w = nl.mgrid[0:128, 0:w]
        x = nl.load(a[i_h, i_w], mask=(i_h < h))
        i_h, i_w, i_k = nl.mgrid[0:128, 0 : w - k + 1, 0:k]
        r = nl.max(x[i_h, i_w + i_k], axis=[2], mask=(i_h < h))
        i_h, i_w = nl.mgrid[0:128, 0 : w - k + 1]
        nl.store(out[i_h, i_w], value=r, mask=(i_h < h))
        return out

    x = np.random.default_rng(5).standard_normal((100, 20)).astype(np.float32)
    want = np.stack([x[:, j : j + 3].max(1) for j in range(18)], axis=1)
    np.testing.assert_array_equal(window_max(x), want)
