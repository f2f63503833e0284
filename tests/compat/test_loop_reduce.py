"""nl.loop_reduce: an accumulator across the iterations of the named loops, compared with
NumPy reductions over the loop axis."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.language as nl


@nki.jit
def block_reduce(x, n_inner):
    # reduce over both loops (sum, max), and over the inner loop only (min, per outer block)
    outer = x.shape[0] // (128 * n_inner)
    out_s = nl.ndarray((128, x.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    out_m = nl.ndarray((128, x.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    out_min = nl.ndarray((outer, 128, x.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    for o in nl.affine_range(outer):
        for i in nl.affine_range(n_inner):
            r = (o * n_inner + i) * 128
            t = nl.load(x[r : r + 128, :])
            s = nl.loop_reduce(t, op=np.add, loop_indices=[o, i], dtype=nl.float32)
            m = nl.loop_reduce(t, op=nl.maximum, loop_indices=(o, i))
            mn = nl.loop_reduce(t, op=np.min, loop_indices=[i])
        nl.store(out_min[o], mn)
    nl.store(out_s, s)
    nl.store(out_m, m)
    return out_s, out_m, out_min


@pytest.mark.parametrize("n_inner", [1, 3])
def test_loop_reduce(n_inner):
    x = np.random.default_rng(n_inner).standard_normal((2 * n_inner * 128, 16)).astype(np.float32)
    s, m, mn = block_reduce(x, n_inner)
    blocks = x.reshape(2, n_inner, 128, 16)
    np.testing.assert_allclose(s, blocks.sum((0, 1)), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(m, blocks.max((0, 1)))
    np.testing.assert_array_equal(mn, blocks.min(1))


@nki.jit
def reduce_into_buffer(x):
    # buf[b] = nl.loop_reduce(t, ...) inside a loop over k: buf[b] accumulates over k, per b
    nb, nk = 2, 3
    out = nl.ndarray((nb, 128, x.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    buf = nl.zeros((nb, nl.par_dim(128), x.shape[1]), dtype=nl.float32)
    for k in nl.affine_range(nk):
        for b in nl.affine_range(nb):
            r = (k * nb + b) * 128
            t = nl.load(x[r : r + 128, :])
            buf[b, :, :] = nl.loop_reduce(t, op=np.add, loop_indices=(k,), dtype=nl.float32)
    for b in nl.affine_range(nb):
        nl.store(out[b], buf[b])
    return out


def test_loop_reduce_accumulates_into_its_destination():
    x = np.random.default_rng(7).random((6 * 128, 8), dtype=np.float32)
    want = x.reshape(3, 2, 128, 8).sum(0)
    np.testing.assert_allclose(reduce_into_buffer(x), want, rtol=1e-5)
