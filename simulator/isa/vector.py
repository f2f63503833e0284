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
from .common import all_int, operand, store, tile, write_res


@executes("isa", "tensor_tensor")
def _tensor_tensor(instr: Instr, ctx: Ctx) -> None:
    a1, a2 = instr.srcs
    op = OPS[instr.attr("op")]
    p = a1.shape[0]  # type: ignore[union-attr]
    exact = instr.attr("engine") == "gpsimd" and op.exact_int and all_int(ctx, a1, a2)
    x = tile(ctx, a1, p, op.bitvec, exact)  # type: ignore[arg-type]
    y = tile(ctx, a2, p, op.bitvec, exact)  # type: ignore[arg-type]
    store(instr, ctx, M.alu(op.name, x, y), op.bitvec)


@executes("isa", "tensor_scalar")
def _tensor_scalar(instr: Instr, ctx: Ctx) -> None:
    data, o0, o1 = instr.srcs
    p = data.shape[0]  # type: ignore[union-attr]
    op0, op1 = instr.attr("op0"), instr.attr("op1")
    bv = OPS[op0].bitvec
    # GpSimd's native integer path: integer-only arithmetic is exact (no fp32 detour)
    ops_exact = OPS[op0].exact_int and (op1 is None or OPS[op1].exact_int)
    ex = instr.attr("engine") == "gpsimd" and ops_exact and all_int(ctx, data, o0, o1)
    x = tile(ctx, data, p, bv, ex)  # type: ignore[arg-type]
    r = M.alu(op0, x, operand(ctx, o0, p, bv, ex), instr.attr("reverse0"))
    if op1 is not None:
        r = M.alu(op1, r, operand(ctx, o1, p, bv, ex), instr.attr("reverse1"))
    store(instr, ctx, r, bv)


@executes("isa", "scalar_tensor_tensor")
def _scalar_tensor_tensor(instr: Instr, ctx: Ctx) -> None:
    data, o0, o1 = instr.srcs
    p = data.shape[0]  # type: ignore[union-attr]
    op0, op1 = instr.attr("op0"), instr.attr("op1")
    bv = OPS[op0].bitvec or OPS[op1].bitvec
    x = tile(ctx, data, p, bv)  # type: ignore[arg-type]
    r = M.alu(op0, x, operand(ctx, o0, p, bv), instr.attr("reverse0"))
    r = M.alu(op1, r, tile(ctx, o1, p, bv), instr.attr("reverse1"))  # type: ignore[arg-type]
    store(instr, ctx, r, bv)


@executes("isa", "tensor_scalar_reduce")
def _tensor_scalar_reduce(instr: Instr, ctx: Ctx) -> None:
    data, o0 = instr.srcs
    p = data.shape[0]  # type: ignore[union-attr]
    x = tile(ctx, data, p, False)  # type: ignore[arg-type]
    r = np.asarray(M.alu(instr.attr("op0"), x, operand(ctx, o0, p), instr.attr("reverse0")))
    r = r.astype(np.float32)
    write_res(ctx, instr, "reduce_res", M.free_reduce(instr.attr("reduce_op"), r))
    store(instr, ctx, r)


@executes("isa", "tensor_reduce")
def _tensor_reduce(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    op = OPS[instr.attr("op")]
    raw = ctx.read(src)  # type: ignore[arg-type]
    x = M.bits(raw) if op.bitvec else numerics.to_compute(raw)
    r = M.reduce(op.name, x, tuple(instr.attr("axes")))
    if instr.attr("negate"):
        r = -np.asarray(r, dtype=np.float32)
    store(instr, ctx, r, op.bitvec)


@executes("isa", "tensor_tensor_scan")
def _tensor_tensor_scan(instr: Instr, ctx: Ctx) -> None:
    a0, a1, init = instr.srcs
    p = a0.shape[0]  # type: ignore[union-attr]
    d0 = tile(ctx, a0, p, False)  # type: ignore[arg-type]
    d1 = tile(ctx, a1, p, False)  # type: ignore[arg-type]
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
