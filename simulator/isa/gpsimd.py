"""Executors of the GpSimd instructions: ``iota``, ``memset``, ``affine_select``,
``tensor_partition_reduce``, ``local_gather``, ``sequence_bounds``, ``nc_n_gather``,
``nonzero_with_count`` and ``topk``."""

from __future__ import annotations

import math

import numpy as np

from nki.errors import NKIError, NKIIndexError
from nki.ir import Instr
from nki.optable import OPS

from .. import numerics
from ..executors import executes
from ..memory import Ctx, eval_index, eval_mask
from . import formulas as M
from .common import dst_of, src_const, src_index, src_tile, store, undefined


@executes("isa", "iota")
def _iota(instr: Instr, ctx: Ctx) -> None:
    dst = instr.dst
    assert dst is not None
    v = np.broadcast_to(eval_index(src_index(instr, 0), ctx.env), dst.shape)
    v = (np.asarray(v, dtype=np.int64) + 2**31) % 2**32 - 2**31  # int32 arithmetic
    store(instr, ctx, v)


@executes("isa", "memset")
def _memset(instr: Instr, ctx: Ctx) -> None:
    c = src_const(instr, 0)
    store(instr, ctx, np.broadcast_to(np.asarray(c.value), dst_of(instr).shape))


@executes("isa", "affine_select")
def _affine_select(instr: Instr, ctx: Ctx) -> None:
    src, fval = src_tile(instr, 0), src_const(instr, 1)
    dst = instr.dst
    assert dst is not None
    cond = eval_mask(instr.attr("pred"), dst.shape, ctx.env)
    raw = ctx.read(src).reshape(dst.shape)
    x = numerics.to_compute(raw)
    store(instr, ctx, np.where(cond, x, np.float32(fval.value)))


@executes("isa", "tensor_partition_reduce")
def _tensor_partition_reduce(instr: Instr, ctx: Ctx) -> None:
    src = src_tile(instr, 0)
    op = OPS[instr.attr("op")]
    # a classic mask is over the data: masked-out elements are neither read nor folded in
    sel = ctx.mask(instr, src.shape)
    sel = None if sel is None else np.broadcast_to(sel, src.shape)
    raw = ctx.read(src, sel)
    x = M.bits(raw) if op.bitvec else numerics.to_compute(raw)
    out = M.reduce(op.name, x, (0,)) if sel is None else M.masked_reduce(op.name, x, sel, (0,))
    if instr.attr("average"):  # (the fp32 sum over the partition count, or those selected)
        n = np.float32(src.shape[0]) if sel is None else np.maximum(sel.sum(0), 1)
        out = np.divide(out, np.asarray(n, dtype=np.float32), dtype=np.float32)
    # (a column with none selected keeps what it held)
    cols = None if sel is None else np.any(sel, axis=0).reshape(dst_of(instr).shape)
    store(instr, ctx, out, op.bitvec, written=cols)


@executes("isa", "local_gather")
def _local_gather(instr: Instr, ctx: Ctx) -> None:
    src, index = src_tile(instr, 0), src_tile(instr, 1)
    p = src.shape[0]
    data = ctx.read(src).reshape(p, -1)
    idx = ctx.read(index).reshape(p, -1).astype(np.int64)
    n, nvalid = instr.attr("n_elem"), instr.attr("n_valid")
    out = np.empty((p, nvalid, n), dtype=data.dtype)
    for g in range(0, p, 16):
        ind = idx[g : g + 16].flatten(order="F")[:nvalid]  # partition-first order
        if ind.size and (ind.max() + n > data.shape[1]):
            raise NKIIndexError(
                f"nisa.local_gather: index {int(ind.max())} + {n} elements reaches past the "
                f"{data.shape[1]} elements per partition of the source (partitions {g}.."
                f"{g + 15}); out-of-range gathers are undefined on hardware",
                code="err_tensor_access_out_of_bound",
            )
        cols = ind[:, None] + np.arange(n)[None, :]
        out[g : g + 16] = data[g : g + 16][:, cols]
    store(instr, ctx, out)


@executes("isa", "sequence_bounds")
def _sequence_bounds(instr: Instr, ctx: Ctx) -> None:
    src = src_tile(instr, 0)
    ids = numerics.to_compute(ctx.read(src), exact_int=True).reshape(-1)
    bad = (ids < 0) | (ids != np.floor(ids))  # (the page: "non-negative integers")
    if bad.any():
        k = int(np.argmax(bad))
        raise NKIError(
            f"nisa.sequence_bounds: segment_ids[0, {k}] = {ids[k]!r} is not a non-negative "
            "integer (segment ids are non-negative integers, 0 for padding)",
            code="err_invalid_argument",
        )
    store(instr, ctx, M.sequence_bounds(ids)[None])


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
