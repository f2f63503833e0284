"""Random-number instructions: the current API's ``rng``, ``rand2``, ``set_rng_seed``,
``rand_set_state`` and ``rand_get_state`` (the per-lane XORWOW generators against an independent
plain-Python XORWOW, determinism per seed, the documented rules) and nisa.dropout."""

from __future__ import annotations

import numpy as np
import pytest

import nki.isa as nisa
import nki.language as nl
from nki.errors import (
    NKIError,
)

from helpers import DTS, expect_error, f32, rand, run
from helpers import hbm_out as _out

RNG = np.random.default_rng(5)


M32 = 0xFFFFFFFF


def xorwow_reference(state: list[int], n: int) -> tuple[list[int], list[int]]:
    """Marsaglia's XORWOW on Python ints: state [x0..x4, d]; returns (outputs, new state)."""
    x, d = list(state[:5]), state[5]
    out = []
    for _ in range(n):
        t, s = x[4], x[0]
        x = [0, s, x[1], x[2], x[3]]
        t ^= t >> 2
        t = (t ^ (t << 1)) & M32
        t = (t ^ s ^ (s << 4)) & M32
        x[0] = t
        d = (d + 362437) & M32
        out.append((t + d) & M32)
    return out, [*x, d]


def _load(a):
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    return t


def k_gpsimd_stream(state, like):
    bits = nl.ndarray(like.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
    low = nl.ndarray(like.shape, dtype=nl.uint8, buffer=nl.shared_hbm)
    after = nl.ndarray(state.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
    nisa.rand_set_state(_load(state), engine=nisa.engine.gpsimd)
    b = nl.ndarray(like.shape, dtype=nl.uint32, buffer=nl.sbuf)
    nisa.rng(b, engine=nisa.engine.gpsimd)
    nisa.dma_copy(bits, b)
    lo = nl.ndarray(like.shape, dtype=nl.uint8, buffer=nl.sbuf)
    nisa.rng(lo, nisa.gpsimd_engine)
    nisa.dma_copy(low, lo)
    s = nl.ndarray(state.shape, dtype=nl.uint32, buffer=nl.sbuf)
    nisa.rand_get_state(s)
    nisa.dma_copy(after, s)
    return bits, low, after


def test_rng_is_xorwow_per_lane_from_the_loaded_state():
    p, f = 16, 5
    state = RNG.integers(1, 2**32, size=(p, 6), dtype=np.uint64).astype(np.uint32)
    bits, low, after = run(k_gpsimd_stream, state, np.zeros((p, f), np.uint32))
    for lane in range(p):
        first, st = xorwow_reference([int(v) for v in state[lane]], f)
        second, st = xorwow_reference(st, f)
        assert bits[lane].tolist() == first
        assert low[lane].tolist() == [v & 0xFF for v in second]  # low bits of each draw
        assert after[lane].tolist() == st


def k_vector_rand(state, like):
    out = nl.ndarray(like.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.rand_set_state(_load(state), engine=nisa.engine.vector)
    u = nl.ndarray(like.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.rand2(u, -2.0, 3.0)
    nisa.dma_copy(out, u)
    return out


def test_rand2_maps_the_vector_engines_four_generators_to_min_max():
    p, f = 8, 9
    state = RNG.integers(1, 2**32, size=(p, 24), dtype=np.uint64).astype(np.uint32)
    got = run(k_vector_rand, state, np.zeros((p, f), np.float32), target="trn3")
    assert ((got >= -2.0) & (got <= 3.0)).all()
    for lane in range(p):
        gens = [[int(v) for v in state[lane, 6 * g : 6 * g + 6]] for g in range(4)]
        want = []
        for i in range(f):  # element i comes from generator i % 4
            (b,), gens[i % 4] = xorwow_reference(gens[i % 4], 1)
            u = np.float32(b * 2.0**-32)
            want.append(np.float32(-2.0) + u * np.float32(5.0))
        np.testing.assert_array_equal(got[lane], np.array(want, np.float32))


def k_seeded(seed, like):
    out = nl.ndarray((2, *like.shape), dtype=nl.int32, buffer=nl.shared_hbm)
    s = _load(seed)
    b = nl.ndarray(like.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.set_rng_seed(s)
    nisa.rng(b)
    nisa.dma_copy(out[0], b)
    nisa.set_rng_seed(s)  # the same seed restarts the same streams
    nisa.rng(b)
    nisa.dma_copy(out[1], b)
    return out


def test_set_rng_seed_makes_streams_deterministic_per_seed():
    like = np.zeros((32, 64), np.int32)
    a = run(k_seeded, np.array([[42]], np.int32), like)
    np.testing.assert_array_equal(a[0], a[1])
    np.testing.assert_array_equal(run(k_seeded, np.array([[42]], np.int32), like), a)
    b = run(k_seeded, np.array([[43]], np.int32), like)
    assert (a[0] != b[0]).mean() > 0.99
    assert len(np.unique(a[0])) > 0.99 * a[0].size  # lanes and draws differ
    # the bits look uniform: each of the 32 bit positions is set about half the time
    ones = ((a[0].astype(np.int64) & M32)[..., None] >> np.arange(32)) & 1
    assert np.all(np.abs(ones.mean(axis=(0, 1)) - 0.5) < 0.05)


def k_vector_state_on_trn2(like):
    out = nl.ndarray((4, 24), dtype=nl.uint32, buffer=nl.shared_hbm)
    s = nl.ndarray((4, 24), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.rand_get_state(s, engine=nisa.engine.vector)  # ERR
    nisa.dma_copy(out, s)
    return out


def k_state_shape(like):
    out = nl.ndarray((4, 24), dtype=nl.uint32, buffer=nl.shared_hbm)
    s = nl.ndarray((4, 24), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.rand_get_state(s)  # ERR
    nisa.dma_copy(out, s)
    return out


def k_rng_float(like):
    out = nl.ndarray(like.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray(like.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.rng(s)  # ERR
    nisa.dma_copy(out, s)
    return out


def k_rand2(like):
    out = nl.ndarray(like.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray(like.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.rand2(s, 0.0, 1.0)  # ERR
    nisa.dma_copy(out, s)
    return out


def test_random_instruction_rules():
    like = np.zeros((4, 8), np.float32)
    expect_error(
        k_vector_state_on_trn2,
        like,
        cls=NKIError,
        code="err_unsupported_engine_for_op",
        fragments=["vector engine", "NeuronCore-v4"],
    )
    expect_error(
        k_state_shape, like, cls=NKIError, code="err_invalid_shape", fragments=["(lanes, 6)"]
    )
    expect_error(
        k_rng_float, like, cls=NKIError, code="err_unsupported_dtype", fragments=["float32"]
    )
    expect_error(
        k_rand2,
        like,
        cls=NKIError,
        code="err_unsupported_instruction_for_target",
        fragments=["nisa.rand2", "trn3"],
    )


def k_dropout(x, prob):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.dropout(nl.load(x), prob))
    return out


@pytest.mark.parametrize("dt", DTS)
def test_dropout(dt):
    x = rand((128, 256), dt, 1, 2)
    np.testing.assert_array_equal(f32(run(k_dropout, x, 0.0)), f32(x))
    assert (f32(run(k_dropout, x, 1.0)) == 0).all()
    y = f32(run(k_dropout, x, 0.3))
    kept = y != 0
    np.testing.assert_array_equal(y[kept], f32(x)[kept])  # kept elements unchanged, not rescaled
    assert abs(1 - kept.mean() - 0.3) < 0.02
