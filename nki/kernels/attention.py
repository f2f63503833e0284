"""Scaled dot-product attention, flash style: forward and backward over blocks of 128 queries
and 128 keys (a whole sequence when shorter: no padding lanes) with an online softmax, so any
sequence length fits on chip.

Layout: q and out are (B * H, Sq, D) HBM tensors (batch and heads flattened), k and v
(B * Hk, Sk, D) with Hk = ``kv_heads`` key/value heads shared by groups of H / Hk query heads
(grouped-query attention; Hk = H by default), D <= 128 (the head dim is the contraction of
Q K^T, on the partition axis). Sq may differ from Sk (a decode step: one query against a KV
cache). An optional additive ``mask`` (MB, MH, Sq, Sk), MB in {1, B} and MH in {1, H}
(broadcast over batch / heads), is added to the scaled scores (-inf entries get zero
probability; a row with every entry -inf gives 0, as torch does). Scores, softmax statistics and
accumulators are fp32; matmul inputs keep the input dtype (fp32, bf16 or fp16). Ragged
sequence tails (past a multiple of 128) load as zeros and their key columns are masked to
-1e30 with ``nisa.affine_select`` (together with the causal predicate), so they get zero
probability."""

from __future__ import annotations

from typing import Any

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import fit, row_tiles

F32 = nl.float32
NEG = -1.0e30
TINY = 1.0e-30  # (the floor of a softmax row's sum: an all -inf row gives 0, not 0 / 0)


def _load_t(x: Any, bh: Any, t: Any, s: int, d: int, b: int) -> Any:
    """Block t (of b rows) of x[bh] transposed: a (D, b) tile with the head dim on partitions
    (rows past s zero)."""
    i_d = nl.arange(d)[:, None]
    i_s = nl.arange(b)[None, :]
    if s % b == 0:
        return nl.load(x[bh, t * b + i_s, i_d])
    tile = nl.zeros((d, b), x.dtype, buffer=nl.sbuf)
    tile[i_d, i_s] = nl.load(x[bh, t * b + i_s, i_d], mask=t * b + i_s < s)
    return tile


def _load_blk(x: Any, bh: Any, t: Any, s: int, d: int, b: int) -> Any:
    """Block t (of b rows) of x[bh]: a (b, D) tile, rows past s zero."""
    i_p = nl.arange(b)[:, None]
    i_d = nl.arange(d)[None, :]
    if s % b == 0:
        return nl.load(x[bh, t * b + i_p, i_d])
    tile = nl.zeros((b, d), x.dtype, buffer=nl.sbuf)
    tile[i_p, i_d] = nl.load(x[bh, t * b + i_p, i_d], mask=t * b + i_p < s)
    return tile


def _mask_blk(mask: Any, b: Any, h: Any, qi: Any, kj: Any, blocks: tuple) -> Any:
    """The (bq, bk) fp32 block of the additive mask for batch b, head h (0 where the mask
    broadcasts over that axis); rows and columns past the ends are 0."""
    sq, sk, bq, bk = blocks
    i_q = nl.arange(bq)[:, None]
    i_k = nl.arange(bk)[None, :]
    mb = b if mask.shape[0] > 1 else 0
    mh = h if mask.shape[1] > 1 else 0
    rows = qi * bq + i_q
    cols = kj * bk + i_k
    tile = nl.zeros((bq, bk), F32, buffer=nl.sbuf)
    tile[i_q, i_k] = nl.load(mask[mb, mh, rows, cols], mask=(rows < sq) & (cols < sk))
    return tile


