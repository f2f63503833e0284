"""where / softmax / rms_norm / randomness / shaping ops / gathers and indirect DMA, op=
values, and nki.typing annotations."""

from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.language as nl
import nki.typing as nt
from nki.errors import NKIError, NKIIndexError, NKIShapeError, NKITypeError
from nki.optable import lookup

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


def _rand_kernel(seed):
    @nki.jit
    def kernel(a):
        if seed is not None:
            nl.random_seed(seed)
        r1 = nl.rand((128, 256), nl.float32)
        x = nl.load(a)
        d = nl.dropout(x, 0.25)
        return _out(r1), _out(d)

    return kernel


def test_rand_and_dropout_are_seeded_and_reproducible():
    a = np.ones((128, 256), np.float32)
    r1, d1 = _rand_kernel(42)(a)
    r2, d2 = _rand_kernel(42)(a)
    r3, _ = _rand_kernel(7)(a)
    assert np.array_equal(r1, r2) and np.array_equal(d1, d2)
    assert not np.array_equal(r1, r3)
    assert r1.min() >= 0.0 and r1.max() < 1.0 and abs(r1.mean() - 0.5) < 0.01
    dropped = np.mean(d1 == 0)
    assert abs(dropped - 0.25) < 0.01
    assert np.all((d1 == 0) | (d1 == 1))  # kept elements pass through unscaled
    r4, _ = _rand_kernel(None)(a)  # default seed: reproducible too
    r5, _ = _rand_kernel(None)(a)
    assert np.array_equal(r4, r5)


def test_random_seed_from_a_tile_and_dropout_rate_per_partition():
    @nki.jit
    def kernel(a, rates):
        seed = nl.full((1, 1), 42, dtype=nl.int32)
        nl.random_seed(seed)
        r1 = nl.rand((4, 8), nl.float32)
        nl.random_seed(seed)
        r2 = nl.rand((4, 8), nl.float32)
        d = nl.dropout(nl.load(a), nl.load(rates))
        return _out(nl.equal(r1, r2)), _out(d)

    a = np.ones((4, 1000), np.float32)
    rates = np.array([[0.0], [1.0], [0.5], [0.1]], np.float32)
    eq, d = kernel(a, rates)
    assert eq.all()
    assert np.all(d[0] == 1) and np.all(d[1] == 0)
    assert 0.4 < np.mean(d[2] == 0) < 0.6 and 0.05 < np.mean(d[3] == 0) < 0.15


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


def test_expand_dims_only_trailing():
    @nki.jit
    def kernel(a):
        nl.expand_dims(nl.load(a), 1)

    with pytest.raises(NKIShapeError) as ei:
        kernel(np.zeros((4, 4), np.float32))
    assert ei.value.code == "err_expand_dims_non_trailing_axis"


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


@nki.jit
def gather_rows(data, idx):
    n = idx.shape[0]
    i_p = nl.arange(n)[:, None]
    i_f = nl.arange(data.shape[1])[None, :]
    it = nl.load(idx)
    x = nl.load(data[it[i_p, 0], i_f])
    return _out(x)


def test_indirect_load_on_the_partition_dim():
    rng = np.random.default_rng(4)
    data = rng.standard_normal((1000, 64)).astype(np.float32)
    idx = rng.integers(0, 1000, (128, 1)).astype(np.int32)
    np.testing.assert_array_equal(gather_rows(data, idx), data[idx[:, 0]])
    assert "sb" in str(gather_rows.last_ir).split("dma.load(data[")[1].split(",")[0]


def test_indirect_load_out_of_bounds_is_a_runtime_error():
    data = np.zeros((10, 8), np.float32)
    idx = np.array([[3], [10]], np.int32)
    with pytest.raises(NKIIndexError) as ei:
        gather_rows(data, idx)
    assert "10" in str(ei.value)


