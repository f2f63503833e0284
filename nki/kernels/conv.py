"""2-D convolution (NCHW, implicit GEMM on the Tensor engine) and max / average pooling.

conv2d: the input planes of an image load once into a zero-padded SBUF window (input
channels on partitions, the contraction, 128 at a time) and the weights once per tile of
output channels; for each output row the KH x KW kernel offsets' matmuls over shifted,
strided views of the window accumulate into one fp32 PSUM tile of (output channels, output
width). Padding is the window's zeros: no masked loads (only a contraction split into groups,
past the budget below, masks the rows of its windows).

pool2d: one image plane per partition (N*C planes, 128 per tile), loaded once into an SBUF
window padded with the value that never wins (-3e38 for max, 0 for the sum); each kernel
offset is a strided view of it, combined on the Vector engine.

Planes or weights past an SBUF budget per partition (``sbuf_budget``) are split into blocks
of output rows (and, for conv2d, groups of input channels and kernel rows), so every shape
the docstrings allow fits on chip; the blocks whose windows stay inside the image run in one
affine loop, the edge blocks with bounds known while tracing. The backward kernels gather
per input row."""

from __future__ import annotations

from typing import Any

import nki
import nki.isa as nisa
import nki.language as nl
from nki import dtypes

from ._tiles import P, fit, row_tiles

F32 = nl.float32
NEG = -3.0e38
# SBUF bytes per partition the forward kernels' input windows, weights and accumulators take
# by default (of the 176 KiB trn1 leaves usable)
BUDGET = 96 * 1024


def _all(*conds: Any) -> Any:
    """The conjunction of the conditions that are not None (None: no condition)."""
    out = None
    for c in conds:
        if c is not None:
            out = c if out is None else out & c
    return out


def _tile(shape: tuple, dtype: Any, fill: Any) -> Any:
    """A new SBUF tile, set to ``fill`` (None: left for loads that cover it)."""
    if fill is None:
        return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)
    return nl.full(shape, fill, dtype, buffer=nl.sbuf)


def _window(read: Any, ok: Any, shape: tuple, dtype: Any, fill: float, pad: int, h: int,
            wd: int, row0: Any, inside: bool = False) -> Any:  # fmt: skip
    """An SBUF tile of ``shape`` (P, [G,] HB, WN) whose element (p, [t,] j, c) is input row
    ``row0 + j - pad``, column ``c - pad`` of the plane ``read(t, p, rows, cols)`` addresses,
    and ``fill`` outside the image and where ``ok(t, p)`` is false (``ok`` None: everywhere
    true); a G axis loads in an affine loop (one DMA instruction). Rows load without a mask
    when ``row0`` is an int (the in-image rows, known while tracing) or ``inside`` says every
    row is in the image; the tile needs no memset when the load covers it."""
    p, hb, wn = shape[0], shape[-2], shape[-1]
    i_p = nl.arange(p)[:, None, None]
    nc = min(wd, wn - pad)  # the input columns the window holds
    if isinstance(row0, int):
        top = row0 - pad
        lo, nr = max(0, top), min(h, top + hb) - max(0, top)
        i_h = nl.arange(max(nr, 1))[None, :, None]
        rows, at, row_ok = lo + i_h, lo - top + i_h, None
    else:
        nr = hb
        i_h = nl.arange(hb)[None, :, None]
        rows, at = row0 - pad + i_h, i_h
        row_ok = None if inside else (rows >= 0) & (rows < h)
    if nr <= 0 or nc <= 0:  # (a window of padding only)
        return _tile(shape, dtype, fill)
    i_w = nl.arange(nc)[None, None, :]
    covered = pad == 0 and nr == hb and nc == wn and ok is None and row_ok is None
    tile = _tile(shape, dtype, None if covered else fill)
    groups = [None] if len(shape) == 3 else nl.affine_range(shape[1])
    for t in groups:
        mask = _all(row_ok, ok(t, i_p) if ok is not None else None)
        dst = (i_p, at, pad + i_w) if t is None else (i_p, t, at, pad + i_w)
        tile[dst] = nl.load(read(t, i_p, rows, i_w), mask=mask)
    return tile


