"""``if bias:`` on a tensor argument or an allocation (``nl.ndarray`` in HBM or on chip) tests
that it was given, as for any Python object and as in NKI's tracer (AWS's kernel library relies on
it); the truth value of a value computed by an operator (``t > 0``) stays a located error."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIControlFlowError

X = np.random.default_rng(4).standard_normal((128, 16)).astype(np.float32)


@nki.jit
def add_optional(x, bias=None):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    if bias:
        b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=b, src=bias)
        nisa.tensor_tensor(dst=t, data1=t, data2=b, op=nl.add)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_hbm_tensor_is_truthy():
    np.testing.assert_array_equal(nki.simulate(add_optional)(X), X)
    np.testing.assert_array_equal(nki.simulate(add_optional)(X, np.ones_like(X)), X + 1)


def test_truth_value_of_an_on_chip_tile_is_an_error():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        if t > 0:  # ERR
            t = nl.multiply(t, 2.0)
        nl.store(out, t)
        return out

    with pytest.raises(NKIControlFlowError) as ei:
        k(X)
    src, first = inspect.getsourcelines(k.fn)
    assert ei.value.code == "err_ambiguous_tensor_truth_value"
    assert ei.value.loc.line == first + next(i for i, s in enumerate(src) if "# ERR" in s)


@nki.jit
def scale_if_given(x, use_sbuf_flag: bool):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    # an on-chip allocation passed around as an optional (None when absent)
    extra = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf) if use_sbuf_flag else None
    if extra:
        nisa.tensor_scalar(dst=extra, data=t, op0=nl.multiply, operand0=3.0)
        nisa.tensor_copy(dst=t, src=extra)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_on_chip_allocation_is_truthy():
    np.testing.assert_array_equal(nki.simulate(scale_if_given)(X, True), X * 3)
    np.testing.assert_array_equal(nki.simulate(scale_if_given)(X, False), X)
