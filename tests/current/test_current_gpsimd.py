"""Destination-first ``iota`` and ``affine_select`` (pattern / channel_multiplier / offset form
of the current API) against NumPy."""

from __future__ import annotations

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


def iota_and_select(a):
    out = nl.ndarray((2, 64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    io = nl.ndarray((64, 32), dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(io, [[3, 32]], offset=5, channel_multiplier=2)
    f = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(f, io)
    nisa.dma_copy(out[0], f)
    at = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(at, a)
    s = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    # causal mask: keep a[p, i] where p - i >= 0
    nisa.affine_select(s, [[-1, 32]], 1, at, -9.0, cmp_op=nl.greater_equal)
    nisa.dma_copy(out[1], s)
    return out


def test_iota_pattern_and_affine_select_match_numpy():
    a = np.random.default_rng(1).random((64, 32), dtype=np.float32)
    got = nki.jit(iota_and_select)(a)
    p, i = np.arange(64)[:, None], np.arange(32)[None, :]
    np.testing.assert_array_equal(got[0], 5 + 2 * p + 3 * i)
    np.testing.assert_array_equal(got[1], np.where(p - i >= 0, a, np.float32(-9.0)))
