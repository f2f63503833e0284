"""nl.rand, nl.random_seed and nl.dropout: seeded, reproducible, rates per partition."""

from __future__ import annotations

import numpy as np

import nki
import nki.language as nl

from helpers import stored as _out


def _rand_kernel(seed):
    @nki.jit
    def kernel(a):
        if seed is not None:
            nl.random_seed(seed)
        r1 = nl.rand((128, 256), nl.float32)
        x = nl.load(a)
        d = nl.dropout(x, 0.25)
        return _out(r1), _out(d)

    return kernel


def test_rand_and_dropout_are_seeded_and_reproducible():
    a = np.ones((128, 256), np.float32)
    r1, d1 = _rand_kernel(42)(a)
    r2, d2 = _rand_kernel(42)(a)
    r3, _ = _rand_kernel(7)(a)
    assert np.array_equal(r1, r2) and np.array_equal(d1, d2)
    assert not np.array_equal(r1, r3)
    assert r1.min() >= 0.0 and r1.max() < 1.0 and abs(r1.mean() - 0.5) < 0.01
    dropped = np.mean(d1 == 0)
    assert abs(dropped - 0.25) < 0.01
    assert np.all((d1 == 0) | (d1 == 1))  # kept elements pass through unscaled
    r4, _ = _rand_kernel(None)(a)  # default seed: reproducible too
    r5, _ = _rand_kernel(None)(a)
    assert np.array_equal(r4, r5)


def test_random_seed_from_a_tile_and_dropout_rate_per_partition():
    @nki.jit
    def kernel(a, rates):
        seed = nl.full((1, 1), 42, dtype=nl.int32)
        nl.random_seed(seed)
        r1 = nl.rand((4, 8), nl.float32)
        nl.random_seed(seed)
        r2 = nl.rand((4, 8), nl.float32)
        d = nl.dropout(nl.load(a), nl.load(rates))
        return _out(nl.equal(r1, r2)), _out(d)

    a = np.ones((4, 1000), np.float32)
    rates = np.array([[0.0], [1.0], [0.5], [0.1]], np.float32)
    eq, d = kernel(a, rates)
    assert eq.all()
    assert np.all(d[0] == 1) and np.all(d[1] == 0)
    assert 0.4 < np.mean(d[2] == 0) < 0.6 and 0.05 < np.mean(d[3] == 0) < 0.15
