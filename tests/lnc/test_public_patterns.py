"""LNC=2 and access-pattern forms that public current-API kernels rely on, in small kernels of
our own checked against NumPy: ``nl.program_id`` inside a raw access pattern (``.ap(offset=...)``),
a kernel that returns a reshape of one of its parameters from both cores, a ``vector_offset``
access pattern of more than two pairs, and cores writing interleaved column halves of rows
through a flat access pattern (no race), against column ranges that overlap (a race)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import nki.typing as nt
from nki.errors import NKIDependencyError

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


@nki.jit
def scatter_rows(cache: nt.mutable_tensor, rows, new):
    # partition p writes its S=2 consecutive rows of `new` at row rows[p] of the cache: a
    # vector_offset access pattern of three pairs (rows, tokens, elements)
    P, S, D = new.shape
    idx = nl.ndarray((P, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=rows)
    t = nl.ndarray((P, S * D), dtype=new.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=new.reshape((P, S * D)))
    nisa.dma_copy(
        dst=cache.ap(pattern=[[1, P], [D, S], [1, D]], offset=0, vector_offset=idx, indirect_dim=0),
        src=t.ap(pattern=[[S * D, P], [D, S], [1, D]]),
    )
    return cache


def test_vector_offset_pattern_of_three_pairs():
    cache = RNG.standard_normal((16, N)).astype(np.float32)
    rows = np.array([[3], [7], [0], [12]], np.uint32)
    new = RNG.standard_normal((4, 2, N)).astype(np.float32)
    want = cache.copy()
    for p, r in enumerate(rows[:, 0]):
        want[r : r + 2] = new[p]
    got = nki.simulate(scatter_rows)(cache.copy(), rows, new)
    np.testing.assert_array_equal(np.asarray(got), want)


@nki.jit
def halves_of_each_row(x):
    # core c writes columns [128c, 128c + 128) of every row of both planes of a 3-D tensor,
    # through a flat access pattern [[256, 128], [1, 128]]: the cores' elements interleave
    # row by row but never meet, so no barrier is needed
    pid = nl.program_id(0)
    E, R, C = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((R, C // 2), dtype=x.dtype, buffer=nl.sbuf)
    for e in range(E):
        at = e * R * C + pid * (C // 2)
        nisa.dma_copy(dst=t, src=x.ap([[C, R], [1, C // 2]], offset=at))
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=out.ap([[C, R], [1, C // 2]], offset=at), src=t)
    return out


def test_interleaved_column_halves_are_no_core_race():
    x = RNG.standard_normal((2, 128, 256)).astype(np.float32)
    np.testing.assert_array_equal(nki.simulate(halves_of_each_row[2])(x), x + 1)


@nki.jit
def overlapping_column_ranges(x):
    pid = nl.program_id(0)
    E, R, C = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((R, C // 2 + 1), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap([[C, R], [1, C // 2 + 1]], offset=pid * (C // 2 - 1)))
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=pid * 1.0)  # the cores differ
    nisa.dma_copy(dst=out.ap([[C, R], [1, C // 2 + 1]], offset=pid * (C // 2 - 1)), src=t)  # RACE
    return out


def test_column_ranges_that_overlap_by_two_are_a_core_race():
    x = RNG.standard_normal((2, 128, 256)).astype(np.float32)
    with pytest.raises(NKIDependencyError) as ei:
        nki.simulate(overlapping_column_ranges[2])(x)
    assert ei.value.code == "err_core_race"
    src, first = inspect.getsourcelines(overlapping_column_ranges.fn)
    assert ei.value.loc.line == first + next(i for i, s in enumerate(src) if "# RACE" in s)


@nki.jit
def different_values_through_ap(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    if nl.program_id(0) == 0:
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=out.ap([[N, 128], [1, N]], offset=0), src=t)  # RACE
    return out


def test_both_cores_writing_through_access_patterns_of_one_tensor_is_a_core_race():
    # each core's .ap view of the shared output is the same tensor: the race check sees them
    with pytest.raises(NKIDependencyError) as ei:
        nki.simulate(different_values_through_ap[2])(np.zeros((128, N), np.float32))
    assert ei.value.code == "err_core_race"
    src, first = inspect.getsourcelines(different_values_through_ap.fn)
    assert ei.value.loc.line == first + next(i for i, s in enumerate(src) if "# RACE" in s)
