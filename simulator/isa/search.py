"""Executors of the statistics and search instructions: ``bn_stats`` / ``bn_aggr``, ``max8``,
``nc_find_index8`` and ``nc_match_replace8``."""

from __future__ import annotations

import numpy as np

from nki import dtypes
from nki.ir import Access, Instr

from .. import numerics
from ..executors import executes
from ..memory import Ctx
from . import formulas as M
from .common import dtype_of, store, tile, write_res


@executes("isa", "bn_stats")
def _bn_stats(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    p = src.shape[0]  # type: ignore[union-attr]
    m = ctx.mask(instr, src.shape)  # type: ignore[union-attr]
    if m is None:
        store(instr, ctx, M.bn_stats(tile(ctx, src, p, False)))  # type: ignore
        return
    # the mask selects input elements: masked-out ones are neither read nor counted
    keep = np.broadcast_to(m, src.shape).reshape(p, -1)  # type: ignore[union-attr]
    x = numerics.to_compute(ctx.read(src, np.broadcast_to(m, src.shape))).reshape(p, -1)  # type: ignore
    rows = keep.any(axis=1) | bool((keep == keep[:1]).all())  # partition-masked rows unwritten
    vals = M.bn_stats(x, keep)
    dst = instr.dst
    assert dst is not None
    sel = np.broadcast_to(rows.reshape((p,) + (1,) * (len(dst.shape) - 1)), dst.shape)
    ctx.write(dst, vals.reshape(dst.shape), sel, instr.accumulate)


@executes("isa", "bn_aggr")
def _bn_aggr(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    store(instr, ctx, M.bn_aggr(tile(ctx, src, src.shape[0], False)))  # type: ignore


@executes("isa", "max8")
def _max8(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    store(instr, ctx, M.top8(tile(ctx, src, src.shape[0], False)))  # type: ignore


def _sentinel(ctx: Ctx, acc: Access) -> int:
    return int(np.iinfo(dtypes.storage(dtype_of(ctx, acc))).max)


@executes("isa", "nc_find_index8")
def _nc_find_index8(instr: Instr, ctx: Ctx) -> None:
    data, vals = instr.srcs
    p = data.shape[0]  # type: ignore[union-attr]
    d = tile(ctx, data, p, False)  # type: ignore[arg-type]
    v = tile(ctx, vals, p, False)  # type: ignore[arg-type]
    store(instr, ctx, M.find_index8(d, v, _sentinel(ctx, instr.dst)))  # type: ignore[arg-type]


@executes("isa", "nc_match_replace8")
def _nc_match_replace8(instr: Instr, ctx: Ctx) -> None:
    data, vals, imm = instr.srcs
    p = data.shape[0]  # type: ignore[union-attr]
    d = tile(ctx, data, p, False)  # type: ignore[arg-type]
    v = tile(ctx, vals, p, False)  # type: ignore[arg-type]
    idx_acc = instr.attr("dst_idx")
    sentinel = _sentinel(ctx, idx_acc) if idx_acc is not None else -1
    out, idx = M.match_replace8(d, v, float(imm.value), sentinel)  # type: ignore[union-attr]
    write_res(ctx, instr, "dst_idx", idx)
    store(instr, ctx, out)
