"""Scaled dot-product attention, flash style: forward and backward over 128 x 128 blocks of
queries and keys with an online softmax, so any sequence length fits on chip.

Layout: q, k, v, out are (BH, S, D) HBM tensors (batch and heads flattened), D <= 128 (the
head dim is the contraction of Q K^T, on the partition axis). Scores, softmax statistics and
accumulators are fp32; matmul inputs keep the input dtype (fp32, bf16 or fp16). Ragged
sequence tails load as zeros and their key columns are masked to -1e30 with
``nisa.affine_select`` (together with the causal predicate), so they get zero probability."""

from __future__ import annotations

from typing import Any

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import P, row_tiles

F32 = nl.float32
NEG = -1.0e30


def _load_t(x: Any, bh: Any, t: Any, s: int, d: int) -> Any:
    """Block t of x[bh] transposed: a (D, 128) tile with the head dim on partitions."""
    i_d = nl.arange(d)[:, None]
    i_s = nl.arange(P)[None, :]
    tile = nl.zeros((d, P), x.dtype, buffer=nl.sbuf)
    tile[i_d, i_s] = nl.load(x[bh, t * P + i_s, i_d], mask=t * P + i_s < s)
    return tile


def _load_blk(x: Any, bh: Any, t: Any, s: int, d: int, dtype: Any = None) -> Any:
    """Block t of x[bh]: a (128, D) tile, rows past s zero."""
    i_p = nl.arange(P)[:, None]
    i_d = nl.arange(d)[None, :]
    tile = nl.zeros((P, d), dtype or x.dtype, buffer=nl.sbuf)
    tile[i_p, i_d] = nl.load(x[bh, t * P + i_p, i_d], mask=t * P + i_p < s)
    return tile


def _scores(q_t: Any, k_t: Any, qi: Any, kj: Any, s: int, scale: float, causal: bool) -> Any:
    """(128 q, 128 k) fp32 scores q k^T * scale, masked (causal, ragged keys) to -1e30."""
    i_q = nl.arange(P)[:, None]
    i_k = nl.arange(P)[None, :]
    raw = nl.matmul(q_t, k_t, transpose_x=True)
    sc = nl.multiply(raw, scale, dtype=F32)
    if causal:
        pred = (qi * P + i_q - kj * P - i_k >= 0) & (kj * P + i_k < s)
    else:
        pred = (kj * P + i_k < s) & (i_q >= 0)
    return nisa.affine_select(pred, sc, NEG)


