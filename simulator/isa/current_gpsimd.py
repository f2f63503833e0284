"""Executors of the current-API-only GpSimd and DMA instructions: ``nc_n_gather``,
``nonzero_with_count``, ``topk`` and ``dma_compute``."""

from __future__ import annotations

import math

import numpy as np

from nki.errors import NKIIndexError, NKIRuntimeError
from nki.ir import Access, Instr

from .. import numerics
from ..executors import executes
from ..memory import Ctx
from .common import dst_of, src_tile, store
from .current_vector import undefined
from .dma import _in_bounds, _scatter_accumulate


@executes("isa", "nc_n_gather")
def _nc_n_gather(instr: Instr, ctx: Ctx) -> None:
    data, index = src_tile(instr, 0), src_tile(instr, 1)
    p = data.shape[0]
    width = int(np.prod(data.shape[1:], dtype=np.int64))
    idx = ctx.read(index).reshape(p, -1).astype(np.int64)
    bad = idx >= width
    if bad.any():
        r, c = (int(v[0]) for v in np.nonzero(bad))
        raise NKIIndexError(
            f"nisa.nc_n_gather: indices[{r}, {c}] = {int(idx[r, c])} is outside the "
            f"{width} elements per partition of 'data' (valid: 0..{width - 1})",
            code="err_tensor_access_out_of_bound",
        )
    used = np.zeros((p, width), dtype=bool)  # only the gathered elements are read
    np.put_along_axis(used, idx, True, axis=1)
    raw = ctx.read(data, used.reshape(data.shape)).reshape(p, -1)
    store(instr, ctx, np.take_along_axis(raw, idx, axis=1))


@executes("isa", "nonzero_with_count")
def _nonzero_with_count(instr: Instr, ctx: Ctx) -> None:
    src = src_tile(instr, 0)
    dst = dst_of(instr)
    p = src.shape[0]
    t = int(np.prod(src.shape[1:], dtype=np.int64))
    cores = np.zeros((p, t), dtype=bool)
    cores[::16] = True  # each GpSimd core reads the first of its 16 partitions only
    x = ctx.read(src, cores.reshape(src.shape)).reshape(p, -1)
    off, pad = instr.attr("index_offset"), instr.attr("padding_val")
    out = np.zeros((p, t + 1), dtype=np.int64)
    rows = np.zeros((p, 1), dtype=bool)
    for r in range(0, p, 16):  # one GpSimd core per 16 partitions, on its first partition
        pos = np.flatnonzero(x[r] != 0)
        out[r, : pos.size] = pos + off
        out[r, pos.size : t] = pad
        out[r, t] = pos.size
        rows[r] = True
    out = (out + 2**31) % 2**32 - 2**31  # int32 arithmetic
    sel = np.broadcast_to(rows, (p, t + 1)).reshape(dst.shape)
    ctx.write(dst, out.reshape(dst.shape), sel)


