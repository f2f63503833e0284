"""Microscaling instructions (``quantize_mx``, ``nc_matmul_mx``) against an independent NumPy
MX reference: group amax -> power-of-two scale (twice the OCP sample scale), fp8 rounding,
little-endian x4 packing, the quadrant layout of the scales, and the scaled matmul."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

import nki.isa as nisa
import nki.language as nl
from nki.dtypes import name_of, pack_x4, unpack_x4
from nki.errors import NKIError

from helpers import expect_error, run

RNG = np.random.default_rng(21)
BF16 = ml_dtypes.bfloat16
FP8 = {"float8_e4m3fn_x4": ml_dtypes.float8_e4m3fn, "float8_e5m2_x4": ml_dtypes.float8_e5m2}
EMAX = {"float8_e4m3fn_x4": 8, "float8_e5m2_x4": 15}


def mx_reference(x: np.ndarray, packed: str):
    """(packed uint32 data, (P/8, F/4) scale exponents, dequantised fp32 values)."""
    p, f = x.shape
    xf = x.astype(np.float32)
    exps = np.empty((p // 8, f // 4), np.int64)
    deq = np.empty_like(xf)
    q8 = np.empty((p, f), FP8[packed])
    for g in range(p // 8):
        for c in range(f // 4):
            blk = xf[8 * g : 8 * g + 8, 4 * c : 4 * c + 4]
            amax = float(np.abs(blk).max())
            e = -127 if amax == 0 else math.floor(math.log2(amax)) - (EMAX[packed] - 1)
            exps[g, c] = e
            q = (blk / np.float32(2.0**e)).astype(FP8[packed])
            q8[8 * g : 8 * g + 8, 4 * c : 4 * c + 4] = q
            deq[8 * g : 8 * g + 8, 4 * c : 4 * c + 4] = q.astype(np.float32) * 2.0**e
    packed_bits = np.ascontiguousarray(q8).view(np.uint8).view("<u4").reshape(p, f // 4)
    return packed_bits, exps, deq


def _load(a):
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    return t


def _quantize_kernel(packed, scale_dtype):
    def k_quantize(x):
        p, f = x.shape
        rows = 32 * (p // 32 - 1) + 4
        q_out = nl.ndarray((p, f // 4), dtype=packed, buffer=nl.shared_hbm)
        s_out = nl.ndarray((rows, f // 4), dtype=scale_dtype, buffer=nl.shared_hbm)
        q = nl.ndarray((p, f // 4), dtype=packed, buffer=nl.sbuf)
        s = nl.ndarray((rows, f // 4), dtype=scale_dtype, buffer=nl.sbuf)
        nisa.memset(s, 1 if scale_dtype == nl.uint8 else 1.0)
        nisa.quantize_mx(q, _load(x), s)
        nisa.dma_copy(q_out, q)
        nisa.dma_copy(s_out, s)
        return q_out, s_out

    return k_quantize


def test_quantize_mx_scales_rounds_packs_and_lays_out_scales_by_quadrant():
    x = (RNG.standard_normal((64, 16)) * 3).astype(BF16)
    x[8:16, 4:8] = 0  # an all-zero group: scale 2**-127
    q, s = run(_quantize_kernel(nl.float8_e4m3fn_x4, nl.float8_e8m0fnu), x, target="trn3")
    want_q, exps, _ = mx_reference(x, "float8_e4m3fn_x4")
    np.testing.assert_array_equal(q, want_q)
    got = s.astype(np.float32)
    for g in range(8):  # group g of 8 partitions -> scale partition 32 * (g // 4) + g % 4
        np.testing.assert_array_equal(got[32 * (g // 4) + g % 4], np.exp2(exps[g]))
    assert got[1, 1] == 2.0**-127
    unused = np.ones(got.shape[0], bool)
    unused[[0, 1, 2, 3, 32, 33, 34, 35]] = False
    assert (got[unused] == 1.0).all()  # the memset value: partitions without scales untouched


def test_quantize_mx_e5m2_with_uint8_scales():
    x = (RNG.standard_normal((32, 8)) * 1000).astype(np.float16)
    q, s = run(_quantize_kernel(nl.float8_e5m2_x4, nl.uint8), x, target="trn3")
    want_q, exps, _ = mx_reference(x, "float8_e5m2_x4")
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(s[:4], (exps + 127).astype(np.uint8))
    assert (s[4:] == 1).all()


def k_mx_matmul(a, b):
    m, n = a.shape[1] // 4, b.shape[1] // 4
    out = nl.ndarray((2, m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    qa = nl.ndarray((a.shape[0], m), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    qb = nl.ndarray((b.shape[0], n), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
    sa = nl.ndarray((36, m), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
    sb = nl.ndarray((36, n), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
    nisa.quantize_mx(qa, _load(a), sa)
    nisa.quantize_mx(qb, _load(b), sb)
    ps = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
    r = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
    nisa.nc_matmul_mx(ps, qa, qb, sa, sb)
    nisa.tensor_copy(r, ps)
    nisa.dma_copy(out[0], r)
    nisa.nc_matmul_mx(ps, qa, qb, sa, sb, accumulate=True)  # adds onto the first product
    nisa.tensor_copy(r, ps)
    nisa.dma_copy(out[1], r)
    return out


def test_nc_matmul_mx_contracts_partitions_and_packed_values_with_group_scales():
    k, m, n = 64, 8, 12
    a = RNG.standard_normal((k, 4 * m)).astype(BF16)
    b = (RNG.standard_normal((k, 4 * n)) * 50).astype(BF16)
    got = run(k_mx_matmul, a, b, target="trn3")
    _, _, da = mx_reference(a, "float8_e4m3fn_x4")
    _, _, db = mx_reference(b, "float8_e5m2_x4")
    # dst[m, n] = sum over partition p and packed value i of A[p, 4m + i] * B[p, 4n + i]
    want = np.einsum("pmi,pni->mn", da.reshape(k, m, 4), db.reshape(k, n, 4))
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[1], 2 * want, rtol=1e-5, atol=1e-4)
    exact = np.einsum(
        "pmi,pni->mn",
        a.astype(np.float32).reshape(k, m, 4),
        b.astype(np.float32).reshape(k, n, 4),
    )
    assert np.abs(got[0] - exact).max() < 0.1 * np.abs(exact).max()  # MX error is small


E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)


def k_fp4_matmul(a, sa, b, sb):
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    ta = nl.ndarray(a.shape, dtype=nl.float4_e2m1fn_x4, buffer=nl.sbuf)
    nisa.dma_copy(ta, a)
    ps = nl.ndarray(out.shape, dtype=nl.float32, buffer=nl.psum)
    tb = nl.ndarray(b.shape, dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    nisa.dma_copy(tb, b)  # the raw bits: an x4 type and uint32 have the same width
    nisa.nc_matmul_mx(ps, ta, tb, _load(sa), _load(sb))
    r = nl.ndarray(out.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(r, ps)
    nisa.dma_copy(out, r)
    return out


def test_nc_matmul_mx_fp4_stationary_with_uint8_scales():
    k, m, n = 32, 4, 6
    a = RNG.integers(0, 2**16, size=(k, m), dtype=np.uint32).astype(np.uint16)
    sa = RNG.integers(124, 131, size=(4, m)).astype(np.uint8)
    b_vals = RNG.standard_normal((k, n, 4)).astype(ml_dtypes.float8_e4m3fn)
    b = np.ascontiguousarray(b_vals).view(np.uint8).view("<u4").reshape(k, n)
    sb = RNG.integers(120, 135, size=(4, n)).astype(np.uint8)
    got = run(k_fp4_matmul, a, sa, b, sb, target="trn3")
    nib = (a[..., None].astype(np.int64) >> (4 * np.arange(4))) & 0xF
    av = np.where(nib & 8, -1.0, 1.0) * E2M1[nib & 7]  # sign bit, then 3 magnitude bits
    av = av * np.exp2(np.repeat(sa.astype(np.float64) - 127, 8, axis=0))[:, :, None]
    bv = (
        b_vals.astype(np.float64)
        * np.exp2(np.repeat(sb.astype(np.float64) - 127, 8, 0))[:, :, None]
    )
    want = np.einsum("pmi,pni->mn", av, bv)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def k_quantize_odd_partitions(x):
    out = nl.ndarray((16, 2), dtype=nl.float8_e4m3fn_x4, buffer=nl.shared_hbm)
    q = nl.ndarray((16, 2), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    s = nl.ndarray((4, 2), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(q, _load(x), s)  # ERR
    nisa.dma_copy(out, q)
    return out


def test_quantize_mx_rules_and_target():
    x = np.ones((16, 8), BF16)
    expect_error(
        k_quantize_odd_partitions,
        x,
        cls=NKIError,
        code="err_num_partition_mismatch",
        fragments=["multiple of 32"],
        target="trn3",
    )
    expect_error(
        k_quantize_odd_partitions,
        x,
        cls=NKIError,
        code="err_unsupported_instruction_for_target",
        fragments=["nisa.quantize_mx", "trn3"],
        target="trn2",
    )


def _tiled_kernel(position, size):
    def k_tiled(a, b):
        m, n = a.shape[1] // 4, b.shape[1] // 4
        out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
        qa = nl.ndarray((a.shape[0], m), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        qb = nl.ndarray((b.shape[0], n), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        sa = nl.ndarray((4, m), dtype=nl.uint8, buffer=nl.sbuf)
        sb = nl.ndarray((4, n), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(qa, _load(a), sa)
        nisa.quantize_mx(qb, _load(b), sb)
        ps = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(ps, qa, qb, sa, sb, tile_position=position, tile_size=size)  # ERR
        r = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(r, ps)
        nisa.dma_copy(out, r)
        return out

    return k_tiled


def test_nc_matmul_mx_row_tiling_places_rows_without_changing_the_result():
    a = RNG.standard_normal((32, 16)).astype(BF16)
    b = RNG.standard_normal((32, 8)).astype(BF16)
    plain = run(_tiled_kernel(None, None), a, b, target="trn3")
    tiled = run(_tiled_kernel((64, 0), (32, 128)), a, b, target="trn3")
    np.testing.assert_array_equal(tiled, plain)
    _, _, da = mx_reference(a, "float8_e4m3fn_x4")
    _, _, db = mx_reference(b, "float8_e4m3fn_x4")
    want = np.einsum("pmi,pni->mn", da.reshape(32, 4, 4), db.reshape(32, 2, 4))
    np.testing.assert_allclose(plain, want, rtol=1e-5, atol=1e-5)
    for position, size, frag in (
        ((0, 0), (32, 64), "row tiling only"),
        ((16, 0), (32, 128), "multiple of the tile size 32"),
    ):
        expect_error(
            _tiled_kernel(position, size),
            a,
            b,
            cls=NKIError,
            code="err_invalid_tile_position",
            fragments=[frag],
            target="trn3",
        )


def k_quantize_into(x, out_data, out_scale):
    """The library's way: the caller passes the packed output; its dtype types the tile."""
    q = nl.ndarray(out_data.shape, dtype=out_data.dtype, buffer=nl.sbuf)
    s = nl.ndarray(out_scale.shape, dtype=out_scale.dtype, buffer=nl.sbuf)
    nisa.memset(s, 0)
    nisa.quantize_mx(q, _load(x), s)
    nisa.dma_copy(out_data, q)
    nisa.dma_copy(out_scale, s)
    return out_data, out_scale