def test_indirect_index_on_a_free_dim_is_rejected():
    @nki.jit
    def kernel(data, idx):
        it = nl.load(idx)
        i_p = nl.arange(4)[:, None]
        nl.load(data[i_p, it[i_p, 0]])

    line = inspect.getsourcelines(kernel.fn)[1] + 4
    with pytest.raises(NKIIndexError) as ei:
        kernel(np.zeros((4, 8), np.float32), np.zeros((4, 1), np.int32))
    assert ei.value.code == "err_indirect_indices_free_dim"
    assert ei.value.loc.line == line


@pytest.mark.parametrize(
    "fn,name",
    [(nl.add, "add"), (nl.max, "maximum"), (nl.maximum, "maximum"), (nl.sum, "add"),
     (nl.multiply, "multiply"), (np.add, "add"), (np.multiply, "multiply"), (np.max, "maximum"),
     (np.subtract, "subtract"), (np.right_shift, "right_shift"), ("add", "add")],
)  # fmt: skip
def test_ops_as_values(fn, name):
    assert lookup(fn).name == name


def test_unknown_op_value_is_a_clear_error():
    with pytest.raises(NKITypeError) as ei:
        lookup(np.cumsum)
    assert ei.value.code == "err_unsupported_op"


# ---- nki.typing ---------------------------------------------------------------------------


@nki.jit
def annotated(a: nt.tensor[128, 512]):
    return _out(nl.load(a))


def test_shape_annotation_checked_at_trace_time():
    x = np.ones((128, 512), np.float32)
    np.testing.assert_array_equal(annotated(x), x)
    with pytest.raises(NKIShapeError) as ei:
        annotated(np.ones((128, 256), np.float32))
    assert ei.value.code == "err_annotation_shape_mismatch"
    assert "128, 512" in str(ei.value) and "256" in str(ei.value)


def test_mutable_tensor_may_be_written_and_is_returned():
    @nki.jit
    def inc(a: nt.mutable_tensor):
        nl.store(a, nl.add(nl.load(a), 1.0))
        return a

    a = np.zeros((4, 8), np.float32)
    out = inc(a)
    assert np.all(out == 1) and np.all(a == 1)