def _scores(
    q_t: Any, k_t: Any, qi: Any, kj: Any, blocks: tuple, scale: float, causal: bool, m_blk: Any
) -> Any:
    """(bq, bk) fp32 scores q k^T * scale (+ the mask block), masked (causal, ragged keys) to
    -1e30."""
    _, sk, bq, bk = blocks
    i_q = nl.arange(bq)[:, None]
    i_k = nl.arange(bk)[None, :]
    raw = nl.matmul(q_t, k_t, transpose_x=True)
    sc = nl.multiply(raw, scale, dtype=F32)
    if m_blk is not None:
        sc = nl.add(sc, m_blk, dtype=F32)
    ragged = kj * bk + i_k < sk if sk % bk else None
    if causal:
        pred = qi * bq + i_q - kj * bk - i_k >= 0
        pred = pred if ragged is None else pred & ragged
    elif ragged is not None:
        pred = ragged & (i_q >= 0)
    else:
        return sc
    return nisa.affine_select(pred, sc, NEG)


def _as(p: Any, dtype: Any) -> Any:
    """The fp32 tile p as a matmul operand of ``dtype`` (a copy unless fp32)."""
    return p if dtype == F32 else nl.copy(p, dtype=dtype)


def _transposed(p: Any, dtype: Any) -> Any:
    """The (bk, bq) SBUF transpose (Tensor engine) of the fp32 (bq, bk) tile p, in ``dtype``."""
    return nl.copy(nl.transpose(_as(p, dtype)), dtype=dtype)


