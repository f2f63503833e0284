"""Every element-wise op of the table against an independent NumPy (float64) reference, for
float32, bfloat16 and an integer dtype where the op allows it, with tile/tile, (P, 1) column
and scalar broadcasting. Float results are checked to the tolerance their rounding implies;
integer and bit-vector results are exact. Ops given by name as op= values."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.language as nl
from nki.errors import NKITypeError
from nki.optable import BINARY, OPS, UNARY, lookup
from nki.testing.reference import NUMPY_OPS

from helpers import BF16

P, F = 16, 24
REF_UNARY = {n: NUMPY_OPS[n] for n in UNARY}
REF_BINARY = {n: NUMPY_OPS[n] for n in BINARY if n not in ("left_shift", "right_shift")}
BOOL_RESULT = {"equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
               "logical_and", "logical_or", "logical_xor", "logical_not"}  # fmt: skip
INT_BINARY = {"add", "subtract", "multiply", "maximum", "minimum", "fmod", "mod", "divide",
              *BOOL_RESULT - {"logical_not"}, "bitwise_and", "bitwise_or", "bitwise_xor",
              "left_shift", "right_shift"}  # fmt: skip
INT_UNARY = {"abs", "negative", "sign", "square", "invert", "logical_not"}
BITVEC = {"bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "invert"}


def test_reference_covers_the_table():
    assert set(UNARY) == set(REF_UNARY)
    assert set(BINARY) == set(REF_BINARY) | {"left_shift", "right_shift"}


def _unary_input(name: str, rng: np.random.Generator) -> np.ndarray:
    if name in ("log", "sqrt", "rsqrt"):
        return rng.uniform(0.1, 5.0, (P, F))
    if name == "reciprocal":
        return rng.choice([-1.0, 1.0], (P, F)) * rng.uniform(0.2, 3.0, (P, F))
    if name == "tan":
        return rng.uniform(-1.2, 1.2, (P, F))
    if name == "arctan":
        return rng.uniform(-1.5, 1.5, (P, F))
    return rng.uniform(-3.0, 3.0, (P, F))


def _binary_inputs(name: str, rng: np.random.Generator, shape_b) -> tuple[np.ndarray, ...]:
    a = rng.uniform(-3.0, 3.0, (P, F))
    b = rng.uniform(-3.0, 3.0, shape_b)
    if name == "power":
        a = rng.uniform(0.5, 2.0, (P, F))
        b = rng.uniform(-2.0, 2.0, shape_b)
    elif name in ("divide", "fmod", "mod"):
        b = rng.choice([-1.0, 1.0], shape_b) * rng.uniform(0.5, 3.0, shape_b)
    elif name in BOOL_RESULT:
        a, b = np.round(a * 2) / 2, np.round(b * 2) / 2  # plenty of equal pairs
    return a, b


def _run(fn, a, b=None, scalar=None, reverse=False):
    @nki.jit
    def kernel(a_in, b_in):
        x = nl.load(a_in)
        if scalar is not None:
            z = fn(scalar, x) if reverse else fn(x, scalar)
        elif b is not None:
            z = fn(x, nl.load(b_in))
        else:
            z = fn(x)
        out = nl.ndarray(z.shape, z.dtype, buffer=nl.shared_hbm)
        nl.store(out, z)
        return out

    return kernel(a, a if b is None else b)


def _expected(ref, dt, *args):
    with np.errstate(all="ignore"):
        return np.asarray(ref(*(np.asarray(x, dtype=np.float64) for x in args)))


def _check_float(got, want, dt, name):
    got = np.asarray(got, dtype=np.float64)
    if name in BOOL_RESULT:
        np.testing.assert_array_equal(got, want.astype(np.float64))
        return
    if dt == "bfloat16":
        # the result is rounded to bf16 (8 significant bits): within one bf16 ulp
        np.testing.assert_allclose(got, want, rtol=2.0**-7, atol=1e-6)
    else:
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", sorted(set(UNARY) - {"invert"}))
def test_unary_float(name, dt):
    rng = np.random.default_rng(hash(name) % 2**32)
    x = _unary_input(name, rng).astype(np.float32).astype(dt)
    got = _run(getattr(nl, name), x)
    want = _expected(REF_UNARY[name], dt, x)
    if name in BOOL_RESULT:
        assert got.dtype == np.bool_
    else:
        assert got.dtype == np.dtype(x.dtype)
    _check_float(got, want, dt, name)


@pytest.mark.parametrize("form", ["tile", "col", "scalar", "rscalar"])
@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", sorted(set(BINARY) - {"left_shift", "right_shift"} - BITVEC))
def test_binary_float(name, dt, form):
    rng = np.random.default_rng(hash(name) % 2**32)
    a, b = _binary_inputs(name, rng, (P, 1) if form == "col" else (P, F))
    a = a.astype(np.float32).astype(dt)
    b = b.astype(np.float32).astype(dt)
    fn = getattr(nl, name)
    if form in ("tile", "col"):
        got = _run(fn, a, b)
        want = _expected(REF_BINARY[name], dt, a, b)
        out_dt = dt
    else:
        s = 1.5 if name != "power" else 0.5
        rev = form == "rscalar"
        if rev and name in ("power", "divide", "fmod", "mod"):
            a = np.abs(a) + np.asarray(0.5, dtype=a.dtype)  # keep the divisor / base sane
            a = a.astype(dt)
        got = _run(fn, a, scalar=s, reverse=rev)
        want = _expected(REF_BINARY[name], dt, *((s, a) if rev else (a, s)))
        out_dt = "float32"  # a Python float is a weak fp32: bf16 (op) 1.5 -> fp32
    if name in BOOL_RESULT:
        assert got.dtype == np.bool_
    else:
        assert got.dtype == nl.float32.np if out_dt == "float32" else got.dtype == BF16
        assert got.shape == (P, F)
    _check_float(got, want, out_dt, name)


def _int_ref(name, a, b, dt):
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    info = np.iinfo(dt)
    if name == "divide":  # fp32 divide, then round-half-even into the int type
        r = np.rint(a64.astype(np.float64) / b64)
    elif name in ("left_shift", "right_shift"):
        bits = np.dtype(dt).itemsize * 8
        u = {8: np.uint8, 16: np.uint16, 32: np.uint32}[bits]
        pat = a.astype(dt).view(u).astype(np.uint64)
        sh = b64.astype(np.uint64)
        r = (pat << sh) if name == "left_shift" else (pat >> sh)
        r = np.where(b64 >= bits, 0, r & (2**bits - 1)).astype(np.uint64).astype(u).view(dt)
        return r
    else:
        r = REF_BINARY[name](a64, b64)
    if name in BOOL_RESULT:
        return np.asarray(r).astype(np.bool_)
    return np.clip(r, info.min, info.max).astype(dt)


@pytest.mark.parametrize("form", ["tile", "col", "scalar"])
@pytest.mark.parametrize("name", sorted(INT_BINARY))
def test_binary_int32_exact(name, form):
    rng = np.random.default_rng(7)
    a = rng.integers(-1000, 1000, (P, F)).astype(np.int32)
    shape_b = (P, 1) if form == "col" else (P, F)
    b = rng.integers(-1000, 1000, shape_b).astype(np.int32)
    if name in ("divide", "fmod", "mod"):
        b = np.where(b == 0, 7, b).astype(np.int32)
    if name in ("left_shift", "right_shift"):
        b = rng.integers(0, 34, shape_b).astype(np.int32)  # includes shifts >= 32
    if name in BOOL_RESULT:
        a, b = a % 5, b % 5
    fn = getattr(nl, name)
    if form == "scalar":
        s = 3
        got = _run(fn, a, scalar=s)
        want = _int_ref(name, a, np.full((P, F), s, np.int32), np.int32)
    else:
        got = _run(fn, a, b)
        want = _int_ref(name, a, np.broadcast_to(b, (P, F)), np.int32)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", sorted(INT_UNARY))
def test_unary_int32_exact(name):
    a = np.random.default_rng(3).integers(-1000, 1000, (P, F)).astype(np.int32)
    a[0, :3] = [0, -1, 1]
    got = _run(getattr(nl, name), a)
    want = REF_UNARY[name](a.astype(np.int64))
    want = want.astype(np.bool_) if name in BOOL_RESULT else want.astype(np.int32)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_right_shift_is_logical_on_the_bit_pattern():
    a = np.array([[-8, -1, 64, 127]], dtype=np.int8)
    got = _run(nl.right_shift, a, scalar=np.int8(1))
    np.testing.assert_array_equal(got, np.array([[124, 127, 32, 63]], dtype=np.int8))
    a32 = np.array([[-8, -(2**31)]], dtype=np.int32)
    got = _run(nl.right_shift, a32, scalar=4)
    assert got.tolist() == [[(2**32 - 8) >> 4, 2**31 >> 4]]


def test_left_shift_and_invert_wrap_instead_of_saturating():
    a = np.array([[64, 1, -1]], dtype=np.int8)
    np.testing.assert_array_equal(
        _run(nl.left_shift, a, scalar=np.int8(1)), np.array([[-128, 2, -2]], dtype=np.int8)
    )
    u = np.array([[5, 0, 255]], dtype=np.uint8)
    np.testing.assert_array_equal(_run(nl.invert, u), np.array([[250, 255, 0]], dtype=np.uint8))


def test_bitvec_op_on_float_is_a_clear_error():
    with pytest.raises(nki.errors.NKITypeError) as ei:
        _run(nl.bitwise_and, np.ones((P, F), np.float32), np.ones((P, F), np.float32))
    assert ei.value.code == "err_bitvec_op_requires_integer_dtype"


def test_python_operators_map_to_ops():
    a = np.random.default_rng(0).uniform(1, 2, (P, F)).astype(np.float32)
    got = _run(lambda x, y: (x + y) * y - x / y, a, a)
    np.testing.assert_allclose(got, (a + a) * a - a / a, rtol=1e-6)


def test_reflected_python_operators_map_to_ops():
    a = np.random.default_rng(1).uniform(0, 3, (P, F)).astype(np.float32)
    np.testing.assert_allclose(_run(lambda x: 2.0**x, a), np.float32(2.0) ** a, rtol=1e-6)
    u = np.random.default_rng(2).integers(0, 7, (P, F)).astype(np.int32)
    got = _run(lambda x: (12 & x) | (1 << x) ^ (255 >> x), u)
    np.testing.assert_array_equal(got, (12 & u) | (1 << u) ^ (255 >> u))


@pytest.mark.parametrize(
    "fn,symbol",
    [(lambda x: x % 3, "%"), (lambda x: 7 // x, "//"), (lambda x: x @ x, "@"),
     (lambda x: abs(x), "abs()"), (lambda x: round(x), "round()"),
     (lambda x: divmod(x, 2), "divmod()")],
)  # fmt: skip
def test_python_operators_nki_does_not_define_are_located_errors(fn, symbol):
    with pytest.raises(NKITypeError) as ei:
        _run(fn, np.ones((P, F), np.float32))
    assert ei.value.code == "err_unsupported_operand"
    assert f"the Python operator {symbol} is not defined on NKI tiles" in str(ei.value)
    assert ei.value.loc.file == __file__


@pytest.mark.parametrize(
    "fn,what",
    [(np.exp, "np.exp"), (lambda x: np.sum(x, axis=1), "np.sum"),
     (lambda x: np.maximum(x, 0.0), "np.maximum"), (len, "len()")],
)  # fmt: skip
def test_numpy_functions_and_len_on_a_tile_are_located_errors(fn, what):
    with pytest.raises(NKITypeError) as ei:
        _run(fn, np.ones((P, F), np.float32))
    assert ei.value.code == "err_unsupported_operand"
    assert str(ei.value).split(": [err_unsupported_operand] ")[1].startswith(what)
    assert ei.value.loc.file == __file__


def test_every_row_has_engines_and_doc():
    for op in OPS.values():
        assert op.engines and op.doc, op.name
        assert getattr(nl, op.name, None) is not None or op.name == "copy"


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
