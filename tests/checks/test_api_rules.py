"""The rules AWS's NKI documentation states (``nki/api_rules.py``), per API generation: each
broken rule is a located error with the documented rule in its message (or the warning AWS's
simulator gives), and a classic kernel the classic documentation allows keeps running."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki import api_rules
from nki.errors import (
    AccumulateUninitializedWarning,
    DtypeRuleWarning,
    NKIError,
    NKIMemoryError,
    NKIShapeError,
    NKITypeError,
    NKIUnsupportedError,
    RawEnumWarning,
)

from helpers import close, expect_error, f32, line_of, rand, run
from helpers import hbm_out as _out
from helpers import load_sbuf as _load
from helpers import sbuf_tile as _tile
from snippets import site_table

CLASSIC = {"api": "classic"}


def _rule(key: str) -> str:
    """A fragment of rule ``key``'s documented text (the message quotes it)."""
    return api_rules.get(key).rule[:40]


def _store(t):
    out = _out(t.shape, t.dtype)
    nisa.dma_copy(out, t)
    return out


# ---- nisa.tensor_tensor: no free-axis broadcast in the current API ---------------------------
def k_tt_column(x, c):
    a, b = _load(x), _load(c)
    y = _tile(x.shape)
    nisa.tensor_tensor(y, a, b, nl.add)  # ERR
    return _store(y)


def k_tt_column_classic(x, c):
    out = _out(x.shape)
    nl.store(out, nisa.tensor_tensor(nl.load(x), nl.load(c), op=nl.add))
    return out


def k_ts_column(x, c):
    a, b = _load(x), _load(c)
    y = _tile(x.shape)
    nisa.tensor_scalar(y, a, nl.add, b)
    return _store(y)


def test_tensor_tensor_column_broadcast_is_an_error_in_the_current_api():
    x, c = rand((128, 64)), rand((128, 1))
    e = expect_error(
        k_tt_column, x, c, cls=NKIShapeError, code="err_free_size_mismatch",
        fragments=["[128, 64]", "[128, 1]", _rule("tensor_tensor.equal_free"), "current API"],
    )  # fmt: skip
    assert "nisa.tensor_scalar" in e.message
    # what the message points to computes it
    close(run(k_ts_column, x, c), x + c)
    # a classic kernel keeps broadcasting the column (AWS's classic double-row sample does)
    close(run(k_tt_column_classic, x, c, jit_opts=CLASSIC), x + c)


# ---- nisa.activation(reduce_op=...) must be nl.add in the current API --------------------------
def k_act_max(x):
    a = _load(x)
    y = _tile(x.shape)
    r = _tile((x.shape[0], 1))
    nisa.activation(y, nl.exp, a, reduce_op=nl.maximum, reduce_res=r,  # ERR
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)  # fmt: skip
    return _store(r)


def k_act_max_classic(x):
    r = nl.ndarray((x.shape[0], 1), nl.float32, buffer=nl.sbuf)
    nisa.activation(op=nl.exp, data=nl.load(x), reduce_op=nl.maximum, reduce_res=r,
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)  # fmt: skip
    out = _out((x.shape[0], 1))
    nl.store(out, r)
    return out


def k_act_reduce_max(x):
    a = _load(x)
    y = _tile(x.shape)
    r = _tile((x.shape[0], 1))
    nisa.activation_reduce(y, nl.exp, a, nl.maximum, r)
    return _store(r)


def test_activation_reduce_op_must_be_add_in_the_current_api():
    x = rand((64, 32))
    e = expect_error(
        k_act_max, x, cls=NKIError, code="err_unsupported_reduce_op",
        fragments=["reduce_op=maximum", _rule("activation.reduce_add")],
    )  # fmt: skip
    assert "nki.isa.activation" in e.message
    want = np.exp(x).max(axis=1, keepdims=True)
    close(run(k_act_max_classic, x, jit_opts=CLASSIC), want)
    # activation_reduce keeps max on NeuronCore-v3+ (its page restricts only v2)
    close(run(k_act_reduce_max, x), want)


