"""Dtype promotion, rounding on write (bf16 / fp8 round-half-even), float -> int casts
(round-half-even + saturation), nl.fp32.min constants (also as ISA immediates), nl.finfo /
nl.iinfo and the fast-fp option."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.dtypes import promote

import backends

RNG = np.random.default_rng(5)

PROMOTION = [  # the classic NKI table (nki.api.shared, "NKI Type Promotion")
    ("float16", "bfloat16", "float32"),
    ("float8_e4m3", "float8_e5m2", "bfloat16"),
    ("float8_e4m3", "float16", "float16"),
    ("float8_e4m3", "bfloat16", "bfloat16"),
    ("float32", "tfloat32", "float32"),
    ("int8", "uint8", "int16"),
    ("int8", "uint16", "int32"),
    ("int32", "uint32", "float32"),
    ("int16", "int32", "int32"),
    ("uint8", "uint16", "uint16"),
    ("int32", "bfloat16", "bfloat16"),
    ("uint8", "float8_e5m2", "float8_e5m2"),
    ("float32", "bfloat16", "float32"),
    ("bool_", "int8", "int16"),  # bool is treated as uint8
]


@pytest.mark.parametrize("a,b,want", PROMOTION)
def test_promotion_table(a, b, want):
    assert promote(a, b) == want
    assert promote(b, a) == want


def _binop_kernel(fn, *scalar):
    @nki.jit
    def kernel(a, b):
        x = nl.load(a)
        z = fn(x, *scalar) if scalar else fn(x, nl.load(b))
        out = nl.ndarray(z.shape, z.dtype, buffer=nl.shared_hbm)
        nl.store(out, z)
        return out

    return kernel


@pytest.mark.parametrize(
    "da,db,want",
    [("float16", "bfloat16", np.float32), ("int8", "uint8", np.int16),
     ("int32", "uint32", np.float32), ("int8", "float16", np.float16)],
)  # fmt: skip
def test_promotion_end_to_end(da, db, want):
    a = np.full((4, 8), 3, dtype=nl.__dict__[da].np)
    b = np.full((4, 8), 2, dtype=nl.__dict__[db].np)
    got = _binop_kernel(nl.add)(a, b)
    assert got.dtype == np.dtype(want)
    assert np.all(got.astype(np.float64) == 5)


def test_python_scalars_are_weak_int32_and_fp32():
    a8 = np.full((4, 8), 100, dtype=np.int8)
    got = _binop_kernel(nl.add, 100)(a8, a8)  # int8 + int -> int32: no saturation at 127
    assert got.dtype == np.int32 and np.all(got == 200)
    h = np.full((4, 8), 1.0, dtype=np.float16)
    got = _binop_kernel(nl.add, 1.2)(h, h)  # fp16 + float -> fp32
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, 2.2, rtol=1e-7)
    got = _binop_kernel(nl.add, np.float16(1.2))(h, h)  # a typed scalar keeps its type
    assert got.dtype == np.float16


def test_numpy_64_bit_scalars_are_the_python_numbers_they_stand_for():
    # np.float64 (1 / np.sqrt(d)) is a Python float; np.int64 an int: no NKI dtype is 64-bit,
    # so they are weak fp32 / int32 immediates, as the Python numbers are
    h = np.full((4, 8), 1.0, dtype=np.float16)
    got = _binop_kernel(nl.add, 1 / np.sqrt(np.float64(64)))(h, h)
    assert got.dtype == np.float32 and np.all(got == 1.125)
    a8 = np.full((4, 8), 100, dtype=np.int8)
    got = _binop_kernel(nl.add, np.int64(100))(a8, a8)
    assert got.dtype == np.int32 and np.all(got == 200)
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    for s in (np.float64(0.125), np.int64(3)):
        np.testing.assert_array_equal(_scaled(x, s), x * np.float32(s))


@nki.jit
def _scaled(x, s):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=s)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_dtype_override():
    a = np.full((4, 8), 2.5, dtype=np.float32)
    got = _binop_kernel(lambda x, y: nl.multiply(x, y, dtype=nl.int32))(a, a)
    assert got.dtype == np.int32 and np.all(got == 6)  # 6.25 -> 6


def _cast_kernel(dt):
    @nki.jit
    def kernel(a):
        x = nl.load(a)
        y = nl.copy(x, dtype=dt)
        out = nl.ndarray(x.shape, dt, buffer=nl.shared_hbm)
        nl.store(out, y)
        return out

    return kernel


HALF_WAYS = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5]


def test_float_to_int_rounds_half_even_and_saturates():
    x = np.array([HALF_WAYS + [127.4, 127.6, 300.0, -300.0, np.nan, np.inf, -np.inf]],
                 dtype=np.float32)  # fmt: skip
    got = _cast_kernel(nl.int8)(x)
    assert got.tolist() == [[0, 2, 2, 0, -2, -2, 4, 127, 127, 127, -128, 0, 127, -128]]
    got = _cast_kernel(nl.uint8)(x)
    assert got.tolist() == [[0, 2, 2, 0, 0, 0, 4, 127, 128, 255, 0, 0, 255, 0]]
    big = np.array([[2.5, 3e9, -3e9, 2147483520.0]], dtype=np.float32)
    got = _cast_kernel(nl.int32)(big)
    assert got.tolist() == [[2, 2**31 - 1, -(2**31), 2147483520]]


def test_int_to_narrower_int_saturates():
    x = np.array([[1000, -1000, 5, 255, 256]], dtype=np.int32)
    assert _cast_kernel(nl.int8)(x).tolist() == [[127, -128, 5, 127, 127]]
    assert _cast_kernel(nl.uint8)(x).tolist() == [[255, 0, 5, 255, 255]]


def test_bf16_rounds_half_to_even_on_write():
    one = 1.0
    x = np.array([[one + 2**-8, one + 3 * 2**-8, one + 2**-8 + 2**-20, -(one + 2**-8),
                   65280.0 + 128.0]], dtype=np.float32)  # fmt: skip
    got = _cast_kernel(nl.bfloat16)(x).astype(np.float64)
    # halfway -> even mantissa; just above halfway -> up; sign symmetric
    assert got.tolist() == [[1.0, 1.0 + 2**-6, 1.0 + 2**-7, -1.0, 65536.0]]


@pytest.mark.parametrize(
    "dt,vals,want",
    [
        ("float8_e4m3", [1.0625, 1.1875, 1.07, -1.0625], [1.0, 1.25, 1.125, -1.0]),
        ("float8_e5m2", [1.125, 1.375, 1.13, -1.125], [1.0, 1.5, 1.25, -1.0]),
    ],
)
def test_fp8_rounds_half_to_even_on_write(dt, vals, want):
    x = np.array([vals], dtype=np.float32)
    got = _cast_kernel(getattr(nl, dt))(x)
    assert got.dtype == getattr(nl, dt).np
    assert got.astype(np.float64).tolist() == [want]


def test_engine_math_is_fp32_then_rounded():
    # bf16 inputs: the product is formed in fp32 and rounded once on write
    a = np.array([[1.0 + 2**-7]], dtype=ml_dtypes.bfloat16)
    got = _binop_kernel(nl.multiply)(a, a)  # (1+2^-7)^2 = 1 + 2^-6 + 2^-14 -> 1 + 2^-6
    assert got.dtype == ml_dtypes.bfloat16
    assert float(got[0, 0]) == 1.0 + 2**-6


def test_fp32_min_constants():
    assert nl.fp32.min == np.float32(np.finfo(np.float32).min)
    assert np.array(nl.fp32.min, dtype=np.float32).view(np.uint32) == 0xFF7FFFFF
    assert np.array(nl.bfp16.min).view(np.uint16) == 0xFF80
    assert nl.bfloat16 == np.dtype(ml_dtypes.bfloat16)
    assert nl.int8.max == 127 and nl.uint16.max == 65535


def _bf16_roundtrip_kernel(**jit_kw):
    @nki.jit(**jit_kw)
    def kernel(a):
        x = nl.load(a)
        t = nl.copy(x, dtype=nl.bfloat16)
        y = nl.add(t, t, dtype=nl.float32)
        out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, y)
        return out

    return kernel


def test_fast_fp_option_keeps_fp32_precision(monkeypatch):
    x = np.array([[1.0 + 2**-12, 3.14159265]], dtype=np.float32)
    precise = _bf16_roundtrip_kernel()(x)
    np.testing.assert_array_equal(precise, 2 * x.astype(ml_dtypes.bfloat16).astype(np.float32))
    fast = _bf16_roundtrip_kernel(precise_fp=False)(x)
    np.testing.assert_array_equal(fast, 2 * x)
    monkeypatch.setenv("NKI_PRECISE_FP", "0")
    np.testing.assert_array_equal(_bf16_roundtrip_kernel()(x), 2 * x)


def test_fast_fp_output_is_still_the_declared_dtype():
    @nki.jit(precise_fp=False)
    def kernel(a):
        x = nl.load(a)
        out = nl.ndarray(x.shape, nl.bfloat16, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(x, dtype=nl.bfloat16))
        return out

    x = np.array([[1.0 + 2**-12]], dtype=np.float32)
    got = kernel(x)
    assert got.dtype == ml_dtypes.bfloat16 and float(got[0, 0]) == 1.0


def test_dma_between_same_width_integers_copies_bits():
    """A DMA (nl.load / nl.store / nisa.dma_copy) between int32 and uint32 (or 16- / 8-bit
    pairs) copies the bit pattern: nc_find_index8's all-ones "not found" lands as -1 in an
    int32 output. A narrowing integer conversion still saturates."""
    import nki.isa as nisa

    @nki.jit
    def kernel(x):
        a = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.shared_hbm)
        b = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.shared_hbm)
        c = nl.ndarray(x.shape, dtype=nl.int16, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(a, t)
        nisa.dma_copy(dst=b, src=t)
        nl.store(c, t)
        return a, b, c

    x = np.array([[0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 70000]] * 2, dtype=np.uint32)
    a, b, c = kernel(x)
    np.testing.assert_array_equal(a, x.view(np.int32))
    np.testing.assert_array_equal(b, x.view(np.int32))
    np.testing.assert_array_equal(c, np.clip(x.astype(np.int64), -32768, 32767).astype(np.int16))


def test_finfo_iinfo():
    import ml_dtypes

    assert nl.finfo(nl.bfloat16).max == ml_dtypes.finfo(ml_dtypes.bfloat16).max
    assert nl.finfo(nl.bfloat16).bits == 16
    assert nl.finfo(nl.float32).min == np.finfo(np.float32).min
    assert nl.iinfo(nl.int8).max == 127 and nl.iinfo(nl.uint16).max == 65535


@nki.jit
def window_max(x):
    out = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    lo = nl.zeros((x.shape[0], 1), dtype=nl.float32)
    hi = nl.full((x.shape[0], 1), 10.0, dtype=nl.float32)
    res = nl.ndarray((x.shape[0], 1), dtype=nl.float32)
    nisa.range_select(
        on_true_tile=t,
        comp_op0=np.greater_equal,
        comp_op1=np.less,
        bound0=lo,
        bound1=hi,
        reduce_cmd=nisa.reduce_cmd.reset_reduce,
        reduce_res=res,
        reduce_op=np.max,
        range_start=0,
        on_false_value=nl.fp32.min,  # a NumPy float32 scalar
    )
    nl.store(out, res)
    return out


def test_numpy_scalar_on_false_value():
    x = RNG.random((16, 40), dtype=np.float32)
    np.testing.assert_allclose(window_max(x), x[:, :10].max(1, keepdims=True))


def test_tfloat32_tiles_round_every_write_to_ten_mantissa_bits():
    """tfloat32 (1 sign, 8 exponent, 10 mantissa bits) is stored in fp32: a write into a
    tfloat32 tile rounds to nearest-even at 10 bits on every backend."""

    @nki.jit
    def to_tf32(x):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        u = nl.ndarray(x.shape, dtype=nl.tfloat32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=u, data=t, op0=nl.add, operand0=0.0)
        v = nl.ndarray(x.shape, dtype=nl.tfloat32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=v, src=t)
        w = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=w, data1=u, data2=v, op=nl.subtract)
        nisa.tensor_copy(dst=t, src=u)
        nisa.dma_copy(dst=out, src=t)
        return out, w

    x = np.array(
        [[1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-23, 3.4028235e38, np.inf, -(2**-14 + 2**-25)]]
    )
    x = x.astype(np.float32)  # (the fp32 maximum rounds up past tfloat32's largest: inf)
    want = np.array([[1.0, 1 + 2**-9, 1.0, np.inf, np.inf, -(2**-14)]], np.float32)
    runs = backends.run_backends(to_tf32, None, x)
    got, diff = runs.results[backends.REFERENCE]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(diff[:, :3], 0.0)


def test_erf_and_gelu_are_the_exact_functions_rounded_to_fp32():
    """``nl.erf`` / ``nl.gelu`` (and the activation's gelu) give erf(x) and x * Phi(x) rounded
    once to fp32, also where a low-order approximation loses them: tiny arguments (erf(x) ~
    2x/sqrt(pi)) and the negative tail of gelu (1 + erf(x) cancels)."""
    import math

    @nki.jit
    def kernel(a):
        x = nl.load(a)
        outs = []
        for y in (nl.erf(x), nl.gelu(x), nisa.activation(op=nl.gelu, data=x)):
            out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, y)
            outs.append(out)
        return tuple(outs)

    special = [1e-30, -1e-6, 1e-4, 0.01, -3.0, -4.0, -5.0, -9.5, -12.3, 0.5, 1.0, 3.9, 12.0]
    x = np.concatenate([special, np.linspace(-14, 6, 128 * 4 - len(special))]).astype(np.float32)
    x = x.reshape(128, 4)
    erf_ref = np.array([math.erf(float(v)) for v in x.flat], np.float32).reshape(x.shape)
    phi = [0.5 * math.erfc(-float(v) / math.sqrt(2.0)) for v in x.flat]
    gelu_ref = np.array([float(v) * p for v, p in zip(x.flat, phi)], np.float32).reshape(x.shape)
    runs = backends.run_backends(kernel, None, x)
    erf, gelu, act = runs.results[backends.REFERENCE]
    np.testing.assert_array_equal(erf, erf_ref)
    np.testing.assert_array_equal(gelu, gelu_ref)
    np.testing.assert_array_equal(act, gelu_ref)
