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


def _accumulate_tile(acc, x_t, i_q, i_k, n_d):
    # a helper given one head's view of the accumulator (flash attention backward's dQ: the
    # view's axis 1 has size 1 and is indexed by a one-trip loop's iterator)
    for i_d in nl.affine_range(n_d):
        t = nl.load(x_t[i_d * 128 : (i_d + 1) * 128, i_q * 128 : (i_q + 1) * 128])
        acc[i_q, i_d, :, :] = nl.loop_reduce(t, op=np.add, loop_indices=(i_k,), dtype=nl.float32)


@nki.jit(api="classic")
def dq_accumulate(x):
    # x: (n_k, heads, 128 * n_d, 128 * n_q); out[h] = x[:, h].sum(0)
    n_k, heads, d, s = x.shape
    n_d, n_q = d // 128, s // 128
    out = nl.ndarray((heads, d, s), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((heads, n_q, n_d, nl.par_dim(128), 128), dtype=nl.float32)
    for i_k in nl.affine_range(n_k):
        for i_h in nl.affine_range(heads):
            for i_q in nl.affine_range(n_q):
                _accumulate_tile(acc[i_h], x[i_k, i_h], i_q, i_k, n_d)
    for i_h in nl.affine_range(heads):
        for i_q in nl.affine_range(n_q):
            for i_d in nl.affine_range(n_d):
                nl.store(out[i_h, i_d * 128 : (i_d + 1) * 128, i_q * 128 : (i_q + 1) * 128],
                         value=acc[i_h, i_q, i_d, :, :])  # fmt: skip
    return out


@pytest.mark.parametrize("heads, n_q", [(1, 32), (2, 4)])
def test_loop_reduce_into_a_view_of_a_head(heads, n_q):
    # the pattern of nki-samples' flash_attn_bwd (dq_local_reduced[i_q_head] passed down, then
    # [local_i_q_seq_tile, i_d_head_tile, :, :] = loop_reduce over the key tiles) at 32 query
    # tiles (sequence length 4096): the one-trip iterator is 0 on the view's axis of size 1
    x = np.random.default_rng(heads).random((3, heads, 128, 128 * n_q), dtype=np.float32)
    got = dq_accumulate(x)
    np.testing.assert_allclose(got, x.sum(0), rtol=1e-5)


def loop_reduce_into_bound_tiles(x):
    # ``b = nl.loop_reduce(...)``: the destination is b as it was before the call (the
    # documentation's "the destination tile is also the rhs input to op"): a start of 5, a
    # second loop adding to the first's sum, and a loop the tracer unrolls
    out = nl.ndarray((3, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    b = nl.full((128, 64), 5.0, dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(4):
        b = nl.loop_reduce(nl.load(x[i]), op=np.add, loop_indices=[i], dtype=nl.float32)
    nl.store(out[0], value=b)
    c = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(2):
        c = nl.loop_reduce(nl.load(x[i]), op=np.add, loop_indices=[i], dtype=nl.float32)
    for j in nl.affine_range(2):
        c = nl.loop_reduce(nl.load(x[2 + j]), op=np.maximum, loop_indices=[j], dtype=nl.float32)
    nl.store(out[1], value=c)
    d = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.static_range(4):
        d = nl.loop_reduce(nl.load(x[i]), op=np.add, loop_indices=[i], dtype=nl.float32)
    nl.store(out[2], value=d)
    return out


def test_a_loop_reduce_bound_to_a_name_accumulates_into_its_tile():
    x = np.random.default_rng(4).random((4, 128, 64), dtype=np.float32)
    got = nki.jit(loop_reduce_into_bound_tiles, api="classic")(x)
    sums = np.zeros((128, 64), np.float32)
    for i in range(4):
        sums += x[i]
    np.testing.assert_allclose(got[0], 5 + sums, rtol=1e-6)
    np.testing.assert_allclose(got[1], np.maximum(np.maximum(x[0] + x[1], x[2]), x[3]), rtol=1e-6)
    np.testing.assert_array_equal(got[2], sums)
