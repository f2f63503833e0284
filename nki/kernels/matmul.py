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


def _a_block(at: Any, mi: Any, krow: Any, m: int, k: int, tm: int, tk: int) -> Any:
    """The stationary operand: rows mi*tm... of ``at(rows, cols)`` (an (m, k) tensor) with K on
    the partition axis (a transposing DMA); a ragged block loads into a zero-filled tile (whole
    blocks need no fill)."""
    i_p = nl.arange(tk)[:, None]
    i_m = nl.arange(tm)[None, :]
    if m % tm or k % tk:
        a_t = nl.zeros((tk, tm), at.dtype, buffer=nl.sbuf)
        a_t[i_p, i_m] = nl.load(at(mi * tm + i_m, krow), mask=(krow < k) & (mi * tm + i_m < m))
        return a_t
    return nl.load(at(mi * tm + i_m, krow))


def _accumulated(product: Any, k: int, tk: int, shape: tuple) -> Any:
    """The sum over K tiles of ``product(ki)`` in an fp32 PSUM tile (one K tile: the product
    itself)."""
    if k <= tk:
        return product(0)
    acc = nl.zeros(shape, nl.float32, buffer=nl.psum)
    for ki in nl.affine_range(_count(k, tk)):
        acc += product(ki)
    return acc


class _Indexed:
    """``x[r, c]``, or ``x[bi, r, c]`` of a batched tensor, as a function of (r, c)."""

    def __init__(self, x: Any, bi: Any = None) -> None:
        self.x, self.bi, self.dtype = x, bi, x.dtype

    def __call__(self, r: Any, c: Any) -> Any:
        return self.x[r, c] if self.bi is None else self.x[self.bi, r, c]


def _mm_tile(a: Any, b: Any, mi: Any, ni: Any, m: int, k: int, n: int, bi: Any = None) -> Any:
    """acc[tm, tn] (fp32 PSUM) = a[mi tile, :] @ b[:, ni tile]; ``a`` is (m, k) and ``b``
    (k, n) HBM tensors, or with ``bi`` (B, m, k) and (B, k, n) ones at batch ``bi``."""
    tm, tk, tn = _tiles(m, k, n)
    i_p = nl.arange(tk)[:, None]
    i_n = nl.arange(tn)[None, :]
    at, bt = _Indexed(a, bi), _Indexed(b, bi)

    def product(ki: Any) -> Any:
        krow = ki * tk + i_p
        a_t = _a_block(at, mi, krow, m, k, tm, tk)
        if k % tk or n % tn:
            b_t = nl.zeros((tk, tn), b.dtype, buffer=nl.sbuf)
            b_t[i_p, i_n] = nl.load(bt(krow, ni * tn + i_n), mask=(krow < k) & (ni * tn + i_n < n))
        else:
            b_t = nl.load(bt(krow, ni * tn + i_n))
        return nl.matmul(a_t, b_t, transpose_x=True)

    return _accumulated(product, k, tk, (tm, tn))


def shared_product(a: Any, bs: list, mi: Any, to_sbuf: bool = True) -> Any:
    """Rows ``mi*tm ...`` of (a @ b for b in bs) side by side (the bs' columns at most ``NT`` in
    all) as one (tm, sum of columns) SBUF tile rounded to a's dtype (without ``to_sbuf``: the
    fp32 PSUM accumulator itself): a's blocks load once and one product computes every result's
    columns, each summing over K as its own product does. Rows past M (of a ragged last tile)
    are zero."""
    m, k = a.shape
    ns = [b.shape[1] for b in bs]
    tm, tk, _ = _tiles(m, k, sum(ns))
    offs = [sum(ns[:i]) for i in range(len(ns))]
    i_p = nl.arange(tk)[:, None]
    at = _Indexed(a)

    def product(ki: Any) -> Any:
        krow = ki * tk + i_p
        a_t = _a_block(at, mi, krow, m, k, tm, tk)
        make = nl.zeros if k % tk else nl.ndarray  # (ragged K: zero rows)
        b_t = make((tk, sum(ns)), dtype=bs[0].dtype, buffer=nl.sbuf)
        for b, n, off in zip(bs, ns, offs):
            i_n = nl.arange(n)[None, :]
            b_t[i_p, off + i_n] = nl.load(b[krow, i_n], mask=krow < k)
        return nl.matmul(a_t, b_t, transpose_x=True)

    acc = _accumulated(product, k, tk, (tm, sum(ns)))
    return nl.copy(acc, dtype=a.dtype) if to_sbuf else acc


def _side_by_side(a: Any, bs: list) -> tuple:
    """(a @ b for b in bs) as one product of a with the bs side by side (``shared_product``),
    each result's columns stored from the product's."""
    m, k = a.shape
    ns = [b.shape[1] for b in bs]
    tm, _, _ = _tiles(m, k, sum(ns))
    outs = [nl.ndarray((m, n), dtype=a.dtype, buffer=nl.shared_hbm) for n in ns]
    offs = [sum(ns[:i]) for i in range(len(ns))]
    for mi in nl.affine_range(_count(m, tm)):
        res = shared_product(a, bs, mi)
        rows = mi * tm + nl.arange(tm)[:, None]
        for out, n, off in zip(outs, ns, offs):
            i_n = nl.arange(n)[None, :]
            nl.store(out[rows, i_n], res[nl.arange(tm)[:, None], off + i_n], mask=rows < m)
    return tuple(outs)


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
    same; fp32 accumulation in PSUM; results in a's dtype (rounded once). When the bs have at
    most 512 columns in all, a's tiles load once and one product computes every result."""
    if sum(b.shape[1] for b in bs) <= NT:
        return _side_by_side(a, bs)
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
