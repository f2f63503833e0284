"""Scalar-engine instructions: nisa.activation (scale, bias, reduce command, accumulate
registers) and nisa.activation_reduce, against NumPy, with their per-target rules; and the
current API's nisa.activate2 (tensor-scalar stage, activation, reductions) against its
documented signature: the exact positional order, no ``engine=`` parameter (a located
unknown-keyword error), the documented constraints (reverse0 / reverse1 need their op; tile
immediates share a dtype) and a fully positional call against NumPy."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import nki.isa as nisa
import nki.language as nl
from nki.errors import (
    NKIError,
    NKITypeError,
)
from nki.isa import reduce_cmd as RC

from helpers import BF16, DTS, close, expect_error, f32, rand, run
from helpers import hbm_out as _out
from helpers import load_sbuf as _load
from helpers import sbuf_tile as _tile


def k_act(x, bias, scale_vec, op):
    out = _out(x.shape, x.dtype)
    r = nisa.activation(op, nl.load(x), bias=nl.load(bias), scale=nl.load(scale_vec))
    nl.store(out, r)
    return out


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize(
    "op,ref",
    [
        (nl.exp, np.exp),
        (np.tanh, np.tanh),
        (nl.relu, lambda v: np.maximum(v, 0)),
        (nl.copy, lambda v: v),
        (nl.sigmoid, lambda v: 1 / (1 + np.exp(-v))),
    ],
)
def test_activation_scale_bias(dt, op, ref):
    x = rand((128, 64), dt)
    b, s = rand((128, 1)), rand((128, 1))
    close(run(k_act, x, b, s, op), ref(f32(x) * s + b), dt, rtol=2e-2 if dt == BF16 else 1e-5)


def k_act_reduce(x, scale):
    out = _out(x.shape, x.dtype)
    red = _out((x.shape[0], 1), nl.float32)
    acc = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    t = nl.load(x)
    r = nisa.activation_reduce(nl.exp, t, reduce_op=nl.add, reduce_res=acc, scale=scale)
    nl.store(out, r)
    nl.store(red, acc)
    return out, red


@pytest.mark.parametrize("dt", DTS)
def test_activation_reduce(dt):
    x = rand((64, 100), dt)
    got, red = run(k_act_reduce, x, 0.5)
    e = np.exp(f32(x) * 0.5)
    close(got, e, dt)
    np.testing.assert_allclose(red[:, 0], e.sum(axis=1), rtol=1e-5)


def k_act_accum(x):
    """Accumulate across two activations in the Scalar engine's registers."""
    red = _out((x.shape[0], 1), nl.float32)
    acc = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    t = nl.load(x)
    nisa.activation(nl.copy, t, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.activation(
        nl.square, t, reduce_op=nl.add, reduce_res=acc, reduce_cmd=nisa.reduce_cmd.reduce
    )
    nl.store(red, acc)
    return red


def test_activation_reduce_cmd_accumulates():
    x = rand((32, 16))
    got = run(k_act_accum, x)
    np.testing.assert_allclose(got[:, 0], x.sum(1) + (x * x).sum(1), rtol=1e-5, atol=1e-5)


def k_act_idle(x, reset_first):
    """reduce_cmd=idle leaves the registers alone: reduce_res reads what is there."""
    red = _out((x.shape[0], 1), nl.float32)
    acc = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    t = nl.load(x)
    if reset_first:
        nisa.activation(nl.copy, t, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.activation(nl.exp, t, reduce_op=nl.add, reduce_res=acc)  # default reduce_cmd=idle
    nl.store(red, acc)
    return red


def test_activation_idle_reads_registers():
    x = rand((8, 4))
    np.testing.assert_allclose(run(k_act_idle, x, True)[:, 0], x.sum(1), rtol=1e-6, atol=1e-6)
    assert np.isnan(run(k_act_idle, x, False)).all()  # never reset: undefined -> NaN


def k_act_max(x):
    red = _out((x.shape[0], 1), nl.float32)
    acc = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    rr = nisa.reduce_cmd.reset_reduce
    nisa.activation(nl.exp, nl.load(x), reduce_op=nl.max, reduce_res=acc, reduce_cmd=rr)  # ERR
    nl.store(red, acc)
    return red


def test_activation_reduce_op_trn1_vs_trn2():
    x = rand((16, 8))
    np.testing.assert_allclose(run(k_act_max, x, target="trn2")[:, 0], np.exp(x).max(1), rtol=1e-6)
    expect_error(
        k_act_max,
        x,
        target="trn1",
        cls=NKIError,
        code="err_unsupported_reduce_op",
        fragments=["maximum", "trn1", "add"],
    )


def k_recip_bias(x, bias):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.activation(nl.reciprocal, nl.load(x), bias=nl.load(bias)))  # ERR
    return out


def test_reciprocal_activation_bias_trn2_only():
    x, b = rand((16, 8), lo=1, hi=2), rand((16, 1))
    close(run(k_recip_bias, x, b, target="trn2"), 1.0 / (x + b))
    expect_error(
        k_recip_bias,
        x,
        b,
        target="trn1",
        cls=NKIError,
        code="err_activation_bias_unsupported",
        fragments=["reciprocal", "trn1"],
    )


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


def k_act_bad_bias(x, bias):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.activation(nl.exp, nl.load(x), bias=nl.load(bias)))  # ERR
    return out