@nki.jit
def attention_kernel(q, k, v, mask=None, scale=1.0, causal=False, heads=0, with_lse=True):
    """out[B*H, Sq, D] = softmax(q k^T * scale (+ mask) (+ causal mask)) v; also
    lse[B*H, Sq, 1] (fp32, the log-sum-exp of each score row, for the backward) unless
    ``with_lse`` is False (inference: ``out`` alone is returned, the log-sum-exp not computed).

    Shapes: q (B*H, Sq, D), k and v (B*Hk, Sk, D) with H = ``heads`` (default: no grouping,
    H = Hk) a multiple of Hk; mask None or (MB, MH, Sq, Sk) with MB in {1, B}, MH in {1, H};
    any B, Sq, Sk, D <= 128. The causal mask keeps key j <= query i (top-left aligned, as
    torch's is_causal). Dtypes: q, k, v float32, bfloat16 or float16, all the same (out in that
    dtype); mask any float dtype. Flash style: blocks of min(Sq, 128) queries, keys streamed in
    blocks of min(Sk, 128) with a running max and sum (nl.sequential_range); with one key
    block (Sk <= 128), a plain softmax."""
    nbh, sq, d = q.shape
    nkv, sk, _ = k.shape
    h = heads or 1  # without heads=, every (batch, head) row of q is its own batch
    hk = nkv * h // nbh
    g = h // hk
    nb = nbh // h
    out = nl.ndarray((nbh, sq, d), dtype=q.dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((nbh, sq, 1), dtype=F32, buffer=nl.shared_hbm) if with_lse else None
    bq, bk = fit(sq), fit(sk)  # query / key block rows: 128, or the whole sequence
    blocks = (sq, sk, bq, bk)
    nk = row_tiles(sk, bk)
    i_p = nl.arange(bq)[:, None]
    i_d = nl.arange(d)[None, :]
    i_1 = nl.arange(1)[None, :]

    def scores(b: Any, head: Any, kv: Any, qi: Any, kj: Any, q_t: Any) -> Any:
        m_blk = None if mask is None else _mask_blk(mask, b, head, qi, kj, blocks)
        k_t = _load_t(k, kv, kj, sk, d, bk)
        return _scores(q_t, k_t, qi, kj, blocks, scale, causal, m_blk)

    def times_v(p: Any, kv: Any, kj: Any) -> Any:
        v_b = _load_blk(v, kv, kj, sk, d, bk)
        return nl.matmul(_transposed(p, q.dtype), v_b, transpose_x=True)

    for b in nl.affine_range(nb):
        for kh in nl.affine_range(hk):
            for j in nl.affine_range(g):
                head = kh * g + j
                bh = b * h + head
                kv = b * hk + kh
                for qi in nl.affine_range(row_tiles(sq, bq)):
                    q_t = _load_t(q, bh, qi, sq, d, bq)
                    if nk == 1:  # one key block: a plain softmax, no running statistics
                        sc = scores(b, head, kv, qi, 0, q_t)
                        row_max = nl.max(sc, axis=1, keepdims=True, dtype=F32)
                        m = nl.maximum(row_max, NEG, dtype=F32)  # (the running max's start)
                        p = nl.exp(nl.subtract(sc, m, dtype=F32), dtype=F32)
                        l_sum = nl.sum(p, axis=1, keepdims=True, dtype=F32)
                        acc = times_v(p, kv, 0)
                    else:
                        m = nl.full((bq, 1), NEG, F32, buffer=nl.sbuf)
                        l_sum = nl.zeros((bq, 1), F32, buffer=nl.sbuf)
                        acc = nl.zeros((bq, d), F32, buffer=nl.sbuf)
                        for kj in nl.sequential_range(nk):
                            sc = scores(b, head, kv, qi, kj, q_t)
                            m_new = nl.maximum(
                                m, nl.max(sc, axis=1, keepdims=True, dtype=F32), dtype=F32
                            )
                            p = nl.exp(nl.subtract(sc, m_new, dtype=F32), dtype=F32)
                            corr = nl.exp(nl.subtract(m, m_new, dtype=F32), dtype=F32)
                            row = nl.sum(p, axis=1, keepdims=True, dtype=F32)
                            l_sum[i_p, i_1] = nl.add(
                                nl.multiply(l_sum, corr, dtype=F32), row, dtype=F32
                            )
                            pv = times_v(p, kv, kj)
                            acc[i_p, i_d] = nl.add(nl.multiply(acc, corr, dtype=F32), pv, dtype=F32)
                            m[i_p, i_1] = nl.copy(m_new, dtype=F32)
                    rows = qi * bq + i_p
                    # (a row whose every key is masked with -inf has l_sum 0 and acc 0: its
                    # output is 0, as torch gives; any other row has l_sum >= 1)
                    l_sum = nl.maximum(l_sum, TINY, dtype=F32)
                    res = nl.multiply(acc, nl.reciprocal(l_sum, dtype=F32), dtype=q.dtype)
                    nl.store(out[bh, rows, i_d], res, mask=rows < sq if sq % bq else None)
                    if with_lse:
                        lse_t = nl.add(m, nl.log(l_sum, dtype=F32), dtype=F32)
                        nl.store(lse[bh, rows, i_1], lse_t, mask=rows < sq if sq % bq else None)
    return (out, lse) if with_lse else out


@nki.jit
def attention_backward_kernel(g, q, k, v, o, lse, mask=None, scale=1.0, causal=False, heads=0):
    """dq [B*H, Sq, D], dk, dv [B*Hk, Sk, D] of :func:`attention_kernel` from the output
    gradient g, the forward output o and its lse: with P = exp(scores - lse), dv = P^T g,
    dS = P (g v^T - rowsum(g o)), dq = dS k * scale, dk = dS^T q * scale. Each key block
    accumulates dk, dv in PSUM over the query blocks of every query head of its group; a
    second pass over query blocks accumulates dq (with one key block, Sk <= 128, dq comes from
    the first pass).

    Shapes and dtypes as :func:`attention_kernel`; g and o as q, lse (B*H, Sq, 1) fp32
    (gradients in q's dtype)."""
    nbh, sq, d = q.shape
    nkv, sk, _ = k.shape
    h = heads or 1
    hk = nkv * h // nbh
    gs = h // hk
    nb = nbh // h
    dq = nl.ndarray((nbh, sq, d), dtype=q.dtype, buffer=nl.shared_hbm)
    dk = nl.ndarray((nkv, sk, d), dtype=q.dtype, buffer=nl.shared_hbm)
    dv = nl.ndarray((nkv, sk, d), dtype=q.dtype, buffer=nl.shared_hbm)
    bq, bk = fit(sq), fit(sk)
    blocks = (sq, sk, bq, bk)
    i_d = nl.arange(d)[None, :]
    nq = row_tiles(sq, bq)
    nk = row_tiles(sk, bk)

    def probs(b, head, kv, qi, kj, q_t):
        """P and dS blocks (bq, bk), fp32, and g's block."""
        bh = b * h + head
        m_blk = None if mask is None else _mask_blk(mask, b, head, qi, kj, blocks)
        sc = _scores(q_t, _load_t(k, kv, kj, sk, d, bk), qi, kj, blocks, scale, causal, m_blk)
        p = nl.exp(nl.subtract(sc, _load_blk(lse, bh, qi, sq, 1, bq), dtype=F32), dtype=F32)
        g_t, v_t = _load_t(g, bh, qi, sq, d, bq), _load_t(v, kv, kj, sk, d, bk)
        dp = nl.matmul(g_t, v_t, transpose_x=True)
        g_b = _load_blk(g, bh, qi, sq, d, bq)
        o_b = _load_blk(o, bh, qi, sq, d, bq)
        di = nl.sum(nl.multiply(g_b, o_b, dtype=F32), axis=1, keepdims=True)
        ds = nl.multiply(p, nl.subtract(dp, di, dtype=F32), dtype=F32)
        return p, ds, g_b

    def k_b(kv, kj):
        return _load_blk(k, kv, kj, sk, d, bk)

    def store_dq(bh, qi, dq_acc):
        rows = qi * bq + nl.arange(bq)[:, None]
        dq_res = nl.multiply(dq_acc, scale, dtype=q.dtype)
        nl.store(dq[bh, rows, i_d], dq_res, mask=rows < sq if sq % bq else None)

    for b in nl.affine_range(nb):
        for kh in nl.affine_range(hk):
            kv = b * hk + kh
            for kj in nl.affine_range(nk):
                dk_acc = nl.zeros((bk, d), F32, buffer=nl.psum)
                dv_acc = nl.zeros((bk, d), F32, buffer=nl.psum)
                for j in nl.affine_range(gs):
                    head = kh * gs + j
                    for qi in nl.affine_range(nq):
                        bh = b * h + head
                        p, ds, g_b = probs(b, head, kv, qi, kj, _load_t(q, bh, qi, sq, d, bq))
                        dv_acc += nl.matmul(_as(p, q.dtype), g_b, transpose_x=True)
                        q_b = _load_blk(q, bh, qi, sq, d, bq)
                        dk_acc += nl.matmul(_as(ds, q.dtype), q_b, transpose_x=True)
                        if nk == 1:  # dq = dS k * scale: this block is the whole sum
                            ds_t = _transposed(ds, q.dtype)
                            store_dq(bh, qi, nl.matmul(ds_t, k_b(kv, kj), transpose_x=True))
                rows = kj * bk + nl.arange(bk)[:, None]
                nl.store(
                    dv[kv, rows, i_d],
                    nl.copy(dv_acc, dtype=q.dtype),
                    mask=rows < sk if sk % bk else None,
                )
                dk_res = nl.multiply(dk_acc, scale, dtype=q.dtype)
                nl.store(dk[kv, rows, i_d], dk_res, mask=rows < sk if sk % bk else None)
            if nk > 1:  # the second pass: dq over the key blocks
                for j in nl.affine_range(gs):
                    head = kh * gs + j
                    bh = b * h + head
                    for qi in nl.affine_range(nq):
                        q_t = _load_t(q, bh, qi, sq, d, bq)
                        dq_acc = nl.zeros((bq, d), F32, buffer=nl.psum)
                        for kj in nl.affine_range(nk):
                            _, ds, _ = probs(b, head, kv, qi, kj, q_t)
                            dq_acc += nl.matmul(
                                _transposed(ds, q.dtype), k_b(kv, kj), transpose_x=True
                            )
                        store_dq(bh, qi, dq_acc)
    return dq, dk, dv
