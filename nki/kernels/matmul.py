"""Matrix products on the Tensor engine: matmul / linear / addmm / bmm, and column sums.

All kernels tile the contraction (K) over up to 128 partitions, the stationary free size (M)
over up to 128 and the moving free size (N) over up to 512, accumulate K tiles in an fp32 PSUM
tile and round once on the store. A dimension smaller than its tile gets a tile of its own
size (no padding lanes to compute); ragged sizes load into zero-filled tiles under masks, so
padding lanes contribute exact zeros to the contraction. bf16 (or fp16) inputs are multiplied
with fp32 accumulation."""

from __future__ import annotations

from typing import Any

import nki
import nki.language as nl
from nki.errors import NKIShapeError, user_loc

from ._tiles import PSUM_FMAX, P

NT = PSUM_FMAX  # moving free size per matmul (one PSUM bank of fp32)


def _tiles(m: int, k: int, n: int) -> tuple[int, int, int]:
    """(M, K, N) tile sizes: the hardware's (128, 128, 512), or a smaller dimension whole."""
    return min(P, m), min(P, k), min(NT, n)


def _count(n: int, tile: int) -> int:
    return (n + tile - 1) // tile


def _mm_tile(a: Any, b: Any, mi: Any, ni: Any, m: int, k: int, n: int, bi: Any = None) -> Any:
    """acc[tm, tn] (fp32 PSUM) = a[mi tile, :] @ b[:, ni tile]; ``a`` is (m, k) and ``b``
    (k, n) HBM tensors, or with ``bi`` (B, m, k) and (B, k, n) ones at batch ``bi``."""
    tm, tk, tn = _tiles(m, k, n)
    i_p = nl.arange(tk)[:, None]
    i_m = nl.arange(tm)[None, :]
    i_n = nl.arange(tn)[None, :]
    at = (lambda r, c: a[r, c]) if bi is None else (lambda r, c: a[bi, r, c])
    bt = (lambda r, c: b[r, c]) if bi is None else (lambda r, c: b[bi, r, c])

    def product(ki: Any) -> Any:
        krow = ki * tk + i_p
        # stationary operand: a's block with K on the partition axis (a transposing DMA); a
        # ragged block loads into a zero-filled tile (whole blocks need no fill)
        if m % tm or k % tk:
            a_t = nl.zeros((tk, tm), a.dtype, buffer=nl.sbuf)
            a_t[i_p, i_m] = nl.load(at(mi * tm + i_m, krow), mask=(krow < k) & (mi * tm + i_m < m))
        else:
            a_t = nl.load(at(mi * tm + i_m, krow))
        if k % tk or n % tn:
            b_t = nl.zeros((tk, tn), b.dtype, buffer=nl.sbuf)
            b_t[i_p, i_n] = nl.load(bt(krow, ni * tn + i_n), mask=(krow < k) & (ni * tn + i_n < n))
        else:
            b_t = nl.load(bt(krow, ni * tn + i_n))
        return nl.matmul(a_t, b_t, transpose_x=True)

    if k <= tk:  # one K tile: the product is the accumulator
        return product(0)
    acc = nl.zeros((tm, tn), nl.float32, buffer=nl.psum)
    for ki in nl.affine_range(_count(k, tk)):
        acc += product(ki)
    return acc


def _out_tile(m: int, k: int, n: int, mi: Any, ni: Any) -> tuple[Any, Any, Any]:
    """(rows, cols, in-bounds mask) of output tile (mi, ni)."""
    tm, _, tn = _tiles(m, k, n)
    rows = mi * tm + nl.arange(tm)[:, None]
    cols = ni * tn + nl.arange(tn)[None, :]
    return rows, cols, (rows < m) & (cols < n)


def _matmul(a: Any, b: Any) -> Any:
    """a @ b into a new HBM tensor of a's dtype, tile by tile."""
    m, k = a.shape
    n = b.shape[1]
    tm, _, tn = _tiles(m, k, n)
    out = nl.ndarray((m, n), dtype=a.dtype, buffer=nl.shared_hbm)
    for mi in nl.affine_range(_count(m, tm)):
        for ni in nl.affine_range(_count(n, tn)):
            acc = _mm_tile(a, b, mi, ni, m, k, n)
            rows, cols, ok = _out_tile(m, k, n, mi, ni)
            nl.store(out[rows, cols], nl.copy(acc, dtype=a.dtype), mask=ok)
    return out


@nki.jit
def matmul_kernel(a, b):
    """c[M, N] = a[M, K] @ b[K, N].

    Shapes: any M, K, N >= 1 (ragged tiles are masked). Dtypes: a and b both float32, bfloat16
    or float16; fp32 accumulation in PSUM; c has a's dtype (rounded once)."""
    return _matmul(a, b)


