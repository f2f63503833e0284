"""Tensor factories and index ops: arange and fill (iota / memset), concatenation and padding
along the last dim, flat gather indices, top-k along the last dim, triangular masks.

Like the element-wise kernels, these work on 2-D (N, D) HBM tensors with rows on the partition
axis, 128 at a time, and D whole in the free axis (D <= 4096). Integer results are int32 (NKI
has no 64-bit types)."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import P, fit, load_operand, load_rows, row_tiles, store_rows

F32 = nl.float32
NEG = -3.0e38


@nki.jit
def arange_kernel(n=1, start=0.0, step=1.0, dtype="int32"):
    """out[N, 1] = start + step * i for i < n (torch.arange), as an iota on GpSimd: exact for
    int32 and for float steps whose products are exact in fp32 (otherwise rounded once, in
    fp32).

    Shapes: any n >= 1. Dtypes: ``dtype`` ``"int32"``, ``"float32"``, ``"bfloat16"`` or
    ``"float16"``."""
    out_dtype = getattr(nl, dtype)
    out = nl.ndarray((n, 1), dtype=out_dtype, buffer=nl.shared_hbm)
    p = fit(n)  # rows per tile: 128, or all of them when fewer
    i_p = nl.arange(p)[:, None]
    i_1 = nl.arange(1)[None, :]
    exact = out_dtype == nl.int32 and float(step).is_integer() and float(start).is_integer()
    for t in nl.affine_range(row_tiles(n, p)):
        i = t * p + i_p + 0 * i_1
        if exact:  # start + step * i is an affine index expression: one iota, int32 arithmetic
            store_rows(out, t, n, 1, nisa.iota(int(start) + int(step) * i, dtype=nl.int32), p)
            continue
        val = nisa.iota(i, dtype=F32)
        scaled = float(step) != 1.0
        shifted = float(start) != 0.0 or float(step) < 0  # (+0.0 keeps -0.0 from 0 * step)
        if scaled:
            val = nl.multiply(val, float(step), dtype=out_dtype if not shifted else F32)
        if shifted:
            val = nl.add(val, float(start), dtype=out_dtype)
        if not (scaled or shifted) and out_dtype != F32:
            val = nl.copy(val, dtype=out_dtype)
        store_rows(out, t, n, 1, val, p)
    return out


@nki.jit
def fill_kernel(n=1, d=1, value=0.0, dtype="float32"):
    """out[N, D] = value everywhere (torch.full / zeros / ones / new_zeros / scalar_tensor), by
    memset on GpSimd.

    Shapes: any N, D <= 4096. Dtypes: ``dtype`` ``"float32"``, ``"bfloat16"``, ``"float16"``,
    ``"int32"`` or ``"bool_"`` (the value is rounded once to it)."""
    out_dtype = getattr(nl, dtype)
    out = nl.ndarray((n, d), dtype=out_dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(row_tiles(n)):
        store_rows(out, t, n, d, nl.full((P, d), value, dtype=out_dtype, buffer=nl.sbuf))
    return out


@nki.jit
def cat_kernel(xs):
    """out[N, sum Di] = the (N, Di) tensors of ``xs`` side by side (torch.cat along the last
    dim of a (rows, columns) view), copied by DMA through SBUF.

    Shapes: each x (N, Di), Di <= 4096. Dtypes: any NKI dtype, all the same."""
    n = xs[0].shape[0]
    total = sum(x.shape[1] for x in xs)
    out = nl.ndarray((n, total), dtype=xs[0].dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    off = 0
    for x in xs:
        d = x.shape[1]
        i_f = nl.arange(d)[None, :]
        for t in nl.affine_range(row_tiles(n)):
            rows = t * P + i_p
            nl.store(out[rows, off + i_f], load_rows(x, t, n, d), mask=rows < n)
        off += d
    return out


@nki.jit
def pad_kernel(x, left=0, right=0, value=0.0):
    """out[N, left + D + right] = x with ``value`` columns before and after (F.pad of the last
    dim, constant mode).

    Shapes: x (N, D), left + D + right <= 4096. Dtypes: any NKI dtype (value rounded to it)."""
    n, d = x.shape
    w = left + d + right
    out = nl.ndarray((n, w), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(d)[None, :]
    for t in nl.affine_range(row_tiles(n)):
        tile = nl.full((P, w), value, dtype=x.dtype, buffer=nl.sbuf)
        tile[i_p, left + i_f] = load_rows(x, t, n, d)
        store_rows(out, t, n, w, tile)
    return out


@nki.jit
def flat_index_kernel(idx, rows=0, stride=1, size=0):
    """out[R, D] = idx'[r, :] + r * stride, with idx' = idx + size where idx < 0 (negative
    indices count from the end of a dim of ``size``): the flat row indices that gather /
    index_select / index read through :func:`nki.kernels.embedding_kernel`. ``idx`` is (R, D),
    or (1, D) broadcast to ``rows`` rows (the same indices in every outer slice).

    Shapes: any R, D <= 4096. Dtypes: idx int32; out int32."""
    d = idx.shape[1]
    r = rows or idx.shape[0]
    out = nl.ndarray((r, d), dtype=nl.int32, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(d)[None, :]
    for t in nl.affine_range(row_tiles(r)):
        it = load_operand(idx, t, r, d)
        wrapped = nl.add(it, nl.multiply(nl.less(it, 0, dtype=nl.int32), size, dtype=nl.int32))
        base = nisa.iota((t * P + i_p) * stride + 0 * i_f, dtype=nl.int32)
        store_rows(out, t, r, d, nl.add(wrapped, base, dtype=nl.int32))
    return out


@nki.jit
def topk_kernel(x, k=1):
    """values[N, k], indices[N, k] of the k largest entries of each row of x, in descending
    order (torch.topk(largest=True, sorted=True); also max / argmax with k = 1), by the Vector
    engine's max8 and find_index8. Equal values take their indices in ascending order.

    Shapes: x (N, D), 1 <= k <= 8, any N, D <= 4096. Dtypes: x float32, bfloat16, float16 or
    int32 (values in x's dtype, compared in fp32); indices int32."""
    n, d = x.shape
    vals = nl.ndarray((n, k), dtype=x.dtype, buffer=nl.shared_hbm)
    idxs = nl.ndarray((n, k), dtype=nl.int32, buffer=nl.shared_hbm)
    w = max(d, 8)
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(d)[None, :]
    i_k = nl.arange(k)[None, :]
    for t in nl.affine_range(row_tiles(n)):
        rows = t * P + i_p
        xt = nl.full((P, w), NEG, dtype=F32, buffer=nl.sbuf)  # padding columns never win
        xt[i_p, i_f] = nl.load(x[rows, i_f], mask=rows < n)
        top = nisa.max8(src=xt)
        where = nisa.nc_find_index8(data=xt, vals=top)
        nl.store(vals[rows, i_k], nl.copy(top[i_p, i_k], dtype=x.dtype), mask=rows < n)
        nl.store(idxs[rows, i_k], nl.copy(where[i_p, i_k], dtype=nl.int32), mask=rows < n)
    return vals, idxs


@nki.jit
def tril_kernel(x, diagonal=0, upper=False):
    """out[B, R, C] = x where col - row <= diagonal, else 0 (torch.tril); with upper=True
    where col - row >= diagonal (torch.triu). The predicate is affine, applied by GpSimd's
    affine_select.

    Shapes: x (B, R, C), any B and R, C <= 4096. Dtypes: float32, bfloat16, float16, int32 or
    bool (out in x's dtype)."""
    nb, r, c = x.shape
    out = nl.ndarray((nb, r, c), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(c)[None, :]
    for b in nl.affine_range(nb):
        for t in nl.affine_range(row_tiles(r)):
            rows = t * P + i_p
            xt = nl.zeros((P, c), dtype=F32, buffer=nl.sbuf)
            xt[i_p, i_f] = nl.load(x[b, rows, i_f], mask=rows < r)
            if upper:
                pred = i_f - rows - diagonal >= 0
            else:
                pred = rows - i_f + diagonal >= 0
            sel = nisa.affine_select(pred, xt, 0.0)
            nl.store(out[b, rows, i_f], nl.copy(sel, dtype=x.dtype), mask=rows < r)
    return out
