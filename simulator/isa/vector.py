"""Executors of the Vector engine instructions (and their Scalar / GpSimd variants):
element-wise tensor-tensor / tensor-scalar ALU ops, reductions and scans."""

from __future__ import annotations

import numpy as np

from nki.ir import Instr
from nki.optable import OPS

from .. import numerics
from ..executors import executes
from ..memory import Ctx
from . import formulas as M
from .common import all_int, operand, src_tile, store, tile, write_res
from .current_vector import accumulate


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


@executes("isa", "tensor_scalar_reduce")
def _tensor_scalar_reduce(instr: Instr, ctx: Ctx) -> None:
    data, o0 = src_tile(instr, 0), instr.srcs[1]
    p = data.shape[0]
    x = tile(ctx, data, p, False)
    r = np.asarray(M.alu(instr.attr("op0"), x, operand(ctx, o0, p), instr.attr("reverse0")))
    r = r.astype(np.float32)
    # the reduction goes through the Vector engine's accumulator registers (shared with
    # exponential, tensor_scalar_cumulative, select_reduce, range_select); reduce_res reads them
    op, cmd = instr.attr("reduce_op"), instr.attr("reduce_cmd", "reset_reduce")
    # load_reduce's reduce_init (current API): a scalar or (P, 1) fp32 tile, the third source
    init = operand(ctx, instr.srcs[2], p) if len(instr.srcs) > 2 else None
    regs = accumulate(ctx, "vector", cmd, op, M.free_reduce(op, r), init)
    if instr.attr("reduce_res_negate"):
        regs = -regs  # the written value only; the registers keep their sign
    write_res(ctx, instr, "reduce_res", regs, "vector")
    store(instr, ctx, r)


@executes("isa", "tensor_reduce")
def _tensor_reduce(instr: Instr, ctx: Ctx) -> None:
    src = src_tile(instr, 0)
    op = OPS[instr.attr("op")]
    raw = ctx.read(src)
    x = M.bits(raw) if op.bitvec else numerics.to_compute(raw)
    r = M.reduce(op.name, x, tuple(instr.attr("axes")))
    if instr.attr("negate"):
        r = -np.asarray(r, dtype=np.float32)
    store(instr, ctx, r, op.bitvec)


@executes("isa", "tensor_tensor_scan")
def _tensor_tensor_scan(instr: Instr, ctx: Ctx) -> None:
    a0, a1, init = src_tile(instr, 0), src_tile(instr, 1), instr.srcs[2]
    p = a0.shape[0]
    d0 = tile(ctx, a0, p, False)
    d1 = tile(ctx, a1, p, False)
    iv = operand(ctx, init, p)
    r = M.scan(
        d0,
        d1,
        iv,
        instr.attr("op0"),
        instr.attr("op1"),
        instr.attr("reverse0"),
        instr.attr("reverse1"),
    )
    store(instr, ctx, r)
