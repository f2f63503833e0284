"""Destination-first reductions into accumulator results and predicated selection/copies
(``tensor_scalar_reduce``, ``activation_reduce``, ``select_reduce``, ``tensor_copy_predicated``,
``nc_stream_shuffle``) against NumPy."""

from __future__ import annotations

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


def reduce_and_select(x, pred):
    P, F = x.shape
    out = nl.ndarray((5, P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    xt = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    pt = nl.ndarray((P, F), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.dma_copy(xt, x)
    nisa.dma_copy(pt, pred)
    # 0: x * 2, with the row sums of x * 2 into r (broadcast back over the row in 1)
    y = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(
        dst=y, data=xt, op0=nl.multiply, operand0=2.0, reduce_op=nl.add, reduce_res=r
    )
    nisa.dma_copy(out[0], y)
    rb = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(rb, 0.0)
    nisa.tensor_tensor(rb, rb, r, nl.add)
    nisa.dma_copy(out[1], rb)
    # 2: exp(x) with the row max into m (broadcast in 3)
    e = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    m = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation_reduce(e, nl.exp, xt, nl.maximum, m)
    nisa.dma_copy(out[2], e)
    mb = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(mb, 0.0)
    nisa.tensor_tensor(mb, mb, m, nl.add)
    nisa.dma_copy(out[3], mb)
    # 4: x where pred else -1 (copy_predicated onto a -1 fill)
    c = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(c, -1.0)
    nisa.tensor_copy_predicated(c, xt, pt)
    nisa.dma_copy(out[4], c)
    return out  # fmt: skip


def test_reductions_and_predicated_copy_match_numpy():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((32, 24)).astype(np.float32)
    pred = (rng.random((32, 24)) > 0.5).astype(np.uint8)
    got = nki.jit(reduce_and_select)(x, pred)
    np.testing.assert_allclose(got[0], 2 * x, rtol=0, atol=0)
    np.testing.assert_allclose(
        got[1], np.broadcast_to((2 * x).sum(1, keepdims=True), x.shape), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(got[2], np.exp(x), rtol=1e-5)
    np.testing.assert_allclose(
        got[3], np.broadcast_to(np.exp(x).max(1, keepdims=True), x.shape), rtol=1e-5
    )
    np.testing.assert_array_equal(got[4], np.where(pred != 0, x, np.float32(-1)))


def shuffle(x):
    out = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    xt = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(xt, x)
    d = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(d, 0.0)
    nisa.nc_stream_shuffle(d, xt, list(range(31, -1, -1)))  # dst first in the current API
    nisa.dma_copy(out, d)
    return out


def test_nc_stream_shuffle_takes_dst_first_in_current_kernels():
    x = np.arange(32 * 8, dtype=np.float32).reshape(32, 8)
    np.testing.assert_array_equal(nki.jit(shuffle, api="current")(x), x[::-1])
