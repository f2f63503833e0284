"""Scalar-engine instructions: nisa.activation (scale, bias, reduce command, accumulate
registers) and nisa.activation_reduce, against NumPy, with their per-target rules."""

import numpy as np
import pytest

import nki.isa as nisa
import nki.language as nl
from nki.errors import (
    NKIError,
    NKITypeError,
)

from helpers import BF16, DTS, close, expect_error, f32, rand, run
from helpers import hbm_out as _out


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
