"""The engines' accumulator registers: 128 per engine (one per partition lane, fp32), kept in
the instance's engine state (``ctx.state["accumulators.<engine>"]``), so every instruction of
one engine reads and writes the same lanes across instructions. ``reduce_cmd`` says what an
instruction does with them (idle, reset, reduce, reset_reduce, load_reduce); registers never
set hold NaN (their hardware content is undefined)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from nki.ir import Instr
from nki.optable import OPS

from ..memory import Ctx
from . import formulas as M

IDENTITY = M.IDENTITY  # (what a reset register holds)


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


def accumulators(ctx: Ctx, engine: str, cmd: str, op: str, partial: np.ndarray | None, p: int):
    """The engine's registers after ``cmd`` as activation, select_reduce and range_select apply
    it (``partial`` None: the instruction folds nothing in; load_reduce resets like
    reset_reduce); :func:`accumulate` is the current API instructions' reading."""
    key = f"accumulators.{engine}"
    ident = OPS[op].identity if OPS[op].identity is not None else 0.0
    regs = ctx.state.get(key)
    if regs is None:  # never reset: undefined on hardware, NaN here so it shows
        regs = np.full(128, np.nan, dtype=np.float32)
    regs = regs.copy()
    if cmd == "reset":
        regs[:] = ident
        ctx.state[key + ".set"] = True
    elif cmd in ("reset_reduce", "load_reduce") and partial is not None:
        regs[:] = ident
        regs[:p] = partial
        ctx.state[key + ".set"] = True
    elif cmd == "reduce" and partial is not None:
        regs[:p] = M.alu(op, regs[:p], partial)
    ctx.state[key] = regs
    return regs[:p]


def masked_out(ctx: Ctx, instr: Instr, y: np.ndarray, op: str, p: int) -> tuple[np.ndarray, Any]:
    """A masked instruction's reduction input: ``y`` (P, F) with the elements its mask leaves
    out replaced by ``op``'s identity (the instruction does not process them), and the
    partitions with an element selected (None: unmasked). A partition with none keeps its
    register and its ``reduce_res`` row (see :func:`keep_rows`)."""
    dst = instr.dst
    sel = None if instr.mask is None or dst is None else ctx.mask(instr, dst.shape)
    if sel is None:
        return y, None
    s2 = np.broadcast_to(sel, dst.shape).reshape(p, -1)
    ident = np.float32(IDENTITY.get(op, 0.0))
    return np.where(s2, np.asarray(y, dtype=np.float32).reshape(p, -1), ident), s2.any(axis=1)


@contextmanager
def keep_rows(ctx: Ctx, engine: str, rows: Any) -> Iterator[None]:
    """Around a masked instruction's update of the ``engine``'s registers: put back those of
    the partitions it left out (``rows``: :func:`masked_out`'s partitions; None: unmasked, no
    copy taken)."""
    before = None if rows is None else registers(ctx, engine)
    yield
    key = f"accumulators.{engine}"
    regs = ctx.state.get(key)
    if before is not None and regs is not None:
        out = np.array(regs, dtype=np.float32)
        left = np.flatnonzero(~rows)
        out[left] = before[left]
        ctx.state[key] = out