# ---- nisa.tensor_scalar on GpSimd: rsqrt only in the current API -------------------------------
def k_ts_gpsimd_add(x):
    a = _load(x)
    y = _tile(x.shape)
    nisa.tensor_scalar(y, a, np.add, 1.0, engine=nisa.gpsimd_engine)  # ERR
    return _store(y)


def k_ts_gpsimd_classic(x):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.tensor_scalar(nl.load(x), np.add, 1, engine=nisa.gpsimd_engine))
    return out


def k_ts_gpsimd_current(x):
    a = _load(x)
    y = _tile(x.shape)
    nisa.tensor_scalar(y, a, nl.multiply, 2.0, engine=nisa.engine.gpsimd)  # ERR
    return _store(y)


def k_ts_gpsimd_rsqrt(x):
    a = _load(x)
    y = _tile(x.shape)
    nisa.tensor_scalar(y, a, nl.rsqrt, None, engine=nisa.engine.gpsimd)
    return _store(y)


def test_tensor_scalar_on_gpsimd_is_rsqrt_only():
    x = rand((32, 16), lo=0.5, hi=4.0)
    for k, frag in ((k_ts_gpsimd_add, "op0=add"), (k_ts_gpsimd_current, "op0=multiply")):
        expect_error(
            k, x, cls=NKIError, code="err_unsupported_engine_for_op",
            fragments=[frag, _rule("tensor_scalar.gpsimd_rsqrt")],
        )  # fmt: skip
    close(run(k_ts_gpsimd_rsqrt, x), 1.0 / np.sqrt(x))
    # classic kernels follow the classic ALU-operator table (add / multiply on GpSimd)
    xi = np.full((4, 4), 2**24 + 1, np.int32)
    np.testing.assert_array_equal(run(k_ts_gpsimd_classic, xi, jit_opts=CLASSIC), xi + 1)


# ---- nisa.memset: the value's type matches dst's dtype ----------------------------------------
def k_memset_float_into_int(x):
    t = _tile((8, 4), nl.int32)
    nisa.memset(dst=t, value=2.0)  # ERR
    return _store(t)


def k_memset_int_into_int(x):
    t = _tile((8, 4), nl.int32)
    nisa.memset(dst=t, value=2)
    return _store(t)


def k_memset_x4(x):
    t = _tile((8, 4), nl.float8_e4m3fn_x4)
    nisa.memset(t, 1)  # ERR
    v = _tile((8, 4), nl.uint32)
    nisa.tensor_copy(v, t.view(nl.uint32))
    return _store(v)


def k_memset_classic(x):
    out = _out((8, 4), np.int32)
    nl.store(out, nisa.memset((8, 4), 2.0, nl.int32))
    return out


def test_memset_value_typed_like_dst():
    x = np.zeros((1, 1), np.float32)
    expect_error(
        k_memset_float_into_int, x, cls=NKITypeError, code="err_memset_value_dtype",
        fragments=["value=2.0", "int32", _rule("memset.value_dtype")],
    )  # fmt: skip
    np.testing.assert_array_equal(run(k_memset_int_into_int, x), np.full((8, 4), 2, np.int32))
    expect_error(
        k_memset_x4, x, cls=NKITypeError, code="err_memset_value_dtype",
        fragments=["value=1", "float8_e4m3fn_x4", "only 0"], target="trn3",
    )  # fmt: skip
    # the classic memset(shape, value, dtype) casts
    got = run(k_memset_classic, x, jit_opts=CLASSIC)
    np.testing.assert_array_equal(got, np.full((8, 4), 2, np.int32))


# ---- outputs in nl.shared_hbm; buffers as objects -----------------------------------------------
def k_hbm_output(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.hbm)  # ERR
    nisa.dma_copy(out, _load(x))
    return out


def k_hbm_output_classic(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.hbm)
    nl.store(out, nl.load(x))
    return out


def k_string_buffer(x):
    t = nl.ndarray(x.shape, x.dtype, buffer="sbuf")  # ERR
    nisa.dma_copy(t, x)
    return _store(t)