def test_writing_an_immutable_parameter_is_an_error():
    @nki.jit
    def bad(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(b, nl.load(a))
        nl.store(out, nl.load(a))
        return out

    line = inspect.getsourcelines(bad.fn)[1] + 3
    with pytest.raises(NKIError) as ei:
        bad(np.zeros((4, 8), np.float32), np.zeros((4, 8), np.float32))
    assert ei.value.code == "err_cannot_update_immutable_parameter"
    assert "'b'" in str(ei.value)
    assert ei.value.loc.line == line


def test_legacy_kernel_writes_its_output_parameter():
    @nki.jit
    def legacy(a, out):
        nl.store(out, nl.multiply(nl.load(a), 2.0))

    a = np.full((4, 8), 3.0, np.float32)
    out = np.zeros_like(a)
    assert legacy(a, out) is None
    assert np.all(out == 6)


@nki.jit
def annotated_locals(a):
    x: nt.tensor[128, 512] = nl.load(a)
    y: nt.tensor[128, 256] = nl.load(a[:, 0:256])
    return _out(nl.add(x[:, 0:256], y))


def test_local_shape_annotations_are_checked():
    x = np.ones((128, 512), np.float32)
    np.testing.assert_array_equal(annotated_locals(x), 2 * x[:, :256])

    @nki.jit
    def wrong(a):
        x: nt.tensor[128, 256] = nl.load(a)
        return _out(x)

    line = inspect.getsourcelines(wrong.fn)[1] + 2
    with pytest.raises(NKIShapeError) as ei:
        wrong(x)
    assert ei.value.code == "err_annotation_shape_mismatch"
    assert ei.value.loc.line == line
    assert "'x'" in str(ei.value) and "(128, 512)" in str(ei.value)


def test_mutable_parameter_must_be_returned():
    @nki.jit
    def not_returned(a: nt.mutable_tensor):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(a, nl.load(a))
        nl.store(out, nl.load(a))
        return out

    line = inspect.getsourcelines(not_returned.fn)[1] + 3
    with pytest.raises(NKIError) as ei:
        not_returned(np.zeros((4, 4), np.float32))
    assert ei.value.code == "err_mutable_parameter_not_returned"
    assert ei.value.loc.line == line


def test_indirect_store_scatters_rows():
    @nki.jit
    def scatter(data: nt.mutable_tensor, idx, vals):
        i_p = nl.arange(4)[:, None]
        i_f = nl.arange(8)[None, :]
        it = nl.load(idx)
        nl.store(data[it[i_p, 0], i_f], nl.load(vals))
        return data

    d = np.zeros((10, 8), np.float32)
    vals = np.arange(32, dtype=np.float32).reshape(4, 8)
    out = scatter(d, np.array([[1], [3], [5], [9]], np.int32), vals)
    want = np.zeros((10, 8), np.float32)
    want[[1, 3, 5, 9]] = vals
    np.testing.assert_array_equal(out, want)


def test_atomic_rmw_scatter_add_keeps_every_duplicate_update():
    @nki.jit
    def scatter_add(grad, idx, table: nt.mutable_tensor):
        i_p = nl.arange(grad.shape[0])[:, None]
        i_f = nl.arange(grad.shape[1])[None, :]
        it = nl.load(idx)
        nl.atomic_rmw(table[it[i_p, 0], i_f], nl.load(grad), op=np.add)
        return table

    rng = np.random.default_rng(8)
    grad = rng.integers(-5, 5, (128, 16)).astype(np.float32)
    idx = rng.integers(0, 10, (128, 1)).astype(np.int32)  # many repeated rows
    table = np.ones((10, 16), np.float32)
    out = scatter_add(grad, idx, table)
    want = np.ones((10, 16), np.float32)
    np.add.at(want, idx[:, 0], grad)
    np.testing.assert_array_equal(out, want)


def test_atomic_rmw_max_and_bad_op():
    @nki.jit
    def rmw_max(v, dst: nt.mutable_tensor):
        nl.atomic_rmw(dst, nl.load(v), nl.maximum)
        return dst

    v = np.array([[1, 5, -2]], np.int32)
    d = np.array([[3, 3, 3]], np.int32)
    assert rmw_max(v, d).tolist() == [[3, 5, 3]]

    @nki.jit
    def bad(v, dst: nt.mutable_tensor):
        nl.atomic_rmw(dst, nl.load(v), np.divide)
        return dst

    with pytest.raises(NKITypeError) as ei:
        bad(v, d)
    assert ei.value.code == "err_unsupported_op"


def test_shared_constant_in_a_grid_is_not_a_race():
    """Every instance of a launch sees the same compile-time constant (no write to race on)."""

    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ident = nl.shared_identity_matrix(n=128, dtype=nl.float32)
        i = nl.program_id(0)
        x = nl.load(a[i * 128 : (i + 1) * 128, :])
        nl.store(out[i * 128 : (i + 1) * 128, :], nl.copy(nl.matmul(nl.load(ident), x)))
        return out

    a = np.random.default_rng(10).standard_normal((256, 32)).astype(np.float32)
    np.testing.assert_allclose(kernel[2](a), a, rtol=1e-6)


def test_shared_constant_and_identity_matrix():
    @nki.jit
    def kernel(a):
        ident = nl.shared_identity_matrix(n=64, dtype=nl.bfloat16)
        c = nl.shared_constant(np.linspace(0, 1, 8).reshape(2, 4))
        x = nl.load(a)  # (64, 32)
        r = nl.matmul(nl.load(ident), x, transpose_x=True)  # identity.T @ x = x
        return _out(r), _out(nl.load(c))

    a = np.random.default_rng(9).standard_normal((64, 32)).astype(ml_dtypes.bfloat16)
    r, c = kernel(a)
    np.testing.assert_array_equal(r, a.astype(np.float32))
    assert c.dtype == np.float32
    np.testing.assert_array_equal(c, np.linspace(0, 1, 8).reshape(2, 4).astype(np.float32))


def test_tile_plus_loop_iterator_is_arithmetic():
    """``t + i * 8`` (and ``nl.add(t, i * 8)``) inside an affine loop adds the iterator's value
    element-wise; only a one-element tile plus an index is a dynamic index."""

    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 3, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        for i in nl.affine_range(3):
            u = t + i * 8
            nl.store(out[:, i, :], nl.subtract(nl.add(u, i), i * 2))
        return out

    x = np.random.default_rng(11).standard_normal((128, 8)).astype(np.float32)
    want = np.stack([x + 8 * i + i - 2 * i for i in range(3)], axis=1)
    np.testing.assert_allclose(kernel(x), want, rtol=1e-6)


def test_isinstance_nt_tensor_on_kernel_arguments():
    """Kernels check their arguments with ``isinstance(x, nt.tensor)`` (optionally a shape)."""

    @nki.jit
    def kernel(x):
        assert isinstance(x, nt.tensor) and isinstance(x, nt.tensor[128, 4])
        assert not isinstance(x, nt.tensor[64, 4]) and not isinstance(3, nt.tensor)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        assert isinstance(t, nt.tensor)
        nl.store(out, t)
        return out

    x = np.ones((128, 4), np.float32)
    np.testing.assert_array_equal(kernel(x), x)


def test_operators_after_an_in_place_update():
    """``acc += ...`` rebinds ``acc``; ``acc / n``, ``acc * s``, ``-acc`` still work."""

    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 3), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 1), dtype=nl.float32, buffer=nl.psum)
        for h in nl.affine_range(2):
            acc += nl.sum(nl.load(x[:, h * 64 : (h + 1) * 64]), axis=[1], keepdims=True)
        res = nl.ndarray((128, 3), dtype=nl.float32)
        res[:, 0:1] = acc / 128
        res[:, 1:2] = acc * 2.0
        res[:, 2:3] = -acc
        nl.store(out, res)
        return out

    x = np.random.default_rng(12).standard_normal((128, 128)).astype(np.float32)
    s = x.astype(np.float64).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(kernel(x), np.hstack([s / 128, 2 * s, -s]), rtol=1e-5, atol=1e-5)


