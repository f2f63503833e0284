"""rms_norm and layer_norm over the last dimension, forward and backward.

Forward: rows on the partition axis (128 per tile), statistics in fp32 on the Vector engine,
the (1, D) weight and bias broadcast to every partition. Backward: the input gradient row by
row; the weight and bias gradients are column sums over all rows, accumulated on the Tensor
engine (ones^T @ tile into fp32 PSUM) across row tiles. Padding rows of a ragged tile are
zero, so they add nothing to those sums."""

from __future__ import annotations

import nki
import nki.language as nl

from ._tiles import P, load_row_vector, load_rows, row_tiles, store_rows

F32 = nl.float32


@nki.jit
def rms_norm_kernel(x, w, eps=1e-6):
    """y[N, D] = x * rsqrt(mean(x^2) + eps) * w; also returns rstd[N, 1] (fp32).

    Shapes: x (N, D), w (1, D); any N, D <= 4096. Dtypes: x and w float32, bfloat16 or
    float16 (y in x's dtype)."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    rstd_out = nl.ndarray((n, 1), dtype=F32, buffer=nl.shared_hbm)
    wt = load_row_vector(w, d)
    for t in nl.affine_range(row_tiles(n)):
        xt = load_rows(x, t, n, d)
        ms = nl.sum(nl.multiply(xt, xt, dtype=F32), axis=1, keepdims=True, dtype=F32)
        rstd = nl.rsqrt(nl.add(nl.multiply(ms, 1.0 / d, dtype=F32), eps, dtype=F32), dtype=F32)
        y = nl.multiply(nl.multiply(xt, rstd, dtype=F32), wt, dtype=x.dtype)
        store_rows(out, t, n, d, y)
        store_rows(rstd_out, t, n, 1, rstd)
    return out, rstd_out


@nki.jit
def rms_norm_backward_kernel(g, x, w, rstd):
    """dx[N, D], dw[1, D] of y = x * rstd * w (rstd from :func:`rms_norm_kernel`):
    dx = rstd * (g*w - xhat * mean(g*w*xhat)), dw = sum over rows of g * xhat.

    Shapes: g, x (N, D), w (1, D), rstd (N, 1) fp32; any N, D <= 512 (dw in one PSUM bank).
    Dtypes: g, x, w float32, bfloat16 or float16 (dx, dw in x's dtype)."""
    n, d = x.shape
    dx = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    dw = nl.ndarray((1, d), dtype=x.dtype, buffer=nl.shared_hbm)
    wt = load_row_vector(w, d)
    ones = nl.ones((P, 1), F32, buffer=nl.sbuf)
    dw_acc = nl.zeros((1, d), F32, buffer=nl.psum)
    for t in nl.affine_range(row_tiles(n)):
        gt = load_rows(g, t, n, d)
        xt = load_rows(x, t, n, d)
        rs = load_rows(rstd, t, n, 1)
        xhat = nl.multiply(xt, rs, dtype=F32)
        gw = nl.multiply(gt, wt, dtype=F32)
        dot = nl.sum(nl.multiply(gw, xhat, dtype=F32), axis=1, keepdims=True, dtype=F32)
        proj = nl.multiply(xhat, nl.multiply(dot, 1.0 / d, dtype=F32), dtype=F32)
        store_rows(dx, t, n, d, nl.multiply(nl.subtract(gw, proj, dtype=F32), rs, dtype=x.dtype))
        dw_acc += nl.matmul(ones, nl.multiply(gt, xhat, dtype=F32), transpose_x=True)
    nl.store(dw, nl.copy(dw_acc, dtype=x.dtype))
    return dx, dw


@nki.jit
def layer_norm_kernel(x, w, b, eps=1e-5):
    """y[N, D] = (x - mean) * rstd * w + b; also returns mean[N, 1] and rstd[N, 1] (fp32).

    Shapes: x (N, D), w and b (1, D); any N, D <= 4096. Dtypes: float32, bfloat16 or
    float16, all the same (y in x's dtype)."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    mean_out = nl.ndarray((n, 1), dtype=F32, buffer=nl.shared_hbm)
    rstd_out = nl.ndarray((n, 1), dtype=F32, buffer=nl.shared_hbm)
    wt = load_row_vector(w, d)
    bt = load_row_vector(b, d)
    for t in nl.affine_range(row_tiles(n)):
        xt = load_rows(x, t, n, d)
        mean = nl.multiply(nl.sum(xt, axis=1, keepdims=True, dtype=F32), 1.0 / d, dtype=F32)
        xc = nl.subtract(xt, mean, dtype=F32)
        var = nl.multiply(
            nl.sum(nl.multiply(xc, xc, dtype=F32), axis=1, keepdims=True, dtype=F32),
            1.0 / d,
            dtype=F32,
        )
        rstd = nl.rsqrt(nl.add(var, eps, dtype=F32), dtype=F32)
        y = nl.add(nl.multiply(nl.multiply(xc, rstd, dtype=F32), wt, dtype=F32), bt, dtype=x.dtype)
        store_rows(out, t, n, d, y)
        store_rows(mean_out, t, n, 1, mean)
        store_rows(rstd_out, t, n, 1, rstd)
    return out, mean_out, rstd_out


@nki.jit
def layer_norm_backward_kernel(g, x, mean, rstd, w):
    """dx[N, D], dw[1, D], db[1, D] of :func:`layer_norm_kernel`:
    dx = rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)), dw = sum(g * xhat), db = sum(g).

    Shapes: g, x (N, D), mean and rstd (N, 1) fp32, w (1, D); any N, D <= 512. Dtypes:
    float32, bfloat16 or float16 (outputs in x's dtype)."""
    n, d = x.shape
    dx = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    dw = nl.ndarray((1, d), dtype=x.dtype, buffer=nl.shared_hbm)
    db = nl.ndarray((1, d), dtype=x.dtype, buffer=nl.shared_hbm)
    wt = load_row_vector(w, d)
    ones = nl.ones((P, 1), F32, buffer=nl.sbuf)
    dw_acc = nl.zeros((1, d), F32, buffer=nl.psum)
    db_acc = nl.zeros((1, d), F32, buffer=nl.psum)
    for t in nl.affine_range(row_tiles(n)):
        gt = load_rows(g, t, n, d, dtype=F32)
        xt = load_rows(x, t, n, d)
        mu = load_rows(mean, t, n, 1)
        rs = load_rows(rstd, t, n, 1)
        xhat = nl.multiply(nl.subtract(xt, mu, dtype=F32), rs, dtype=F32)
        gw = nl.multiply(gt, wt, dtype=F32)
        m1 = nl.multiply(nl.sum(gw, axis=1, keepdims=True, dtype=F32), 1.0 / d, dtype=F32)
        dot = nl.sum(nl.multiply(gw, xhat, dtype=F32), axis=1, keepdims=True, dtype=F32)
        m2 = nl.multiply(dot, 1.0 / d, dtype=F32)
        inner = nl.subtract(
            nl.subtract(gw, m1, dtype=F32), nl.multiply(xhat, m2, dtype=F32), dtype=F32
        )
        store_rows(dx, t, n, d, nl.multiply(inner, rs, dtype=x.dtype))
        dw_acc += nl.matmul(ones, nl.multiply(gt, xhat, dtype=F32), transpose_x=True)
        db_acc += nl.matmul(ones, gt, transpose_x=True)
    nl.store(dw, nl.copy(dw_acc, dtype=x.dtype))
    nl.store(db, nl.copy(db_acc, dtype=x.dtype))
    return dx, dw, db
