"""Executors of the DMA instructions: ``dma_copy`` (casting, bit copies, read-modify-write,
skipped out-of-bounds indirect rows), ``dma_transpose`` and ``dma_compute`` (sums of sources,
scatter / gather-add)."""

from __future__ import annotations

import math

import numpy as np

from nki.errors import NKIRuntimeError
from nki.ir import Access, Instr, tensor_label

from .. import numerics
from ..executors import executes
from ..memory import Ctx, eval_index
from .common import dst_of, dtype_of, src_tile, store


def _in_bounds(ctx: Ctx, acc: Access) -> np.ndarray:
    """Which elements of an access (indirect rows included) fall inside the tensor."""
    shape = ctx.array(acc.tensor).shape
    ok = np.ones(acc.shape, dtype=bool)
    ind = dict(acc.indirect)
    for d, (e, n) in enumerate(zip(acc.index, shape)):
        v = np.asarray(eval_index(e, ctx.env), dtype=np.int64)
        if d in ind:
            v = v + ctx.offsets(ind[d], acc.shape)
        ok &= np.broadcast_to((v >= 0) & (v < n), acc.shape)
    return ok


@executes("isa", "dma_copy")
def _dma_copy(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    dst = instr.dst
    assert dst is not None and isinstance(src, Access)
    sel = ctx.mask(instr)
    ssel = sel if src.shape == dst.shape else None
    if instr.attr("oob") == "skip" and (src.indirect or dst.indirect):
        # (element k of the source goes to element k of the destination, in row-major order)
        paired = math.prod(src.shape) == math.prod(dst.shape)
        ok = _in_bounds(ctx, dst)
        if paired:
            ok &= _in_bounds(ctx, src).reshape(dst.shape)
        sel = ok if sel is None else sel & ok
        ssel = sel.reshape(src.shape) if paired else None
    raw = ctx.read(src, ssel)
    rmw = instr.attr("rmw") or instr.accumulate
    sdt, ddt = dtype_of(ctx, src), dtype_of(ctx, dst)
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
    flat = np.ravel_multi_index(ctx.indices(dst, sel), shape).reshape(-1)
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


@executes("isa", "dma_transpose")
def _dma_transpose(instr: Instr, ctx: Ctx) -> None:
    raw = ctx.read(src_tile(instr, 0))
    store(instr, ctx, np.transpose(raw, instr.attr("axes")))


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
            f"nisa.dma_compute: the indirect destination {tensor_label(ctx.decl(dst.tensor))} "
            "receives element "
            f"{tuple(int(i) for i in where)} more than once, but unique_indices=True promises "
            "distinct rows (the hardware result is undefined); pass unique_indices=False to "
            "accumulate every update",
            code="err_runtime",
        )