def k_string_buffer_classic(x):
    t = nl.ndarray(x.shape, x.dtype, buffer="sbuf")
    t[...] = nl.load(x)
    out = _out(x.shape)
    nl.store(out, t)
    return out


def test_output_in_private_hbm_is_an_error_in_the_current_api():
    x = rand((16, 8))
    expect_error(
        k_hbm_output, x, cls=NKIMemoryError, code="err_output_tensor_must_be_shared_hbm",
        fragments=["'out'", _rule("output.shared_hbm")],
    )  # fmt: skip
    close(run(k_hbm_output_classic, x, jit_opts=CLASSIC), x)


def test_string_buffer_is_an_error_in_the_current_api():
    x = rand((16, 8))
    # told at the allocation, although the kernel's generation is decided two lines later
    expect_error(
        k_string_buffer, x, cls=NKITypeError, code="err_unsupported_memory",
        fragments=["buffer='sbuf'", "buffer=nl.sbuf", _rule("buffer.object")],
    )  # fmt: skip
    close(run(k_string_buffer_classic, x, jit_opts=CLASSIC), x)


# ---- nisa.dma_copy(dge_mode=hwdge) does not cast in the current API ---------------------------
def k_hwdge_cast(x):
    t = nl.ndarray(x.shape, nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x, dge_mode=nisa.dge_mode.hwdge)  # ERR
    y = _tile(x.shape)
    nisa.tensor_copy(y, t)
    return _store(y)


def k_hwdge_cast_classic(x):
    t = nl.ndarray(x.shape, nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x, dge_mode=nisa.dge_mode.hwdge)
    out = _out(x.shape)
    nl.store(out, nisa.tensor_copy(t, dtype=nl.float32))
    return out


def test_hwdge_dma_needs_equal_dtypes_in_the_current_api():
    x = rand((16, 8))
    expect_error(
        k_hwdge_cast, x, cls=NKITypeError, code="err_dtype_mismatch",
        fragments=["src float32 and dst bfloat16", _rule("dma_copy.hwdge_dtype")],
    )  # fmt: skip
    want = f32(x.astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(run(k_hwdge_cast_classic, x, jit_opts=CLASSIC), want)


# ---- nki.jit(platform_target=...) ---------------------------------------------------------------
def k_copy_current(x):
    return _store(_load(x))


def test_platform_target_is_deprecated_in_the_current_api():
    x = rand((16, 8))
    k = nki.jit(k_copy_current, platform_target="trn2")  # ERR
    with pytest.raises(NKIError) as ei:
        k(x)
    e = ei.value
    assert e.code == "err_deprecated_platform_target", e.message
    assert _rule("jit.platform_target") in e.message and "'trn2'" in e.message
    assert e.loc.file == __file__
    assert e.loc.line == line_of(test_platform_target_is_deprecated_in_the_current_api)
    # the replacements work
    close(nki.jit(k_copy_current).configure(target="trn2")(x), x)
    # the classic nki.jit takes it (its documented way to pick a target)
    k = nki.jit(k_hbm_output_classic, platform_target="trn1", api="classic")
    close(k(x), x)
    assert k.last_ir.target == "trn1"


# ---- nisa.nc_matmul(accumulate=True) into PSUM nothing wrote: a warning ------------------------
def k_accumulate(a, b, first):
    sa, sb = _load(a), _load(b)
    ps = nl.ndarray((a.shape[1], b.shape[1]), nl.float32, buffer=nl.psum)
    if first:
        nisa.nc_matmul(ps, sa, sb)
    nisa.nc_matmul(ps, sa, sb, accumulate=True)  # WARN
    y = _tile(ps.shape)
    nisa.tensor_copy(y, ps)
    return _store(y)


def test_accumulate_into_unwritten_psum_warns():
    a, b = rand((32, 16)), rand((32, 8))
    with pytest.warns(AccumulateUninitializedWarning) as rec:
        got = run(k_accumulate, a, b, False)
    assert np.isnan(got).all()  # fresh PSUM holds NaN: the sum is garbage
    (w,) = [r for r in rec if r.category is AccumulateUninitializedWarning]
    assert w.filename == __file__
    assert w.lineno == line_of(k_accumulate, "# WARN")
    assert "'ps'" in str(w.message)
    assert _rule("nc_matmul.accumulate_unwritten") in str(w.message)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AccumulateUninitializedWarning)
        got = run(k_accumulate, a, b, True)
    close(got, 2 * a.T @ b, rtol=1e-4, atol=1e-4)


