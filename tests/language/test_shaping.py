"""Shaping and composite ops: nl.where, softmax, rms_norm, broadcast_to, expand_dims,
static_cast (in and outside a kernel) and gather_flattened, against NumPy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIShapeError

from helpers import stored as _out


def test_where_with_tiles_and_scalars():
    @nki.jit
    def kernel(a, b):
        x = nl.load(a)
        y = nl.load(b)
        return _out(nl.where(nl.greater(x, y), x, 0.0)), _out(nl.where(nl.less(x, 0), y, x))

    rng = np.random.default_rng(0)
    a = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal((32, 1)).astype(np.float32)
    r1, r2 = kernel(a, b)
    np.testing.assert_array_equal(r1, np.where(a > b, a, 0.0))
    np.testing.assert_array_equal(r2, np.where(a < 0, np.broadcast_to(b, a.shape), a))


@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16])
def test_softmax_and_rms_norm(dt):
    @nki.jit
    def kernel(a, w):
        x = nl.load(a)
        wt = nl.load(w)
        return _out(nl.softmax(x, axis=1)), _out(nl.rms_norm(x, wt, axis=1, n=a.shape[1]))

    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 256)).astype(dt)
    w = rng.uniform(0.5, 1.5, (1, 256)).astype(dt)
    sm, rn = kernel(a, w)
    x = a.astype(np.float64)
    e = np.exp(x - x.max(1, keepdims=True))
    want_sm = e / e.sum(1, keepdims=True)
    want_rn = x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-6) * w.astype(np.float64)
    tol = 2.0**-7 if dt is ml_dtypes.bfloat16 else 1e-5
    np.testing.assert_allclose(sm.astype(np.float64), want_sm, rtol=tol, atol=1e-7)
    np.testing.assert_allclose(rn.astype(np.float64), want_rn, rtol=tol, atol=1e-6)


def where_by_index(ids, x, m):
    """Classic: ``nl.where`` on predicates over ``nl.arange`` indices (a sentinel past ``n``
    rows, a causal triangle, that one under a mask)."""
    ids_out = nl.ndarray(ids.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    tri = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    part = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(ids.shape[0])[:, None]
    i_q, i_f = nl.arange(x.shape[0])[:, None], nl.arange(x.shape[1])[None, :]
    raw = nl.load(ids)
    nl.store(ids_out, nl.where(i_p < 100, raw, 7, dtype=nl.int32))
    t = nl.load(x)
    nl.store(tri, nl.where(i_q >= i_f, t, nl.load(m)))
    nl.store(part, nl.where(i_q >= i_f, t, -1.0, mask=i_f < 40))
    return ids_out, tri, part


@pytest.mark.parametrize("backend", ["numpy", "batched", "numba"])
def test_where_on_an_index_predicate(backend):
    rng = np.random.default_rng(2)
    ids = rng.integers(-1000, 1000, (128, 1)).astype(np.int32)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    m = rng.standard_normal((64, 1)).astype(np.float32)
    kernel = nki.jit(where_by_index, api="classic").configure(backend=backend)
    got_ids, tri, part = kernel(ids, x, m)
    rows, cols = np.indices(x.shape)
    np.testing.assert_array_equal(got_ids, np.where(np.arange(128)[:, None] < 100, ids, 7))
    np.testing.assert_array_equal(tri, np.where(rows >= cols, x, np.broadcast_to(m, x.shape)))
    want = np.where(rows >= cols, x, np.float32(-1.0))
    # (the mask leaves columns 40 on unwritten: their stored values are whatever the tile held)
    np.testing.assert_array_equal(part[:, :40], want[:, :40])


def test_broadcast_expand_dims_static_cast():
    @nki.jit
    def kernel(a, row):
        x = nl.load(a)  # (8, 4)
        r = nl.load(row)  # (1, 4)
        b = nl.broadcast_to(r, shape=(8, 4))
        e = nl.expand_dims(x, 2)  # (8, 4, 1)
        assert e.shape == (8, 4, 1)
        e2 = nl.add(e, nl.zeros((8, 4, 3), nl.float32))
        c = nl.static_cast(x, nl.int8)
        return _out(b), _out(e2), _out(c)

    a = (np.arange(32, dtype=np.float32).reshape(8, 4) - 16) * 10.5
    row = np.array([[1, 2, 3, 4]], np.float32)
    b, e2, c = kernel(a, row)
    np.testing.assert_array_equal(b, np.broadcast_to(row, (8, 4)))
    np.testing.assert_array_equal(e2, np.broadcast_to(a[:, :, None], (8, 4, 3)))
    np.testing.assert_array_equal(c, np.clip(np.rint(a), -128, 127).astype(np.int8))


def test_expand_dims_classic_only_trailing():
    @nki.jit
    def kernel(a):
        t = nl.load(a)
        nl.expand_dims(t[...], 1)  # (a classic kernel: nl.par_dim)
        nl.ndarray((nl.par_dim(4), 4), dtype=nl.float32, buffer=nl.sbuf)

    with pytest.raises(NKIShapeError) as ei:
        kernel(np.zeros((4, 4), np.float32))
    assert ei.value.code == "err_expand_dims_non_trailing_axis"
    assert "classic NKI only adds trailing axes" in str(ei.value)


def test_expand_dims_current_adds_free_axes_anywhere():
    @nki.jit
    def kernel(a):
        out = nl.ndarray((8, 1, 3, 1), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        u = nl.ndarray((8, 1, 3, 1), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=u, src=nl.expand_dims(t, [1, -1]))
        nisa.dma_copy(dst=out, src=u)
        return out

    a = np.arange(24, dtype=np.float32).reshape(8, 3)
    np.testing.assert_array_equal(kernel(a), np.expand_dims(a, (1, -1)))


def test_expand_dims_never_before_the_partition_axis():
    @nki.jit
    def kernel(a):
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nl.expand_dims(t, 0)

    with pytest.raises(NKIShapeError) as ei:
        kernel(np.zeros((4, 4), np.float32))
    assert ei.value.code == "err_expand_dims_non_trailing_axis"
    assert "must be free axes (1 to 2)" in str(ei.value)
    assert ei.value.loc.line == kernel.fn.__code__.co_firstlineno + 4


def test_static_cast_outside_a_kernel_converts_numpy_arrays():
    import ml_dtypes

    x = np.array([[1.0009, -2.5, 300.7, np.nan]])
    b = nl.static_cast(x, nl.bfloat16)
    assert b.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(b.astype(np.float32)[0, :3], [1.0, -2.5, 300.0])
    i = nl.static_cast(x, nl.int8)  # round to nearest even, saturate, NaN -> 0
    np.testing.assert_array_equal(i, [[1, -2, 127, 0]])


def test_gather_flattened():
    @nki.jit
    def kernel(data, idx):
        return _out(nl.gather_flattened(nl.load(data), nl.load(idx)))

    rng = np.random.default_rng(3)
    data = rng.standard_normal((16, 4, 8)).astype(np.float32)
    idx = rng.integers(0, 32, (16, 10)).astype(np.uint32)
    got = kernel(data, idx)
    want = np.take_along_axis(data.reshape(16, 32), idx.astype(np.int64), axis=1)
    np.testing.assert_array_equal(got, want)
