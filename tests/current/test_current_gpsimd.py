"""Destination-first ``iota`` and ``affine_select`` (pattern / channel_multiplier / offset form
of the current API) against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError


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


def iota_two_pairs_into_one_free_dim(x):
    out = nl.ndarray((128, 32), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 32), dtype=nl.int32, buffer=nl.sbuf)
    # pairs outermost first: element f of a partition is (f // 8, f % 8) of the pattern
    nisa.iota(t, [[1, 4], [100, 8]], offset=3, channel_multiplier=1000)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_iota_pattern_with_more_pairs_than_dst_free_dims_walks_dst_in_order():
    got = nki.jit(iota_two_pairs_into_one_free_dim)(np.zeros(1, np.float32))
    p = np.arange(128)[:, None, None]
    a, b = np.arange(4)[None, :, None], np.arange(8)[None, None, :]
    np.testing.assert_array_equal(got, (3 + 1000 * p + a + 100 * b).reshape(128, 32))


def iota_pattern_too_short(x):
    t = nl.ndarray((128, 32), dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(t, [[1, 4], [100, 4]])
    return x


def test_iota_pattern_that_does_not_cover_dst_is_a_located_error():
    with pytest.raises(NKIError, match="16 elements per partition") as e:
        nki.jit(iota_pattern_too_short)(np.zeros((1, 1), np.float32))
    assert e.value.code == "err_free_size_mismatch"
    assert e.value.loc.line == iota_pattern_too_short.__code__.co_firstlineno + 2
