"""Vector-engine instructions: nisa.tensor_tensor, tensor_scalar, scalar_tensor_tensor,
tensor_scalar_reduce, tensor_reduce and tensor_tensor_scan, against NumPy, with their engine,
dtype, memory and shape rules."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nki.isa as nisa
import nki.language as nl
from nki.errors import (
    NKIError,
    NKIMemoryError,
    NKIShapeError,
    NKITypeError,
    NKIUnsupportedError,
)

from helpers import BF16, DTS, close, expect_error, f32, rand, run
from helpers import hbm_out as _out


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


OPS = {
    "add": (np.add, np.add),
    "subtract": (nl.subtract, np.subtract),
    "multiply": (np.multiply, np.multiply),
    "maximum": (nl.maximum, np.maximum),
    "minimum": (np.minimum, np.minimum),
}


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


def k_tsr(x, op):
    out = _out(x.shape, x.dtype)
    red = _out((x.shape[0], 1), nl.float32)
    acc = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    r = nisa.tensor_scalar_reduce(
        data=nl.load(x), op0=np.multiply, operand0=3.0, reduce_op=op, reduce_res=acc
    )
    nl.store(out, r)
    nl.store(red, acc)
    return out, red


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("op,ref", [(np.add, np.sum), (np.max, np.max), (nl.minimum, np.min)])
def test_tensor_scalar_reduce(dt, op, ref):
    x = rand((96, 48), dt)
    got, red = run(k_tsr, x, op)
    close(got, f32(x) * 3, dt)
    close(red, ref(f32(x) * 3, axis=1, keepdims=True), np.float32, rtol=1e-4, atol=1e-4)


def k_reduce(x, op, axis, negate, keepdims):
    r = nisa.tensor_reduce(op, nl.load(x), axis=axis, negate=negate, keepdims=keepdims)
    out = _out(r.shape, x.dtype)
    nl.store(out, r)
    return out


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize(
    "op,ref", [(np.add, np.sum), (nl.maximum, np.max), (np.min, np.min), (nl.multiply, np.prod)]
)
def test_tensor_reduce(dt, op, ref):
    x = rand((64, 4, 8), dt, 0.5, 1.5)
    got = run(k_reduce, x, op, (1, 2), False, False)
    assert got.shape == (64, 1)
    close(got, ref(f32(x), axis=(1, 2))[:, None], dt, rtol=2e-2 if dt == BF16 else 1e-4)
    got = run(k_reduce, x, op, 2, True, True)
    assert got.shape == (64, 4, 1)
    close(got, -ref(f32(x), axis=2, keepdims=True), dt, rtol=2e-2 if dt == BF16 else 1e-4)


def test_tensor_reduce_bitwise():
    x = RNGI = np.random.default_rng(3).integers(0, 2**16, size=(16, 12)).astype(np.int32)
    del RNGI
    got = run(k_reduce, x, nl.bitwise_or, 1, False, True)
    np.testing.assert_array_equal(got[:, 0], np.bitwise_or.reduce(x, axis=1))


def k_reduce_axis(x, axis):
    r = nisa.tensor_reduce(np.add, nl.load(x), axis=axis)  # ERR
    out = _out(r.shape, x.dtype)
    nl.store(out, r)
    return out


def test_tensor_reduce_axis_rule():
    x = rand((8, 4, 4))
    for axis in (0, 1, (1, 3)):
        expect_error(
            k_reduce_axis,
            x,
            axis,
            cls=NKIError,
            code="err_invalid_axis",
            fragments=[repr(axis), "last axis 2"],
        )


def k_red(x, op, nfree):
    axes = tuple(range(x.ndim - nfree, x.ndim))
    r = nisa.tensor_reduce(op, nl.load(x), axis=axes, keepdims=True)
    out = nl.ndarray(r.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, r)
    return out


@given(
    shape=st.lists(st.integers(1, 9), min_size=2, max_size=4),
    p=st.integers(1, 128),
    op=st.sampled_from(["add", "maximum", "minimum"]),
    data=st.data(),
)
def test_tensor_reduce_trailing_axes(shape, p, op, data):
    shape = (p, *shape[1:])
    nfree = data.draw(st.integers(1, len(shape) - 1))
    x = np.random.default_rng(p).uniform(-1, 1, shape).astype(np.float32)
    ref = {"add": np.sum, "maximum": np.max, "minimum": np.min}[op]
    axes = tuple(range(len(shape) - nfree, len(shape)))
    got = run(k_red, x, OPS[op][0], nfree)
    np.testing.assert_allclose(got, ref(x, axis=axes, keepdims=True), rtol=1e-5, atol=1e-5)


def _scan_ref(a, b, init, f0, f1, rev0, rev1):
    r = np.empty_like(a)
    prev = init[:, 0]
    for i in range(a.shape[1]):
        t = f0(prev, a[:, i]) if rev0 else f0(a[:, i], prev)
        prev = f1(b[:, i], t) if rev1 else f1(t, b[:, i])
        r[:, i] = prev
    return r


def k_scan(a, b, init, op0, op1, rev0, rev1):
    out = _out(a.shape, a.dtype)
    iv = nl.load(init)
    r = nisa.tensor_tensor_scan(nl.load(a), nl.load(b), iv, op0, op1, reverse0=rev0, reverse1=rev1)
    nl.store(out, r)
    return out


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("rev0,rev1", [(False, False), (True, True)])
def test_scan_recurrence(dt, rev0, rev1):
    a, b = rand((32, 20), dt, 0.2, 0.9), rand((32, 20), dt)
    init = rand((32, 1))
    got = run(k_scan, a, b, init, np.multiply, np.subtract, rev0, rev1)
    want = _scan_ref(f32(a), f32(b), init, np.multiply, np.subtract, rev0, rev1)
    close(got, want, dt, rtol=2e-2 if dt == BF16 else 1e-4, atol=2e-2 if dt == BF16 else 1e-5)


def k_scan_scalar_init(a, b):
    out = _out(a.shape, a.dtype)
    nl.store(out, nisa.tensor_tensor_scan(nl.load(a), nl.load(b), 1.0, np.add, np.multiply))
    return out


def test_scan_scalar_initial():
    a, b = rand((4, 6), lo=0.1, hi=1.0), rand((4, 6), lo=0.5, hi=1.0)
    want = np.empty_like(a)
    prev = np.ones(4, np.float32)
    for i in range(6):
        prev = (a[:, i] + prev) * b[:, i]
        want[:, i] = prev
    close(run(k_scan_scalar_init, a, b), want)


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
