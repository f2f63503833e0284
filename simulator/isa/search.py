"""Executors of the search instructions: ``max8``, ``nc_find_index8`` and
``nc_match_replace8``."""

from __future__ import annotations

import numpy as np

from nki import dtypes
from nki.ir import Access, Instr

from .. import numerics
from ..executors import executes
from ..memory import Ctx, eval_mask
from . import formulas as M
from .common import dst_of, dtype_of, src_const, src_tile, store, tile, write_res


def _searched(instr: Instr, ctx: Ctx, src: Access, fill: float) -> np.ndarray:
    """The (P, F) source of a search, ``fill`` where its source mask (``src_mask``, a mask over
    the source's elements) leaves an element out."""
    x = tile(ctx, src, src.shape[0], False)
    keep = instr.attr("src_mask")
    if keep is None:
        return x
    sel = eval_mask(keep, src.shape, ctx.env).reshape(x.shape)
    return np.where(sel, x, np.float32(fill))


@executes("isa", "max8")
def _max8(instr: Instr, ctx: Ctx) -> None:
    src = src_tile(instr, 0)
    store(instr, ctx, M.top8(_searched(instr, ctx, src, -np.inf)))


def _sentinel(ctx: Ctx, acc: Access) -> int:
    return int(np.iinfo(dtypes.storage(dtype_of(ctx, acc))).max)


@executes("isa", "nc_find_index8")
def _nc_find_index8(instr: Instr, ctx: Ctx) -> None:
    data, vals = src_tile(instr, 0), src_tile(instr, 1)
    p = data.shape[0]
    d = _searched(instr, ctx, data, np.nan)  # NaN never matches
    v = tile(ctx, vals, p, False)
    store(instr, ctx, M.find_index8(d, v, _sentinel(ctx, dst_of(instr))))


@executes("isa", "nc_match_replace8")
def _nc_match_replace8(instr: Instr, ctx: Ctx) -> None:
    data, vals, imm = src_tile(instr, 0), src_tile(instr, 1), src_const(instr, 2)
    p = data.shape[0]
    v = tile(ctx, vals, p, False)
    idx_acc = instr.attr("dst_idx")
    sentinel = _sentinel(ctx, idx_acc) if idx_acc is not None else -1
    sel = ctx.mask(instr, data.shape)
    rows = None
    if sel is None:
        d = tile(ctx, data, p, False)
    else:  # masked-out elements are neither read nor searched; a row with none keeps dst_idx
        keep = np.broadcast_to(sel, data.shape)
        d = numerics.to_compute(ctx.read(data, keep)).reshape(p, -1)
        keep = keep.reshape(d.shape)
        d = np.where(keep, d, np.float32(np.nan))  # (NaN never matches)
        rows = keep.any(axis=1)
    out, idx = M.match_replace8(d, v, float(imm.value), sentinel)
    write_res(ctx, instr, "dst_idx", idx, rows=rows)
    store(instr, ctx, out)
