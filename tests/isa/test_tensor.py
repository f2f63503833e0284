"""Tensor-engine instructions: nisa.nc_matmul (values, PSUM accumulation, transpose
mode, tiling, double row, dtype and memory rules; the destination-first form's accumulate modes
per element and a tiled matmul accumulating over K in PSUM) and nisa.nc_transpose on both
engines, against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import (
    NKIError,
    NKIMemoryError,
    NKIRuntimeError,
    NKIShapeError,
    NKITypeError,
    NKIUnsupportedError,
)

import backends
from helpers import BF16, close, expect_error, f32, rand, run
from helpers import hbm_out as _out

RNG = np.random.default_rng(11)


def mm(a, b):
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    p = nisa.nc_matmul(nl.load(a), nl.load(b))
    nl.store(out, p)
    return out


@pytest.mark.parametrize("dt", [np.float32, BF16])
def test_matmul_vs_numpy(dt):
    a, b = rand((128, 128), dt), rand((128, 512), dt)
    out = run(mm, a, b)
    assert out.dtype == np.float32
    ref = f32(a).astype(np.float64).T @ f32(b).astype(np.float64)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def mm_accumulate(a, b):
    out = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.zeros((64, 512), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(a.shape[0] // 128):
        ps += nisa.nc_matmul(
            nl.load(a[k * 128 : (k + 1) * 128, :]), nl.load(b[k * 128 : (k + 1) * 128, :])
        )
    nl.store(out, ps)
    return out


@pytest.mark.parametrize("dt", [np.float32, BF16])
def test_psum_accumulation_over_k_tiles(dt):
    a, b = rand((384, 64), dt), rand((384, 512), dt)
    out = run(mm_accumulate, a, b)
    ref = f32(a).astype(np.float64).T @ f32(b).astype(np.float64)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def mm_transpose(x, ident):
    out = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.shared_hbm)
    p = nisa.nc_matmul(nl.load(x), nl.load(ident), is_transpose=True)  # ERR
    nl.store(out, nisa.tensor_copy(p))
    return out


def test_is_transpose_keeps_dtype_on_trn2_and_is_rejected_on_trn1():
    x = rand((64, 32), BF16)
    x[0, 0] = np.inf
    ident = np.eye(64, dtype=BF16)
    out = run(mm_transpose, x, ident)
    assert out.dtype == BF16
    np.testing.assert_array_equal(f32(out), f32(x).T)
    expect_error(
        mm_transpose,
        x,
        ident,
        target="trn1",
        cls=NKIUnsupportedError,
        code="err_unsupported_perf_mode",
        fragments=["is_transpose", "trn1"],
    )


def mm_transpose_blocks(x, ident):
    # a (blocks, K, F) stack transposed block by block over an affine loop (the batched
    # backend's positions), as generated kernels transpose with an identity
    n, k, f = x.shape
    out = nl.ndarray((n, f, k), dtype=x.dtype, buffer=nl.shared_hbm)
    eye = nl.load(ident)
    for i in nl.affine_range(n):
        p = nisa.nc_matmul(nl.load(x[i]), eye, is_transpose=True)  # ERR
        nl.store(out[i], nisa.tensor_copy(p))
    return out


@pytest.mark.parametrize("dt", [np.float32, BF16])
def test_is_transpose_over_loop_positions_is_the_same_on_every_backend(dt):
    x = rand((6, 64, 32), dt)
    x[2, 0, 0], x[3, 1, 5] = np.inf, np.nan  # (passed through, not spread as a matmul would)
    ident = np.eye(64, dtype=dt)
    runs = backends.run_backends(nki.jit(mm_transpose_blocks), None, x, ident)
    got = runs[backends.REFERENCE]
    np.testing.assert_array_equal(f32(got), np.swapaxes(f32(x), 1, 2))
    bad = ident.copy()
    bad[3, 4] = 1
    with pytest.raises(NKIRuntimeError, match="needs 'moving' to be an identity") as e:
        nki.jit(mm_transpose_blocks).configure(backend="batched")(x, bad)
    assert e.value.code == "err_matmul_transpose_needs_identity"


def mm_big_moving(a, b):
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    p = nisa.nc_matmul(nl.load(a), nl.load(b))  # ERR
    nl.store(out, nisa.tensor_copy(p))
    return out


def test_moving_free_limit():
    a, b = rand((64, 32)), rand((64, 1024))
    expect_error(
        mm_big_moving,
        a,
        b,
        cls=NKIShapeError,
        code="err_size_of_dimension_exceed_arch_limit",
        fragments=["1024", "'moving'", "512", "nisa.nc_matmul"],
    )
    # trn3 has a whole-PSUM moving limit (4096 fp32 columns): the same kernel runs there
    out = run(mm_big_moving, a, b, target="trn3")
    np.testing.assert_allclose(out, a.T @ b, rtol=1e-5, atol=1e-5)


def test_stationary_free_and_partition_limits():
    a, b = rand((64, 130)), rand((64, 128))
    expect_error(
        mm,
        a,
        b,
        cls=NKIShapeError,
        code="err_size_of_dimension_exceed_arch_limit",
        fragments=["130", "'stationary'", "128"],
        marker="nisa.nc_matmul",
    )
    a, b = rand((64, 32)), rand((32, 128))
    expect_error(
        mm,
        a,
        b,
        cls=NKIShapeError,
        code="err_num_partition_mismatch",
        fragments=["64", "32"],
        marker="nisa.nc_matmul",
    )


def mm_from_psum(a, b):
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.psum)
    ps[...] = nl.load(a)
    p = nisa.nc_matmul(ps, nl.load(b))  # ERR
    nl.store(out, nisa.tensor_copy(p))
    return out


def test_tensor_engine_reads_sbuf_only():
    expect_error(
        mm_from_psum,
        rand((32, 32)),
        rand((32, 64)),
        cls=NKIMemoryError,
        code="err_unsupported_memory",
        fragments=["stationary", "psum", "sbuf"],
    )


def mm_into_sbuf(a, b):
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    res = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    res[...] = nisa.nc_matmul(nl.load(a), nl.load(b))  # ERR
    nl.store(out, res)
    return out


def test_tensor_engine_writes_psum_only():
    expect_error(
        mm_into_sbuf,
        rand((32, 32)),
        rand((32, 64)),
        cls=NKIMemoryError,
        code="err_unsupported_memory",
        fragments=["Tensor engine", "PSUM"],
    )


def mm_int(a, b):
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    p = nisa.nc_matmul(nl.load(a), nl.load(b))  # ERR
    nl.store(out, nisa.tensor_copy(p))
    return out


def test_matmul_dtype_rule():
    a = np.ones((32, 32), np.int32)
    expect_error(
        mm_int,
        a,
        a,
        cls=NKITypeError,
        code="err_unsupported_matmul_dtype",
        fragments=["int32", "stationary"],
    )


def mm_bf16_out(a, b):
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    p = nisa.nc_matmul(nl.load(a), nl.load(b), dtype=nl.bfloat16)  # ERR
    nl.store(out, nisa.tensor_copy(p))
    return out


def test_matmul_output_dtype_per_target():
    a, b = rand((32, 32), BF16), rand((32, 64), BF16)
    expect_error(
        mm_bf16_out,
        a,
        b,
        target="trn2",
        cls=NKIError,
        code="err_unsupported_matmul_dtype",
        fragments=["float32", "bfloat16"],
    )
    out = run(mm_bf16_out, a, b, target="trn3")
    close(out, f32(a).T @ f32(b), BF16)


def mm_tiled(a, b):
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    p = nisa.nc_matmul(nl.load(a), nl.load(b), tile_position=(32, 0), tile_size=(32, 32))  # ERR
    nl.store(out, nisa.tensor_copy(p))
    return out


def test_tile_size_32_only_from_trn2():
    a, b = rand((32, 32)), rand((32, 64))
    out = run(mm_tiled, a, b, target="trn2")
    np.testing.assert_allclose(out, a.T @ b, rtol=1e-5, atol=1e-5)
    expect_error(
        mm_tiled,
        a,
        b,
        target="trn1",
        cls=NKIError,
        code="err_invalid_tile_position",
        fragments=["tile_size", "32", "trn1"],
    )


def k_mm_tile_loop(g, h, step):
    out = _out((g.shape[0], g.shape[2], h.shape[2]))
    for i in nl.affine_range(g.shape[0]):
        gi, hi = nl.load(g[i]), nl.load(h[i])
        r = nisa.nc_matmul(gi, hi, tile_position=(i * step, 0), tile_size=(64, 128))  # ERR
        nl.store(out[i], r)
    return out


def test_matmul_tile_position_affine_in_loop_iterator():
    g, h = rand((2, 64, 48)), rand((2, 64, 256))
    got = run(k_mm_tile_loop, g, h, 64)
    want = np.einsum("bkm,bkn->bmn", g.astype(np.float64), h.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_matmul_tile_position_misaligned_at_run_time():
    g, h = rand((2, 64, 48)), rand((2, 64, 256))
    # i * 32 stays inside the array (max 32 + 64 <= 128) but is not a multiple of 64 at i = 1
    expect_error(
        k_mm_tile_loop,
        g,
        h,
        32,
        cls=NKIRuntimeError,
        code="err_invalid_tile_position",
        fragments=["tile_position row", "= 32", "multiple of the tile size 64"],
    )


def k_mm_tile_loop4(g, h):
    out = _out((g.shape[0], g.shape[2], h.shape[2]))
    for i in nl.affine_range(g.shape[0]):
        gi, hi = nl.load(g[i]), nl.load(h[i])
        r = nisa.nc_matmul(gi, hi, tile_position=(i * 64, 0), tile_size=(64, 128))  # ERR
        nl.store(out[i], r)
    return out


def test_matmul_tile_position_outside_pe_array_at_trace_time():
    g, h = rand((3, 64, 48)), rand((3, 64, 128))
    expect_error(
        k_mm_tile_loop4,
        g,
        h,
        cls=NKIError,
        code="err_invalid_tile_position",
        fragments=["tile_position row", "in [0, 128]", "position + size <= 128"],
    )


def mm_double_row(a, b):
    out = nl.ndarray((a.shape[2], b.shape[2]), dtype=nl.float32, buffer=nl.shared_hbm)
    p = nisa.nc_matmul(nl.load(a), nl.load(b), perf_mode="double_row_gen3")  # ERR
    nl.store(out, nisa.tensor_copy(p))
    return out


def test_double_row_fp8_trn2_only():
    import ml_dtypes

    a = rand((128, 2, 16), ml_dtypes.float8_e4m3)
    b = rand((128, 2, 64), ml_dtypes.float8_e4m3)
    out = run(mm_double_row, a, b)
    ref = np.einsum("kim,kin->mn", f32(a), f32(b))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-3)
    expect_error(
        mm_double_row,
        a,
        b,
        target="trn1",
        cls=NKIUnsupportedError,
        code="err_unsupported_perf_mode",
        fragments=["double_row_gen3", "trn1"],
    )


def k_mm_double_row_cols(a, b, cols):
    out = _out((a.shape[2], b.shape[2]))
    sa, sb, mode = nl.load(a), nl.load(b), "double_row_gen3"
    p = nisa.nc_matmul(sa, sb, perf_mode=mode, tile_position=(0, 0), tile_size=(128, cols))  # ERR
    nl.store(out, nisa.tensor_copy(p))
    return out


def test_double_row_cannot_use_column_tiling():
    import ml_dtypes

    a = rand((128, 2, 32), ml_dtypes.float8_e4m3)
    b = rand((128, 2, 64), ml_dtypes.float8_e4m3)
    got = run(k_mm_double_row_cols, a, b, 128)
    want = np.einsum("kim,kin->mn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    expect_error(
        k_mm_double_row_cols,
        a,
        b,
        64,
        cls=NKIError,
        code="err_invalid_tile_position",
        fragments=["double_row_gen3", "column tiling", "column 64"],
    )


def transpose_k(x, engine):
    out = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nisa.nc_transpose(nl.load(x), engine=engine)
    nl.store(out, nisa.tensor_copy(t))
    return out


@pytest.mark.parametrize("dt", [np.float32, BF16])
@pytest.mark.parametrize(
    "engine,shape", [(nisa.tensor_engine, (96, 128)), (nisa.vector_engine, (32, 20))]
)
def test_transpose_both_engines(dt, engine, shape):
    x = rand(shape, dt)
    out = run(transpose_k, x, engine)
    np.testing.assert_array_equal(f32(out), f32(x).T)


@pytest.mark.parametrize("target", ["trn1", "trn2"])
@pytest.mark.parametrize("dt", [np.int32, np.uint8, np.int16])
def test_pe_transpose_takes_any_dtype_and_moves_integers_exactly(dt, target):
    # the documentation's "Data types": the input may be any NKI dtype; integers (no NaN / Inf,
    # the only values NeuronCore-v2's PE transpose changes) keep every bit, beyond 2^24 too
    info = np.iinfo(dt)
    x = np.random.default_rng(4).integers(info.min, info.max, (96, 128), endpoint=True)
    x = x.astype(dt)
    x[0, 0], x[1, 2] = info.max, info.min
    np.testing.assert_array_equal(run(transpose_k, x, nisa.tensor_engine, target=target), x.T)


def test_pe_transpose_nan_exact_on_trn2_not_on_trn1():
    x = rand((64, 64))
    x[3, 5] = np.nan
    exact = run(transpose_k, x, nisa.tensor_engine, target="trn2")
    np.testing.assert_array_equal(exact, x.T)
    lossy = run(transpose_k, x, nisa.tensor_engine, target="trn1")
    # matmul with an identity: the NaN spreads over its whole output row on NeuronCore-v2
    assert np.isnan(lossy[5]).all() and not np.isnan(np.delete(lossy, 5, axis=0)).any()


def transpose_big(x):
    out = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nisa.nc_transpose(nl.load(x), engine=nisa.vector_engine)  # ERR
    nl.store(out, t)
    return out


def test_vector_transpose_limit():
    expect_error(
        transpose_big,
        rand((32, 64)),
        cls=NKIShapeError,
        code="err_size_of_dimension_exceed_arch_limit",
        fragments=["64", "32", "vector engine", "nisa.nc_transpose"],
    )


def k_part_limit(x):
    out = _out((x.shape[1], x.shape[0]), x.dtype)
    nl.store(out, nisa.nc_transpose(nl.load(x[0:128, 0:200]), engine=nisa.tensor_engine))  # ERR
    return out


def test_tensor_transpose_free_limit():
    expect_error(
        k_part_limit,
        rand((128, 200)),
        cls=NKIShapeError,
        code="err_size_of_dimension_exceed_arch_limit",
        fragments=["200", "128", "tensor engine"],
    )


@nki.jit
def transpose_blocks(x):
    # (128, 2*64) -> two 64x128 blocks transposed into one SBUF buffer, then stored
    out = nl.ndarray((64, 2, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    buf = nl.ndarray((nl.par_dim(64), 2, 128), dtype=x.dtype)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    j_p, j_f = nl.mgrid[0:64, 0:128]
    for b in nl.affine_range(2):
        buf[j_p, b, j_f] = nisa.nc_transpose(t[i_p, b * 64 + i_f])
    nl.store(out, buf)
    return out


def test_nc_transpose_into_sbuf_buffer():
    x = RNG.random((128, 128), dtype=np.float32)
    want = np.stack([x[:, :64].T, x[:, 64:].T], axis=1)
    np.testing.assert_array_equal(transpose_blocks(x), want)


def tiled_matmul(lhsT, rhs):
    """out[M, N] = lhsT[K, M].T @ rhs[K, N], K in 128-row tiles accumulated in one PSUM tile
    (accumulate=None: the first matmul into an element overwrites, the later ones add)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        acc = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(K // 128):
            a = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
            b = nl.ndarray((128, N), dtype=rhs.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=lhsT[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
            nisa.dma_copy(dst=b, src=rhs[k * 128 : (k + 1) * 128, :])
            nisa.nc_matmul(acc, a, b)
        res = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out[m * 128 : (m + 1) * 128, :], src=res)
    return out


def test_tiled_matmul_accumulates_over_k_in_psum():
    rng = np.random.default_rng(3)
    lhsT = rng.standard_normal((384, 256), dtype=np.float32)
    rhs = rng.standard_normal((384, 192), dtype=np.float32)
    got = nki.jit(tiled_matmul)(lhsT, rhs)
    np.testing.assert_allclose(got, lhsT.T.astype(np.float64) @ rhs, rtol=2e-5, atol=2e-4)


def accumulate_modes(x, y):
    """Row block 0: two matmuls, accumulate=None (sum). Row block 1: memset 1, then
    accumulate=True (1 + product). Row block 2: a matmul then accumulate=False (last product)."""
    out = nl.ndarray((96, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    xt = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    yt = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    y2 = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(xt, x)
    nisa.dma_copy(yt, y)
    nisa.tensor_scalar(y2, yt, nl.multiply, 3.0)
    ps = nl.ndarray((96, 32), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps[0:32, :], xt, yt)
    nisa.nc_matmul(ps[0:32, :], xt, y2, accumulate=None)
    nisa.memset(ps[32:64, :], 1.0)
    nisa.nc_matmul(ps[32:64, :], xt, yt, accumulate=True)
    nisa.nc_matmul(ps[64:96, :], xt, yt)
    nisa.nc_matmul(dst=ps[64:96, :], stationary=xt, moving=y2, accumulate=False)
    res = nl.ndarray((96, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(res, ps)
    nisa.dma_copy(out, res)
    return out


def test_accumulate_modes_of_nc_matmul():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 32), dtype=np.float32)
    y = rng.standard_normal((64, 32), dtype=np.float32)
    p = x.T.astype(np.float64) @ y
    got = nki.jit(accumulate_modes)(x, y)
    np.testing.assert_allclose(got[0:32], p + 3 * p, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[32:64], 1 + p, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[64:96], 3 * p, rtol=1e-5, atol=1e-4)


def overlapping(x, y):
    """Two matmuls into overlapping PSUM rows with accumulate=None: per element, rows written
    once hold one product, rows written twice the sum."""
    out = nl.ndarray((96, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    xt = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
    yt = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(xt, x)
    nisa.dma_copy(yt, y)
    ps = nl.ndarray((96, 32), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps[0:64, :], xt, yt)
    nisa.nc_matmul(ps[32:96, :], xt, yt)
    res = nl.ndarray((96, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(res, ps)
    nisa.dma_copy(out, res)
    return out


def test_overlapping_accumulation_regions_add_per_element():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((64, 64), dtype=np.float32)
    y = rng.standard_normal((64, 32), dtype=np.float32)
    p = x.T.astype(np.float64) @ y
    want = np.zeros((96, 32))
    want[0:64] += p
    want[32:96] += p
    np.testing.assert_allclose(nki.jit(overlapping)(x, y), want, rtol=1e-5, atol=1e-4)
