"""Negative log-likelihood loss over class scores (the second half of cross-entropy after
log_softmax), forward and backward.

Rows (samples) go on the partition axis, 128 at a time; the C class scores of a row stay in the
free axis (C <= 4096). The target's one-hot row is built on the fly (iota over the classes
compared with the row's target), so no gather is needed; ignored targets get a zero row. Sums
over rows run on the Tensor engine (ones^T @ column, fp32 PSUM)."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import P, load_rows, row_tiles, store_rows

F32 = nl.float32


def _onehot(target, t, n: int, c: int, ignore_index: int):
    """(128, C) fp32 one-hot rows of row tile t of the targets (N, 1), zero where the target
    is ignore_index or the row is padding (>= n), and the (128, 1) valid flags."""
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(c)[None, :]
    i_1 = nl.arange(1)[None, :]
    classes = nisa.iota(i_f + 0 * i_p, dtype=F32)
    tf = load_rows(target, t, n, 1, dtype=F32)
    real = nl.less(nisa.iota(t * P + i_p + 0 * i_1, dtype=F32), float(n), dtype=F32)
    valid = nl.multiply(nl.not_equal(tf, float(ignore_index), dtype=F32), real, dtype=F32)
    return nl.multiply(nl.equal(classes, tf, dtype=F32), valid, dtype=F32), valid


@nki.jit
def nll_loss_kernel(x, target, reduction=1, ignore_index=-100):
    """loss, total_weight of ``F.nll_loss(x, target)`` without class weights:
    per-row l[n] = -x[n, target[n]] (0 where target[n] == ignore_index). reduction 0 ("none")
    returns l as (N, 1); 1 ("mean") sum(l) / (number of valid rows) as (1, 1); 2 ("sum")
    sum(l) as (1, 1). total_weight (1, 1) fp32 is the number of valid rows.

    Shapes: x (N, C), target (N, 1); any N, C <= 4096. Dtypes: x float32, bfloat16 or float16
    (loss in x's dtype), target int32 in [0, C) or ignore_index."""
    n, c = x.shape
    i_1 = nl.arange(1)[None, :]
    ones = nl.ones((P, 1), F32, buffer=nl.sbuf)
    total = nl.ndarray((1, 1), dtype=F32, buffer=nl.shared_hbm)
    if reduction == 0:
        loss = nl.ndarray((n, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    else:
        loss = nl.ndarray((1, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((1, 2), F32, buffer=nl.psum)
    for t in nl.affine_range(row_tiles(n)):
        oh, valid = _onehot(target, t, n, c, ignore_index)
        picked = nl.sum(nl.multiply(oh, load_rows(x, t, n, c), dtype=F32), axis=1, keepdims=True)
        neg = nl.negative(picked, dtype=F32)
        if reduction == 0:
            store_rows(loss, t, n, 1, nl.copy(neg, dtype=x.dtype))
        pair = nl.zeros((P, 2), F32, buffer=nl.sbuf)
        pair[nl.arange(P)[:, None], i_1] = neg
        pair[nl.arange(P)[:, None], 1 + i_1] = valid
        acc += nl.matmul(ones, pair, transpose_x=True)  # padding rows are zero: they add nothing
    sums = nl.copy(acc, dtype=F32)
    nl.store(total[0 * i_1, i_1], sums[0 * i_1, 1 + i_1])
    if reduction == 1:
        mean = nl.divide(sums[0 * i_1, i_1], sums[0 * i_1, 1 + i_1], dtype=x.dtype)
        nl.store(loss[0 * i_1, i_1], mean)
    elif reduction == 2:
        nl.store(loss[0 * i_1, i_1], nl.copy(sums[0 * i_1, i_1], dtype=x.dtype))
    return loss, total


@nki.jit
def nll_loss_backward_kernel(g, target, total_weight, c=1, reduction=1, ignore_index=-100):
    """dx[N, C] of :func:`nll_loss_kernel`: -g * onehot(target) (zero rows for ignored
    targets), divided by total_weight for reduction 1 ("mean"). g is the loss gradient: (1, 1)
    for reductions 1 and 2, (N, 1) for 0.

    Shapes: target (N, 1) int32, total_weight (1, 1) fp32, C = c <= 4096. Dtypes: g float32,
    bfloat16 or float16 (dx in g's dtype)."""
    n = target.shape[0]
    dx = nl.ndarray((n, c), dtype=g.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    i_1 = nl.arange(1)[None, :]
    for t in nl.affine_range(row_tiles(n)):
        oh, _ = _onehot(target, t, n, c, ignore_index)
        if reduction == 0:
            gt = load_rows(g, t, n, 1, dtype=F32)
        else:
            gt = nl.load(g[i_p * 0, i_1], dtype=F32)
            if reduction == 1:
                gt = nl.divide(gt, nl.load(total_weight[i_p * 0, i_1]), dtype=F32)
        store_rows(dx, t, n, c, nl.multiply(oh, nl.negative(gt, dtype=F32), dtype=g.dtype))
    return dx
