"""Batch normalization over (N, C, L) tensors (L = H * W): per-channel statistics over N and L,
forward (training, with the running-statistics update) and backward.

Channels go on the partition axis (128 per tile), the L positions of one sample in the free
axis (L <= 4096); samples are visited in a sequential loop that accumulates fp32 sums in SBUF.
Statistics are two-pass (mean first, then the centred sum of squares), as torch computes them."""

from __future__ import annotations

from typing import Any

import nki
import nki.language as nl

from ._tiles import P, row_tiles

F32 = nl.float32


def _load(x: Any, s: Any, t: Any, c: int, ln: int, dtype: Any = None) -> Any:
    """Channels t*128 ... of sample s of x (N, C, L) as a (128, L) tile, padding channels 0."""
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(ln)[None, :]
    ch = t * P + i_p
    tile = nl.zeros((P, ln), dtype=dtype or x.dtype, buffer=nl.sbuf)
    tile[i_p, i_f] = nl.load(x[s, ch, i_f], mask=ch < c)
    return tile


def _col(v: Any, t: Any, c: int) -> Any:
    """Rows t*128 ... of the (C, 1) tensor v as a (128, 1) fp32 tile."""
    i_p = nl.arange(P)[:, None]
    i_1 = nl.arange(1)[None, :]
    ch = t * P + i_p
    tile = nl.zeros((P, 1), dtype=F32, buffer=nl.sbuf)
    tile[i_p, i_1] = nl.load(v[ch, i_1], mask=ch < c)
    return tile


def _store_col(out: Any, t: Any, c: int, value: Any) -> None:
    i_p = nl.arange(P)[:, None]
    i_1 = nl.arange(1)[None, :]
    ch = t * P + i_p
    nl.store(out[ch, i_1], value, mask=ch < c)


def _channel_sum(n: int, fn: Any, *args: Any) -> Any:
    """(128, 1) fp32: the sum over samples s < n and positions of the tile fn(s, *args)."""
    i_p = nl.arange(P)[:, None]
    i_1 = nl.arange(1)[None, :]
    acc = nl.zeros((P, 1), dtype=F32, buffer=nl.sbuf)
    for s in nl.sequential_range(n):
        part = nl.sum(fn(s, *args), axis=1, keepdims=True, dtype=F32)
        acc[i_p, i_1] = nl.add(acc, part, dtype=F32)
    return acc


def _x(s: Any, x: Any, t: Any, c: int, ln: int) -> Any:
    return _load(x, s, t, c, ln, F32)


def _centred_sq(s: Any, x: Any, mean: Any, t: Any, c: int, ln: int) -> Any:
    return nl.square(nl.subtract(_load(x, s, t, c, ln), mean, dtype=F32), dtype=F32)


def _xhat(s: Any, x: Any, mu: Any, rs: Any, t: Any, c: int, ln: int) -> Any:
    return nl.multiply(nl.subtract(_load(x, s, t, c, ln), mu, dtype=F32), rs, dtype=F32)


def _g_xhat(s: Any, g: Any, x: Any, mu: Any, rs: Any, t: Any, c: int, ln: int) -> Any:
    return nl.multiply(_load(g, s, t, c, ln), _xhat(s, x, mu, rs, t, c, ln), dtype=F32)


