"""Embedding lookup (indirect DMA gather) and its weight gradient (one-hot matmul), and the
transpose of the last two dims (Tensor-engine transposes of 128 x 128 blocks)."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import PSUM_FMAX, P, fit, load_rows, row_tiles, store_rows

F32 = nl.float32


@nki.jit
def embedding_kernel(w, idx):
    """out[N, D] = w[idx[n], :] for each row n: a gather by indirect DMA (the partition index
    of the load is an SBUF tile of indices).

    Shapes: w (V, D), idx (N, 1) int32 with 0 <= idx < V (out-of-range indices are reported
    by the simulator); any N, D <= 4096. Dtypes: w float32, bfloat16 or float16."""
    n = idx.shape[0]
    d = w.shape[1]
    p = fit(n)  # rows per tile: 128, or all of them (no padding rows) when fewer
    out = nl.ndarray((n, d), dtype=w.dtype, buffer=nl.shared_hbm)
    i_f = nl.arange(d)[None, :]
    for t in nl.affine_range(row_tiles(n, p)):
        it = load_rows(idx, t, n, 1, p=p)  # padding rows read index 0, never stored
        rows_t = nl.load(w[it, i_f])
        store_rows(out, t, n, d, rows_t, p=p)
    return out


@nki.jit
def embedding_backward_kernel(g, idx, num_weights=1, padding_idx=-1):
    """dw[V, D] = sum of the rows g[n] with idx[n] == v, as onehot(idx)^T @ g on the Tensor
    engine (the one-hot block built from iota and a compare), fp32 PSUM accumulation over N.
    Rows whose index is ``padding_idx`` (if >= 0) add nothing. Also the scatter-add of
    index_put(accumulate=True) and scatter.

    Shapes: g (N, D), idx (N, 1) int32, V = num_weights; any N, V, D. Dtypes: g float32,
    bfloat16 or float16 (dw in g's dtype)."""
    n, d = g.shape
    v = num_weights
    dw = nl.ndarray((v, d), dtype=g.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    i_m = nl.arange(P)[None, :]
    fw = min(PSUM_FMAX, d)  # (columns per PSUM tile: no wider than dw)
    i_n = nl.arange(fw)[None, :]
    for vt in nl.affine_range(row_tiles(v)):
        for dt in nl.affine_range((d + fw - 1) // fw):
            cols = dt * fw + i_n
            acc = nl.zeros((P, fw), F32, buffer=nl.psum)
            for t in nl.affine_range(row_tiles(n)):
                rows = t * P + i_p
                it = load_rows(idx, t, n, 1, dtype=F32)
                ids = nisa.iota(vt * P + i_m + 0 * i_p, dtype=F32)
                onehot = nl.equal(ids, it, dtype=g.dtype)
                if padding_idx >= 0:
                    keep = nl.not_equal(it, float(padding_idx), dtype=g.dtype)
                    onehot = nl.multiply(onehot, keep, dtype=g.dtype)
                gt = nl.zeros((P, fw), g.dtype, buffer=nl.sbuf)
                gt[i_p, i_n] = nl.load(g[rows, cols], mask=(rows < n) & (cols < d))
                acc += nl.matmul(onehot, gt, transpose_x=True)
            vrows = vt * P + i_p
            nl.store(dw[vrows, cols], nl.copy(acc, dtype=g.dtype), mask=(vrows < v) & (cols < d))
    return dw


@nki.jit
def transpose_kernel(x):
    """out[B, C, R] = x[B, R, C] transposed in its last two dims, 128 x 128 blocks at a time
    through the Tensor engine (bit-exact).

    Shapes: any B, R, C. Dtypes: float32, bfloat16, float16."""
    nb, r, c = x.shape
    out = nl.ndarray((nb, c, r), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(P)[None, :]
    for b in nl.affine_range(nb):
        for rt in nl.affine_range(row_tiles(r)):
            for ct in nl.affine_range(row_tiles(c)):
                rows = rt * P + i_p
                cols = ct * P + i_f
                blk = nl.zeros((P, P), x.dtype, buffer=nl.sbuf)
                blk[i_p, i_f] = nl.load(x[b, rows, cols], mask=(rows < r) & (cols < c))
                tb = nl.transpose(blk)
                orow = ct * P + i_p
                ocol = rt * P + i_f
                nl.store(
                    out[b, orow, ocol], nl.copy(tb, dtype=x.dtype), mask=(orow < c) & (ocol < r)
                )
    return out
