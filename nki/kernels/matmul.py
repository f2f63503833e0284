"""Matrix products on the Tensor engine: matmul / linear / addmm / bmm, and column sums.

All kernels tile the contraction (K) over 128 partitions, the stationary free size (M) over
128 and the moving free size (N) over 512, accumulate K tiles in an fp32 PSUM tile and round
once on the store. Ragged sizes load into zero-filled tiles under masks, so padding lanes
contribute exact zeros to the contraction. bf16 (or fp16) inputs are multiplied with fp32
accumulation."""

from __future__ import annotations

from typing import Any

import nki
import nki.language as nl

from ._tiles import PSUM_FMAX, P, row_tiles

NT = PSUM_FMAX  # moving free size per matmul (one PSUM bank of fp32)


def _mm_tile(a: Any, b: Any, mi: Any, ni: Any, m: int, k: int, n: int, b_row: Any = None) -> Any:
    """acc[128, 512] (fp32 PSUM) = a[mi tile, :] @ b[:, ni tile]; ``a`` is (m, k) and ``b``
    (k, n) HBM tensors (``b_row`` selects a batch: b[b_row, ...])."""
    i_p = nl.arange(P)[:, None]
    i_m = nl.arange(P)[None, :]
    i_n = nl.arange(NT)[None, :]
    acc = nl.zeros((P, NT), nl.float32, buffer=nl.psum)
    for ki in nl.affine_range(row_tiles(k)):
        krow = ki * P + i_p
        # stationary operand: a's block with K on the partition axis (a transposing DMA)
        a_t = nl.zeros((P, P), a.dtype, buffer=nl.sbuf)
        a_t[i_p, i_m] = nl.load(a[mi * P + i_m, krow], mask=(krow < k) & (mi * P + i_m < m))
        b_t = nl.zeros((P, NT), b.dtype, buffer=nl.sbuf)
        b_t[i_p, i_n] = nl.load(b[krow, ni * NT + i_n], mask=(krow < k) & (ni * NT + i_n < n))
        acc += nl.matmul(a_t, b_t, transpose_x=True)
    return acc


@nki.jit
def matmul_kernel(a, b):
    """c[M, N] = a[M, K] @ b[K, N].

    Shapes: any M, K, N >= 1 (ragged tiles are masked). Dtypes: a and b both float32, bfloat16
    or float16; fp32 accumulation in PSUM; c has a's dtype (rounded once)."""
    m, k = a.shape
    n = b.shape[1]
    out = nl.ndarray((m, n), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    i_n = nl.arange(NT)[None, :]
    for mi in nl.affine_range(row_tiles(m)):
        for ni in nl.affine_range((n + NT - 1) // NT):
            acc = _mm_tile(a, b, mi, ni, m, k, n)
            rows = mi * P + i_p
            cols = ni * NT + i_n
            nl.store(out[rows, cols], nl.copy(acc, dtype=a.dtype), mask=(rows < m) & (cols < n))
    return out


@nki.jit
def addmm_kernel(bias, a, b, beta=1.0, alpha=1.0):
    """c[M, N] = beta * bias + alpha * (a[M, K] @ b[K, N]) (torch.addmm; linear with a bias).

    Shapes: bias (1, N) (broadcast over rows) or (M, N). Dtypes as :func:`matmul_kernel`
    (bias of the same dtype); the bias is added to the fp32 accumulator before rounding."""
    m, k = a.shape
    n = b.shape[1]
    out = nl.ndarray((m, n), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    i_n = nl.arange(NT)[None, :]
    row_bias = bias.shape[0] == 1
    for mi in nl.affine_range(row_tiles(m)):
        for ni in nl.affine_range((n + NT - 1) // NT):
            acc = _mm_tile(a, b, mi, ni, m, k, n)
            rows = mi * P + i_p
            cols = ni * NT + i_n
            ok = (rows < m) & (cols < n)
            if row_bias:
                bt = nl.load(bias[i_p * 0, cols], mask=cols < n)
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
    out = nl.ndarray((nb, m, n), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    i_m = nl.arange(P)[None, :]
    i_n = nl.arange(NT)[None, :]
    for bi in nl.affine_range(nb):
        for mi in nl.affine_range(row_tiles(m)):
            for ni in nl.affine_range((n + NT - 1) // NT):
                acc = nl.zeros((P, NT), nl.float32, buffer=nl.psum)
                for ki in nl.affine_range(row_tiles(k)):
                    krow = ki * P + i_p
                    a_t = nl.zeros((P, P), a.dtype, buffer=nl.sbuf)
                    a_t[i_p, i_m] = nl.load(
                        a[bi, mi * P + i_m, krow], mask=(krow < k) & (mi * P + i_m < m)
                    )
                    b_t = nl.zeros((P, NT), b.dtype, buffer=nl.sbuf)
                    b_t[i_p, i_n] = nl.load(
                        b[bi, krow, ni * NT + i_n], mask=(krow < k) & (ni * NT + i_n < n)
                    )
                    acc += nl.matmul(a_t, b_t, transpose_x=True)
                rows = mi * P + i_p
                cols = ni * NT + i_n
                nl.store(
                    out[bi, rows, cols], nl.copy(acc, dtype=a.dtype), mask=(rows < m) & (cols < n)
                )
    return out


@nki.jit
def sum_rows_kernel(x):
    """s[1, D] = sum over rows of x[N, D] (a reduction over the partition axis, done on the
    Tensor engine as ones[N]^T @ x with fp32 PSUM accumulation; used for bias gradients).

    Shapes: any N, D. Dtypes: float32, bfloat16, float16 (result in x's dtype)."""
    n, d = x.shape
    out = nl.ndarray((1, d), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    i_n = nl.arange(NT)[None, :]
    i_1 = nl.arange(1)[None, :]
    ones = nl.ones((P, 1), x.dtype, buffer=nl.sbuf)
    for ni in nl.affine_range((d + NT - 1) // NT):
        cols = ni * NT + i_n
        acc = nl.zeros((1, NT), nl.float32, buffer=nl.psum)
        for ki in nl.affine_range(row_tiles(n)):
            krow = ki * P + i_p
            xt = nl.zeros((P, NT), x.dtype, buffer=nl.sbuf)
            xt[i_p, i_n] = nl.load(x[krow, cols], mask=(krow < n) & (cols < d))
            acc += nl.matmul(ones, xt, transpose_x=True)
        nl.store(out[i_1 * 0, cols], nl.copy(acc, dtype=x.dtype), mask=cols < d)
    return out
