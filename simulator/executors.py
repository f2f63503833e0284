"""The one registry of instruction executors, keyed like the IR: ``(kind, op)``.

``@executes("isa", "tensor_tensor")`` registers the reference interpreter's executor of one
``nki.isa`` instruction; ``@executes("dma")`` the executor of every op of an instruction kind.
``@lowers(...)`` registers a Numba backend lowering under the same keys (the code generator
hosts an instruction without one). ``@prepares("isa")`` registers a check every executor of a
kind runs first (the engines' destination rules of ``nki.isa``).

Executor modules (``simulator/language``, ``simulator/isa``, ``collectives``) register themselves
on import; ``interpreter`` imports them all."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nki.ir import Instr

if TYPE_CHECKING:
    from .memory import Ctx

Executor = Callable[[Instr, "Ctx"], None]
ANY = "*"  # an executor / lowering of every op of its kind

EXECUTORS: dict[tuple[str, str], Executor] = {}
LOWERINGS: dict[tuple[str, str], Callable[..., None]] = {}
PREPARE: dict[str, Executor] = {}
_RESOLVED: dict[tuple[str, str], Executor | None] = {}

# instruction kinds at which the instances of a launch wait for each other (``nl.all_reduce``)
COLLECTIVES = frozenset({"all_reduce", "lnc"})  # "lnc": between the cores of LNC=2


def executes(kind: str, op: str = ANY) -> Callable[[Executor], Executor]:
    """Register the interpreter's executor of instruction ``kind`` (one ``op`` or all)."""

    def deco(fn: Executor) -> Executor:
        EXECUTORS[(kind, op)] = fn
        _RESOLVED.clear()
        return fn

    return deco


def prepares(kind: str) -> Callable[[Executor], Executor]:
    """Register a check run before every executor of ``kind``."""

    def deco(fn: Executor) -> Executor:
        PREPARE[kind] = fn
        _RESOLVED.clear()
        return fn

    return deco


def lowers(kind: str, op: str = ANY) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register the Numba backend's lowering of instruction ``kind`` (one ``op`` or all)."""

    def deco(fn: Callable[..., None]) -> Callable[..., None]:
        LOWERINGS[(kind, op)] = fn
        return fn

    return deco


def _lookup(table: dict[tuple[str, str], Any], kind: str, op: str) -> Any:
    got = table.get((kind, op))
    return got if got is not None else table.get((kind, ANY))


def executor_of(instr: Instr) -> Executor | None:
    """The executor of ``instr`` (with its kind's preparation), or None when there is none."""
    key = (instr.kind, instr.op)
    if key in _RESOLVED:
        return _RESOLVED[key]
    fn = _lookup(EXECUTORS, instr.kind, instr.op)
    pre = PREPARE.get(instr.kind)
    if fn is not None and pre is not None:
        fn = _prepared(pre, fn)
    _RESOLVED[key] = fn
    return fn


def _prepared(pre: Executor, fn: Executor) -> Executor:
    def run(instr: Instr, ctx: Ctx) -> None:
        pre(instr, ctx)
        fn(instr, ctx)

    return run


def lowering_of(instr: Instr) -> Callable[..., None] | None:
    """The Numba lowering of ``instr``, or None (the instruction is hosted)."""
    return _lookup(LOWERINGS, instr.kind, instr.op)