def _segments(nblk: int, rb: int, oh: int, s: int, pad: int, hb: int,
              h: int) -> list[tuple[int, int, bool]]:  # fmt: skip
    """Runs (first block, blocks, edge) covering the ``nblk`` blocks of ``rb`` output rows
    (input windows of ``hb`` rows from row ``blk * rb * s - pad``): an edge block (its window
    leaves the image, or it has fewer than rb output rows) is a run of its own, traced with
    static bounds; the blocks between run in one affine loop, with no masks."""
    runs: list[tuple[int, int, bool]] = []
    for blk in range(nblk):
        top = blk * rb * s - pad
        edge = top < 0 or top + hb > h or (blk + 1) * rb > oh
        if not edge and runs and not runs[-1][2]:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1, False)
        else:
            runs.append((blk, 1, edge))
    return runs


def _conv_plan(ti: int, po: int, kh: int, kw: int, wn: int, oh: int, ow: int, stride: int,
               item: int, budget: int) -> tuple[int, int, int]:  # fmt: skip
    """(input-channel tiles per group, kernel rows per group, output rows per block) whose
    weights, input window and (when the contraction is split) fp32 row accumulators fit
    ``budget`` bytes per partition: the whole contraction and the whole plane when they fit."""

    def cost(g: int, gy: int, rb: int) -> int:
        split = g < ti or gy < kh
        window = g * ((rb - 1) * stride + gy) * wn
        return item * (g * gy * kw * po + window) + (4 * rb * ow if split else 0)

    g, gy, rb = ti, kh, oh
    while g > 1 and cost(g, gy, 1) > budget:
        g -= 1
    while gy > 1 and cost(g, gy, 1) > budget:
        gy -= 1
    while rb > 1 and cost(g, gy, rb) > budget:
        rb -= 1
    return g, gy, rb


