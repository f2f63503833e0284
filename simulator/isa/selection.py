"""Executors of the copy / selection instructions: ``tensor_copy`` (plain and predicated),
``select_reduce``, ``range_select`` (whose max goes to the Vector accumulators) and
``nc_stream_shuffle``."""

from __future__ import annotations

import numpy as np

from nki.errors import NKIRuntimeError
from nki.ir import Const, Instr

from .. import numerics
from ..executors import executes
from ..memory import Ctx
from . import formulas as M
from .accumulators import accumulators, keep_rows, masked_out
from .common import dst_of, dtype_of, operand, src_const, src_tile, store, tile, write_res


@executes("isa", "tensor_copy")
def _tensor_copy(instr: Instr, ctx: Ctx) -> None:
    src = src_tile(instr, 0)
    raw = ctx.read(src)
    same = dtype_of(ctx, src) == dtype_of(ctx, dst_of(instr))
    if instr.attr("exact") and same:
        store(instr, ctx, raw)  # bit-exact copy
    else:
        store(instr, ctx, numerics.to_compute(raw))  # through fp32


@executes("isa", "tensor_copy_predicated")
def _tensor_copy_predicated(instr: Instr, ctx: Ctx) -> None:
    src, pred = instr.srcs[0], src_tile(instr, 1)
    dst = instr.dst
    assert dst is not None
    keep = ctx.read(pred).reshape(dst.shape) != 0
    if instr.attr("reverse_pred"):
        keep = ~keep
    m = ctx.mask(instr)
    sel = keep if m is None else keep & m
    if isinstance(src, Const):
        vals = np.broadcast_to(np.asarray(src.value), dst.shape)
    elif src.shape[0] == dst.shape[0] and int(np.prod(src.shape)) == dst.shape[0] != int(
        np.prod(dst.shape)
    ):
        vals = np.broadcast_to(
            ctx.read(src).reshape(dst.shape[0], *([1] * (len(dst.shape) - 1))), dst.shape
        )
    else:
        vals = ctx.read(src).reshape(dst.shape)
    ctx.write(dst, vals, sel)


@executes("isa", "select_reduce")
def _select_reduce(instr: Instr, ctx: Ctx) -> None:
    pred, on_true, on_false = src_tile(instr, 0), src_tile(instr, 1), instr.srcs[2]
    dst = instr.dst
    assert dst is not None
    p = on_true.shape[0]
    keep = ctx.read(pred).reshape(p, -1) != 0
    if instr.attr("reverse_pred"):
        keep = ~keep
    t = tile(ctx, on_true, p, False)
    r = np.where(keep, t, operand(ctx, on_false, p)).astype(np.float32)
    _vector_accumulate(instr, ctx, r, p)
    store(instr, ctx, r)


def _vector_accumulate(instr: Instr, ctx: Ctx, r: np.ndarray, p: int) -> None:
    cmd = instr.attr("reduce_cmd", "idle")
    if instr.attr("reduce_res") is None and cmd == "idle":
        return
    # (a masked instruction folds in its selected elements, on its selected partitions)
    r_in, rows = masked_out(ctx, instr, r, "maximum", p)
    if rows is not None and not rows.any():
        return
    partial = (
        M.free_reduce("maximum", r_in) if cmd in ("reduce", "reset_reduce", "load_reduce") else None
    )
    with keep_rows(ctx, "vector", rows):
        regs = accumulators(ctx, "vector", cmd, "maximum", partial, p)
    write_res(ctx, instr, "reduce_res", regs, "vector", rows)


@executes("isa", "range_select")
def _range_select(instr: Instr, ctx: Ctx) -> None:
    src, b0, b1 = src_tile(instr, 0), instr.srcs[1], instr.srcs[2]
    fill = src_const(instr, 3)
    p = src.shape[0]
    x = tile(ctx, src, p, False)
    j = np.arange(x.shape[1], dtype=np.float32)[None, :] + np.float32(instr.attr("range_start"))
    keep = np.asarray(M.alu(instr.attr("comp_op0"), j, operand(ctx, b0, p))) & np.asarray(
        M.alu(instr.attr("comp_op1"), j, operand(ctx, b1, p))
    )
    r = np.where(keep, x, np.float32(fill.value)).astype(np.float32)
    _vector_accumulate(instr, ctx, r, p)
    store(instr, ctx, r)


@executes("isa", "nc_stream_shuffle")
def _nc_stream_shuffle(instr: Instr, ctx: Ctx) -> None:
    src = src_tile(instr, 0)
    dst = instr.dst
    assert dst is not None
    p, dparts = src.shape[0], dst.shape[0]  # a 1-partition source may fill 32 (broadcast)
    raw = ctx.read(src).reshape(p, -1)
    out = np.zeros((dparts, raw.shape[1]), dtype=raw.dtype)
    rows = np.zeros(dparts, dtype=bool)
    shuffle = instr.attr("shuffle")
    for q in range(0, max(dparts, 1), 32):
        for i, m in enumerate(shuffle):
            dp, sp = q + i, q + m
            if m == 255 or dp >= dparts:
                continue
            if sp >= p:
                raise NKIRuntimeError(
                    f"nisa.nc_stream_shuffle: shuffle_mask[{i}] = {m} reads partition {sp} "
                    f"beyond the {p} partitions of the source",
                    code="err_invalid_shuffle_mask",
                )
            out[dp] = raw[sp]
            rows[dp] = True
    sel = np.broadcast_to(rows.reshape(dparts, *([1] * (len(dst.shape) - 1))), dst.shape)
    m = ctx.mask(instr)
    ctx.write(dst, out.reshape(dst.shape), sel if m is None else sel & m)
