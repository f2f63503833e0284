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
from .common import dst_of, dtype_of, src_const, src_tile, store, tile, write_res


@executes("isa", "bn_stats")
def _bn_stats(instr: Instr, ctx: Ctx) -> None:
    src = src_tile(instr, 0)
    p = src.shape[0]
    m = ctx.mask(instr, src.shape)
    if m is None:
        store(instr, ctx, M.bn_stats(tile(ctx, src, p, False)))
        return
    # the mask selects input elements: masked-out ones are neither read nor counted
    keep = np.broadcast_to(m, src.shape).reshape(p, -1)
    x = numerics.to_compute(ctx.read(src, np.broadcast_to(m, src.shape))).reshape(p, -1)
    rows = keep.any(axis=1) | bool((keep == keep[:1]).all())  # partition-masked rows unwritten
    vals = M.bn_stats(x, keep)
    dst = instr.dst
    assert dst is not None
    sel = np.broadcast_to(rows.reshape((p,) + (1,) * (len(dst.shape) - 1)), dst.shape)
    ctx.write(dst, vals.reshape(dst.shape), sel, instr.accumulate)


@executes("isa", "bn_aggr")
def _bn_aggr(instr: Instr, ctx: Ctx) -> None:
    src = src_tile(instr, 0)
    store(instr, ctx, M.bn_aggr(tile(ctx, src, src.shape[0], False)))


@executes("isa", "max8")
def _max8(instr: Instr, ctx: Ctx) -> None:
    src = src_tile(instr, 0)
    store(instr, ctx, M.top8(tile(ctx, src, src.shape[0], False)))


def _sentinel(ctx: Ctx, acc: Access) -> int:
    return int(np.iinfo(dtypes.storage(dtype_of(ctx, acc))).max)


@executes("isa", "nc_find_index8")
def _nc_find_index8(instr: Instr, ctx: Ctx) -> None:
    data, vals = src_tile(instr, 0), src_tile(instr, 1)
    p = data.shape[0]
    d = tile(ctx, data, p, False)
    v = tile(ctx, vals, p, False)
    store(instr, ctx, M.find_index8(d, v, _sentinel(ctx, dst_of(instr))))


@executes("isa", "nc_match_replace8")
def _nc_match_replace8(instr: Instr, ctx: Ctx) -> None:
    data, vals, imm = src_tile(instr, 0), src_tile(instr, 1), src_const(instr, 2)
    p = data.shape[0]
    d = tile(ctx, data, p, False)
    v = tile(ctx, vals, p, False)
    idx_acc = instr.attr("dst_idx")
    sentinel = _sentinel(ctx, idx_acc) if idx_acc is not None else -1
    out, idx = M.match_replace8(d, v, float(imm.value), sentinel)
    write_res(ctx, instr, "dst_idx", idx)
    store(instr, ctx, out)
