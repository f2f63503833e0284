"""Collectives between SPMD instances (``nl.all_reduce``).

An instance that reaches a collective reads its input and stops (the interpreter's walk is a
generator, see ``instances.py``); when every running instance has stopped or ended,
``combine`` reduces the inputs of each group (the instances that differ only along the
collective's program axes) and the instances go on, each writing the group's result into its
own tile."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from nki.errors import NKIRuntimeError
from nki.ir import Access, Instr, LoopSym
from nki.optable import OPS

from .executors import executes
from .isa.formulas import alu
from .language.common import is_int_access
from .memory import Ctx


def _key(instr: Instr) -> tuple[str, int]:
    return ("all_reduce", id(instr))


@executes("all_reduce")
def _all_reduce(instr: Instr, ctx: Ctx) -> None:
    """First call: this instance's input (fp32, or exact int64 for integer tiles). Second
    call, after ``combine``: write the group's result."""
    src = instr.srcs[0]
    assert isinstance(src, Access) and instr.dst is not None
    sel = ctx.mask(instr, src.shape)
    result = ctx.state.pop(_key(instr) + ("result",), None)
    if result is not None:
        ctx.write(instr.dst, result, sel, None)
        return
    exact = OPS[instr.op].exact_int and is_int_access(src, ctx)
    ctx.state[_key(instr)] = member_input(instr.op, ctx.value(src, sel, exact_int=exact), sel)


def member_input(op: str, x: np.ndarray, sel: np.ndarray | None) -> np.ndarray:
    """One member's input to the group's reduction: its masked-off lanes take no part (they
    hold the op's identity)."""
    if sel is None:
        return x
    return np.where(sel, x, np.asarray(OPS[op].identity, dtype=x.dtype))


def fold(op: str, inputs: Iterable[np.ndarray]) -> np.ndarray:
    """The group's result: the members' inputs folded left with the engine ALU, in the order
    given (the members' grid coordinates)."""
    it = iter(inputs)
    acc = next(it)
    for x in it:
        acc = alu(op, acc, x)
    return acc


def combine(
    waiting: dict[tuple[int, ...], Instr], ctxs: dict[tuple[int, ...], Ctx], grid: tuple[int, ...]
) -> None:
    """Reduce the inputs of every group of instances stopped at the same collective (in the
    order of their grid coordinates) and hand each member the result."""
    groups: dict[tuple[Any, ...], list[tuple[int, ...]]] = {}
    for inst, instr in waiting.items():
        axes = instr.attr("axes")
        rest = tuple(v for a, v in enumerate(inst) if a not in axes)
        iters = tuple(sorted((str(s), v) for s, v in ctxs[inst].env.items()
                             if isinstance(s, LoopSym)))  # fmt: skip
        groups.setdefault((id(instr), rest, iters), []).append(inst)
    for members in groups.values():
        members.sort()
        instr = waiting[members[0]]
        axes = instr.attr("axes")
        size = math.prod(grid[a] for a in axes) if grid else 1
        if len(members) != size:
            _mismatch(instr, members, axes, grid, waiting)
        acc = fold(instr.op, [ctxs[m].state.pop(_key(instr)) for m in members])
        for m in members:
            ctxs[m].state[_key(instr) + ("result",)] = acc


def _mismatch(
    instr: Instr,
    members: list[tuple[int, ...]],
    axes: tuple[int, ...],
    grid: tuple[int, ...],
    waiting: dict[tuple[int, ...], Instr],
) -> None:
    here = set(members)
    first = members[0]
    group = [
        inst
        for inst in np.ndindex(*grid)
        if all(inst[a] == first[a] for a in range(len(grid)) if a not in axes)
    ]
    missing = [g for g in group if g not in here]
    elsewhere = [
        f"{g} at line {waiting[g].loc.line if waiting[g].loc else '?'}"
        for g in missing
        if g in waiting
    ]
    raise NKIRuntimeError(
        f"'{instr.api or 'nl.all_reduce'}' over program axes {list(axes)}: instances {members} "
        f"reached it but {missing} of the same group did not"
        + (f" (waiting at another collective: {', '.join(elsewhere)})" if elsewhere else "")
        + "; every instance of the group must execute the same collectives in the same order",
        code="err_collective_mismatch",
        loc=instr.loc,
        instance=first,
    )