@nki.jit
def conv2d_kernel(x, w, b, stride=1, padding=0, sbuf_budget=BUDGET):
    """out[N, Co, OH, OW] = conv2d(x[N, Ci, H, W], w[Co, Ci, KH, KW]) + b[Co, 1].

    OH = (H + 2*padding - KH) // stride + 1 (OW likewise). Limits: OW <= 512 (one PSUM bank
    per output row), any N, Ci, Co (tiled by 128), stride >= 1, padding >= 0, dilation 1,
    groups 1. Dtypes: float32, bfloat16 or float16, all the same; fp32 accumulation.

    The weights of an output-channel tile load once (all input channels and kernel offsets in
    one SBUF tile), each image's input planes once into a zero-padded SBUF window (one memset,
    one DMA); each output row then accumulates the KH x KW offsets' matmuls over shifted
    (strided) views of the window in one PSUM tile. Planes or weights past the SBUF budget are
    split into blocks of output rows and groups of input channels / kernel rows (the groups'
    sums then accumulate in an fp32 SBUF tile): ``sbuf_budget`` is the bytes per partition
    they may take."""
    n, ci, h, wd = x.shape
    co, _, kh, kw = w.shape
    s = stride
    oh = (h + 2 * padding - kh) // s + 1
    ow = (wd + 2 * padding - kw) // s + 1
    out = nl.ndarray((n, co, oh, ow), dtype=x.dtype, buffer=nl.shared_hbm)
    pi, po = fit(ci), fit(co)  # channel tiles: 128, or all the channels when fewer
    ti, to = row_tiles(ci, pi), row_tiles(co, po)
    wn = (ow - 1) * s + kw  # the input columns (padding included) a row of outputs reads
    g, gy, rb = _conv_plan(ti, po, kh, kw, wn, oh, ow, s, dtypes.itemsize(str(x.dtype)),
                            sbuf_budget)  # fmt: skip
    ng, ny, nblk = row_tiles(ti, g), row_tiles(kh, gy), row_tiles(oh, rb)
    hb = (rb - 1) * s + gy  # input rows a block of output rows reads per group of kernel rows
    i_q, i_1 = nl.arange(po)[:, None], nl.arange(1)[None, :]
    i_w = nl.arange(ow)[None, :]

    def chans(gc: Any, t: Any, i_p: Any) -> Any:
        return (gc * g + t) * pi + i_p

    def chan_ok(gc: Any, t: Any, i_p: Any) -> Any:
        return chans(gc, t, i_p) < ci if ng * g * pi > ci else None

    def weights(ct: Any, gc: Any, ky: Any) -> Any:
        """(Ci tile, group tile, kernel row, kernel column, Co) weights of a group."""
        i_p = nl.arange(pi)[:, None, None, None]
        i_y = nl.arange(gy)[None, :, None, None]
        i_x = nl.arange(kw)[None, None, :, None]
        i_o = nl.arange(po)[None, None, None, :]
        rows, ochan = ky * gy + i_y, ct * po + i_o
        row_ok = rows < kh if ny * gy > kh else None
        co_ok = ochan < co if co % po else None
        ragged = row_ok is not None or co_ok is not None or ng * g * pi > ci
        wt = _tile((pi, g, gy, kw, po), w.dtype, 0.0 if ragged else None)
        for t in nl.affine_range(g):
            mask = _all(chan_ok(gc, t, i_p), row_ok, co_ok)
            wt[i_p, t, i_y, i_x, i_o] = nl.load(w[ochan, chans(gc, t, i_p), rows, i_x], mask=mask)
        return wt

    def window(img: Any, gc: Any, row0: Any, inside: bool = False) -> Any:
        def read(t: Any, i_p: Any, rows: Any, cols: Any) -> Any:
            return x[img, chans(gc, t, i_p), rows, cols]

        ok = (lambda t, i_p: chan_ok(gc, t, i_p)) if ng * g * pi > ci else None
        return _window(read, ok, (pi, g, hb, wn), x.dtype, 0.0, padding, h, wd, row0, inside)

    def row_sum(wt: Any, xw: Any, r: Any) -> Any:
        """The (Co, OW) fp32 PSUM sum of a group's matmuls for output row r of the block."""
        i_p, i_o = nl.arange(pi)[:, None], nl.arange(po)[None, :]
        acc = nl.zeros((po, ow), F32, buffer=nl.psum)
        for it in nl.affine_range(g):
            for dy in nl.static_range(gy):
                for dx in nl.static_range(kw):
                    moving = xw[i_p, it, r * s + dy, i_w * s + dx]
                    acc += nl.matmul(wt[i_p, it, dy, dx, i_o], moving, transpose_x=True)
        return acc

    def store(img: Any, ct: Any, row: Any, acc: Any, bias: Any, row_ok: Any = None) -> None:
        ochan = ct * po + i_q
        mask = _all(ochan < co if co % po else None, row_ok)
        nl.store(out[img, ochan, row, i_w], nl.add(acc, bias, dtype=x.dtype), mask=mask)

    for ct in nl.affine_range(to):
        ochan = ct * po + i_q
        bias = nl.load(b[ochan, i_1], mask=ochan < co if co % po else None)
        if ng == 1 and ny == 1:  # the whole contraction in one window: one PSUM sum per row
            wt = weights(ct, 0, 0)
            for img in nl.affine_range(n):
                for b0, count, edge in _segments(nblk, rb, oh, s, padding, hb, h):
                    if edge:
                        xw = window(img, 0, b0 * rb * s)
                        for r in nl.affine_range(min(rb, oh - b0 * rb)):
                            store(img, ct, b0 * rb + r, row_sum(wt, xw, r), bias)
                        continue
                    for j in nl.affine_range(count):
                        xw = window(img, 0, (b0 + j) * rb * s, inside=True)
                        for r in nl.affine_range(rb):
                            store(img, ct, (b0 + j) * rb + r, row_sum(wt, xw, r), bias)
            continue
        for img in nl.affine_range(n):
            for blk in nl.affine_range(nblk):
                total = nl.zeros((po, rb, ow), F32, buffer=nl.sbuf)
                for gc in nl.sequential_range(ng):
                    for ky in nl.sequential_range(ny):
                        wt = weights(ct, gc, ky)
                        xw = window(img, gc, blk * rb * s + ky * gy)
                        for r in nl.affine_range(rb):
                            part = total[i_q, r, i_w]
                            total[i_q, r, i_w] = nl.add(part, row_sum(wt, xw, r), dtype=F32)
                for r in nl.affine_range(rb):
                    row = blk * rb + r
                    row_ok = row < oh if nblk * rb > oh else None
                    store(img, ct, row, total[i_q, r, i_w], bias, row_ok)
    return out


