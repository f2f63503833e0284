"""Every index form of the classic API, checked against NumPy slicing of the same data."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError

from helpers import expect
from helpers import randn as _rand


def test_integer_and_slice_indexing():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a[1, 128:256, 0:64])  # integer on a leading HBM dim, then slices
        nl.store(out[:, :], value=t)
        return out

    a = _rand((3, 256, 100))
    np.testing.assert_array_equal(k(a), a[1, 128:256, 0:64])


def test_ellipsis_and_ds():
    @nki.jit
    def k(a):
        out = nl.ndarray((2, 64, 32), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a[1, nl.ds(16, 64), ...])  # ... fills the remaining (free) axis
        u = nl.load(a[0, nl.ds(0, 64), nl.ds(8, 32)])
        assert t.shape == (64, 48) and u.shape == (64, 32)
        nl.store(out[0, ...], value=t[:, 0:32])
        nl.store(out[1, :, :], value=u)
        return out

    a = _rand((2, 128, 48))
    got = k(a)
    np.testing.assert_array_equal(got[0], a[1, 16:80, 0:32])
    np.testing.assert_array_equal(got[1], a[0, 0:64, 8:40])


def test_arange_affine_with_program_id_and_loop():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        ip = nl.arange(64)[:, None]
        jf = nl.arange(32)[None, :]
        for j in nl.affine_range(a.shape[1] // 32):
            t = nl.load(a[i * 64 + ip, j * 32 + jf])
            nl.store(out[i * 64 + ip, j * 32 + jf], value=t)
        return out

    a = _rand((128, 96))
    np.testing.assert_array_equal(k[2](a), a)


def test_strided_free_access():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 50), dtype=a.dtype, buffer=nl.shared_hbm)
        ip = nl.arange(128)[:, None]
        jf = nl.arange(50)[None, :]
        t = nl.load(a[ip, 2 * jf + 1])  # odd columns
        nl.store(out[ip, jf], value=t)
        return out

    a = _rand((128, 100))
    np.testing.assert_array_equal(k(a), a[:, 1::2])


def test_mgrid_unpacking_and_attributes():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:64]
        g = nl.mgrid[0:128, 0:64]
        t = nl.load(a[i_p, i_f + 64])
        nl.store(out[g.p, g.x], value=t)
        return out

    a = _rand((128, 128))
    np.testing.assert_array_equal(k(a), a[:, 64:])


def test_three_d_index_arrays():
    # a (128, 4, 16) tile read from a (128, 64) tensor as four 16-wide groups
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 4, 16), dtype=a.dtype, buffer=nl.shared_hbm)
        ip = nl.arange(128)[:, None, None]
        ig = nl.arange(4)[None, :, None]
        ie = nl.arange(16)[None, None, :]
        t = nl.load(a[ip, ig * 16 + ie])
        nl.store(out[ip, ig, ie], value=t)
        return out

    a = _rand((128, 64))
    np.testing.assert_array_equal(k(a), a.reshape(128, 4, 16))


def test_broadcasting_index_arrays_give_numpys_shape():
    """``a[ip, ie]`` with ``ip = nl.arange(B)[:, None, None]`` and ``ie = nl.arange(T)[None,
    None, :]`` is a (B, 1, T) tile, as NumPy's indexing gives: the extent-1 axis between the
    broadcast indices belongs to the tile (it is not an unused axis of an mgrid)."""

    @nki.jit
    def k(a):
        b, t = a.shape
        out = nl.ndarray((b, t), dtype=a.dtype, buffer=nl.shared_hbm)
        tile = nl.ndarray((nl.par_dim(b), 1, t), dtype=a.dtype, buffer=nl.sbuf)
        ip, ie = nl.arange(b)[:, None, None], nl.arange(t)[None, None, :]
        loaded = nl.load(a[ip, ie])
        assert loaded.shape == (b, 1, t)
        tile[ip, 0, ie] = nl.multiply(loaded, 2.0)
        nl.store(out[ip, ie], value=tile[ip, 0, ie])
        return out

    a = _rand((4, 64))
    ip, ie = np.arange(4)[:, None, None], np.arange(64)[None, None, :]
    assert a[ip, ie].shape == (4, 1, 64)
    np.testing.assert_array_equal(k(a), a * 2)


def test_an_int_picks_a_position_of_an_index_and_drops_its_axis():
    # NumPy's meaning: i[:, :, 0] of a (B, 1, 1) arange is (B, 1); ie[0, 0, -3] of a (1, 1, 8)
    # one is the element 5 (as a 0-D index: a constant column)
    i_p, i_e = nl.arange(4)[:, None, None], nl.arange(8)[None, None, :]
    assert i_p[:, :, 0].shape == (4, 1)
    picked = i_e[0, 0, -3]
    assert picked.shape == () and picked.expr.base.const == 5
    for bad in (8, -9):
        with pytest.raises(NKIError, match=f"index {bad} for an index of shape"):
            i_e[0, 0, bad]
    with pytest.raises(NKIError, match="too many|for an index of shape"):
        i_p[0, 0, 0, 0]


def test_tiles_that_differ_by_trailing_unit_axes_copy_partition_first():
    """A (P, 1) ``tensor_reduce`` result assigned into a (P, 1, 1) tile, and that tile stored
    into a (P, 1) tensor: NumPy's alignment from the last axis does not fit these, aligning
    from the partition axis does (the element correspondence is the same)."""

    @nki.jit(api="classic")
    def k(v1):
        b, t = v1.shape
        out = nl.ndarray((b, 1), dtype=v1.dtype, buffer=nl.shared_hbm)
        v4 = nl.ndarray((nl.par_dim(b), 1, t), dtype=v1.dtype, buffer=nl.sbuf)
        v5 = nl.ndarray((nl.par_dim(b), 1, 1), dtype=v1.dtype, buffer=nl.sbuf)
        ip, ie = nl.arange(b)[:, None, None], nl.arange(t)[None, None, :]
        v4[ip, 0, ie] = nl.load(v1[ip, ie])
        v5[ip, 0, 0] = nisa.tensor_reduce(nl.maximum, data=v4[ip, 0, ie], axis=[2])
        nl.store(out[ip[:, :, 0], 0], value=v5[ip, 0, 0])
        return out

    x = _rand((4, 512))
    np.testing.assert_array_equal(k(x), x.max(axis=1, keepdims=True))


def test_block_dims_before_partition():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        buf = nl.ndarray((4, nl.par_dim(128), 64), dtype=a.dtype, buffer=nl.sbuf)
        ip = nl.arange(128)[:, None]
        jf = nl.arange(64)[None, :]
        for b in nl.affine_range(4):
            buf[b, ip, jf] = nl.load(a[b * 128 + ip, jf])
        for b in nl.affine_range(4):
            nl.store(out[b * 128 + ip, jf], value=nl.multiply(buf[b, ip, jf], 2.0))
        return out

    a = _rand((512, 64))
    np.testing.assert_array_equal(k(a), a * 2)


def test_assignment_broadcasts_from_source():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
        col = nl.load(a[:, 0:1])  # (128, 1)
        t = nl.ndarray((128, 64), dtype=a.dtype)
        t[:, :] = col  # broadcast along the free axis
        nl.store(out, value=t)
        return out

    a = _rand((128, 8))
    np.testing.assert_array_equal(k(a), np.broadcast_to(a[:, :1], (128, 64)))


def test_assignment_of_a_tile_with_extra_unit_axes():
    # out[c, 0, 0] = s (a (1, 1, 1) tile into one element) and out[c] = s (a (1, 4, 8) tile into
    # a (4, 8) row block): the same elements, as nisa.dma_copy copies them
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        corner = nl.ndarray((2, 1), dtype=x.dtype, buffer=nl.shared_hbm)
        for c in nl.affine_range(2):
            s = nl.ndarray((1, 4, 8), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=s, src=x[c : c + 1, :, :])
            out[c] = s
            one = nl.ndarray((1, 1, 1), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=one, src=s[0:1, 3:4, 7:8])
            corner[c, 0] = one
        return out, corner

    x = _rand((2, 4, 8))
    out, corner = k(x)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(corner[:, 0], x[:, 3, 7])


def test_assignment_of_one_partition_into_several_is_a_located_error():
    def k(x):
        s = nl.ndarray((1, 4, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=x[0:1, :, :])
        t = nl.ndarray((4, 8), dtype=x.dtype, buffer=nl.sbuf)
        t[0:4, 0:8] = s  # ERR
        return t

    expect(
        k, _rand((2, 4, 8)), code="err_num_partition_mismatch", values=("[1, 4, 8]", "4 partitions")
    )


@pytest.mark.parametrize("shape", [(250, 500), (128, 512), (300, 1000)])
def test_masks_on_ragged_shapes(shape):
    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        P, F = a.shape
        ip = nl.arange(128)[:, None]
        jf = nl.arange(512)[None, :]
        for i in nl.affine_range((P + 127) // 128):
            for j in nl.affine_range((F + 511) // 512):
                m = (i * 128 + ip < P) & (j * 512 + jf < F)
                x = nl.load(a[i * 128 + ip, j * 512 + jf], mask=m)
                y = nl.load(b[i * 128 + ip, j * 512 + jf], mask=m)
                z = nl.add(x, y, mask=m)
                nl.store(out[i * 128 + ip, j * 512 + jf], value=z, mask=m)
        return out

    a, b = _rand(shape, 1), _rand(shape, 2)
    np.testing.assert_array_equal(k(a, b), a + b)


@pytest.mark.parametrize("out_dtype", [nl.float32, nl.bfloat16])
def test_masked_op_assigned_into_a_tile_keeps_the_masked_out_elements(out_dtype):
    """``t[...] = nl.add(t, u, mask=m)``: the op writes only the selected lanes of ``t`` (the
    compiler fuses the op into the assignment), whether or not the dtypes match; mask=False
    writes nothing."""

    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ip = nl.arange(128)[:, None]
        t = nl.ndarray(a.shape, dtype=out_dtype, buffer=nl.sbuf)
        t[...] = nl.load(a)
        t[...] = nl.add(t, nl.load(b), mask=(ip < 64), dtype=nl.float32)
        t[...] = nl.multiply(t, 100.0, mask=False)
        nl.store(out, t)
        return out

    a, b = _rand((128, 32), 1), _rand((128, 32), 2)
    want = a.copy()
    want[:64] += b[:64]
    tol = 1e-6 if out_dtype == nl.float32 else 2e-2
    for checks in ("static", "full"):
        np.testing.assert_allclose(k.configure(checks=checks)(a, b), want, rtol=tol, atol=tol)


def test_unused_axis_of_a_3d_mgrid_is_not_a_tile_dimension():
    """``ix, iw, iy = nl.mgrid[0:128, 0:1, 0:N]`` and ``x[iw, iy]`` is a [1, N] tile (the
    classic layernorm / rmsnorm tutorials broadcast such a row of weights)."""

    @nki.jit
    def k(g):
        out = nl.ndarray((128, g.shape[0]), dtype=g.dtype, buffer=nl.shared_hbm)
        ix, iw, iy = nl.mgrid[0:128, 0:1, 0 : g.shape[0]]
        row = nl.load(g.reshape((1, g.shape[0]))[iw, iy])
        assert row.shape == (1, g.shape[0])
        nl.store(out, row.broadcast_to((128, g.shape[0])))
        return out

    g = _rand((96,), 3)
    np.testing.assert_array_equal(k(g), np.broadcast_to(g, (128, 96)))


def test_ragged_rows_with_a_3d_mgrid_and_its_mask():
    """Row tiles indexed with two axes of a 3-D mgrid and masked with the third's sibling:
    the mask follows the tile's axes (classic rmsnorm tutorial pattern)."""

    @nki.jit
    def k(a, g):
        n, m = a.shape
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ix, iw, iy = nl.mgrid[0:128, 0:1, 0:m]
        gt = nl.load(g.reshape((1, m))[iw, iy]).broadcast_to((128, m))
        for i in nl.affine_range((n + 127) // 128):
            t = nl.load(a[i * 128 + ix, iy], mask=(i * 128 + ix < n))
            nl.store(out[i * 128 + ix, iy], value=nl.multiply(t, gt), mask=(i * 128 + ix < n))
        return out

    a, g = _rand((200, 48), 4), _rand((48,), 5)
    for checks in ("static", "full"):
        np.testing.assert_allclose(k.configure(checks=checks)(a, g), a * g, rtol=1e-6)


def test_indices_and_masks_from_different_mgrids():
    """``s[i_p, j * 6 + i_s]`` with i_p from a 3-D mgrid and i_s from a 2-D one, and a mask
    from the 2-D mgrid on a tile indexed by both (classic layernorm tutorial, bn_stats over
    chunks of a ragged row)."""
    import nki.isa as nisa

    @nki.jit
    def k(a):
        m = a.shape[1]
        out = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        i_p, i_f, _unused = nl.mgrid[0:128, 0:m, 0:1]
        x = nl.load(a[i_p, i_f])
        i_c, i_s = nl.mgrid[0:512, 0:6]
        chunks = (m + 511) // 512
        stats = nl.ndarray((128, 6 * chunks), dtype=nl.float32)
        for j in nl.affine_range(chunks):
            stats[i_p, j * 6 + i_s] = nisa.bn_stats(
                x[i_p, j * 512 + i_c], mask=(j * 512 + i_c < m), dtype=nl.float32
            )
        nl.store(out, nisa.bn_aggr(stats))
        return out

    a = _rand((128, 700), 6)
    got = k(a)
    np.testing.assert_allclose(got[:, 0], a.mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[:, 1], a.var(axis=1), rtol=1e-4, atol=1e-6)


def test_constant_leading_index_then_tile_valued_rows():
    """``kv[1, idx[i_p, 0], i_f]`` (vLLM's KV-cache load): the constant selects a sub-tensor and
    the tile of indices picks its rows, directly or through the view ``kv[1]``."""

    @nki.jit
    def k(kv, idx):
        out = nl.ndarray((2, 16, kv.shape[2]), dtype=kv.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(16)[:, None]
        i_f = nl.arange(kv.shape[2])[None, :]
        rows = nl.load(idx)
        nl.store(out[0], nl.load(kv[1, rows[i_p, 0], i_f]))
        nl.store(out[1], nl.load(kv[0][rows[i_p, 0], i_f]))
        return out

    kv = _rand((2, 64, 24), 7)
    idx = np.random.default_rng(8).permutation(64)[:16].astype(np.int32).reshape(16, 1)
    got = k(kv, idx)
    np.testing.assert_array_equal(got[0], kv[1, idx[:, 0]])
    np.testing.assert_array_equal(got[1], kv[0, idx[:, 0]])


def test_constant_index_with_a_2d_mgrid_is_a_column():
    """``t[i_p, 2]`` with i_p from ``nl.mgrid[0:128, 0:4]`` is a [128, 1] column (the mgrid's
    free axis is not used), as with ``nl.arange(128)[:, None]``."""

    @nki.jit
    def k(a):
        out = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.shared_hbm)
        i_p, _ = nl.mgrid[0:128, 0:4]
        t = nl.load(a)
        col = t[i_p, 2]
        assert tuple(col.shape) == (128, 1)
        nl.store(out, nl.copy(col))
        return out

    a = _rand((128, 4), 9)
    np.testing.assert_array_equal(k(a), a[:, 2:3])


def test_extent_one_mgrid_axes_stay_tile_dimensions():
    """Axes of extent 1 of an mgrid that indexes a tensor of the same rank stay: a [1, 2, N]
    tile indexed by a 3-D mgrid with one partition, and ``t[ix, j, iz]`` for a column j of a
    [P, 8, 4] tile written from a [P, 1, 4] value."""

    @nki.jit
    def k(a, b):
        out1 = nl.ndarray((1, 2, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
        ix, iy, iz = nl.mgrid[0:1, 0:2, 0 : a.shape[1]]
        t = nl.ndarray((1, 2, a.shape[1]), dtype=a.dtype)
        t[ix, iy, iz] = nl.load(a.reshape((1, 1, a.shape[1]))).broadcast_to((1, 2, a.shape[1]))
        nl.store(out1, t)
        out2 = nl.ndarray((128, 8, 4), dtype=b.dtype, buffer=nl.shared_hbm)
        jx, jy, jz = nl.mgrid[0:128, 0:1, 0:4]
        src = nl.load(b)  # (128, 8, 4)
        dst = nl.ndarray((128, 8, 4), dtype=b.dtype)
        for j in nl.affine_range(8):
            dst[jx, j, jz] = nl.copy(src[jx, 7 - j, jz])
        nl.store(out2, dst)
        return out1, out2

    a, b = _rand((1, 16), 11), _rand((128, 8, 4), 12)
    o1, o2 = k(a, b)
    np.testing.assert_array_equal(o1, np.broadcast_to(a[:, None, :], (1, 2, 16)))
    np.testing.assert_array_equal(o2, b[:, ::-1, :])


def test_integer_indices_of_hbm_drop_their_dims():
    """``F[j, 0:128, 1]`` of a 3-D HBM tensor loads one element per partition (a [128, 1]
    tile); ``x[i, 0:512]`` along the last dim stays a [1, 512] row."""

    @nki.jit
    def k(f, x):
        out1 = nl.ndarray((128, 4), dtype=f.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 4), dtype=f.dtype)
        for j in nl.affine_range(4):
            t[:, j] = nl.load(f[j, 0:128, 1])
        nl.store(out1, t)
        out2 = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
        row = nl.load(x[2, 0 : x.shape[1]])
        assert tuple(row.shape) == (1, x.shape[1])
        nl.store(out2, row)
        return out1, out2

    f, x = _rand((4, 128, 3), 13), _rand((4, 40), 14)
    o1, o2 = k(f, x)
    np.testing.assert_array_equal(o1, f[:, :, 1].T)
    np.testing.assert_array_equal(o2, x[2:3])


def test_masked_out_destination_untouched():
    @nki.jit
    def k(a, out):
        ip = nl.arange(128)[:, None]
        jf = nl.arange(64)[None, :]
        t = nl.load(a[ip, jf])
        nl.store(out[ip, jf], value=t, mask=(jf < 10) & (ip >= 100))

    a = _rand((128, 64))
    out = np.full((128, 64), -7.0, np.float32)
    k(a, out)
    ref = np.full((128, 64), -7.0, np.float32)
    ref[100:, :10] = a[100:, :10]
    np.testing.assert_array_equal(out, ref)
