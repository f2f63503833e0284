"""Executors of the Scalar engine instructions: ``nisa.activation`` (with its optional
per-partition reduction into the engine's accumulator registers)."""

from __future__ import annotations

import numpy as np

from nki.ir import Instr
from nki.optable import OPS

from ..executors import executes
from ..memory import Ctx
from . import formulas as M
from .common import accumulators, f32, operand, store, write_res


@executes("isa", "activation")
def _activation(instr: Instr, ctx: Ctx) -> None:
    data, scale, bias = instr.srcs
    x = f32(ctx, data)
    p = x.shape[0]
    x2 = x.reshape(p, -1)
    sc = operand(ctx, scale, p)
    bi = operand(ctx, bias, p)
    with np.errstate(all="ignore"):
        y = np.asarray(OPS[instr.attr("op")].fn((x2 * sc + bi).astype(np.float32)))
    y = y.astype(np.float32)
    rop = instr.attr("reduce_op")
    if rop is not None:
        cmd = instr.attr("reduce_cmd", "idle")
        partial = (
            M.free_reduce(rop, y) if cmd in ("reduce", "reset_reduce", "load_reduce") else None
        )
        regs = accumulators(ctx, "scalar", cmd, rop, partial, p)
        write_res(ctx, instr, "reduce_res", regs, "scalar")
    store(instr, ctx, y)