def _pool_plan(k: int, s: int, wn: int, oh: int, ow: int, item: int, tiles: int,
               budget: int) -> int:  # fmt: skip
    """Output rows per block: the input window and ``tiles`` fp32 (rows, OW) tiles fit
    ``budget`` bytes per partition."""
    rb = oh
    while rb > 1 and item * ((rb - 1) * s + k) * wn + 4 * tiles * rb * ow > budget:
        rb -= 1
    return rb


def _pool_windows(x: Any, kernel: int, stride: int, padding: int, fill: float, tiles: int,
                  budget: int, body: Any) -> None:  # fmt: skip
    """Each (up to 128 planes, block of output rows) of x[M, H, W] loaded once into an SBUF
    window padded with ``fill``; ``body(row, rows, taps)`` combines the KH x KW strided views
    ``taps`` ((dy, dx, view) each) of the ``rows`` output rows from output row ``row`` into
    the (output, value) pairs to store."""
    m, h, wd = x.shape
    oh = (h + 2 * padding - kernel) // stride + 1
    ow = (wd + 2 * padding - kernel) // stride + 1
    p = fit(m)
    wn = (ow - 1) * stride + kernel
    rb = _pool_plan(kernel, stride, wn, oh, ow, dtypes.itemsize(str(x.dtype)), tiles,
                    budget)  # fmt: skip
    nblk = row_tiles(oh, rb)
    hb = (rb - 1) * stride + kernel
    i_p = nl.arange(p)[:, None, None]
    i_w = nl.arange(ow)[None, None, :]
    for t in nl.affine_range(row_tiles(m, p)):

        def read(_: Any, i_p: Any, rows: Any, cols: Any, t: Any = t) -> Any:
            return x[t * p + i_p, rows, cols]

        def ok(_: Any, i_p: Any, t: Any = t) -> Any:
            return t * p + i_p < m

        def block(blk: Any, nrow: int, inside: bool, t: Any = t) -> None:
            part = ok if m % p else None
            row0 = blk * rb * stride
            xw = _window(read, part, (p, hb, wn), x.dtype, fill, padding, h, wd, row0, inside)
            i_h = nl.arange(nrow)[None, :, None]
            taps = [
                (dy, dx, xw[i_p, i_h * stride + dy, i_w * stride + dx])
                for dy in range(kernel)
                for dx in range(kernel)
            ]
            mask = ok(None, i_p) if m % p else None
            for dst, value in body(blk * rb, nrow, taps):
                nl.store(dst[t * p + i_p, blk * rb + i_h, i_w], value, mask=mask)

        for b0, count, edge in _segments(nblk, rb, oh, stride, padding, hb, h):
            if edge:
                block(b0, min(rb, oh - b0 * rb), False)
                continue
            for j in nl.affine_range(count):
                block(b0 + j, rb, True)


