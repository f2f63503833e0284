"""Executors of the core nki.language instruction kinds: data movement (``nl.load`` /
``nl.store`` / DMA copies), engine copies, memset and ``nl.device_print``."""

from __future__ import annotations

import numpy as np

from nki.ir import Access, Const, Instr

from .. import numerics
from ..executors import executes
from ..memory import Ctx


@executes("dma")
def _dma(instr: Instr, ctx: Ctx) -> None:
    """nl.load / nl.store / DMA copies: move a tile, casting to the destination dtype."""
    sel = ctx.mask(instr)
    src = instr.srcs[0]
    assert isinstance(src, Access) and instr.dst is not None
    vals = ctx.read(src, sel)
    dst_dtype = ctx.decl(instr.dst.tensor).dtype
    if instr.accumulate is None and numerics.dma_copies_bits(ctx.decl(src.tensor).dtype, dst_dtype):
        vals = vals.view(numerics.storage_dtype(dst_dtype))
    ctx.write(instr.dst, vals, sel, instr.accumulate)


@executes("copy")
def _copy(instr: Instr, ctx: Ctx) -> None:
    """Tile-to-tile copy on an engine (assignment, nl.copy): casts through the engine."""
    sel = ctx.mask(instr)
    src, dst = instr.srcs[0], instr.dst
    assert isinstance(src, Access) and dst is not None
    vals = ctx.read(src, sel)
    ctx.write(dst, np.broadcast_to(vals, dst.shape), sel, instr.accumulate)


@executes("memset")
def _memset(instr: Instr, ctx: Ctx) -> None:
    c, dst = instr.srcs[0], instr.dst
    assert isinstance(c, Const) and dst is not None
    ctx.write(dst, np.asarray(c.value), ctx.mask(instr), instr.accumulate)


@executes("print")
def _print(instr: Instr, ctx: Ctx) -> None:
    prefix = instr.attr("prefix", "")
    src = instr.srcs[0]
    if isinstance(src, Access):
        vals = ctx.read(src)
        shown = (
            vals.astype(np.float32)
            if vals.dtype.kind == "V" or vals.dtype.itemsize < 4 and vals.dtype.kind == "f"
            else vals
        )
    else:
        shown = src
    where = f" (instance {ctx.instance}, core {ctx.core})" if ctx.instance else ""
    print(f"{prefix}{where}\n{shown}", flush=True)
