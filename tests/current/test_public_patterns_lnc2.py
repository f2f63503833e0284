"""LNC=2 patterns that public current-API kernels rely on, in small kernels of our own checked
against NumPy: ``nl.program_id`` inside a raw access pattern (``.ap(offset=...)``), and a kernel
that returns a reshape of one of its parameters from both cores."""

from __future__ import annotations

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

RNG = np.random.default_rng(77)
N = 32


@nki.jit
def double_my_half(x):
    # each core doubles its 64 rows of x, addressed with an access pattern whose offset
    # depends on the core's program id
    pid = nl.program_id(0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((64, N), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap([[N, 64], [1, N]], offset=pid * 64 * N))
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out.ap([[N, 64], [1, N]], offset=pid * 64 * N), src=t)
    return out


def test_program_id_in_an_access_pattern_offset():
    x = RNG.standard_normal((128, N)).astype(np.float32)
    np.testing.assert_array_equal(nki.simulate(double_my_half[2])(x), 2 * x)


@nki.jit
def fill_and_return_reshaped(x, cache):
    # both cores write their half of the cache parameter, meet, and return it reshaped
    pid = nl.program_id(0)
    t = nl.ndarray((64, N), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[nl.ds(pid * 64, 64), :])
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=cache[nl.ds(pid * 64, 64), :], src=t)
    nisa.core_barrier(cache, (0, 1))
    return cache.reshape((2, 64, N))


def test_both_cores_return_a_reshape_of_a_parameter():
    x = RNG.standard_normal((128, N)).astype(np.float32)
    got = nki.simulate(fill_and_return_reshaped[2])(x, np.zeros_like(x))
    np.testing.assert_array_equal(np.asarray(got), (x + 1).reshape(2, 64, N))