def k_act_bad_scale(x, scale):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.activation(nl.exp, nl.load(x), scale=nl.load(scale)))  # ERR
    return out


def test_activation_operand_dtype_rules():
    x = rand((16, 8))
    expect_error(
        k_act_bad_bias,
        x,
        np.ones((16, 1), np.int32),
        cls=NKITypeError,
        code="err_activation_bias_invalid_type",
        fragments=["bias", "int32"],
    )
    expect_error(
        k_act_bad_scale,
        x,
        np.ones((16, 1), BF16),
        cls=NKITypeError,
        code="err_activation_scale_invalid_type",
        fragments=["scale", "bfloat16"],
    )


def k_act_not_act(x):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.activation(np.add, nl.load(x)))  # ERR
    return out


def test_activation_op_must_be_activation():
    expect_error(
        k_act_not_act,
        rand((8, 8)),
        cls=NKIError,
        code="err_unsupported_activation",
        fragments=["add", "activation"],
    )


RNG = np.random.default_rng(7)


def _x(shape=(64, 32), lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def k_activate2(a, s, b):
    out = nl.ndarray((4, 64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    res = nl.ndarray((64, 3), dtype=nl.float32, buffer=nl.shared_hbm)
    x, st, bt = _load(a), _load(s), _load(b)
    y = [_tile((64, 32)) for _ in range(4)]
    r = _tile((64, 3))
    nisa.activate2(y[0], nl.tanh, x, st, bt, nl.multiply, nl.add)
    nisa.activate2(y[1], nl.exp, x, 0.5, 1.0, nl.multiply, nl.subtract, reverse1=True)
    nisa.activate2(
        y[2], nl.prelu, x, 1.0, 0.0, nl.subtract, nl.bypass, relu_param=st, reverse0=True,
        reduce_op=nl.abs_max, reduce_res=r[:, 0:1], reduce_cmd=RC.reset_reduce,
    )  # fmt: skip
    # activation and activate2 share the Scalar engine's registers
    nisa.activation(y[3], nl.copy, x, reduce_op=nl.add, reduce_cmd=RC.reset_reduce)
    nisa.activate2(
        y[3], nl.copy, x, None, None, nl.bypass, nl.bypass, reduce_op=nl.add,
        reduce_res=r[:, 1:2], reduce_cmd=RC.reduce,
    )  # fmt: skip
    nisa.activate2(
        y[3], nl.copy, x, 2.0, None, nl.add, nl.bypass, reduce_op=nl.minimum,
        reduce_res=r[:, 2:3], reduce_cmd=RC.reset_reduce,
    )  # fmt: skip
    for i in range(4):
        nisa.dma_copy(out[i], y[i])
    nisa.dma_copy(res, r)
    return out, res


def test_activate2_tensor_scalar_stage_activation_and_reductions():
    a, s, b = _x(), _x((64, 1), 0.1, 1.0), _x((64, 1))
    out, res = run(k_activate2, a, s, b, target="trn3")
    np.testing.assert_allclose(out[0], np.tanh(a * s + b), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out[1], np.exp(np.float32(1.0) - a * np.float32(0.5)), rtol=1e-6)
    t = np.float32(1.0) - a
    pre = np.where(t >= 0, t, s * t)
    np.testing.assert_allclose(out[2], pre, rtol=1e-6)
    # abs_max keeps the signed value of largest magnitude
    idx = np.argmax(np.abs(pre), axis=1)
    np.testing.assert_allclose(res[:, 0], pre[np.arange(64), idx], rtol=1e-6)
    np.testing.assert_allclose(res[:, 1], 2 * a.sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res[:, 2], (a + 2).min(axis=1), rtol=1e-6)
    np.testing.assert_allclose(out[3], a + 2, rtol=1e-6)


def k_activate2_bad_pair(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = _load(a)
    nisa.activate2(x, nl.exp, x, 1.0, 1.0, nl.add, nl.add)  # ERR
    nisa.dma_copy(out, x)
    return out


def test_activate2_rejects_an_undocumented_op_pair_and_older_targets():
    expect_error(
        k_activate2_bad_pair,
        _x(),
        cls=NKIError,
        code="err_unsupported_op",
        fragments=["(add, add)", "(multiply, add)"],
        target="trn3",
    )
    expect_error(
        k_activate2_bad_pair,
        _x(),
        cls=NKIError,
        code="err_unsupported_instruction_for_target",
        fragments=["nisa.activate2", "trn3"],
        target="trn2",
    )


A2_RNG = np.random.default_rng(3)


P, F = 64, 40


# the documented parameter list, in order
DOC_PARAMS = (
    "dst", "op", "data", "imm0", "imm1", "op0", "op1", "relu_param", "reverse0", "reverse1",
    "reduce_op", "reduce_res", "reduce_cmd", "name",
)  # fmt: skip


def test_the_signature_is_the_documented_one_in_order():
    params = inspect.signature(nisa.activate2).parameters
    assert tuple(params) == DOC_PARAMS
    assert params["relu_param"].default == 0.0
    assert params["reduce_cmd"].default == nisa.reduce_cmd.idle


def _sb(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


def all_positional(a, s, b):
    """Every documented parameter passed by position up to reduce_cmd."""
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    res = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x, st, bt, y, r = _sb((P, F)), _sb((P, 1)), _sb((P, 1)), _sb((P, F)), _sb((P, 1))
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=st, src=s)
    nisa.dma_copy(dst=bt, src=b)
    nisa.activate2(y, nl.prelu, x, st, bt, nl.multiply, nl.subtract, 0.25, True, True,
                   nl.maximum, r, nisa.reduce_cmd.reset_reduce)  # fmt: skip
    nisa.dma_copy(dst=out, src=y)
    nisa.dma_copy(dst=res, src=r)
    return out, res


def test_a_fully_positional_call_matches_numpy():
    a = A2_RNG.standard_normal((P, F)).astype(np.float32)
    s = A2_RNG.uniform(0.5, 2.0, (P, 1)).astype(np.float32)
    b = A2_RNG.standard_normal((P, 1)).astype(np.float32)
    out, res = run(all_positional, a, s, b, target="trn3")
    t = b - s * a  # reverse0: imm0 * data; reverse1: imm1 - that
    want = np.where(t >= 0, t, np.float32(0.25) * t)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(res[:, 0], want.max(axis=1), rtol=1e-6, atol=1e-6)


def with_engine(a):
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    x = _sb((P, F))
    nisa.dma_copy(dst=x, src=a)
    nisa.activate2(x, nl.exp, x, 1.0, 0.0, nl.multiply, nl.add, engine=nisa.engine.scalar)  # ERR
    nisa.dma_copy(dst=out, src=x)
    return out


def test_engine_is_not_a_parameter_of_activate2():
    expect_error(with_engine, np.zeros((P, F), np.float32), cls=NKIError,
                 code="err_unexpected_keyword_argument", fragments=["engine"],
                 target="trn3")  # fmt: skip


def reversed_bypass(a, which):
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    x = _sb((P, F))
    nisa.dma_copy(dst=x, src=a)
    r0, r1 = which == 0, which == 1
    nisa.activate2(x, nl.exp, x, 2.0, 0.0, nl.multiply, nl.bypass, reverse0=r0, reverse1=r1)  # ERR
    nisa.dma_copy(dst=out, src=x)
    return out


def test_reverse1_needs_op1():
    expect_error(reversed_bypass, np.zeros((P, F), np.float32), 1, cls=NKIError,
                 code="err_invalid_argument", fragments=["reverse1", "op1", "nl.bypass"],
                 target="trn3")  # fmt: skip


def test_reverse0_with_op0_set_is_fine():
    a = A2_RNG.standard_normal((P, F)).astype(np.float32)
    got = run(reversed_bypass, a, 0, target="trn3")
    np.testing.assert_allclose(got, np.exp(np.float32(2.0) * a), rtol=1e-6)


def mixed_imm_dtypes(a, dt1):
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    x, i0, i1 = _sb((P, F)), _sb((P, 1)), _sb((P, 1), dt1)
    nisa.dma_copy(dst=x, src=a)
    nisa.memset(i0, 2.0)
    nisa.memset(i1, 1.0)
    nisa.activate2(x, nl.copy, x, i0, i1, nl.multiply, nl.add)  # ERR
    nisa.dma_copy(dst=out, src=x)
    return out


@pytest.mark.parametrize("dt1", [nl.bfloat16, nl.float32])
def test_tile_immediates_share_a_dtype(dt1):
    a = A2_RNG.standard_normal((P, F)).astype(np.float32)
    if dt1 == nl.float32:
        np.testing.assert_allclose(run(mixed_imm_dtypes, a, dt1, target="trn3"), 2 * a + 1)
        return
    expect_error(mixed_imm_dtypes, a, dt1, cls=NKIError, code="err_invalid_operand_dtype",
                 fragments=["float32", "bfloat16"], target="trn3")  # fmt: skip


def k_sine_two_ways(a):
    x = nl.load(a)
    out_act = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    out_nl = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out_act, nisa.activation(op=nl.sin, data=x))
    nl.store(out_nl, nl.sin(x))
    return out_act, out_nl


def test_activation_sine_has_no_range_reduction_and_nl_sin_does():
    """The shared API page: the Scalar engine evaluates its sine polynomial without range
    reduction, so activation(op=nl.sin) extrapolates a cubic outside [-pi, pi] (sin(9.0) ~
    27.65); nl.sin reduces first and stays the sine everywhere."""
    import nki

    from backends import REFERENCE, run_backends

    x = np.array([[9.0, -9.0, 3.0, -3.0, 0.5, 3.2, 100.0, np.pi]], np.float32)
    runs = run_backends(nki.jit(k_sine_two_ways), None, x)
    act, exact = runs.results[REFERENCE]
    np.testing.assert_allclose(act[0, :2], [27.65, -27.65], atol=0.01)
    inside = np.abs(x) <= np.float32(np.pi)
    np.testing.assert_array_equal(act[inside], np.sin(x[inside]))
    d = x[0, 5].astype(np.float64) - np.pi  # (just past pi: near sin, then the cubic grows)
    np.testing.assert_allclose(act[0, 5], d**3 / 6 - d, rtol=1e-6)
    assert act[0, 6] > 1e5
    np.testing.assert_allclose(exact, np.sin(x.astype(np.float64)), rtol=1e-6, atol=1e-6)
