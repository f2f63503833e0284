"""A kernel that creates and writes a shared-HBM tensor but never returns (or reads) it loses
what it wrote: typically a forgotten ``return``. The trace warns (``UnreturnedOutputWarning``,
an ``NKIWarning``) at the line that created the tensor."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import UnreturnedOutputWarning

from helpers import line_of


def forgot_return(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)  # WARN
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    nisa.dma_copy(out, t)


def returns_the_other(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    lost = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)  # WARN
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    nisa.dma_copy(out, t)
    nisa.dma_copy(lost, t)
    return out


def returns(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    scratch = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    nisa.dma_copy(scratch, t)  # written, then read back: a scratch tensor, not lost
    nisa.dma_copy(t, scratch)
    nisa.dma_copy(out, t)
    return out


def writes_its_parameter(a, out):
    nl.store(out, nl.load(a))


A = np.arange(32, dtype=np.float32).reshape(4, 8)


@pytest.mark.parametrize("kernel,how", [(forgot_return, "returns nothing"),
                                        (returns_the_other, "does not return it")])  # fmt: skip
def test_a_written_shared_hbm_tensor_nobody_sees_warns(kernel, how):
    with pytest.warns(UnreturnedOutputWarning) as rec:
        nki.jit(kernel)(A)
    (w,) = [r for r in rec if r.category is UnreturnedOutputWarning]
    assert w.filename == __file__ and w.lineno == line_of(kernel, "# WARN")
    assert how in str(w.message) and "never sees what it wrote" in str(w.message)
    assert f"kernel '{kernel.__name__}'" in str(w.message)


def test_returned_scratch_and_legacy_outputs_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnreturnedOutputWarning)
        np.testing.assert_array_equal(nki.jit(returns)(A), A)
        out = np.zeros_like(A)
        nki.jit(writes_its_parameter)(A, out)  # legacy: outputs are the written parameters
        np.testing.assert_array_equal(out, A)
