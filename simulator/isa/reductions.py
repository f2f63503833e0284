"""Executors of the Vector engine's reductions, scans and statistics along the free axes:
tensor_reduce, tensor_scalar_reduce, tensor_tensor_scan, tensor_scalar_cumulative, bn_stats and
bn_aggr (the accumulator registers: ``accumulators.py``)."""

from __future__ import annotations

import numpy as np

from nki.ir import Instr
from nki.optable import OPS

from .. import numerics
from ..executors import executes
from ..memory import Ctx
from . import formulas as M
from .accumulators import IDENTITY, accumulate, keep_rows, masked_out, registers, set_registers
from .common import dst_of, operand, src_tile, store, tile, undefined, write_res


@executes("isa", "tensor_reduce")
def _tensor_reduce(instr: Instr, ctx: Ctx) -> None:
    src = src_tile(instr, 0)
    op = OPS[instr.attr("op")]
    axes = tuple(instr.attr("axes"))
    # a classic mask is over the data: masked-out elements are neither read nor folded in
    sel = ctx.mask(instr, src.shape)
    sel = None if sel is None else np.broadcast_to(sel, src.shape)
    raw = ctx.read(src, sel)
    x = M.bits(raw) if op.bitvec else numerics.to_compute(raw)
    r = M.reduce(op.name, x, axes) if sel is None else M.masked_reduce(op.name, x, sel, axes)
    if instr.attr("negate"):
        r = -np.asarray(r, dtype=np.float32)
    # (a row with none selected keeps what it held)
    rows = None if sel is None else np.any(sel, axis=axes).reshape(dst_of(instr).shape)
    store(instr, ctx, r, op.bitvec, written=rows)


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
    # (a masked instruction folds in its selected elements, on its selected partitions)
    r_in, rows = masked_out(ctx, instr, r, op, p)
    if rows is None or rows.any():
        with keep_rows(ctx, "vector", rows):
            regs = accumulate(ctx, "vector", cmd, op, M.free_reduce(op, r_in), init)
        if instr.attr("reduce_res_negate"):
            regs = -regs  # the written value only; the registers keep their sign
        write_res(ctx, instr, "reduce_res", regs, "vector", rows)
    store(instr, ctx, r)


@executes("isa", "tensor_scalar_cumulative")
def _tensor_scalar_cumulative(instr: Instr, ctx: Ctx) -> None:
    src, o0, o1 = src_tile(instr, 0), instr.srcs[1], instr.srcs[2]
    p = src.shape[0]
    op0, op1, cmd = instr.attr("op0"), instr.attr("op1"), instr.attr("reduce_cmd")
    t = np.asarray(M.alu(op0, tile(ctx, src, p, False), operand(ctx, o0, p)), dtype=np.float32)
    t = np.broadcast_to(t, (p, t.shape[1]))
    unset = None
    if cmd == "reduce":
        reg = registers(ctx, "vector")[:p]
        if not ctx.state.get("accumulators.vector.set"):  # never set: undefined registers
            unset = np.ones(dst_of(instr).shape, dtype=bool)
    elif cmd == "load_reduce":
        reg = np.broadcast_to(operand(ctx, o1, p).reshape(-1), (p,)).astype(np.float32)
    else:  # reset_reduce, reset, idle: from the identity
        reg = np.full(p, IDENTITY[op1], dtype=np.float32)
    out = np.empty(t.shape, dtype=np.float32)
    with np.errstate(all="ignore"):
        if op1 == "subtract":  # reg = op0(x_i, imm0) - reg: not an associative fold
            for i in range(t.shape[1]):
                reg = (t[:, i] - reg).astype(np.float32)
                out[:, i] = reg
        else:  # commutative: op1(x_i, reg) == op1(reg, x_i), a left fold from reg
            ufunc = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum,
                     "minimum": np.minimum}[op1]  # fmt: skip
            seq = np.concatenate([reg[:, None], t], axis=1)
            out = ufunc.accumulate(seq, axis=1, dtype=np.float32)[:, 1:]
            if t.shape[1]:
                reg = out[:, -1]
    if cmd != "idle":
        regs = registers(ctx, "vector")
        regs[:p] = reg
        set_registers(ctx, "vector", regs)
    with undefined(ctx, instr, unset):
        store(instr, ctx, out)


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
    shape = dst_of(instr).shape
    written = np.broadcast_to(rows.reshape((p,) + (1,) * (len(shape) - 1)), shape)
    store(instr, ctx, M.bn_stats(x, keep), written=written)


@executes("isa", "bn_aggr")
def _bn_aggr(instr: Instr, ctx: Ctx) -> None:
    src = src_tile(instr, 0)
    store(instr, ctx, M.bn_aggr(tile(ctx, src, src.shape[0], False)))
