"""Executors of the current-API-only Vector / Scalar engine instructions: ``exponential``,
``tensor_scalar_cumulative`` and ``activate2``, and the accumulator-register commands they
share with ``activation`` (Scalar engine) and ``select_reduce`` / ``range_select`` (Vector
engine): the registers live in the instance's engine state under the same keys as
``common.accumulators``, so every instruction of one engine reads and writes the same 128
lanes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

from nki.ir import Instr
from nki.optable import OPS

from ..executors import executes
from ..memory import Ctx
from . import formulas as M
from .common import dst_of, operand, src_tile, store, tile, write_res

IDENTITY: dict[str, float] = {
    "add": 0.0,
    "subtract": 0.0,
    "multiply": 1.0,
    "maximum": float("-inf"),
    "minimum": float("inf"),
    "abs_max": 0.0,
    "abs_min": float("inf"),
}


def fold(op: str, acc: np.ndarray, new: np.ndarray) -> np.ndarray:
    """One accumulation step ``op(acc, new)`` in fp32. abs_max / abs_min keep the signed value
    of larger / smaller magnitude; on equal magnitudes the newer value."""
    with np.errstate(all="ignore"):
        if op == "abs_max":
            return np.where(np.abs(new) >= np.abs(acc), new, acc).astype(np.float32)
        if op == "abs_min":
            return np.where(np.abs(new) <= np.abs(acc), new, acc).astype(np.float32)
        return np.asarray(M.alu(op, acc, new), dtype=np.float32)


def row_reduce(op: str, x2d: np.ndarray) -> np.ndarray:
    """Per-partition reduction of a (P, F) fp32 array -> (P,)."""
    if op in ("abs_max", "abs_min"):
        rev = x2d[:, ::-1]  # the later of equal magnitudes wins, as in ``fold``
        pick = np.argmax if op == "abs_max" else np.argmin
        j = pick(np.abs(rev), axis=1)
        return rev[np.arange(x2d.shape[0]), j].astype(np.float32)
    return np.asarray(M.free_reduce(op, x2d), dtype=np.float32)


def registers(ctx: Ctx, engine: str) -> np.ndarray:
    """A copy of the engine's 128 accumulator registers (NaN where never set: their hardware
    content is undefined)."""
    regs = ctx.state.get(f"accumulators.{engine}")
    return np.full(128, np.nan, dtype=np.float32) if regs is None else regs.copy()


@contextlib.contextmanager
def undefined(ctx: Ctx, instr: Instr, lanes: np.ndarray | None) -> Iterator[None]:
    """Writes inside the block mark ``lanes`` (a mask of the written tile; None: none) as
    uninitialised data computed at ``instr`` (reported when read under checks="full")."""
    if lanes is None or not ctx.full_checks:
        yield
        return
    poison = ctx.poison
    saved = poison.mask, poison.root
    poison.mask, poison.root = lanes.copy(), instr.loc
    try:
        yield
    finally:
        poison.mask, poison.root = saved


def set_registers(ctx: Ctx, engine: str, regs: np.ndarray) -> None:
    ctx.state[f"accumulators.{engine}"] = regs.astype(np.float32)
    ctx.state[f"accumulators.{engine}.set"] = True


def accumulate(
    ctx: Ctx,
    engine: str,
    cmd: str,
    op: str,
    partial: np.ndarray,
    init: np.ndarray | None = None,
) -> np.ndarray:
    """Apply ``reduce_cmd`` with this instruction's per-partition ``partial`` (P,) values to
    the engine's registers; returns the first P registers afterwards."""
    p = partial.shape[0]
    regs = registers(ctx, engine)
    if cmd == "idle":
        return regs[:p]
    if cmd == "reset":
        regs[:] = IDENTITY[op]
    elif cmd == "reset_reduce":
        regs[:] = IDENTITY[op]
        regs[:p] = partial
    elif cmd == "load_reduce":
        start = np.broadcast_to(np.asarray(init, dtype=np.float32).reshape(-1), (p,))
        regs[:p] = fold(op, start, partial)
    else:  # reduce
        regs[:p] = fold(op, regs[:p], partial)
    set_registers(ctx, engine, regs)
    return regs[:p]


@executes("isa", "exponential")
def _exponential(instr: Instr, ctx: Ctx) -> None:
    src, mv, init = src_tile(instr, 0), instr.srcs[1], instr.srcs[2]
    p = src.shape[0]
    x = tile(ctx, src, p, False)
    with np.errstate(all="ignore"):
        y = np.exp(x - operand(ctx, mv, p)).astype(np.float32)
    cmd = instr.attr("reduce_cmd")
    partial = np.sum(y, axis=1, dtype=np.float32)
    regs = accumulate(ctx, "vector", cmd, "add", partial, operand(ctx, init, p))
    write_res(ctx, instr, "reduce_res", regs, "vector")
    store(instr, ctx, y)


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