# ---- more rules of the per-instruction pages -----------------------------------------------------
def k_raw_enum(x):
    t = _tile(x.shape)
    nisa.dma_copy(t, x, dge_mode=2)  # ERR
    return _store(t)


def test_raw_integer_enum_warns_and_runs():
    # the release notes reject raw integers; AWS's NKI library still passes dge_mode=3
    with pytest.warns(RawEnumWarning) as rec:
        got = run(k_raw_enum, _X, target="trn2")
    np.testing.assert_array_equal(got, _X)
    (w,) = [r for r in rec if r.category is RawEnumWarning]
    assert w.filename == __file__
    assert w.lineno == line_of(k_raw_enum, "# ERR")
    assert "'dge_mode' of 'nisa.dma_copy' got 2; write nisa.dge_mode.hwdge" in str(w.message)
    assert _rule("enum.named") in str(w.message)


def k_transpose_widen(x):
    a = _load(x)
    ps = nl.ndarray((x.shape[1], x.shape[0]), nl.float32, buffer=nl.psum)
    nisa.nc_transpose(ps, a)  # WARN
    y = _tile(ps.shape, nl.float32)
    nisa.tensor_copy(y, ps)
    return _store(y)


def test_transpose_widening_into_fp32_psum_warns_and_is_exact():
    # the documentation asks dst to have data's dtype; the Tensor engine's transpose is a
    # matmul with an identity, so a bf16 tile lands in fp32 PSUM exactly
    xb = _X.astype(ml_dtypes.bfloat16)
    with pytest.warns(DtypeRuleWarning) as rec:
        got = run(k_transpose_widen, xb, target="trn2")
    np.testing.assert_array_equal(got, xb.T.astype(np.float32))
    (w,) = [r for r in rec if r.category is DtypeRuleWarning]
    assert w.lineno == line_of(k_transpose_widen, "# WARN")
    assert "data bfloat16 and dst float32" in str(w.message)
    assert _rule("nc_transpose.widen") in str(w.message)


def k_dma_engine(x):
    t = _tile(x.shape)
    nisa.dma_copy(t, x, engine=nisa.engine.sync)  # ERR
    return _store(t)


def k_dma_engine_ok(x):
    t = _tile(x.shape)
    nisa.dma_copy(t, x, dge_mode=nisa.dge_mode.hwdge, engine=nisa.engine.scalar)
    return _store(t)


def k_dma_priority(x):
    t = _tile(x.shape)
    nisa.dma_copy(t, x, priority=1)  # ERR
    return _store(t)


def k_fp8_mix(x):
    a = _load(x)
    s8 = _tile(x.shape, nl.float8_e4m3)
    m8 = _tile(x.shape, nl.float8_e4m3fn)
    nisa.tensor_copy(s8, a)
    nisa.tensor_copy(m8, a)
    ps = nl.ndarray((x.shape[1], x.shape[1]), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps, s8, m8)  # ERR
    y = _tile(ps.shape)
    nisa.tensor_copy(y, ps)
    return _store(y)


def k_fp32_bf16(x):
    a = _load(x)
    b = _tile(x.shape, nl.bfloat16)
    nisa.tensor_copy(b, a)
    ps = nl.ndarray((x.shape[1], x.shape[1]), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps, a, b)  # ERR
    y = _tile(ps.shape)
    nisa.tensor_copy(y, ps)
    return _store(y)


def k_fp32_bf16_classic(x):
    a = nl.load(x)
    b = nisa.tensor_copy(a, dtype=nl.bfloat16)
    out = _out((x.shape[1], x.shape[1]))
    nl.store(out, nisa.nc_matmul(a, b))
    return out