@nki.jit
def attention_kernel(q, k, v, scale=1.0, causal=False):
    """out[BH, S, D] = softmax(q k^T * scale (+ causal mask)) v; also lse[BH, S, 1] (fp32,
    the log-sum-exp of each score row, for the backward).

    Shapes: q, k, v (BH, S, D), any BH and S, D <= 128. Dtypes: float32, bfloat16 or float16,
    all the same (out in that dtype). Flash style: 128-query blocks, keys streamed in
    128-blocks with a running max and sum (nl.sequential_range)."""
    nbh, s, d = q.shape
    out = nl.ndarray((nbh, s, d), dtype=q.dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((nbh, s, 1), dtype=F32, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    i_d = nl.arange(d)[None, :]
    i_1 = nl.arange(1)[None, :]
    for bh in nl.affine_range(nbh):
        for qi in nl.affine_range(row_tiles(s)):
            q_t = _load_t(q, bh, qi, s, d)
            m = nl.full((P, 1), NEG, F32, buffer=nl.sbuf)
            l_sum = nl.zeros((P, 1), F32, buffer=nl.sbuf)
            acc = nl.zeros((P, d), F32, buffer=nl.sbuf)
            for kj in nl.sequential_range(row_tiles(s)):
                sc = _scores(q_t, _load_t(k, bh, kj, s, d), qi, kj, s, scale, causal)
                m_new = nl.maximum(m, nl.max(sc, axis=1, keepdims=True, dtype=F32), dtype=F32)
                p = nl.exp(nl.subtract(sc, m_new, dtype=F32), dtype=F32)
                corr = nl.exp(nl.subtract(m, m_new, dtype=F32), dtype=F32)
                row = nl.sum(p, axis=1, keepdims=True, dtype=F32)
                l_sum[i_p, i_1] = nl.add(nl.multiply(l_sum, corr, dtype=F32), row, dtype=F32)
                p_t = nl.copy(nl.transpose(nl.copy(p, dtype=q.dtype)), dtype=q.dtype)
                pv = nl.matmul(p_t, _load_blk(v, bh, kj, s, d), transpose_x=True)
                acc[i_p, i_d] = nl.add(nl.multiply(acc, corr, dtype=F32), pv, dtype=F32)
                m[i_p, i_1] = nl.copy(m_new, dtype=F32)
            rows = qi * P + i_p
            res = nl.multiply(acc, nl.reciprocal(l_sum, dtype=F32), dtype=q.dtype)
            nl.store(out[bh, rows, i_d], res, mask=rows < s)
            lse_t = nl.add(m, nl.log(l_sum, dtype=F32), dtype=F32)
            nl.store(lse[bh, rows, i_1], lse_t, mask=rows < s)
    return out, lse


@nki.jit
def attention_backward_kernel(g, q, k, v, o, lse, scale=1.0, causal=False):
    """dq, dk, dv [BH, S, D] of :func:`attention_kernel` from the output gradient g, the
    forward output o and its lse: with P = exp(scores - lse), dv = P^T g, dS = P (g v^T -
    rowsum(g o)), dq = dS k * scale, dk = dS^T q * scale. Key blocks accumulate dk, dv over
    query blocks in PSUM; a second pass over query blocks accumulates dq.

    Shapes: g, q, k, v, o (BH, S, D), lse (BH, S, 1) fp32; any BH and S, D <= 128. Dtypes:
    float32, bfloat16 or float16, all the same (gradients in that dtype)."""
    nbh, s, d = q.shape
    dq = nl.ndarray((nbh, s, d), dtype=q.dtype, buffer=nl.shared_hbm)
    dk = nl.ndarray((nbh, s, d), dtype=q.dtype, buffer=nl.shared_hbm)
    dv = nl.ndarray((nbh, s, d), dtype=q.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    i_d = nl.arange(d)[None, :]
    nt = row_tiles(s)

    def probs(bh, qi, kj, q_t):
        """P and dS blocks (128 q, 128 k), fp32."""
        sc = _scores(q_t, _load_t(k, bh, kj, s, d), qi, kj, s, scale, causal)
        p = nl.exp(nl.subtract(sc, _load_blk(lse, bh, qi, s, 1), dtype=F32), dtype=F32)
        dp = nl.matmul(_load_t(g, bh, qi, s, d), _load_t(v, bh, kj, s, d), transpose_x=True)
        g_b = _load_blk(g, bh, qi, s, d)
        di = nl.sum(nl.multiply(g_b, _load_blk(o, bh, qi, s, d), dtype=F32), axis=1, keepdims=True)
        ds = nl.multiply(p, nl.subtract(dp, di, dtype=F32), dtype=F32)
        return p, ds, g_b

    for bh in nl.affine_range(nbh):
        for kj in nl.affine_range(nt):
            dk_acc = nl.zeros((P, d), F32, buffer=nl.psum)
            dv_acc = nl.zeros((P, d), F32, buffer=nl.psum)
            for qi in nl.affine_range(nt):
                p, ds, g_b = probs(bh, qi, kj, _load_t(q, bh, qi, s, d))
                dv_acc += nl.matmul(nl.copy(p, dtype=q.dtype), g_b, transpose_x=True)
                q_b = _load_blk(q, bh, qi, s, d)
                dk_acc += nl.matmul(nl.copy(ds, dtype=q.dtype), q_b, transpose_x=True)
            rows = kj * P + i_p
            nl.store(dv[bh, rows, i_d], nl.copy(dv_acc, dtype=q.dtype), mask=rows < s)
            dk_res = nl.multiply(dk_acc, scale, dtype=q.dtype)
            nl.store(dk[bh, rows, i_d], dk_res, mask=rows < s)
        for qi in nl.affine_range(nt):
            q_t = _load_t(q, bh, qi, s, d)
            dq_acc = nl.zeros((P, d), F32, buffer=nl.psum)
            for kj in nl.affine_range(nt):
                _, ds, _ = probs(bh, qi, kj, q_t)
                ds_t = nl.copy(nl.transpose(nl.copy(ds, dtype=q.dtype)), dtype=q.dtype)
                dq_acc += nl.matmul(ds_t, _load_blk(k, bh, kj, s, d), transpose_x=True)
            rows = qi * P + i_p
            nl.store(dq[bh, rows, i_d], nl.multiply(dq_acc, scale, dtype=q.dtype), mask=rows < s)
    return dq, dk, dv
