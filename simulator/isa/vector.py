"""Executors of the Vector engine's element-wise instructions (and their Scalar / GpSimd
variants): tensor-tensor / tensor-scalar ALU ops, reciprocal and exponential (whose sum goes to
the accumulator registers)."""

from __future__ import annotations

import numpy as np

from nki.ir import Instr
from nki.optable import OPS

from ..executors import executes
from ..memory import Ctx
from . import formulas as M
from .accumulators import accumulate, row_reduce
from .common import all_int, f32, operand, src_tile, store, tile, write_res


@executes("isa", "tensor_tensor")
def _tensor_tensor(instr: Instr, ctx: Ctx) -> None:
    a1, a2 = src_tile(instr, 0), src_tile(instr, 1)
    op = OPS[instr.attr("op")]
    p = a1.shape[0]
    exact = instr.attr("engine") == "gpsimd" and op.exact_int and all_int(ctx, a1, a2)
    x = tile(ctx, a1, p, op.bitvec, exact)
    y = tile(ctx, a2, p, op.bitvec, exact)
    store(instr, ctx, M.alu(op.name, x, y), op.bitvec)


@executes("isa", "tensor_scalar")
def _tensor_scalar(instr: Instr, ctx: Ctx) -> None:
    data, o0, o1 = src_tile(instr, 0), instr.srcs[1], instr.srcs[2]
    p = data.shape[0]
    op0, op1 = instr.attr("op0"), instr.attr("op1")
    bv = OPS[op0].bitvec
    # GpSimd's native integer path: integer-only arithmetic is exact (no fp32 detour)
    ops_exact = OPS[op0].exact_int and (op1 is None or OPS[op1].exact_int)
    ex = instr.attr("engine") == "gpsimd" and ops_exact and all_int(ctx, data, o0, o1)
    x = tile(ctx, data, p, bv, ex)
    r = M.alu(op0, x, operand(ctx, o0, p, bv, ex), instr.attr("reverse0"))
    if op1 is not None:
        r = M.alu(op1, r, operand(ctx, o1, p, bv, ex), instr.attr("reverse1"))
    store(instr, ctx, r, bv)


@executes("isa", "scalar_tensor_tensor")
def _scalar_tensor_tensor(instr: Instr, ctx: Ctx) -> None:
    data, o0, o1 = src_tile(instr, 0), instr.srcs[1], src_tile(instr, 2)
    p = data.shape[0]
    op0, op1 = instr.attr("op0"), instr.attr("op1")
    bv = OPS[op0].bitvec or OPS[op1].bitvec
    x = tile(ctx, data, p, bv)
    r = M.alu(op0, x, operand(ctx, o0, p, bv), instr.attr("reverse0"))
    r = M.alu(op1, r, tile(ctx, o1, p, bv), instr.attr("reverse1"))
    store(instr, ctx, r, bv)


@executes("isa", "reciprocal")
def _reciprocal(instr: Instr, ctx: Ctx) -> None:
    x = f32(ctx, instr.srcs[0])
    with np.errstate(all="ignore"):
        store(instr, ctx, np.float32(1.0) / x)


@executes("isa", "exponential")
def _exponential(instr: Instr, ctx: Ctx) -> None:
    src, mv, init = src_tile(instr, 0), instr.srcs[1], instr.srcs[2]
    p = src.shape[0]
    x = tile(ctx, src, p, False)
    with np.errstate(all="ignore"):
        y = np.exp(x - operand(ctx, mv, p)).astype(np.float32)
    cmd = instr.attr("reduce_cmd")
    partial = row_reduce("add", y)
    regs = accumulate(ctx, "vector", cmd, "add", partial, operand(ctx, init, p))
    write_res(ctx, instr, "reduce_res", regs, "vector")
    store(instr, ctx, y)
