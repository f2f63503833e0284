"""Vector-engine element-wise instructions: nisa.tensor_tensor, tensor_scalar,
scalar_tensor_tensor, reciprocal and exponential, in both calling forms, against NumPy, with
their engine, dtype, memory and shape rules."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import (
    NKIError,
    NKIMemoryError,
    NKIShapeError,
    NKITypeError,
    NKIUnsupportedError,
)
from nki.isa import reduce_cmd as RC

from helpers import ALU_OPS as OPS
from helpers import BF16, DTS, close, expect_error, f32, rand, run
from helpers import hbm_out as _out
from helpers import load_sbuf as _load
from helpers import sbuf_tile as _tile


def k_tensor_tensor(x, y, op):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.tensor_tensor(nl.load(x), nl.load(y), op=op))
    return out


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize(
    "op,ref",
    [
        (np.add, np.add),
        (nl.subtract, np.subtract),
        (nl.multiply, np.multiply),
        (np.maximum, np.maximum),
        (nl.greater, lambda a, b: (a > b).astype(np.float32)),
    ],
)
def test_tensor_tensor(dt, op, ref):
    x, y = rand((128, 64), dt), rand((128, 64), dt)
    close(run(k_tensor_tensor, x, y, op), ref(f32(x), f32(y)), dt)


def test_tensor_tensor_bitvec_on_raw_bits():
    x = np.array([[-1, 5, 0x7FFF0000, -8]] * 4, np.int32)
    y = np.array([[0xFF, 3, 0x0000FFFF, 2]] * 4, np.int32)
    np.testing.assert_array_equal(run(k_tensor_tensor, x, y, nl.bitwise_and), x & y)
    np.testing.assert_array_equal(run(k_tensor_tensor, x, y, np.bitwise_xor), x ^ y)
    # logical shift right of the unsigned bit pattern
    sh = run(k_tensor_tensor, x, np.full_like(x, 4), nl.right_shift)
    np.testing.assert_array_equal(sh, (x.view(np.uint32) >> 4).view(np.int32))


def k_tt(x, y, op, engine):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.tensor_tensor(nl.load(x), nl.load(y), op=op, engine=engine))  # ERR
    return out


def test_bitvec_rules():
    xi = np.ones((8, 8), np.int32)
    xf = rand((8, 8))
    expect_error(
        k_tt,
        xf,
        xf,
        nl.bitwise_and,
        nisa.vector_engine,
        cls=NKITypeError,
        code="err_bitvec_op_requires_integer_dtype",
        fragments=["bitwise_and", "float32"],
    )
    expect_error(
        k_tt,
        xi,
        xi,
        nl.bitwise_or,
        nisa.gpsimd_engine,
        cls=NKIError,
        code="err_unsupported_engine_for_op",
        fragments=["bitwise_or", "Vector", "gpsimd"],
    )


def test_gpsimd_int32_add_is_exact():
    x = np.full((4, 4), 2**24 + 1, np.int32)
    y = np.ones((4, 4), np.int32)
    np.testing.assert_array_equal(run(k_tt, x, y, np.add, nisa.gpsimd_engine), x + y)
    # the Vector engine computes arithmetic in fp32
    np.testing.assert_array_equal(
        run(k_tt, x, y, np.add, nisa.vector_engine), (x.astype(np.float32) + 1).astype(np.int32)
    )


def k_tt_int_default(x, y):
    """``tensor_tensor`` without ``engine=`` on int32 tiles, the second from PSUM."""
    out = nl.ndarray((3,) + x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    xt, yt = nl.load(x), nl.load(y)
    nl.store(out[0], nisa.tensor_tensor(xt, yt, op=np.add))
    nl.store(out[1], nisa.tensor_tensor(xt, yt, op=nl.maximum))
    ps = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.psum)
    ps[...] = yt
    nl.store(out[2], nisa.tensor_tensor(xt, ps, op=np.add))
    return out


@pytest.mark.parametrize("dt", [np.int32, np.uint32])
def test_int32_tensor_tensor_defaults_to_gpsimds_exact_arithmetic(dt):
    # the current tensor_tensor page: all input / output tiles int32 or uint32 default to the
    # GpSimd engine and its native integer arithmetic, exact for every 32-bit value; an operand
    # in PSUM (which GpSimd cannot read) keeps the Vector engine and its fp32 arithmetic
    x = np.full((4, 4), 2**30 + 1, dt)
    y = np.arange(2, 18, dtype=dt).reshape(4, 4)
    got = run(k_tt_int_default, x, y)
    np.testing.assert_array_equal(got[0], x + y)
    np.testing.assert_array_equal(got[1], np.maximum(x, y))
    np.testing.assert_array_equal(got[2], (x.astype(np.float32) + y.astype(np.float32)).astype(dt))


@nki.jit
def int_sum_into_psum(x):
    out = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    ps = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.psum)
    nisa.tensor_tensor(dst=ps, data1=t, data2=t, op=nl.add)  # (no engine: the Vector engine)
    r = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=ps)
    nisa.dma_copy(dst=out, src=r)
    return out


def test_int32_tensor_tensor_into_psum_keeps_the_vector_engine():
    # "the automatic GpSimd dispatch for int32/uint32 falls back to Vector Engine when any
    # operand resides in PSUM" (a destination too: GpSimd cannot write PSUM)
    x = np.arange(128 * 64, dtype=np.int32).reshape(128, 64)
    np.testing.assert_array_equal(int_sum_into_psum(x), 2 * x)


def k_tt_column(x, c):
    out = nl.ndarray((2,) + x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    xt, ct = nl.load(x), nl.load(c)
    nl.store(out[0], nisa.tensor_tensor(xt, ct, op=nl.multiply))
    nl.store(out[1], nisa.tensor_tensor(ct, xt, op=nl.subtract))
    return out


def k_tt_parts(x, y):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.tensor_tensor(nl.load(x), nl.load(y), op=np.add))  # ERR
    return out


def k_tt_psum(x):
    out = _out(x.shape, x.dtype)
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum)
    b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum)
    a[...] = nl.load(x)
    b[...] = nl.load(x)
    nl.store(out, nisa.tensor_tensor(a, b, op=np.add))  # ERR
    return out


def test_tensor_tensor_memory_and_shape_rules():
    x = rand((8, 8))
    expect_error(
        k_tt_psum,
        x,
        cls=NKIMemoryError,
        code="err_unsupported_memory",
        fragments=["data1", "data2", "PSUM"],
    )
    expect_error(
        k_tt_parts,
        x,
        rand((4, 16)),
        cls=NKIShapeError,
        code="err_num_partition_mismatch",
        fragments=["data1[8, 8]", "data2[4, 16]"],
    )
    expect_error(
        k_tt_parts,
        x,
        rand((8, 9)),
        cls=NKIShapeError,
        code="err_free_size_mismatch",
        fragments=["[8, 8] (8)", "[8, 9] (9)"],
    )
    # a (P, 1) column broadcasts along the free axis, on either side
    col = np.random.default_rng(3).uniform(0.5, 1.5, (8, 1)).astype(np.float32)
    got = run(k_tt_column, x, col)
    np.testing.assert_allclose(got[0], x * col, rtol=1e-6)
    np.testing.assert_allclose(got[1], col - x, rtol=1e-6)


def k_tensor_scalar(x, v, op0, rev0, op1, rev1, engine):
    out = _out(x.shape, x.dtype)
    vt = nl.load(v)
    r = nisa.tensor_scalar(
        nl.load(x), op0, vt, reverse0=rev0, op1=op1, operand1=2.5, reverse1=rev1, engine=engine
    )
    nl.store(out, r)
    return out


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("rev0,rev1", [(False, False), (True, False), (False, True), (True, True)])
def test_tensor_scalar_reverse(dt, rev0, rev1):
    x, v = rand((64, 40), dt), rand((64, 1), np.float32)
    got = run(k_tensor_scalar, x, v, np.subtract, rev0, np.divide, rev1, nisa.vector_engine)
    a, b = f32(x), f32(v)
    t = (b - a) if rev0 else (a - b)
    want = (2.5 / t) if rev1 else (t / 2.5)
    close(got, want, dt, rtol=2e-2 if dt == BF16 else 1e-4)


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_tensor_scalar_on_scalar_engine(target):
    x, v = rand((32, 16)), rand((32, 1))
    got = run(
        k_tensor_scalar, x, v, np.multiply, False, np.add, False, nisa.scalar_engine, target=target
    )
    close(got, x * v + 2.5)


def k_ts_scalar(x, op0, op1):
    out = _out(x.shape, x.dtype)
    o1 = None if op1 is None else 1.0
    act = nisa.scalar_engine
    r = nisa.tensor_scalar(nl.load(x), op0, 2.0, op1=op1, operand1=o1, engine=act)  # ERR
    nl.store(out, r)
    return out


def test_scalar_engine_tensor_scalar_trn1_vs_trn2():
    x = rand((16, 8))
    np.testing.assert_allclose(
        run(k_ts_scalar, x, np.multiply, np.add, target="trn2"), x * 2 + 1, rtol=1e-6
    )
    expect_error(
        k_ts_scalar,
        x,
        np.multiply,
        np.add,
        target="trn1",
        cls=NKIUnsupportedError,
        code="err_unsupported_engine_for_op",
        fragments=["Scalar", "trn1", "v3"],
    )
    expect_error(
        k_ts_scalar,
        x,
        np.add,
        np.multiply,
        target="trn2",
        cls=NKIError,
        code="err_unsupported_engine_for_op",
        fragments=["(op0=add, op1=multiply)", "(op0=multiply, op1=add)"],
    )
    expect_error(
        k_ts_scalar,
        x,
        np.subtract,
        None,
        target="trn2",
        cls=NKIError,
        code="err_unsupported_engine_for_op",
        fragments=["op0=subtract"],
    )


@pytest.mark.parametrize("target,ok", [("trn1", False), ("trn2", True)])
def test_same_kernel_two_targets_summary(target, ok):
    """One kernel, several per-target rules: all pass on trn2, the first fails on trn1."""
    x = rand((16, 8))
    if ok:
        run(k_ts_scalar, x, np.multiply, None, target=target)
    else:
        with pytest.raises(NKIUnsupportedError):
            run(k_ts_scalar, x, np.multiply, None, target=target)


def k_ts_gp(x, engine):
    out = _out(x.shape, x.dtype)
    nl.store(
        out, nisa.tensor_scalar(nl.load(x), np.add, 1, op1=np.multiply, operand1=3, engine=engine)
    )
    return out


def test_gpsimd_tensor_scalar_int_exact():
    x = np.full((4, 4), 2**24 + 1, np.int32)
    np.testing.assert_array_equal(run(k_ts_gp, x, nisa.gpsimd_engine), (x + 1) * 3)
    vec = run(k_ts_gp, x, nisa.vector_engine)
    want = ((x.astype(np.float32) + 1) * 3).astype(np.int64).astype(np.int32)
    np.testing.assert_array_equal(vec, want)


def k_ts_mixed(x):
    out = _out(x.shape, x.dtype)
    r = nisa.tensor_scalar(nl.load(x), np.add, 1, op1=nl.bitwise_and, operand1=3)  # ERR
    nl.store(out, r)
    return out


def k_ts_vec_shape(x, v):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.tensor_scalar(nl.load(x), np.add, nl.load(v)))  # ERR
    return out


def test_tensor_scalar_rules():
    xi = np.ones((8, 8), np.int32)
    expect_error(
        k_ts_mixed,
        xi,
        cls=NKIError,
        code="err_tensor_scalar_op_class_mismatch",
        fragments=["op0=add", "op1=bitwise_and"],
    )
    expect_error(
        k_ts_vec_shape,
        rand((8, 8)),
        rand((8, 2)),
        cls=NKIShapeError,
        code="err_scalar_or_vector_operand_shape",
        fragments=["operand0", "(8, 1)", "[8, 2]"],
    )


def k_ts(x, v, op0, rev0, op1, rev1):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nisa.tensor_scalar(
        nl.load(x), op0, nl.load(v), reverse0=rev0, op1=op1, operand1=0.75, reverse1=rev1
    )
    nl.store(out, t)
    return out


@given(
    p=st.integers(1, 128),
    f=st.integers(1, 48),
    o0=st.sampled_from(sorted(OPS)),
    o1=st.sampled_from(sorted(OPS)),
    rev0=st.booleans(),
    rev1=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_tensor_scalar_any_pair(p, f, o0, o1, rev0, rev1, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, (p, f)).astype(np.float32)
    v = rng.uniform(-3, 3, (p, 1)).astype(np.float32)
    got = run(k_ts, x, v, OPS[o0][0], rev0, OPS[o1][0], rev1)
    f0, f1 = OPS[o0][1], OPS[o1][1]
    t = f0(v, x) if rev0 else f0(x, v)
    want = f1(np.float32(0.75), t) if rev1 else f1(t, np.float32(0.75))
    np.testing.assert_array_equal(got, want.astype(np.float32))


def k_stt(x, y):
    out = _out(x.shape, x.dtype)
    r = nisa.scalar_tensor_tensor(
        data=nl.load(x),
        op0=np.subtract,
        operand0=1.5,
        op1=np.multiply,
        operand1=nl.load(y),
        reverse0=True,
    )
    nl.store(out, r)
    return out


@pytest.mark.parametrize("dt", DTS)
def test_scalar_tensor_tensor(dt):
    x, y = rand((128, 32), dt), rand((128, 32), dt)
    close(run(k_stt, x, y), (1.5 - f32(x)) * f32(y), dt)


RNG = np.random.default_rng(7)


def _x(shape=(64, 32), lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def k_exponential(a, m):
    out = nl.ndarray((2, 64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    sums = nl.ndarray((64, 3), dtype=nl.float32, buffer=nl.shared_hbm)
    x, mt = _load(a), _load(m)
    e = _tile((64, 32))
    s = _tile((64, 3))
    nisa.exponential(e, x, max_value=mt, reduce_res=s[:, 0:1], reduce_cmd=RC.reset_reduce)
    nisa.dma_copy(out[0], e)
    # a second call keeps summing into the same registers; a third starts from reduce_init
    e2 = _tile((64, 32), nl.bfloat16)
    nisa.exponential(e2, x, 1.5, s[:, 1:2], RC.reduce)
    nisa.exponential(e2, x, 1.5, s[:, 2:3], RC.load_reduce, reduce_init=10.0)
    f = _tile((64, 32))
    nisa.tensor_copy(f, e2)
    nisa.dma_copy(out[1], f)
    nisa.dma_copy(sums, s)
    return out, sums


def test_exponential_subtracts_max_and_sums_into_the_vector_registers():
    a, m = _x(), _x((64, 1))
    out, sums = run(k_exponential, a, m, target="trn3")
    e = np.exp(a - m)
    e2 = np.exp(a - np.float32(1.5))
    np.testing.assert_allclose(out[0], e, rtol=1e-6)
    want = e2.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(out[1], want)
    s1 = e.sum(axis=1)
    np.testing.assert_allclose(sums[:, 0], s1, rtol=1e-5)
    np.testing.assert_allclose(sums[:, 1], s1 + e2.sum(axis=1), rtol=1e-5)
    # load_reduce: reduce_init, then this call's sum (the fp32 sum, not the bf16 dst's)
    np.testing.assert_allclose(sums[:, 2], 10.0 + e2.sum(axis=1), rtol=1e-5)


def k_exponential_stray_init(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = _load(a)
    nisa.exponential(x, x, reduce_init=1.0)  # ERR
    nisa.dma_copy(out, x)
    return out


def test_exponential_reduce_init_only_with_load_reduce():
    expect_error(
        k_exponential_stray_init,
        _x(),
        cls=NKIError,
        code="err_invalid_argument",
        fragments=["reduce_init", "load_reduce", "reduce_cmd=idle"],
        target="trn3",
    )


def k_exponential_only(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = _load(a)
    nisa.exponential(x, x)  # ERR
    nisa.dma_copy(out, x)
    return out


def test_exponential_needs_neuroncore_v4():
    expect_error(
        k_exponential_only,
        _x(),
        cls=NKIError,
        code="err_unsupported_instruction_for_target",
        fragments=["nisa.exponential", "trn2", "trn3"],
        target="trn2",
    )
    np.testing.assert_allclose(run(k_exponential_only, _x((8, 4)) * 0, target="trn3"), 1.0)


def k_exponential_uint32(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = _load(a)
    d = _tile(a.shape, nl.uint32)
    nisa.exponential(d, x)  # ERR
    nisa.dma_copy(out, x)
    return out


def test_exponential_rejects_a_uint32_destination():
    expect_error(
        k_exponential_uint32,
        _x(),
        cls=NKIError,
        code="err_unsupported_dtype",
        fragments=["'dst'", "uint32"],
        target="trn3",
    )


def k_recip(x):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.reciprocal(nl.load(x)))
    return out


@pytest.mark.parametrize("dt", DTS)
def test_reciprocal(dt):
    x = rand((32, 32), dt, 0.5, 4.0)
    close(run(k_recip, x), 1.0 / f32(x), dt)


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
