"""Executors of the nki.language shaping and fused ops: tile reshape, ``nl.gather_flattened``,
``nl.softmax`` and ``nl.rms_norm``."""

from __future__ import annotations

import numpy as np

from nki.ir import Access, Instr

from .. import numerics
from ..executors import executes
from ..memory import Ctx
from .common import is_int_access


@executes("reshape")
def _reshape(instr: Instr, ctx: Ctx) -> None:
    """tile.reshape: the same values per partition, row-major, in the destination's shape."""
    src = instr.srcs[0]
    assert isinstance(src, Access) and instr.dst is not None
    vals = np.ascontiguousarray(ctx.read(src)).reshape(instr.dst.shape)
    ctx.write(instr.dst, vals, ctx.mask(instr), instr.accumulate)


@executes("gather")
def _gather(instr: Instr, ctx: Ctx) -> None:
    """nl.gather_flattened: per-partition gather from the flattened free axes."""
    da, ia = instr.srcs
    assert isinstance(da, Access) and isinstance(ia, Access) and instr.dst is not None
    data = ctx.read(da)
    p = data.shape[0]
    flat = data.reshape(p, -1)
    idx = ctx.read(ia).astype(np.int64).reshape(p, -1)
    ok = (idx >= 0) & (idx < flat.shape[1])
    got = np.take_along_axis(flat, np.where(ok, idx, 0), axis=1)
    garbage = numerics.fill_value(ctx.decl(da.tensor).dtype)
    out = np.where(ok, numerics.to_compute(got), np.float32(garbage))
    if is_int_access(da, ctx):
        out = np.where(ok, got.astype(np.int64), np.int64(garbage))  # type: ignore[arg-type]
    ctx.write(instr.dst, out.reshape(instr.dst.shape), ctx.mask(instr), instr.accumulate)


@executes("softmax")
def _softmax(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    assert isinstance(src, Access) and instr.dst is not None
    axes = tuple(instr.attr("axes"))
    x = numerics.to_compute(ctx.read(src)).astype(np.float32)
    e = np.exp(x - np.max(x, axis=axes, keepdims=True))
    out = e / np.sum(e, axis=axes, keepdims=True, dtype=np.float32)
    ctx.write(instr.dst, out.astype(np.float32), ctx.mask(instr), instr.accumulate)


@executes("rms_norm")
def _rms_norm(instr: Instr, ctx: Ctx) -> None:
    xa, wa = instr.srcs
    assert isinstance(xa, Access) and isinstance(wa, Access) and instr.dst is not None
    axes = tuple(instr.attr("axes"))
    x = numerics.to_compute(ctx.read(xa)).astype(np.float32)
    w = numerics.to_compute(ctx.read(wa)).astype(np.float32)
    ms = np.sum(x * x, axis=axes, keepdims=True, dtype=np.float32) / np.float32(instr.attr("n"))
    r = np.float32(1.0) / np.sqrt(ms + np.float32(instr.attr("epsilon")))
    ctx.write(instr.dst, (x * r * w).astype(np.float32), ctx.mask(instr), instr.accumulate)
