"""nisa.activate2 against its documented signature (nki 0.7 stubs): the exact positional
order, no ``engine=`` parameter (a located unknown-keyword error), the documented constraints
(reverse0 / reverse1 need their op; tile immediates share a dtype), and a fully positional call
against NumPy."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError

from helpers import expect_error, run

RNG = np.random.default_rng(3)
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
    a = RNG.standard_normal((P, F)).astype(np.float32)
    s = RNG.uniform(0.5, 2.0, (P, 1)).astype(np.float32)
    b = RNG.standard_normal((P, 1)).astype(np.float32)
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
    a = RNG.standard_normal((P, F)).astype(np.float32)
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
    a = RNG.standard_normal((P, F)).astype(np.float32)
    if dt1 == nl.float32:
        np.testing.assert_allclose(run(mixed_imm_dtypes, a, dt1, target="trn3"), 2 * a + 1)
        return
    expect_error(mixed_imm_dtypes, a, dt1, cls=NKIError, code="err_invalid_operand_dtype",
                 fragments=["float32", "bfloat16"], target="trn3")  # fmt: skip
