"""Classic tile forms that real kernels rely on: one-element-per-partition accesses used as
(P, 1) tiles, tile methods (broadcast_to, astype, expand_dims, assert_shape), HBM views with
another dtype. Each kernel is compared with NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIShapeError

RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.random(shape, dtype=np.float32)


@nki.jit
def column_stats(x):
    # per-row mean and variance stored from single columns of the (P, 2) aggregate
    mean_out = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.shared_hbm)
    var_out = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.shared_hbm)
    mv = nisa.bn_aggr(nisa.bn_stats(nl.load(x)))
    nl.store(mean_out, mv[:, 0])
    nl.store(var_out, mv[:, 1])
    return mean_out, var_out


def test_store_column_of_tile_into_p_by_1():
    x = rand(64, 100)
    mean, var = column_stats(x)
    np.testing.assert_allclose(mean, x.mean(1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(var, x.var(1, keepdims=True), rtol=1e-4)


@nki.jit
def scale_by_column(x, w, j):
    # w[:, j] loaded from HBM is one value per partition: a (P, 1) activation scale
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    w_j = nl.load(w[0 : x.shape[0], j])
    nl.store(out, nisa.activation(op=nl.copy, data=nl.load(x), scale=w_j))
    return out


def test_hbm_column_load_is_a_partition_vector():
    x, w = rand(96, 40), rand(96, 5)
    np.testing.assert_allclose(scale_by_column(x, w, 3), x * w[:, 3:4], rtol=1e-6)


@nki.jit
def chained_scan(a, b):
    # the second half of a scan starts from the last column of the first half
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    ta, tb = nl.load(a), nl.load(b)
    h = a.shape[1] // 2
    c = nl.ndarray(a.shape, dtype=nl.float32)
    c[:, 0:h] = nisa.tensor_tensor_scan(ta[:, 0:h], tb[:, 0:h], 0.0, np.multiply, np.add)
    carry = nl.zeros((a.shape[0], 1), dtype=nl.float32)
    carry[...] = c[:, h - 1]
    c[:, h : 2 * h] = nisa.tensor_tensor_scan(
        ta[:, h : 2 * h], tb[:, h : 2 * h], carry, np.multiply, np.add
    )
    nl.store(out, c)
    return out


def test_scan_initial_from_a_column():
    a, b = rand(32, 16) * 0.9, rand(32, 16)
    want = np.zeros_like(a)
    prev = np.zeros(32, np.float32)
    for i in range(16):
        prev = a[:, i] * prev + b[:, i]
        want[:, i] = prev
    np.testing.assert_allclose(chained_scan(a, b), want, rtol=1e-5)


@nki.jit
def row_broadcast(x, g):
    # a (1, F) row of a 2-D HBM tensor, repeated over the partitions with .broadcast_to
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    row = nl.load(g[1, 0 : x.shape[1]])
    nl.store(out, nl.load(x) * row.broadcast_to(x.shape))
    return out


def test_row_access_and_broadcast_to_method():
    x, g = rand(128, 24), rand(3, 24)
    np.testing.assert_allclose(row_broadcast(x, g), x * g[1][None, :], rtol=1e-6)


@nki.jit
def tile_methods(x):
    out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.load(x).assert_shape(x.shape)
    s = nl.sum(t, axis=1).expand_dims(1)  # (P,) -> (P, 1)
    nl.store(out, (t - s).astype(nl.bfloat16))
    return out


def test_astype_expand_dims_assert_shape():
    x = rand(16, 8)
    got = tile_methods(x).astype(np.float32)
    want = x - x.sum(1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)


def test_assert_shape_mismatch_is_an_error():
    @nki.jit
    def bad(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x).assert_shape((8, 8)))
        return out

    with pytest.raises(NKIShapeError, match="assert_shape"):
        bad(rand(16, 8))


@nki.jit
def bits_of(x):
    # reinterpret float32 HBM data as int32 (no conversion)
    out = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    nl.store(out, nl.load(x.view(nl.int32)))
    return out


def test_hbm_view_reinterprets_bytes():
    x = rand(8, 16) - 0.5
    np.testing.assert_array_equal(bits_of(x), x.view(np.int32))


@nki.jit
def halves(x):
    # int32 viewed as int16: the last dimension doubles
    out = nl.ndarray((x.shape[0], 2 * x.shape[1]), dtype=nl.int16, buffer=nl.shared_hbm)
    nl.store(out, nl.load(x.view(nl.int16)))
    return out


def test_hbm_view_with_smaller_elements():
    x = RNG.integers(-(2**30), 2**30, size=(4, 6)).astype(np.int32)
    np.testing.assert_array_equal(halves(x), x.view(np.int16))


@nki.jit
def transpose_then_matmul(a, b):
    # nl.transpose's result feeds nl.matmul directly (language-level ops place their tiles)
    out = nl.ndarray((a.shape[0], b.shape[0]), dtype=nl.float32, buffer=nl.shared_hbm)
    b_t = nl.transpose(nl.load(b))  # (K, N)
    nl.store(out, nl.copy(nl.matmul(nl.load(a), b_t)))
    return out


def test_transpose_result_feeds_matmul():
    a, b = rand(64, 32), rand(48, 32)
    np.testing.assert_allclose(transpose_then_matmul(a, b), a @ b.T, rtol=1e-5)


def _update_column(col, t):
    # a helper that writes column 0 of the (P, 1) view it is given
    col[:, 0] = nl.add(col[:, 0], nl.sum(t, axis=1))


@nki.jit
def column_views(x):
    # acc[:, j] is a (P, 1) view; indexing it again with [:, 0] addresses the same column
    out = nl.ndarray((x.shape[0], 3), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((x.shape[0], 3), dtype=nl.float32)
    t = nl.load(x)
    for j in range(3):
        _update_column(acc[:, j], t)
        _update_column(acc[:, j], t * float(j))
    nl.store(out, acc)
    return out


def test_column_view_of_a_column_view():
    x = rand(32, 10)
    s = x.sum(1)
    want = np.stack([s * (1 + j) for j in range(3)], axis=1)
    np.testing.assert_allclose(column_views(x), want, rtol=1e-5)


@nki.jit
def mgrid_as_subscript(x):
    # t[nl.mgrid[0:P, 0:F]]: an mgrid object indexes every dimension at once
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x[nl.mgrid[0 : x.shape[0], 0 : x.shape[1]]])
    nl.store(out[nl.mgrid[0 : x.shape[0], 0 : x.shape[1]]], value=nl.negative(t))
    return out


def test_mgrid_object_as_subscript():
    x = rand(24, 40)
    np.testing.assert_array_equal(mgrid_as_subscript(x), -x)


@nki.jit
def tile_reshapes(x):
    # (P, A, B) -> (P, A*B) on a loaded tile, and back on an SBUF buffer at the store
    p, a, b = x.shape
    out = nl.ndarray((p, a * b), dtype=x.dtype, buffer=nl.shared_hbm)
    out3 = nl.ndarray((p, b, a), dtype=x.dtype, buffer=nl.shared_hbm)
    flat = nl.load(x).reshape((p, a * b))
    nl.store(out, flat)
    tr = nl.ndarray((p, b * a), dtype=x.dtype)
    i_p, i_a, i_b = nl.mgrid[0:p, 0:a, 0:b]
    tr[i_p, i_b * a + i_a] = nl.copy(flat[i_p, i_a * b + i_b])
    nl.store(out3, tr.reshape((p, b, a)))
    return out, out3


def test_tile_reshape():
    x = rand(16, 3, 5)
    flat, tr = tile_reshapes(x)
    np.testing.assert_array_equal(flat, x.reshape(16, 15))
    np.testing.assert_array_equal(tr, x.transpose(0, 2, 1))


@nki.jit
def write_through_reshape(a):
    # a reshaped tile is a view: writing it writes the tile, and it sees later writes to the
    # tile (NxD's paged-attention kernels write through such views); per loop iteration too
    out = nl.ndarray((2, 128, 2, 4), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        t = nl.ndarray((nl.par_dim(128), 2, 4), dtype=a.dtype, buffer=nl.sbuf)
        flat = t.reshape((128, 8))
        flat[...] = nl.load(a)
        t[:, 1, :] = nl.multiply(t[:, 1, :], i + 2)
        nl.store(out[i], value=flat.reshape((128, 2, 4)))
    return out


def test_writes_through_a_reshaped_tile_land_in_the_tile():
    a = rand(128, 8)
    want = np.stack([a.reshape(128, 2, 4).copy() for _ in range(2)])
    want[0, :, 1, :] *= 2
    want[1, :, 1, :] *= 3
    for checks in ("static", "full"):
        np.testing.assert_allclose(
            write_through_reshape.configure(checks=checks)(a), want, rtol=1e-6
        )


@nki.jit
def returns_reshaped(a):
    # the caller receives the shape of the returned view, not of the tensor behind it
    out = nl.ndarray((2, 128, 4), dtype=a.dtype, buffer=nl.shared_hbm)
    a3 = a.reshape((2, 128, 4))
    for m in nl.affine_range(2):
        nl.store(out[m], value=nl.load(a3[m]))
    return out.reshape((1024,)), out.reshape((256, 4)).view(nl.int32)


def test_returned_reshape_keeps_its_shape():
    a = np.arange(1024, dtype=np.float32)
    flat, bits = returns_reshaped(a)
    assert flat.shape == (1024,) and bits.shape == (256, 4) and bits.dtype == np.int32
    np.testing.assert_array_equal(flat, a)
    np.testing.assert_array_equal(bits, a.reshape(256, 4).view(np.int32))


def test_tile_reshape_must_keep_partitions():
    @nki.jit
    def bad(x):
        out = nl.ndarray((8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x).reshape((8, 8)))
        return out

    with pytest.raises(NKIShapeError, match="partition"):
        bad(rand(16, 4))


def test_sizeinbytes():
    from nki.language.constants import sizeinbytes

    assert [sizeinbytes(d) for d in (nl.float32, nl.bfloat16, nl.int8)] == [4, 2, 1]