def test_shared_constant_made_inside_a_loop():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 2, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        for e in nl.affine_range(2):
            c = nl.shared_constant(np.arange(1024).reshape(128, 8), dtype=nl.float32)
            nl.store(out[:, e, :], nl.add(nl.load(x[:, e, :]), nl.load(c)))
        return out

    x = np.random.default_rng(13).standard_normal((128, 2, 8)).astype(np.float32)
    want = x + np.arange(1024, dtype=np.float32).reshape(128, 1, 8)
    np.testing.assert_allclose(kernel(x), want, rtol=1e-6)


def test_scalar_forms_of_static_cast_and_atomic_rmw():
    """``nl.static_cast`` of a scalar converts it (float -> int rounds to nearest even, as for
    tiles); ``nl.atomic_rmw`` takes a scalar value and applies it once per index, repeats
    included."""

    @nki.jit
    def kernel(a, idx, dst: nt.mutable_tensor):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        n = nl.static_cast(3.7, nl.int32)
        nl.store(out, nl.load(a) + n)
        i_f = nl.arange(dst.shape[1])[None, :]
        nl.atomic_rmw(dst[nl.load(idx), i_f], value=2.0, op=np.add)
        return out, dst

    a = np.zeros((4, 3), np.float32)
    idx = np.array([[1], [1], [3]], np.int32)
    dst = np.zeros((4, 2), np.float32)
    out, got = kernel(a, idx, dst)
    np.testing.assert_array_equal(out, a + 4)
    want = np.zeros((4, 2), np.float32)
    np.add.at(want, idx[:, 0], 2.0)
    np.testing.assert_array_equal(got, want)
    assert nl.static_cast(2.5, nl.int32) == 2 and nl.static_cast(-1.5, nl.int8) == -2