def k_transpose_cast(x):
    a = _load(x)
    ps = nl.ndarray((x.shape[1], x.shape[0]), nl.bfloat16, buffer=nl.psum)
    nisa.nc_transpose(ps, a)  # ERR
    y = _tile(ps.shape, nl.bfloat16)
    nisa.tensor_copy(y, ps)
    return _store(y)


def k_transpose_cast_classic(x):
    out = _out((x.shape[1], x.shape[0]), ml_dtypes.bfloat16)
    nl.store(out, nisa.nc_transpose(nl.load(x), dtype=nl.bfloat16))
    return out


def k_dma_transpose_fp32(x):
    t = _tile((x.shape[1], x.shape[0]))
    nisa.dma_transpose(t, x, dge_mode=nisa.dge_mode.hwdge)  # ERR
    return _store(t)


def k_dma_transpose_hwdge_rows(x):
    # 64 partitions: a 2-D hardware-DGE transpose takes 16
    t = _tile((x.shape[1], x.shape[0]), x.dtype)
    nisa.dma_transpose(t, _load(x), dge_mode=nisa.dge_mode.hwdge)  # ERR
    return _store(t)


def k_dma_transpose_direct_swdge(x):
    t = _tile((x.shape[1], x.shape[0]), x.dtype)
    nisa.dma_transpose(t, _load(x), dge_mode=nisa.dge_mode.swdge)  # ERR
    return _store(t)


def k_dma_transpose_fp32_default_dge(x):
    t = _tile((x.shape[1], x.shape[0]), x.dtype)  # (dma_transpose does not convert)
    nisa.dma_transpose(t, x)  # (the compiler picks the DMA path: 2- or 4-byte elements)
    return _store(t)


