"""Executors of the core instruction kinds: data movement, copies, memset, elementwise ops and
device_print."""

from __future__ import annotations

import numpy as np

from nki import dtypes
from nki.ir import Access, Const, Instr
from nki.optable import OPS, apply

from . import numerics
from .interpreter import Ctx, handler


@handler("dma")
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


@handler("copy")
def _copy(instr: Instr, ctx: Ctx) -> None:
    """Tile-to-tile copy on an engine (assignment, nl.copy): casts through the engine."""
    sel = ctx.mask(instr)
    src = instr.srcs[0]
    assert isinstance(src, Access)
    vals = ctx.read(src, sel)
    ctx.write(
        instr.dst,
        np.broadcast_to(vals, instr.dst.shape),
        sel,  # type: ignore[union-attr]
        instr.accumulate,
    )


@handler("memset")
def _memset(instr: Instr, ctx: Ctx) -> None:
    c = instr.srcs[0]
    assert isinstance(c, Const)
    sel = ctx.mask(instr)
    ctx.write(instr.dst, np.asarray(c.value), sel, instr.accumulate)  # type: ignore[arg-type]


def _exact_int(instr: Instr, ctx: Ctx) -> bool:
    """Integer-only arithmetic runs exactly (GpSimd's native integer path)."""
    op = OPS[instr.op]
    if not op.exact_int:
        return False
    for s in instr.srcs:
        if isinstance(s, Access):
            if not dtypes.is_int(ctx.decl(s.tensor).dtype) and not dtypes.is_bool(
                ctx.decl(s.tensor).dtype
            ):
                return False
        elif isinstance(s, Const):
            if isinstance(s.value, float) or (
                isinstance(s.value, np.generic) and s.value.dtype.kind == "f"
            ):
                return False
    return True


@handler("ew")
def _elementwise(instr: Instr, ctx: Ctx) -> None:
    """An op-table row applied element-wise with NumPy broadcasting, in fp32."""
    op = OPS[instr.op]
    sel = ctx.mask(instr)
    exact = _exact_int(instr, ctx)
    vals = []
    for s in instr.srcs:
        v = ctx.value(s, _operand_sel(s, sel, instr), exact_int=exact)
        vals.append(v)
    # bit-vector rows act on the operands' bit patterns (logical shifts, wrapping)
    bits = (
        (instr.attr("bit_dtype") or numerics.bit_dtype(instr.srcs, ctx.decl)) if op.bitvec else None
    )
    out = apply(op, vals, bits)
    ctx.write(instr.dst, out, sel, instr.accumulate)  # type: ignore[arg-type]


def _operand_sel(src: object, sel: np.ndarray | None, instr: Instr) -> np.ndarray | None:
    """Masks apply to operands of the destination's shape (broadcast operands read whole)."""
    if sel is None or not isinstance(src, Access):
        return None
    if src.shape == sel.shape:
        return sel
    return None


@handler("print")
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
