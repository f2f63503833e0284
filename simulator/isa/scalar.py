"""Executors of the Scalar engine instructions: ``nisa.activation`` and ``nisa.activate2``
(with their optional per-partition reduction into the engine's accumulator registers)."""

from __future__ import annotations

import numpy as np

from nki.ir import Instr
from nki.optable import OPS, activation_function

from ..executors import executes
from ..memory import Ctx
from . import formulas as M
from .accumulators import accumulate, accumulators, keep_rows, masked_out, row_reduce
from .common import f32, operand, src_tile, store, tile, write_res


@executes("isa", "activation")
def _activation(instr: Instr, ctx: Ctx) -> None:
    data, scale, bias = instr.srcs
    x = f32(ctx, data)
    p = x.shape[0]
    x2 = x.reshape(p, -1)
    sc = operand(ctx, scale, p)
    bi = operand(ctx, bias, p)
    with np.errstate(all="ignore"):
        y = np.asarray(activation_function(instr.attr("op"))((x2 * sc + bi).astype(np.float32)))
    y = y.astype(np.float32)
    rop = instr.attr("reduce_op")
    if rop is not None:
        cmd = instr.attr("reduce_cmd", "idle")
        # (a masked instruction folds in its selected elements, on its selected partitions)
        y_in, rows = masked_out(ctx, instr, y, rop, p)
        if rows is None or rows.any():
            partial = (
                M.free_reduce(rop, y_in)
                if cmd in ("reduce", "reset_reduce", "load_reduce")
                else None
            )
            with keep_rows(ctx, "scalar", rows):
                regs = accumulators(ctx, "scalar", cmd, rop, partial, p)
            write_res(ctx, instr, "reduce_res", regs, "scalar", rows)
    store(instr, ctx, y)


@executes("isa", "activate2")
def _activate2(instr: Instr, ctx: Ctx) -> None:
    data, i0, i1, rp = src_tile(instr, 0), instr.srcs[1], instr.srcs[2], instr.srcs[3]
    p = data.shape[0]
    t = tile(ctx, data, p, False)
    op0, op1 = instr.attr("op0"), instr.attr("op1")
    if op0 != "bypass":
        t = np.asarray(M.alu(op0, t, operand(ctx, i0, p), instr.attr("reverse0")), np.float32)
    if op1 != "bypass":
        t = np.asarray(M.alu(op1, t, operand(ctx, i1, p), instr.attr("reverse1")), np.float32)
    fn = instr.attr("op")
    with np.errstate(all="ignore"):
        if fn == "prelu":
            y = np.where(t >= 0, t, operand(ctx, rp, p) * t)
        else:
            y = OPS[fn].fn(t)
    y = np.broadcast_to(np.asarray(y, dtype=np.float32), (p, tile_width(data)))
    rop = instr.attr("reduce_op")
    if rop is not None:
        regs = accumulate(ctx, "scalar", instr.attr("reduce_cmd"), rop, row_reduce(rop, y))
        write_res(ctx, instr, "reduce_res", regs, "scalar")
    store(instr, ctx, y)


def tile_width(acc) -> int:
    """Elements per partition of an access."""
    return int(np.prod(acc.shape[1:], dtype=np.int64))