def _pool(x, kernel, stride, padding, is_max, budget):
    m, h, wd = x.shape
    oh = (h + 2 * padding - kernel) // stride + 1
    ow = (wd + 2 * padding - kernel) // stride + 1
    out = nl.ndarray((m, oh, ow), dtype=x.dtype, buffer=nl.shared_hbm)

    def body(row: Any, nrow: int, taps: list) -> list:
        acc = taps[0][2]
        for _, _, tap in taps[1:]:  # max: exact in any dtype; sums in fp32
            acc = nl.maximum(acc, tap, dtype=x.dtype) if is_max else nl.add(acc, tap, dtype=F32)
        if is_max:
            return [(out, acc if len(taps) > 1 else nl.copy(acc, dtype=x.dtype))]
        return [(out, nl.multiply(acc, 1.0 / (kernel * kernel), dtype=x.dtype))]

    _pool_windows(x, kernel, stride, padding, NEG if is_max else 0.0, 3, budget, body)
    return out


@nki.jit
def max_pool2d_kernel(x, kernel=2, stride=2, padding=0, sbuf_budget=BUDGET):
    """out[M, OH, OW] = max over each kernel x kernel window of the planes x[M, H, W] (M = N*C;
    padding never wins). Limits: OH * OW <= 4096, padding <= kernel // 2. Dtypes: float32,
    bfloat16, float16 (exact).

    Each tile of planes loads once into an SBUF window padded with -3e38 (blocks of output
    rows when a plane exceeds ``sbuf_budget`` bytes per partition); the kernel offsets are
    strided views of it."""
    return _pool(x, kernel, stride, padding, True, sbuf_budget)


@nki.jit
def avg_pool2d_kernel(x, kernel=2, stride=2, padding=0, sbuf_budget=BUDGET):
    """out[M, OH, OW] = mean over each kernel x kernel window of x[M, H, W] (M = N*C; padding
    counts as zeros, torch's count_include_pad=True). Limits: OH * OW <= 4096. Dtypes:
    float32, bfloat16, float16 (fp32 sums). Windows as :func:`max_pool2d_kernel`'s."""
    return _pool(x, kernel, stride, padding, False, sbuf_budget)


@nki.jit
def max_pool2d_indices_kernel(x, kernel=2, stride=2, padding=0, sbuf_budget=BUDGET):
    """(out, idx)[M, OH, OW]: :func:`max_pool2d_kernel` plus, for each output, the flat index
    row * W + col of the first maximum in its window (int32; torch's max_pool2d_with_indices,
    whose backward scatters through these indices). Limits: OH * OW <= 4096,
    padding <= kernel // 2, H * W < 2**24. Dtypes: float32, bfloat16, float16. Windows as
    :func:`max_pool2d_kernel`'s."""
    m, h, wd = x.shape
    oh = (h + 2 * padding - kernel) // stride + 1
    ow = (wd + 2 * padding - kernel) // stride + 1
    out = nl.ndarray((m, oh, ow), dtype=x.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((m, oh, ow), dtype=nl.int32, buffer=nl.shared_hbm)

    def body(row0: Any, nrow: int, taps: list) -> list:
        i_p = nl.arange(fit(m))[:, None, None]
        i_h = nl.arange(nrow)[None, :, None]
        i_w = nl.arange(ow)[None, None, :]

        # the input position of offset (0, 0), row-major; offset (dy, dx) is dy * W + dx on
        row = (row0 + i_h) * stride - padding
        corner = nisa.iota(row * wd + i_w * stride - padding + 0 * i_p, dtype=nl.int32)
        best, step = taps[0][2], 0  # step: the winning offset's dy * W + dx so far
        for dy, dx, tap in taps[1:]:
            better = nl.greater(tap, best, dtype=F32)  # strict: the first maximum wins
            step = nl.where(better, dy * wd + dx, step, dtype=nl.int32)
            best = nl.maximum(best, tap, dtype=x.dtype)
        if len(taps) == 1:
            return [(out, nl.copy(best, dtype=x.dtype)), (idx, corner)]
        return [(out, best), (idx, nl.add(corner, step, dtype=nl.int32))]

    _pool_windows(x, kernel, stride, padding, NEG, 5, sbuf_budget, body)
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