def k_dma_transpose_one_byte(x):
    t = nl.ndarray((x.shape[1], x.shape[0]), x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(t, x)  # ERR
    out = _out(t.shape, x.dtype)
    nisa.dma_copy(out, t)
    return out


def k_dma_transpose_fp32_classic(x):
    out = _out((x.shape[1], x.shape[0]))
    nl.store(out, nisa.dma_transpose(x))
    return out


def k_select_from_psum(x):
    a = _load(x)
    ps = nl.ndarray(x.shape, nl.float32, buffer=nl.psum)
    nisa.tensor_copy(ps, a)
    y = _tile(x.shape)
    nisa.affine_select(y, [[-1, x.shape[1]]], 1, ps, -9984.0,  # ERR
                       cmp_op=nl.greater_equal)  # fmt: skip
    return _store(y)


def k_select_from_psum_classic(x):
    i_p, i_f = nl.mgrid[0 : x.shape[0], 0 : x.shape[1]]
    ps = nl.ndarray(x.shape, nl.float32, buffer=nl.psum)
    ps[...] = nl.load(x)
    out = _out(x.shape)
    nl.store(out, nisa.affine_select(i_p >= i_f, ps, -9984.0))
    return out


def k_dropout_cast(x):
    a = _load(x)
    y = _tile(x.shape, nl.bfloat16)
    nisa.dropout(y, a, 0.0)  # ERR
    return _store(y)


def k_dropout_cast_classic(x):
    out = _out(x.shape, ml_dtypes.bfloat16)
    nl.store(out, nisa.dropout(nl.load(x), 0.0, dtype=nl.bfloat16))
    return out


def k_stt_bitvec(x):
    a = _tile(x.shape, nl.int32)
    nisa.dma_copy(a, x)
    y = _tile(x.shape, nl.int32)
    nisa.scalar_tensor_tensor(y, a, nl.bitwise_and, 6, nl.bitwise_or, a)  # ERR
    return _store(y)


def k_stt_bitvec_classic(x):
    a = nl.load(x)
    out = _out(x.shape, np.int32)
    nl.store(out, nisa.scalar_tensor_tensor(data=a, op0=nl.bitwise_and, operand0=6,
                                            op1=nl.bitwise_or, operand1=a))  # fmt: skip
    return out


def k_tsr_reverse0(x):
    a = _load(x)
    y = _tile(x.shape)
    r = _tile((x.shape[0], 1))
    nisa.tensor_scalar_reduce(y, a, nl.subtract, 1.0, nl.add, r, reverse0=True)  # ERR
    return _store(r)


def k_tsr_reverse0_classic(x):
    r = nl.ndarray((x.shape[0], 1), nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(data=nl.load(x), op0=nl.subtract, operand0=1.0,  # ERR
                              reduce_op=nl.add, reduce_res=r, reverse0=True)  # fmt: skip
    out = _out((x.shape[0], 1))
    nl.store(out, r)
    return out


def k_shuffle_start(x):
    a = _load(x)
    y = _tile(x.shape)
    nisa.memset(y, 0.0)
    nisa.nc_stream_shuffle(y[32:96], a[32:96], list(range(32)))  # ERR
    return _store(y)


def k_shuffle_start_classic(x):
    a = nl.load(x)
    y = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.nc_stream_shuffle(src=a[32:96], dst=y[32:96], shuffle_mask=list(range(32)))  # ERR
    out = _out(x.shape)
    nl.store(out, y)
    return out


def k_ts_bf16_operand(x):
    a = _load(x)
    c = _tile((x.shape[0], 1), nl.bfloat16)
    nisa.memset(c, 1.0)
    y = _tile(x.shape)
    nisa.tensor_scalar(y, a, nl.add, c)  # ERR
    return _store(y)


def k_ts_bf16_operand_classic(x):
    c = nisa.memset((x.shape[0], 1), 1.0, nl.bfloat16)
    out = _out(x.shape)
    nl.store(out, nisa.tensor_scalar(nl.load(x), nl.add, c))
    return out


_X = rand((64, 32))
_XI = np.arange(64 * 32, dtype=np.int32).reshape(64, 32)
_X8 = _X.astype(ml_dtypes.float8_e4m3fn)
_XB = _X.astype(ml_dtypes.bfloat16)
# (rule, kernel, its input, target, error class, code, fragments of the message)
CURRENT_RULES = [
    ("dma_copy.engine", k_dma_engine, _X, "trn2", NKIError, "err_unsupported_engine_for_op",
     ["engine=sync with dge_mode=unknown"]),
    ("dma_copy.priority", k_dma_priority, _X, "trn2", NKIUnsupportedError,
     "err_unsupported_instruction_for_target", ["priority=1 on trn2"]),
    ("nc_matmul.fp32_pair", k_fp32_bf16, _X, "trn2", NKITypeError, "err_dtype_mismatch",
     ["stationary float32 and moving bfloat16"]),
    ("nc_transpose.dtype", k_transpose_cast, _X, "trn2", NKITypeError, "err_dtype_mismatch",
     ["data float32 and dst bfloat16"]),
    ("dma_transpose.dtype", k_dma_transpose_fp32, _X, "trn2", NKITypeError,
     "err_unsupported_dtype", ["a float32 src with dge_mode=hwdge"]),
    ("dma_transpose.hwdge_shape", k_dma_transpose_hwdge_rows, _XB, "trn2", NKIShapeError,
     "err_unsupported_transpose_axes", ["a src of shape [64, 32]"]),
    ("dma_transpose.direct_dge", k_dma_transpose_direct_swdge, _XB, "trn2", NKITypeError,
     "err_invalid_argument", ["dge_mode=swdge for a direct src"]),
    ("dma_transpose.one_byte", k_dma_transpose_one_byte, _X8, "trn2", NKITypeError,
     "err_unsupported_dtype", ["a float8_e4m3fn src"]),
    ("affine_select.on_true_sbuf", k_select_from_psum, _X, "trn2", NKIMemoryError,
     "err_unsupported_memory", ["the PSUM tile 'ps'"]),
    ("dropout.dst_dtype", k_dropout_cast, _X, "trn2", NKITypeError, "err_dtype_mismatch",
     ["data float32 and dst bfloat16"]),
    ("scalar_tensor_tensor.arith", k_stt_bitvec, _XI, "trn2", NKIError, "err_unsupported_op",
     ["op0=bitwise_and"]),
    ("tensor_scalar.operand_fp32", k_ts_bf16_operand, _X, "trn2", NKITypeError,
     "err_invalid_operand_dtype", ["a bfloat16 'operand0' tile for op add"]),
]  # fmt: skip
# the classic twins of the rules above that the classic documentation allows
CLASSIC_TWINS = {
    "nc_matmul.fp32_pair": (k_fp32_bf16_classic, lambda x: x.T @ f32(x.astype(ml_dtypes.bfloat16))),
    "nc_transpose.dtype": (k_transpose_cast_classic, lambda x: f32(x.T.astype(ml_dtypes.bfloat16))),
    "dma_transpose.dtype": (k_dma_transpose_fp32_classic, lambda x: x.T),
    "dma_transpose.one_byte": (k_dma_transpose_fp32_classic, lambda x: f32(x.T)),
    "affine_select.on_true_sbuf": (
        k_select_from_psum_classic,
        lambda x: np.where(np.arange(64)[:, None] >= np.arange(32)[None, :], x, -9984.0),
    ),
    "dropout.dst_dtype": (k_dropout_cast_classic, lambda x: f32(x.astype(ml_dtypes.bfloat16))),
    "tensor_scalar.operand_fp32": (k_ts_bf16_operand_classic, lambda x: x + 1.0),
}  # fmt: skip


@pytest.mark.parametrize("row", CURRENT_RULES, ids=[r[0] for r in CURRENT_RULES])
def test_current_api_rule_of_an_instruction_page(row):
    key, kernel, x, target, cls, code, fragments = row
    expect_error(kernel, x, cls=cls, code=code, fragments=[*fragments, _rule(key)], target=target)
    if key in CLASSIC_TWINS:
        twin, want = CLASSIC_TWINS[key]
        close(f32(run(twin, x, jit_opts=CLASSIC)), want(x), rtol=1e-2, atol=1e-2)


def test_scalar_tensor_tensor_bit_vector_ops_in_a_classic_kernel():
    got = run(k_stt_bitvec_classic, _XI, jit_opts=CLASSIC)
    np.testing.assert_array_equal(got, (_XI & 6) | _XI)


def test_raw_integer_enums_in_a_classic_kernel():
    def k(x):
        t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x, dge_mode=2)
        out = _out(x.shape)
        nl.store(out, t)
        return out

    close(run(k, _X, jit_opts=CLASSIC), _X)


def test_dma_transpose_of_four_byte_elements_with_the_default_dge_mode():
    np.testing.assert_array_equal(run(k_dma_transpose_fp32_default_dge, _X), _X.T)
    xi = (_X * 100).astype(np.int32)
    np.testing.assert_array_equal(run(k_dma_transpose_fp32_default_dge, xi), xi.T)


def k_dma_priority_by_position(x):
    t = _tile(x.shape)
    nisa.dma_copy(t, x, 2)  # (SDK 2.31+: priority is the third parameter)
    return _store(t)


def k_dma_oob_mode_third(x):
    t = _tile(x.shape)
    nisa.dma_copy(t, x, nisa.oob_mode.skip)  # ERR
    return _store(t)


def test_dma_copy_engine_with_hwdge_and_priority_on_trn3():
    close(run(k_dma_engine_ok, _X), _X)
    close(run(k_dma_priority, _X, target="trn3"), _X)
    close(run(k_dma_priority_by_position, _X, target="trn3"), _X)
    expect_error(
        k_dma_oob_mode_third, _X, cls=NKITypeError, code="err_invalid_argument", target="trn3",
        fragments=["priority= of nisa.dma_copy must be None or an int"],
    )  # fmt: skip


def test_legacy_and_ocp_fp8_do_not_mix_in_a_matmul():
    expect_error(
        k_fp8_mix, _X, cls=NKITypeError, code="err_dtype_mismatch", target="trn3",
        fragments=["float8_e4m3 and moving float8_e4m3fn", _rule("nc_matmul.fp8_mix")],
    )  # fmt: skip


def test_tensor_scalar_reduce_reverse0_is_not_supported_yet_in_both_apis():
    for k, opts in ((k_tsr_reverse0, None), (k_tsr_reverse0_classic, CLASSIC)):
        expect_error(
            k, _X, cls=NKIUnsupportedError, code="err_unsupported_attribute", jit_opts=opts,
            fragments=["reverse0=True", _rule("tensor_scalar_reduce.reverse0")],
        )  # fmt: skip


def test_stream_shuffle_start_partitions_follow_the_active_partitions():
    x = rand((128, 16))
    for k, opts in ((k_shuffle_start, None), (k_shuffle_start_classic, CLASSIC)):
        expect_error(
            k, x, cls=NKIShapeError, code="err_unsupported_start_partition", jit_opts=opts,
            fragments=["64 active partitions", "starting at partition 32",
                       _rule("nc_stream_shuffle.start")],
        )  # fmt: skip


def k_positional_dtype(x):
    out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nl.store(out, nl.exp(nl.load(x), nl.bfloat16))  # ERR
    return out


def test_positional_dtype_is_classic_keyword_only_and_current_positional():
    expect_error(
        k_positional_dtype, _X, cls=NKITypeError, code="err_invalid_argument", jit_opts=CLASSIC,
        fragments=["'nl.exp' got dtype by position", _rule("nl.keyword_only")],
    )  # fmt: skip
    got = run(k_positional_dtype, _X)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got, np.exp(_X).astype(ml_dtypes.bfloat16))