def topk_snake(x: np.ndarray, n: int, k: int) -> tuple[np.ndarray, ...]:
    """Top-k of each 16-partition group's snake (element e at [e % 16, e // 16]) of a (P, C)
    array: (values, indices, written) each (P, C') with C' = ceil(k / 16), result j of a group
    at [j % 16, j // 16], ascending values, ties lower index first."""
    p = x.shape[0]
    width = math.ceil(k / 16)
    vals = np.zeros((p, width), dtype=np.float32)
    idxs = np.zeros((p, width), dtype=np.int64)
    written = np.zeros((p, width), dtype=bool)
    j = np.arange(k)
    for g in range(0, p, 16):
        snake = x[g : g + 16, : math.ceil(n / 16)].T.reshape(-1)[:n]
        e = np.arange(n)
        best = np.lexsort((e, -snake))[:k]  # largest first, lower index first on ties
        order = best[np.lexsort((best, snake[best]))]  # ascending value, then index
        vals[g + j % 16, j // 16] = snake[order]
        idxs[g + j % 16, j // 16] = order
        written[g + j % 16, j // 16] = True
    return vals, idxs, written


@executes("isa", "topk")
def _topk(instr: Instr, ctx: Ctx) -> None:
    src = src_tile(instr, 0)
    vdst = dst_of(instr)
    idst = instr.attr("idx_dst")
    p, n = src.shape[0], instr.attr("n")
    cols = int(np.prod(src.shape[1:], dtype=np.int64))
    e = np.arange(16)[:, None] + 16 * np.arange(cols)[None, :]  # snake position of each slot
    used = np.tile(e < n, (p // 16, 1))  # slots past n are not read
    x = numerics.to_compute(ctx.read(src, used.reshape(src.shape))).reshape(p, -1)
    k = int(np.prod(vdst.shape[1:], dtype=np.int64))
    vals, idxs, written = topk_snake(x, n, k)
    width = vals.shape[1]
    # the hardware writes each result column across all 16 partitions of a group: the lanes
    # of the last column past K receive unspecified values (NaN / all-ones here, and
    # uninitialised under checks="full")
    spill = np.zeros((p, k), dtype=bool)
    spill[:, :width] = ~written
    for acc, v, junk in ((vdst, vals, np.nan), (idst, idxs, 0xFFFFFFFF)):
        full = np.zeros((p, k), dtype=v.dtype)
        sel = np.zeros((p, k), dtype=bool)
        full[:, :width] = v
        sel[:, :width] = written
        ctx.write(acc, full.reshape(acc.shape), sel.reshape(acc.shape))
        if spill.any():
            lanes = spill.reshape(acc.shape)
            with undefined(ctx, instr, lanes):
                ctx.write(acc, np.full(acc.shape, junk), lanes)


@executes("isa", "dma_compute")
def _dma_compute(instr: Instr, ctx: Ctx) -> None:
    dst = dst_of(instr)
    srcs = [s for s in instr.srcs if isinstance(s, Access)]
    sel = ctx.mask(instr)
    if instr.attr("oob") == "skip" and any(a.indirect for a in (dst, *srcs)):
        ok = _in_bounds(ctx, dst)
        for s in srcs:
            if s.shape == dst.shape:
                ok &= _in_bounds(ctx, s)
        sel = ok if sel is None else sel & ok
    ssel = sel
    if dst.indirect and not instr.attr("unique"):
        # scatter-add with repeated rows: every update lands (serialised like dma_copy's RMW)
        data = next(s for s in srcs if s != dst)
        vals = numerics.to_compute(ctx.read(data, ssel if data.shape == dst.shape else None))
        _scatter_accumulate(ctx, dst, vals.reshape(dst.shape), sel, "add")
        return
    if dst.indirect:
        _require_unique_rows(ctx, dst, sel)
    total = np.zeros(dst.shape, dtype=np.float32)
    for s in srcs:
        raw = ctx.read(s, ssel if s.shape == dst.shape else None)
        total = (total + numerics.to_compute(raw).reshape(dst.shape)).astype(np.float32)
    ctx.write(dst, total, sel)


def _require_unique_rows(ctx: Ctx, dst: Access, sel: np.ndarray | None) -> None:
    shape = ctx.array(dst.tensor).shape
    flat = np.ravel_multi_index(ctx.indices(dst, sel), shape).reshape(-1)
    if sel is not None:
        flat = flat[sel.reshape(-1)]
    uniq, counts = np.unique(flat, return_counts=True)
    if (counts > 1).any():
        where = np.unravel_index(int(uniq[np.argmax(counts > 1)]), shape)
        raise NKIRuntimeError(
            f"nisa.dma_compute: the indirect destination '{dst.tensor}' receives element "
            f"{tuple(int(i) for i in where)} more than once, but unique_indices=True promises "
            "distinct rows (the hardware result is undefined); pass unique_indices=False to "
            "accumulate every update",
            code="err_runtime",
        )
