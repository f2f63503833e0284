"""Batched executors of the selecting instructions: ``nisa.affine_select`` (a tile where an
affine predicate of its indices, program ids and loop iterators holds, a constant elsewhere)
and ``nl.where`` (a select by a condition tile). Each restates its reference executor
(``simulator/isa/gpsimd._affine_select``, ``simulator/language/ops._select``) over operands
with leading batch axes, call for call, so results are bit-identical."""

from __future__ import annotations

import dataclasses

import numpy as np

from nki.ir import Access, Const, Instr

from .. import numerics
from ..language.common import is_int_access
from .context import BCtx
from .ops import _batched, _declines_copy, _isa  # (the batched executors' registration rules)

# id(affine_select) -> (it, the same instruction with its predicate as its mask): the batch's
# selection comes from ``BCtx.mask``, which skips conditions that hold throughout and keeps the
# selection per instruction and batch state (``masks.py``). Bounded.
_AS_MASKED: dict[int, tuple[Instr, Instr]] = {}
_MAX = 1024


def _selection(instr: Instr, ctx: BCtx) -> np.ndarray | None:
    """Where the predicate of an affine_select holds over the batch (None: everywhere)."""
    hit = _AS_MASKED.get(id(instr))
    if hit is None or hit[0] is not instr:
        if len(_AS_MASKED) >= _MAX:
            _AS_MASKED.clear()
        hit = _AS_MASKED[id(instr)] = (instr, dataclasses.replace(instr, mask=instr.attr("pred")))
    return ctx.mask(hit[1])


@_isa("affine_select")
def _affine_select(instr: Instr, ctx: BCtx) -> None:
    src, fval = instr.srcs
    dst = instr.dst
    assert isinstance(src, Access) and isinstance(fval, Const) and dst is not None
    full = (*ctx.dims, *dst.shape)
    x = numerics.to_compute(ctx.read(src).reshape(full))
    ctx.write(dst, selected(instr, ctx, x, fval.value), ctx.mask(instr), instr.accumulate)


def selected(instr: Instr, ctx: BCtx, x: np.ndarray, fill: object) -> np.ndarray:
    """``np.where(cond, x, fill)``'s values, where ``cond`` is the affine_select's predicate
    over the batch: ``x`` itself where it holds throughout, else a copy with the fill put
    where it fails."""
    cond = _selection(instr, ctx)
    if cond is None:
        return x
    vals = np.array(x, dtype=np.float32)
    np.copyto(vals, np.float32(fill), where=~cond)
    return vals


@_batched("select", _declines_copy)
def _where(instr: Instr, ctx: BCtx) -> None:
    dst = instr.dst
    assert dst is not None
    sel = ctx.mask(instr)
    exact = all(
        is_int_access(s, ctx) or (isinstance(s, Const) and isinstance(s.value, (int, np.integer)))
        for s in instr.srcs[1:]
    )
    c, a, b = (
        ctx.value(s, sel if isinstance(s, Access) and s.shape == dst.shape else None, exact)
        for s in instr.srcs
    )
    ctx.write(dst, np.where(np.asarray(c) != 0, a, b), sel, instr.accumulate)