@nki.jit
def matmul_shared_kernel(a, bs):
    """(a @ b for b in bs): the products of one a[M, K] with several b[K, Ni] in one launch
    (the query, key and value projections of one input), each computed as ``matmul_kernel``
    computes it.

    Shapes: any M, K, Ni >= 1. Dtypes: a and every b float32, bfloat16 or float16, all the
    same; fp32 accumulation in PSUM; results in a's dtype (rounded once)."""
    return tuple(_matmul(a, b) for b in bs)


@nki.jit
def matmul_pairs_kernel(lhs, rhs):
    """(a @ b for a, b in zip(lhs, rhs)): independent products in one launch (a backward
    graph's input and weight gradients), each computed as ``matmul_kernel`` computes it.

    Shapes: as many ``rhs`` as ``lhs``; each a[M, K] with b[K, N], any M, K, N >= 1. Dtypes:
    each pair float32, bfloat16 or float16, a and b the same; fp32 accumulation in PSUM; each
    result in its a's dtype (rounded once)."""
    if len(lhs) != len(rhs):
        raise NKIShapeError(
            f"matmul_pairs_kernel takes one rhs per lhs: {len(lhs)} lhs, {len(rhs)} rhs",
            code="err_invalid_shape",
            loc=user_loc(),
        )
    return tuple(_matmul(a, b) for a, b in zip(lhs, rhs))


@nki.jit
def addmm_kernel(bias, a, b, beta=1.0, alpha=1.0):
    """c[M, N] = beta * bias + alpha * (a[M, K] @ b[K, N]) (torch.addmm; linear with a bias).

    Shapes: bias (1, N) (broadcast over rows) or (M, N). Dtypes as :func:`matmul_kernel`
    (bias of the same dtype); the bias is added to the fp32 accumulator before rounding."""
    m, k = a.shape
    n = b.shape[1]
    tm, _, tn = _tiles(m, k, n)
    out = nl.ndarray((m, n), dtype=a.dtype, buffer=nl.shared_hbm)
    row_bias = bias.shape[0] == 1
    for mi in nl.affine_range(_count(m, tm)):
        for ni in nl.affine_range(_count(n, tn)):
            acc = _mm_tile(a, b, mi, ni, m, k, n)
            rows, cols, ok = _out_tile(m, k, n, mi, ni)
            if row_bias:
                bt = nl.load(bias[nl.arange(tm)[:, None] * 0, cols], mask=cols < n)
            else:
                bt = nl.load(bias[rows, cols], mask=ok)
            res = nl.add(
                nl.multiply(acc, alpha, dtype=nl.float32),
                nl.multiply(bt, beta, dtype=nl.float32),
                dtype=a.dtype,
            )
            nl.store(out[rows, cols], res, mask=ok)
    return out


@nki.jit
def bmm_kernel(a, b):
    """c[B, M, N] = a[B, M, K] @ b[B, K, N] (torch.bmm), one batch per outer loop iteration.

    Shapes and dtypes as :func:`matmul_kernel` per batch."""
    nb, m, k = a.shape
    n = b.shape[2]
    tm, _, tn = _tiles(m, k, n)
    out = nl.ndarray((nb, m, n), dtype=a.dtype, buffer=nl.shared_hbm)
    for bi in nl.affine_range(nb):
        for mi in nl.affine_range(_count(m, tm)):
            for ni in nl.affine_range(_count(n, tn)):
                acc = _mm_tile(a, b, mi, ni, m, k, n, bi)
                rows, cols, ok = _out_tile(m, k, n, mi, ni)
                nl.store(out[bi, rows, cols], nl.copy(acc, dtype=a.dtype), mask=ok)
    return out


@nki.jit
def sum_rows_kernel(x):
    """s[1, D] = sum over rows of x[N, D] (a reduction over the partition axis, done on the
    Tensor engine as ones[N]^T @ x with fp32 PSUM accumulation; used for bias gradients).

    Shapes: any N, D. Dtypes: float32, bfloat16, float16 (result in x's dtype)."""
    n, d = x.shape
    _, tk, tn = _tiles(1, n, d)
    out = nl.ndarray((1, d), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(tk)[:, None]
    i_n = nl.arange(tn)[None, :]
    i_1 = nl.arange(1)[None, :]
    ones = nl.ones((tk, 1), x.dtype, buffer=nl.sbuf)
    for ni in nl.affine_range(_count(d, tn)):
        cols = ni * tn + i_n
        acc = nl.zeros((1, tn), nl.float32, buffer=nl.psum)
        for ki in nl.affine_range(_count(n, tk)):
            krow = ki * tk + i_p
            xt = nl.zeros((tk, tn), x.dtype, buffer=nl.sbuf)
            xt[i_p, i_n] = nl.load(x[krow, cols], mask=(krow < n) & (cols < d))
            acc += nl.matmul(ones, xt, transpose_x=True)
        nl.store(out[i_1 * 0, cols], nl.copy(acc, dtype=x.dtype), mask=cols < d)
    return out
