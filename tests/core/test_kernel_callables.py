"""What nki.jit takes as a kernel: functions, ``functools.partial`` of one (the bound arguments
are compile-time values), callable objects and kernels; anything else is a located error. Errors
inside a partial kernel point at the function's own lines."""

from __future__ import annotations

import functools
import inspect

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError

from helpers import line_of


def scaled(a, scale):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    nisa.tensor_scalar(t, t, nl.multiply, scale)
    nisa.dma_copy(out, t)
    return out


def too_many_partitions(a, rows):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((rows, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)  # ERR
    nisa.dma_copy(t, a)
    nisa.dma_copy(out, t)
    return out


class Scaler:
    def __init__(self, scale):
        self.scale = scale

    def __call__(self, a):
        return scaled(a, self.scale)


A = np.random.default_rng(3).standard_normal((16, 8)).astype(np.float32)


def test_a_partial_is_a_kernel_with_its_bound_arguments():
    k = nki.jit(functools.partial(scaled, scale=3.0))
    np.testing.assert_allclose(k(A), 3.0 * A, rtol=1e-6)
    assert k.__name__ == "scaled"
    assert list(inspect.signature(k.fn).parameters)[0] == "a"
    # a partial of an @nki.jit kernel, and nki.simulate of a partial
    k2 = nki.jit(functools.partial(nki.jit(scaled), scale=-2.0))
    np.testing.assert_allclose(k2(A), -2.0 * A, rtol=1e-6)
    np.testing.assert_allclose(nki.simulate(functools.partial(scaled, scale=0.5))(A), 0.5 * A)


def test_errors_in_a_partial_kernel_point_at_its_function():
    with pytest.raises(NKIError) as ei:
        nki.jit(functools.partial(too_many_partitions, rows=256))(np.zeros((256, 8), np.float32))
    e = ei.value
    assert e.code == "err_num_partition_exceed_arch_limit", e.message
    assert e.loc.file == __file__ and e.loc.line == line_of(too_many_partitions)


def test_a_callable_object_is_a_kernel():
    np.testing.assert_allclose(nki.jit(Scaler(5.0))(A), 5.0 * A, rtol=1e-6)


@pytest.mark.parametrize("thing", [3, "scaled", [scaled]])
def test_a_non_callable_is_a_located_error(thing):
    with pytest.raises(NKIError) as ei:
        nki.jit(thing)  # ERR
    e = ei.value
    assert e.code == "err_invalid_mode" and type(thing).__name__ in e.message, e.message
    assert "functools.partial" in e.message
    assert e.loc.file == __file__
    assert e.loc.line == line_of(test_a_non_callable_is_a_located_error)


@nki.jit
def test_named_kernel(in_tensor):
    """A kernel named like a test (AWS's doc tests have one): pytest must not collect it, as it
    would fail for want of an ``in_tensor`` fixture."""
    return scaled(in_tensor, 3.0)


def test_a_kernel_named_test_is_not_collected_but_runs():
    assert test_named_kernel.__test__ is False
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(test_named_kernel(a), 3 * a)