@nki.jit
def batch_norm_kernel(x, w, b, running_mean, running_var, momentum=0.1, eps=1e-5):
    """Training-mode batch norm: y = (x - mean) * rstd * w + b with mean and biased variance
    per channel over N and L; returns y, mean (C, 1), rstd (C, 1) (fp32) and the updated
    running statistics (1 - momentum) * running + momentum * batch (the variance unbiased,
    times M / (M - 1), M = N * L), in the running tensors' dtype.

    Shapes: x (N, C, L), w, b, running_mean, running_var (C, 1); any N and C, L <= 4096.
    Dtypes: x, w, b float32, bfloat16 or float16 (y in x's dtype)."""
    n, c, ln = x.shape
    m = n * ln
    y = nl.ndarray((n, c, ln), dtype=x.dtype, buffer=nl.shared_hbm)
    mean_out = nl.ndarray((c, 1), dtype=F32, buffer=nl.shared_hbm)
    rstd_out = nl.ndarray((c, 1), dtype=F32, buffer=nl.shared_hbm)
    rm_out = nl.ndarray((c, 1), dtype=running_mean.dtype, buffer=nl.shared_hbm)
    rv_out = nl.ndarray((c, 1), dtype=running_var.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(ln)[None, :]
    for t in nl.affine_range(row_tiles(c)):
        ch = t * P + i_p
        mean = nl.multiply(_channel_sum(n, _x, x, t, c, ln), 1.0 / m, dtype=F32)
        sq = _channel_sum(n, _centred_sq, x, mean, t, c, ln)
        var = nl.multiply(sq, 1.0 / m, dtype=F32)
        rstd = nl.rsqrt(nl.add(var, eps, dtype=F32), dtype=F32)
        scale = nl.multiply(rstd, _col(w, t, c), dtype=F32)
        shift = _col(b, t, c)
        for s in nl.affine_range(n):
            xc = nl.subtract(_load(x, s, t, c, ln), mean, dtype=F32)
            res = nl.add(nl.multiply(xc, scale, dtype=F32), shift, dtype=x.dtype)
            nl.store(y[s, ch, i_f], res, mask=ch < c)
        _store_col(mean_out, t, c, mean)
        _store_col(rstd_out, t, c, rstd)
        unbiased = nl.multiply(sq, 1.0 / max(m - 1, 1), dtype=F32)
        rm = nl.add(
            nl.multiply(_col(running_mean, t, c), 1.0 - momentum, dtype=F32),
            nl.multiply(mean, momentum, dtype=F32),
            dtype=running_mean.dtype,
        )
        rv = nl.add(
            nl.multiply(_col(running_var, t, c), 1.0 - momentum, dtype=F32),
            nl.multiply(unbiased, momentum, dtype=F32),
            dtype=running_var.dtype,
        )
        _store_col(rm_out, t, c, rm)
        _store_col(rv_out, t, c, rv)
    return y, mean_out, rstd_out, rm_out, rv_out


@nki.jit
def batch_norm_backward_kernel(g, x, w, mean, rstd):
    """dx, dw (C, 1), db (C, 1) of training-mode :func:`batch_norm_kernel`: with
    xhat = (x - mean) * rstd, db = sum(g), dw = sum(g * xhat), dx = w * rstd * (g - db / M -
    xhat * dw / M), M = N * L.

    Shapes: g, x (N, C, L), w (C, 1), mean and rstd (C, 1) fp32; any N and C, L <= 4096.
    Dtypes: g, x, w float32, bfloat16 or float16 (gradients in x's dtype)."""
    n, c, ln = x.shape
    m = n * ln
    dx = nl.ndarray((n, c, ln), dtype=x.dtype, buffer=nl.shared_hbm)
    dw = nl.ndarray((c, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    db = nl.ndarray((c, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(ln)[None, :]
    for t in nl.affine_range(row_tiles(c)):
        ch = t * P + i_p
        mu = _col(mean, t, c)
        rs = _col(rstd, t, c)
        sg = _channel_sum(n, _x, g, t, c, ln)
        sgx = _channel_sum(n, _g_xhat, g, x, mu, rs, t, c, ln)
        k = nl.multiply(rs, _col(w, t, c), dtype=F32)
        mg = nl.multiply(sg, 1.0 / m, dtype=F32)
        mgx = nl.multiply(sgx, 1.0 / m, dtype=F32)
        for s in nl.affine_range(n):
            inner = nl.subtract(
                nl.subtract(_load(g, s, t, c, ln), mg, dtype=F32),
                nl.multiply(_xhat(s, x, mu, rs, t, c, ln), mgx, dtype=F32),
                dtype=F32,
            )
            nl.store(dx[s, ch, i_f], nl.multiply(inner, k, dtype=x.dtype), mask=ch < c)
        _store_col(dw, t, c, nl.copy(sgx, dtype=x.dtype))
        _store_col(db, t, c, nl.copy(sg, dtype=x.dtype))
    return dx, dw, db