def k_abs_max_call(x):
    a = nl.load(x)
    out = _out(x.shape)
    nl.store(out, nl.abs_max(a, nl.negative(nl.multiply(a, 0.5))))  # ERR
    return out


def k_abs_min_op(x):
    a = _load(x)
    b = _tile(x.shape)
    nisa.tensor_scalar(b, a, nl.multiply, -2.0)
    y = _tile(x.shape)
    nisa.tensor_tensor(y, a, b, nl.abs_min)  # ERR
    return _store(y)


def test_abs_max_and_abs_min_are_neuroncore_v4_operators():
    x = rand((64, 32), lo=-2.0, hi=2.0)
    x[0, :4] = [1.0, -1.0, 0.0, 3.0]  # (|x| and |x * 0.5| tie at 0 only)
    for k, what in (
        (k_abs_max_call, "'nl.abs_max' on trn2"),
        (k_abs_min_op, "'nisa.tensor_tensor' got op nl.abs_min on trn2"),
    ):
        expect_error(k, x, cls=NKIUnsupportedError, code="err_unsupported_instruction_for_target",
                     target="trn2", fragments=[what, _rule("alu.since_gen")])  # fmt: skip
    half = -(x * np.float32(0.5))
    np.testing.assert_array_equal(
        run(k_abs_max_call, x, target="trn3"), np.where(np.abs(half) >= np.abs(x), half, x)
    )
    twice = x * np.float32(-2.0)
    np.testing.assert_array_equal(
        run(k_abs_min_op, x, target="trn3"), np.where(np.abs(twice) <= np.abs(x), twice, x)
    )


def k_power_into_psum(x):
    a = _load(x)
    ps = nl.ndarray(x.shape, nl.float32, buffer=nl.psum)
    nisa.tensor_tensor(ps, a, a, nl.power)  # ERR
    y = _tile(x.shape)
    nisa.tensor_copy(y, ps)
    return _store(y)


def test_power_runs_on_gpsimd_which_cannot_write_psum():
    x = rand((32, 16), lo=0.5, hi=2.0)
    e = expect_error(k_power_into_psum, x, cls=NKIMemoryError, code="err_unsupported_memory",
                     fragments=["GpSimd", "PSUM"])  # fmt: skip
    assert "'ps'" in e.message


# ---- the table ---------------------------------------------------------------------------------
def test_every_checked_rule_is_tested_here():
    source = open(__file__).read()
    for r in api_rules.RULES:
        if r.checked:  # a test above checks its message
            assert f'_rule("{r.key}")' in source or f'("{r.key}", k_' in source, r.key


@pytest.mark.parametrize("marker,checked", [("api-rules", True), ("api-rules-unchecked", False)])
def test_the_porting_guide_lists_are_generated_from_the_table(marker, checked):
    assert site_table("guides/porting.md", marker) == api_rules.markdown(checked).strip()
