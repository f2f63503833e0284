"""Executors of the GpSimd (iota, memset, affine_select, tensor_partition_reduce,
local_gather) and DMA (dma_copy, dma_transpose) nki.isa instructions; registered into
``handlers_isa.ISA``."""

from __future__ import annotations

import numpy as np

from nki.errors import NKIIndexError
from nki.ir import Access, Instr
from nki.optable import OPS

from . import isa_math as M
from . import numerics
from .handlers_isa import _dtype, _store, isa
from .interpreter import Ctx, eval_index, eval_mask

# --------------------------------------------------------------------------------------------
# GpSimd
# --------------------------------------------------------------------------------------------


@isa("iota")
def _iota(instr: Instr, ctx: Ctx) -> None:
    dst = instr.dst
    assert dst is not None
    v = np.broadcast_to(eval_index(instr.srcs[0], ctx.env), dst.shape)  # type: ignore[arg-type]
    v = (np.asarray(v, dtype=np.int64) + 2**31) % 2**32 - 2**31  # int32 arithmetic
    _store(instr, ctx, v)


@isa("memset")
def _memset(instr: Instr, ctx: Ctx) -> None:
    c = instr.srcs[0]
    _store(instr, ctx, np.broadcast_to(np.asarray(c.value), instr.dst.shape))  # type: ignore


@isa("affine_select")
def _affine_select(instr: Instr, ctx: Ctx) -> None:
    src, fval = instr.srcs
    dst = instr.dst
    assert dst is not None
    cond = eval_mask(instr.attr("pred"), dst.shape, ctx.env)
    raw = ctx.read(src).reshape(dst.shape)  # type: ignore[arg-type]
    x = numerics.to_compute(raw)
    _store(instr, ctx, np.where(cond, x, np.float32(fval.value)))  # type: ignore[union-attr]


@isa("tensor_partition_reduce")
def _tensor_partition_reduce(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    op = OPS[instr.attr("op")]
    raw = ctx.read(src)  # type: ignore[arg-type]
    x = M.bits(raw) if op.bitvec else numerics.to_compute(raw)
    _store(instr, ctx, M.reduce(op.name, x, (0,)), op.bitvec)


@isa("local_gather")
def _local_gather(instr: Instr, ctx: Ctx) -> None:
    src, index = instr.srcs
    p = src.shape[0]  # type: ignore[union-attr]
    data = ctx.read(src).reshape(p, -1)  # type: ignore[arg-type]
    idx = ctx.read(index).reshape(p, -1).astype(np.int64)  # type: ignore[arg-type]
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
    _store(instr, ctx, out)


# --------------------------------------------------------------------------------------------
# DMA
# --------------------------------------------------------------------------------------------


def _in_bounds(ctx: Ctx, acc: Access) -> np.ndarray:
    """Which elements of an access (indirect rows included) fall inside the tensor."""
    shape = ctx.array(acc.tensor).shape
    ok = np.ones(acc.shape, dtype=bool)
    ind = dict(acc.indirect)
    for d, (e, n) in enumerate(zip(acc.index, shape)):
        v = np.asarray(eval_index(e, ctx.env), dtype=np.int64)
        if d in ind:
            v = v + np.broadcast_to(ctx.read(ind[d]).astype(np.int64), acc.shape)
        ok &= np.broadcast_to((v >= 0) & (v < n), acc.shape)
    return ok


@isa("dma_copy")
def _dma_copy(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    dst = instr.dst
    assert dst is not None and isinstance(src, Access)
    sel = ctx.mask(instr)
    ssel = sel if src.shape == dst.shape else None
    if instr.attr("oob") == "skip" and (src.indirect or dst.indirect):
        ok = _in_bounds(ctx, dst)
        if src.shape == dst.shape:
            ok &= _in_bounds(ctx, src)
        sel = ok if sel is None else sel & ok
        ssel = sel if src.shape == dst.shape else None
    raw = ctx.read(src, ssel)
    rmw = instr.attr("rmw") or instr.accumulate
    sdt, ddt = _dtype(ctx, src), _dtype(ctx, dst)
    if sdt == ddt:
        vals = raw
    elif not rmw and numerics.dma_copies_bits(sdt, ddt):
        vals = raw.view(numerics.storage_dtype(ddt))
    else:
        vals = numerics.to_compute(raw)
    vals = vals.reshape(dst.shape)
    if rmw and dst.indirect:
        _scatter_accumulate(ctx, dst, vals, sel, rmw)
    else:
        ctx.write(dst, vals, sel, rmw)


def _scatter_accumulate(
    ctx: Ctx, dst: Access, vals: np.ndarray, sel: np.ndarray | None, op: str
) -> None:
    """A read-modify-write DMA through indirect (data-dependent) rows. Duplicate destination
    rows are legal: the compiler serialises the conflicting descriptors (documented for
    ``dst_rmw_op``: duplicate offsets cost synchronisation, not updates), so every update lands.
    Element ``k``-th in row-major order among those sharing a destination is applied in round
    ``k``; each round writes distinct elements, rounding to the destination dtype per update."""
    shape = ctx.array(dst.tensor).shape
    flat = np.ravel_multi_index(ctx._fancy(dst, sel), shape).reshape(-1)
    live = np.ones(flat.shape, dtype=bool) if sel is None else sel.reshape(-1)
    order = np.argsort(np.where(live, flat, -1), kind="stable")
    fs = flat[order]
    starts = np.r_[True, fs[1:] != fs[:-1]]
    group_start = np.maximum.accumulate(np.where(starts, np.arange(fs.size), 0))
    rank = np.empty(flat.shape, dtype=np.int64)
    rank[order] = np.arange(fs.size) - group_start
    rank = rank.reshape(dst.shape)
    live = live.reshape(dst.shape)
    for r in range(int(rank[live].max(initial=-1)) + 1):
        ctx.write(dst, vals, live & (rank == r), op)


@isa("dma_transpose")
def _dma_transpose(instr: Instr, ctx: Ctx) -> None:
    raw = ctx.read(instr.srcs[0])  # type: ignore[arg-type]
    _store(instr, ctx, np.transpose(raw, instr.attr("axes")))
