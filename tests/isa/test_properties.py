"""Property-based test of nisa.bn_stats + nisa.bn_aggr: mean and variance of every tile
width and partition count, against NumPy."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import nki.isa as nisa
import nki.language as nl

from helpers import run


def k_bn(x):
    out = nl.ndarray((x.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nisa.bn_aggr(nisa.bn_stats(nl.load(x), dtype=nl.float32)))
    return out


@given(p=st.integers(1, 128), f=st.integers(1, 512), seed=st.integers(0, 999))
def test_bn_stats_aggr_any_width(p, f, seed):
    x = np.random.default_rng(seed).normal(2, 3, (p, f)).astype(np.float32)
    got = run(k_bn, x)
    np.testing.assert_allclose(got[:, 0], x.mean(1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[:, 1], x.var(1), rtol=1e-4, atol=1e-3)
