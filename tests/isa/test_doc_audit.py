"""Discrepancies found by auditing nki.isa against the official NKI documentation: each test
checks real values against an independent NumPy formulation of the documented semantics, or a
located error for a documented restriction."""

import numpy as np
from helpers import close, expect_error, rand, run
from helpers import hbm_out as _out

import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError, NKIMemoryError, NKIRuntimeError, NKITypeError

# --------------------------------------------------------------------------------------------
# tensor_tensor_scan: "data0 and data1 cannot both reside in PSUM"
# --------------------------------------------------------------------------------------------


def k_scan_psum(a, b, one_in_psum):
    out = _out(a.shape)
    pa = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.psum)
    pa[...] = nl.load(a)
    if one_in_psum:
        sb = nl.load(b)
    else:
        sb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.psum)
        sb[...] = nl.load(b)
    r = nisa.tensor_tensor_scan(pa, sb, 0.5, np.multiply, np.add)  # ERR
    nl.store(out, r)
    return out


def test_scan_operands_not_both_psum():
    a, b = rand((16, 12), lo=0.1, hi=0.9), rand((16, 12))
    got = run(k_scan_psum, a, b, True)
    want = np.empty_like(a)
    prev = np.full(16, 0.5, np.float32)
    for i in range(a.shape[1]):  # r[:, i] = (data0[:, i] * r[:, i-1]) + data1[:, i]
        prev = a[:, i] * prev + b[:, i]
        want[:, i] = prev
    close(got, want, rtol=1e-5)
    expect_error(
        k_scan_psum,
        a,
        b,
        False,
        cls=NKIMemoryError,
        code="err_unsupported_memory",
        fragments=["'data0'", "'data1'", "nisa.tensor_tensor_scan", "PSUM"],
    )


# --------------------------------------------------------------------------------------------
# nc_matmul tiling: positions may be affine in loop iterators; double_row excludes column tiling
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# activation: a scalar bias needs NeuronCore-v3; NeuronCore-v2 takes (P, 1) vectors only
# --------------------------------------------------------------------------------------------


def k_act_scalar_bias(x):
    out = _out(x.shape)
    nl.store(out, nisa.activation(nl.exp, nl.load(x), bias=0.25, scale=2.0))  # ERR
    return out


def test_activation_scalar_bias_trn2_only():
    x = rand((32, 40), lo=-1.0, hi=1.0)
    got = run(k_act_scalar_bias, x, target="trn2")
    close(got, np.exp(x * np.float32(2.0) + np.float32(0.25)), rtol=1e-5)
    expect_error(
        k_act_scalar_bias,
        x,
        target="trn1",
        cls=NKITypeError,
        code="err_activation_bias_invalid_type",
        fragments=["'bias'", "nisa.activation", "(32, 1) vector", "trn1", "0.25"],
    )


# --------------------------------------------------------------------------------------------
# bad compile-time arguments: located NKIErrors, not bare Python exceptions
# --------------------------------------------------------------------------------------------


def k_bad_arg(x, which):
    out = _out((8, 8))
    t = nl.load(x)
    lt = np.less
    if which == "memset_shape":
        r = nisa.memset((8, "8"), 0.0, nl.float32)  # E_memset_shape
    elif which == "memset_dtype":
        r = nisa.memset((8, 8), 0.0, "float31")  # E_memset_dtype
    elif which == "iota_dtype":
        r = nisa.iota(nl.arange(8)[:, None] + nl.arange(8)[None, :], "int33")  # E_iota_dtype
    elif which == "range_start":
        r = nisa.range_select(  # E_range_start
            on_true_tile=t, comp_op0=lt, comp_op1=lt, bound0=1.0, bound1=2.0, range_start="3"
        )
    elif which == "imm":
        r = nisa.nc_match_replace8(data=t, vals=t, imm="-inf")  # E_imm
    else:
        r = nisa.dma_transpose(t, axes="ab")  # E_axes
    nl.store(out, r)
    return out


def test_bad_compile_time_arguments_are_located():
    x = rand((8, 8))
    for which, cls, code, frags in (
        ("memset_shape", NKITypeError, "err_invalid_argument", ["'shape'", "nisa.memset", "'8'"]),
        ("memset_dtype", NKITypeError, "err_unsupported_dtype", ["'float31'"]),
        ("iota_dtype", NKITypeError, "err_unsupported_dtype", ["'int33'"]),
        ("range_start", NKITypeError, "err_invalid_argument", ["'range_start'", "'3'"]),
        ("imm", NKITypeError, "err_unsupported_operand", ["'imm'", "nc_match_replace8", "-inf"]),
        ("axes", NKIError, "err_unsupported_transpose_axes", ["axes='ab'"]),
    ):
        expect_error(
            k_bad_arg, x, which, cls=cls, code=code, fragments=frags, marker=f"# E_{which}"
        )


# --------------------------------------------------------------------------------------------
# reciprocal: engine= selects the Vector (default) or Scalar engine, nothing else
# --------------------------------------------------------------------------------------------


def k_recip_engine(x, engine):
    out = _out(x.shape)
    nl.store(out, nisa.reciprocal(nl.load(x), engine=engine))  # ERR
    return out


def test_reciprocal_engine_choice():
    x = rand((16, 24), lo=0.5, hi=4.0)
    for eng in (nisa.vector_engine, nisa.scalar_engine, nisa.unknown_engine):
        close(run(k_recip_engine, x, eng), np.float32(1.0) / x)
    expect_error(
        k_recip_engine,
        x,
        nisa.gpsimd_engine,
        cls=NKIError,
        code="err_unsupported_engine_for_op",
        fragments=["nisa.reciprocal", "Vector or Scalar", "gpsimd"],
    )
