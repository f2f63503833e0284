"""Reductions over the last dimension, softmax and log_softmax (forward and backward).

Rows go on the partition axis (128 per tile, the last tile masked); the whole last dimension
D (<= 4096) stays in the free axis and is reduced on the Vector engine in fp32. Outputs are
rounded once to the input dtype (float32, bfloat16 or float16)."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import load_rows, row_tiles, store_rows

F32 = nl.float32


@nki.jit
def sum_kernel(x):
    """s[N, 1] = sum of x[N, D] over the last dim (fp32 accumulation). Any N, D <= 4096."""
    n, d = x.shape
    out = nl.ndarray((n, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(row_tiles(n)):
        xt = load_rows(x, t, n, d)
        store_rows(out, t, n, 1, nl.sum(xt, axis=1, keepdims=True, dtype=x.dtype))
    return out


@nki.jit
def mean_kernel(x):
    """m[N, 1] = mean of x[N, D] over the last dim (fp32 sum times 1/D). Any N, D <= 4096."""
    n, d = x.shape
    out = nl.ndarray((n, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(row_tiles(n)):
        xt = load_rows(x, t, n, d)
        s = nl.sum(xt, axis=1, keepdims=True, dtype=F32)
        store_rows(out, t, n, 1, nl.multiply(s, 1.0 / d, dtype=x.dtype))
    return out


@nki.jit
def amax_kernel(x):
    """m[N, 1] = max of x[N, D] over the last dim (exact). Any N, D <= 4096."""
    n, d = x.shape
    out = nl.ndarray((n, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(row_tiles(n)):
        xt = load_rows(x, t, n, d)
        store_rows(out, t, n, 1, nl.max(xt, axis=1, keepdims=True, dtype=x.dtype))
    return out


def _shifted(xt):
    """x - rowmax(x) in fp32 and the row sums of its exponentials."""
    m = nl.max(xt, axis=1, keepdims=True, dtype=F32)
    z = nl.subtract(xt, m, dtype=F32)
    e = nl.exp(z, dtype=F32)
    return z, e, nl.sum(e, axis=1, keepdims=True, dtype=F32)


@nki.jit
def softmax_kernel(x):
    """y[N, D] = softmax of x over the last dim (max-subtracted, fp32). Any N, D <= 4096."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(row_tiles(n)):
        _, e, s = _shifted(load_rows(x, t, n, d))
        store_rows(out, t, n, d, nl.multiply(e, nl.reciprocal(s, dtype=F32), dtype=x.dtype))
    return out


@nki.jit
def log_softmax_kernel(x):
    """y[N, D] = log_softmax of x over the last dim (fp32). Any N, D <= 4096."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(row_tiles(n)):
        z, _, s = _shifted(load_rows(x, t, n, d))
        store_rows(out, t, n, d, nl.subtract(z, nl.log(s, dtype=F32), dtype=x.dtype))
    return out


@nki.jit
def softmax_backward_kernel(g, y):
    """dx[N, D] = y * (g - sum(g * y)) for y = softmax(x) over the last dim. Any N,
    D <= 4096; g and y of one dtype (fp32 math)."""
    n, d = g.shape
    out = nl.ndarray((n, d), dtype=g.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(row_tiles(n)):
        gt = load_rows(g, t, n, d)
        yt = load_rows(y, t, n, d)
        s = nl.sum(nl.multiply(gt, yt, dtype=F32), axis=1, keepdims=True, dtype=F32)
        store_rows(out, t, n, d, nl.multiply(yt, nl.subtract(gt, s, dtype=F32), dtype=g.dtype))
    return out


@nki.jit
def log_softmax_backward_kernel(g, y):
    """dx[N, D] = g - exp(y) * sum(g) for y = log_softmax(x) over the last dim. Any N,
    D <= 4096; g and y of one dtype (fp32 math)."""
    n, d = g.shape
    out = nl.ndarray((n, d), dtype=g.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(row_tiles(n)):
        gt = load_rows(g, t, n, d)
        yt = load_rows(y, t, n, d)
        s = nl.sum(gt, axis=1, keepdims=True, dtype=F32)
        p = nl.exp(yt, dtype=F32)
        store_rows(out, t, n, d, nl.subtract(gt, nl.multiply(p, s, dtype=F32), dtype=g.dtype))
    return out


@nki.jit
def cumsum_kernel(x):
    """c[N, D] = cumulative sum of x[N, D] along the last dim, as x @ U on the Tensor engine
    (U[i, j] = 1 for i <= j, built with iota; fp32 PSUM accumulation).

    Shapes: any N, D <= 512 (one PSUM bank; the contraction D is tiled by 128). Dtypes:
    float32, bfloat16, float16 (result in x's dtype)."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_m = nl.arange(128)[None, :]
    i_d = nl.arange(d)[None, :]
    for t in nl.affine_range(row_tiles(n)):
        acc = nl.zeros((128, d), F32, buffer=nl.psum)
        for kt in nl.affine_range((d + 127) // 128):
            krow = kt * 128 + i_p
            xt = nl.zeros((128, 128), x.dtype, buffer=nl.sbuf)
            xt[i_p, i_m] = nl.load(x[t * 128 + i_m, krow], mask=(krow < d) & (t * 128 + i_m < n))
            diff = nisa.iota(i_d - krow, dtype=F32)  # j - k
            upper = nl.greater_equal(diff, 0.0, dtype=x.dtype)  # U[k, j] = (j >= k)
            acc += nl.matmul(xt, upper, transpose_x=True)
        store_rows(out, t, n, d, nl.copy(acc, dtype=x.dtype))
    return out


@nki.jit
def sum_middle_kernel(x, scale=1.0):
    """s[O, I] = scale * sum over r of x[O, R, I] (torch.sum / mean over a middle dim, or over
    leading dims with O = 1), as ones[R]^T @ x[o] on the Tensor engine with fp32 PSUM
    accumulation over 128-row tiles of R.

    Shapes: any O, R, I (I tiled by 512). Dtypes: float32, bfloat16, float16 (s in x's dtype)."""
    no, r, ni = x.shape
    out = nl.ndarray((no, ni), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_n = nl.arange(512)[None, :]
    i_1 = nl.arange(1)[None, :]
    ones = nl.ones((128, 1), x.dtype, buffer=nl.sbuf)
    for o in nl.affine_range(no):
        for ci in nl.affine_range((ni + 511) // 512):
            cols = ci * 512 + i_n
            acc = nl.zeros((1, 512), F32, buffer=nl.psum)
            for rt in nl.affine_range(row_tiles(r)):
                rows = rt * 128 + i_p
                xt = nl.zeros((128, 512), x.dtype, buffer=nl.sbuf)
                xt[i_p, i_n] = nl.load(x[o, rows, cols], mask=(rows < r) & (cols < ni))
                acc += nl.matmul(ones, xt, transpose_x=True)
            res = nl.multiply(acc, scale, dtype=x.dtype)
            nl.store(out[o + 0 * i_1, cols], res, mask=cols < ni)
    return out
