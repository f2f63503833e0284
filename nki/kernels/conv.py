"""2-D convolution (NCHW, implicit GEMM on the Tensor engine) and max / average pooling.

conv2d: for each image and output row, the products over input channels (the contraction,
on the partition axis, 128 at a time) and the KH x KW kernel offsets accumulate into one fp32
PSUM tile of (output channels, output width); each offset reads a shifted, strided window of
the input under a mask, so padding reads nothing and contributes zeros.

pool2d: one image plane per partition (N*C planes, 128 per tile), each kernel offset a strided
3-D load of the plane, combined on the Vector engine."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import P, fit, row_tiles

F32 = nl.float32
NEG = -3.0e38


@nki.jit
def conv2d_kernel(x, w, b, stride=1, padding=0):
    """out[N, Co, OH, OW] = conv2d(x[N, Ci, H, W], w[Co, Ci, KH, KW]) + b[Co, 1].

    OH = (H + 2*padding - KH) // stride + 1 (OW likewise). Limits: OW <= 512 (one PSUM bank
    per output row), any N, Ci, Co (tiled by 128), stride >= 1, padding >= 0, dilation 1,
    groups 1. Dtypes: float32, bfloat16 or float16, all the same; fp32 accumulation."""
    n, ci, h, wd = x.shape
    co, _, kh, kw = w.shape
    oh = (h + 2 * padding - kh) // stride + 1
    ow = (wd + 2 * padding - kw) // stride + 1
    out = nl.ndarray((n, co, oh, ow), dtype=x.dtype, buffer=nl.shared_hbm)
    pi, po = fit(ci), fit(co)  # channel tiles: 128, or all the channels when fewer
    i_p = nl.arange(pi)[:, None]  # input channels (the contraction, on partitions)
    i_q = nl.arange(po)[:, None]  # output channels (the result's partitions)
    i_o = nl.arange(po)[None, :]
    i_w = nl.arange(ow)[None, :]
    i_1 = nl.arange(1)[None, :]
    for img in nl.affine_range(n):
        for ct in nl.affine_range(row_tiles(co, po)):
            ochan = ct * po + i_q
            bias = nl.load(b[ochan, i_1], mask=ochan < co)
            for r in nl.affine_range(oh):
                acc = nl.zeros((po, ow), F32, buffer=nl.psum)
                for it in nl.affine_range(row_tiles(ci, pi)):
                    ichan = it * pi + i_p
                    for dy in nl.static_range(kh):
                        for dx in nl.static_range(kw):
                            w_t = nl.zeros((pi, po), w.dtype, buffer=nl.sbuf)
                            w_t[i_p, i_o] = nl.load(
                                w[ct * po + i_o, ichan, dy, dx],
                                mask=(ichan < ci) & (ct * po + i_o < co),
                            )
                            row = r * stride + dy - padding
                            col = i_w * stride + dx - padding
                            x_t = nl.zeros((pi, ow), x.dtype, buffer=nl.sbuf)
                            x_t[i_p, i_w] = nl.load(
                                x[img, ichan, row, col],
                                mask=(ichan < ci)
                                & (row >= 0)
                                & (row < h)
                                & (col >= 0)
                                & (col < wd),
                            )
                            acc += nl.matmul(w_t, x_t, transpose_x=True)
                res = nl.add(acc, bias, dtype=x.dtype)
                nl.store(out[img, ochan, r, i_w], res, mask=ochan < co)
    return out


def _pool(x, kernel, stride, padding, is_max):
    m, h, wd = x.shape
    oh = (h + 2 * padding - kernel) // stride + 1
    ow = (wd + 2 * padding - kernel) // stride + 1
    out = nl.ndarray((m, oh, ow), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None, None]
    i_h = nl.arange(oh)[None, :, None]
    i_w = nl.arange(ow)[None, None, :]
    for t in nl.affine_range(row_tiles(m)):
        planes = t * P + i_p
        acc = nl.full((P, oh, ow), NEG if is_max else 0.0, F32, buffer=nl.sbuf)
        for dy in nl.static_range(kernel):
            for dx in nl.static_range(kernel):
                row = i_h * stride + dy - padding
                col = i_w * stride + dx - padding
                win = nl.full((P, oh, ow), NEG if is_max else 0.0, x.dtype, buffer=nl.sbuf)
                win[i_p, i_h, i_w] = nl.load(
                    x[planes, row, col],
                    mask=(planes < m) & (row >= 0) & (row < h) & (col >= 0) & (col < wd),
                )
                if is_max:
                    acc[i_p, i_h, i_w] = nl.maximum(acc, win, dtype=F32)
                else:
                    acc[i_p, i_h, i_w] = nl.add(acc, win, dtype=F32)
        res = acc if is_max else nl.multiply(acc, 1.0 / (kernel * kernel), dtype=F32)
        nl.store(out[planes, i_h, i_w], nl.copy(res, dtype=x.dtype), mask=planes < m)
    return out


@nki.jit
def max_pool2d_kernel(x, kernel=2, stride=2, padding=0):
    """out[M, OH, OW] = max over each kernel x kernel window of the planes x[M, H, W] (M = N*C;
    padding never wins). Limits: OH * OW <= 4096, padding <= kernel // 2. Dtypes: float32,
    bfloat16, float16 (exact)."""
    return _pool(x, kernel, stride, padding, True)


@nki.jit
def avg_pool2d_kernel(x, kernel=2, stride=2, padding=0):
    """out[M, OH, OW] = mean over each kernel x kernel window of x[M, H, W] (M = N*C; padding
    counts as zeros, torch's count_include_pad=True). Limits: OH * OW <= 4096. Dtypes:
    float32, bfloat16, float16 (fp32 sums)."""
    return _pool(x, kernel, stride, padding, False)


@nki.jit
def max_pool2d_indices_kernel(x, kernel=2, stride=2, padding=0):
    """(out, idx)[M, OH, OW]: :func:`max_pool2d_kernel` plus, for each output, the flat index
    row * W + col of the first maximum in its window (int32; torch's max_pool2d_with_indices,
    whose backward scatters through these indices). Limits: OH * OW <= 4096,
    padding <= kernel // 2, H * W < 2**24. Dtypes: float32, bfloat16, float16."""
    m, h, wd = x.shape
    oh = (h + 2 * padding - kernel) // stride + 1
    ow = (wd + 2 * padding - kernel) // stride + 1
    out = nl.ndarray((m, oh, ow), dtype=x.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((m, oh, ow), dtype=nl.int32, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None, None]
    i_h = nl.arange(oh)[None, :, None]
    i_w = nl.arange(ow)[None, None, :]
    for t in nl.affine_range(row_tiles(m)):
        planes = t * P + i_p
        best = nl.full((P, oh, ow), NEG, F32, buffer=nl.sbuf)
        arg = nl.zeros((P, oh, ow), F32, buffer=nl.sbuf)
        for dy in nl.static_range(kernel):
            for dx in nl.static_range(kernel):
                row = i_h * stride + dy - padding
                col = i_w * stride + dx - padding
                win = nl.full((P, oh, ow), NEG, x.dtype, buffer=nl.sbuf)
                win[i_p, i_h, i_w] = nl.load(
                    x[planes, row, col],
                    mask=(planes < m) & (row >= 0) & (row < h) & (col >= 0) & (col < wd),
                )
                cand = nisa.iota(row * wd + col + 0 * i_p, dtype=F32)
                better = nl.greater(win, best, dtype=F32)  # strict: the first maximum wins
                arg[i_p, i_h, i_w] = nl.where(better, cand, arg, dtype=F32)
                best[i_p, i_h, i_w] = nl.maximum(best, win, dtype=F32)
        nl.store(out[planes, i_h, i_w], nl.copy(best, dtype=x.dtype), mask=planes < m)
        nl.store(idx[planes, i_h, i_w], nl.copy(arg, dtype=nl.int32), mask=planes < m)
    return out, idx


@nki.jit
def conv2d_input_grad_kernel(g, w, h=1, wd=1, stride=1, padding=0):
    """dx[N, Ci, H, W] of :func:`conv2d_kernel` from the output gradient g[N, Co, OH, OW]:
    dx[n, ci, y, x] = sum over co, dy, dx of g[n, co, r, c] w[co, ci, dy, dx] where
    y = r*stride + dy - padding, x = c*stride + dx - padding. Input rows are unrolled
    (nl.static_range) and columns split by their phase modulo the stride, so every gathered
    output position is an affine index; co is the contraction (partitions, 128 per tile), the
    (dy, dx) offsets accumulate in the same PSUM tile.

    Limits: ceil(W / stride) <= 512, H small (rows are unrolled), any N, Ci, Co. Dtypes:
    float32, bfloat16 or float16; fp32 accumulation."""
    n, co, oh, ow = g.shape
    _, ci, kh, kw = w.shape
    dx_out = nl.ndarray((n, ci, h, wd), dtype=g.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    i_o = nl.arange(P)[None, :]
    for img in nl.affine_range(n):
        for it in nl.affine_range(row_tiles(ci)):
            ichan = it * P + i_p
            for y in nl.static_range(h):
                for px in nl.static_range(stride):
                    wp = (wd - px + stride - 1) // stride  # columns x = stride*j + px
                    if wp <= 0:
                        continue
                    i_j = nl.arange(wp)[None, :]
                    acc = nl.zeros((P, wp), F32, buffer=nl.psum)
                    for ot in nl.affine_range(row_tiles(co)):
                        ochan = ot * P + i_p
                        for dy in nl.static_range(kh):
                            for dxx in nl.static_range(kw):
                                ry, cx = y + padding - dy, px + padding - dxx
                                if ry % stride or cx % stride or not 0 <= ry // stride < oh:
                                    continue
                                w_t = nl.zeros((P, P), w.dtype, buffer=nl.sbuf)
                                w_t[i_p, i_o] = nl.load(
                                    w[ochan, it * P + i_o, dy, dxx],
                                    mask=(ochan < co) & (it * P + i_o < ci),
                                )
                                col = i_j + cx // stride
                                g_t = nl.zeros((P, wp), g.dtype, buffer=nl.sbuf)
                                g_t[i_p, i_j] = nl.load(
                                    g[img, ochan, ry // stride, col],
                                    mask=(ochan < co) & (col >= 0) & (col < ow),
                                )
                                acc += nl.matmul(w_t, g_t, transpose_x=True)
                    nl.store(
                        dx_out[img, ichan, y, i_j * stride + px],
                        nl.copy(acc, dtype=g.dtype),
                        mask=ichan < ci,
                    )
    return dx_out


@nki.jit
def conv2d_weight_grad_kernel(g, x, kh=1, kw=1, stride=1, padding=0):
    """dw[Co, Ci, KH, KW] of :func:`conv2d_kernel`: the sum over images n and output rows r of
    g[n, :, r, :] @ window(x)^T, contracting the output columns (OW <= 128, on partitions)
    with fp32 PSUM accumulation over n and r.

    Limits: OW <= 128, Co <= 128, Ci <= 512 (one PSUM tile per kernel offset). Dtypes:
    float32, bfloat16 or float16 (dw in g's dtype)."""
    n, co, oh, ow = g.shape
    _, ci, h, wd = x.shape
    dw = nl.ndarray((co, ci, kh, kw), dtype=g.dtype, buffer=nl.shared_hbm)
    i_c = nl.arange(ow)[:, None]  # output columns on partitions
    i_co = nl.arange(co)[None, :]
    i_ci = nl.arange(ci)[None, :]
    i_po = nl.arange(co)[:, None]
    for dy in nl.static_range(kh):
        for dxx in nl.static_range(kw):
            acc = nl.zeros((co, ci), F32, buffer=nl.psum)
            for img in nl.affine_range(n):
                for r in nl.affine_range(oh):
                    g_t = nl.load(g[img, i_co, r, i_c])  # (OW, Co)
                    row = r * stride + dy - padding
                    col = i_c * stride + dxx - padding
                    x_t = nl.zeros((ow, ci), x.dtype, buffer=nl.sbuf)
                    x_t[i_c, i_ci] = nl.load(
                        x[img, i_ci, row, col],
                        mask=(row >= 0) & (row < h) & (col >= 0) & (col < wd),
                    )
                    acc += nl.matmul(g_t, x_t, transpose_x=True)
            nl.store(dw[i_po, i_ci, dy, dxx], nl.copy(acc, dtype=g.dtype))
    return dw


def _pool_backward(g, idx, h, wd, kernel, stride, padding, is_max):
    m, oh, ow = g.shape
    dx = nl.ndarray((m, h, wd), dtype=g.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    for t in nl.affine_range(row_tiles(m)):
        planes = t * P + i_p
        for y in nl.static_range(h):
            for px in nl.static_range(stride):
                wp = (wd - px + stride - 1) // stride  # columns x = stride*j + px
                if wp <= 0:
                    continue
                i_j = nl.arange(wp)[None, :]
                acc = nl.zeros((P, wp), F32, buffer=nl.sbuf)
                for dy in nl.static_range(kernel):
                    for dxx in nl.static_range(kernel):
                        ry, cx = y + padding - dy, px + padding - dxx
                        if ry % stride or cx % stride or not 0 <= ry // stride < oh:
                            continue
                        col = i_j + cx // stride
                        ok = (planes < m) & (col >= 0) & (col < ow)
                        g_t = nl.zeros((P, wp), F32, buffer=nl.sbuf)
                        g_t[i_p, i_j] = nl.load(g[planes, ry // stride, col], mask=ok)
                        if is_max:  # the window's gradient goes to its argmax only
                            i_t = nl.zeros((P, wp), F32, buffer=nl.sbuf)
                            i_t[i_p, i_j] = nl.load(idx[planes, ry // stride, col], mask=ok)
                            here = nisa.iota(y * wd + i_j * stride + px + 0 * i_p, dtype=F32)
                            hit = nl.equal(i_t, here, dtype=F32)
                            contrib = nl.multiply(g_t, hit, dtype=F32)
                        else:
                            contrib = nl.multiply(g_t, 1.0 / (kernel * kernel), dtype=F32)
                        acc[i_p, i_j] = nl.add(acc, contrib, dtype=F32)
                nl.store(
                    dx[planes, y, i_j * stride + px], nl.copy(acc, dtype=g.dtype), mask=planes < m
                )
    return dx


@nki.jit
def max_pool2d_backward_kernel(g, idx, h=1, wd=1, kernel=2, stride=2, padding=0):
    """dx[M, H, W] of :func:`max_pool2d_indices_kernel`: each output gradient g[M, OH, OW]
    goes to the input position idx names (a gather per input position over the windows that
    contain it; input rows unrolled, columns split by phase modulo the stride).

    Limits: H small (rows unrolled), W <= 4096. Dtypes: g float32, bfloat16 or float16, idx
    int32; fp32 sums."""
    return _pool_backward(g, idx, h, wd, kernel, stride, padding, True)


@nki.jit
def avg_pool2d_backward_kernel(g, h=1, wd=1, kernel=2, stride=2, padding=0):
    """dx[M, H, W] of :func:`avg_pool2d_kernel` (count_include_pad): every input position
    gets g / kernel**2 from each window containing it. Limits and dtypes as
    :func:`max_pool2d_backward_kernel`."""
    return _pool_backward(g, None, h, wd, kernel, stride, padding, False)