def test_numpy_arrays_of_packed_dtypes_keep_their_type_into_the_kernel():
    x = (RNG.standard_normal((32, 16)) * 5).astype(BF16)
    data = np.zeros((32, 4), dtype=nl.float8_e5m2_x4)  # (NumPy knows the packed names)
    assert data.dtype == np.uint32 and name_of(data.dtype) == "float8_e5m2_x4"
    q, s = run(k_quantize_into, x, data, np.zeros((32, 4), np.uint8), target="trn3")
    want_q, exps, deq = mx_reference(x, "float8_e5m2_x4")
    np.testing.assert_array_equal(q, want_q)
    assert name_of(q.dtype) == "float8_e5m2_x4"
    np.testing.assert_array_equal(s[:4], (exps + 127).astype(np.uint8))
    # unpacked with the group scales, the values are the reference's dequantised ones
    scale = np.repeat(np.exp2(exps.astype(np.float64)), 8, axis=0).repeat(4, axis=1)
    np.testing.assert_array_equal(unpack_x4(q).reshape(32, 16) * scale, deq)


def test_pack_x4_and_unpack_x4_round_values_and_place_them_by_byte_or_nibble():
    v = (RNG.standard_normal((3, 6, 4)) * 4).astype(np.float32)
    for packed, elem in (*FP8.items(), ("float4_e2m1fn_x4", ml_dtypes.float4_e2m1fn)):
        bits = pack_x4(v, packed)
        assert name_of(bits.dtype) == packed and bits.shape == (3, 6)
        np.testing.assert_array_equal(unpack_x4(bits), v.astype(elem).astype(np.float32))
    one = np.eye(4, dtype=np.float32)  # 1.0 as value i of element i
    assert list(pack_x4(one, nl.float4_e2m1fn_x4)) == [0x2, 0x20, 0x200, 0x2000]  # fp4 1.0: 0b0010
    assert list(pack_x4(one, nl.float8_e4m3fn_x4)) == [0x38 << (8 * i) for i in range(4)]
