"""``op0`` of tensor_scalar / tensor_scalar_reduce may be a unary ALU operator (``nl.abs``,
``nl.rsqrt``, ...) applied to the data alone, with ``operand0`` None or 0 (as AWS's kernel
library computes row absolute maxima); any other operand0 is a located error."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError

RNG = np.random.default_rng(11)
X = RNG.standard_normal((128, 96)).astype(np.float32)


@nki.jit
def abs_rowmax_current(x):
    out = nl.ndarray((128, 97), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    a = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.sbuf)
    m = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(
        dst=a, data=t, op0=nl.abs, operand0=0.0, reduce_op=nl.maximum, reduce_res=m
    )
    nisa.dma_copy(dst=out[:, 0:96], src=a)
    nisa.dma_copy(dst=out[:, 96:97], src=m)
    return out


@nki.jit
def abs_then_scale_current(x):
    out = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.abs, operand0=None, op1=nl.multiply, operand1=3.0)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit(api="classic")
def rsqrt_classic(x):
    out = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, nisa.tensor_scalar(t, nl.rsqrt, 0, engine=nisa.gpsimd_engine))
    return out


def test_tensor_scalar_reduce_with_abs():
    got = nki.simulate(abs_rowmax_current)(X)
    np.testing.assert_array_equal(got[:, :96], np.abs(X))
    np.testing.assert_array_equal(got[:, 96], np.abs(X).max(axis=1))


def test_tensor_scalar_with_a_unary_first_op():
    np.testing.assert_allclose(nki.simulate(abs_then_scale_current)(X), 3 * np.abs(X), rtol=1e-6)
    pos = np.abs(X) + 0.5
    want = 1 / np.sqrt(pos)
    np.testing.assert_allclose(nki.simulate(rsqrt_classic)(pos), want, rtol=1e-5)


def test_unary_first_op_with_an_operand_is_an_error():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.abs, operand0=2.0)  # ERR
        nisa.dma_copy(dst=out, src=t)
        return out

    with pytest.raises(NKIError) as ei:
        nki.simulate(k)(X)
    src, first = inspect.getsourcelines(k.fn)
    assert ei.value.loc.line == first + next(i for i, s in enumerate(src) if "# ERR" in s)
    assert "operand0" in str(ei.value) and "2.0" in str(ei.value)
