"""The one registry of instruction executors for every backend, keyed like the IR: ``(kind, op)``.

Each backend of ``backends.py`` has, per key, at most one entry: its executor and, optionally, a
``declines`` predicate saying why the backend does not run a given instruction of that key
(None: it runs it). An instruction a backend has no entry for, or whose entry declines it, is
hosted by that backend: run by the reference interpreter's executor.

* ``@executes("isa", "tensor_tensor")`` registers the interpreter's executor of one ``nki.isa``
  instruction; ``@executes("dma")`` the executor of every op of an instruction kind;
  ``@executes("ew", backend="batched", declines=...)`` the batched backend's.
* ``@lowers(...)`` registers the Numba backend's entry: a lowering (it generates code for the
  instruction instead of running it; the code generator hosts an instruction without one).
* ``@prepares("isa")`` registers a check every executor of a kind runs first, on every backend
  (the engines' destination rules of ``nki.isa``). A check reads only the instruction and
  ``ctx.decl`` (tensor declarations), so a backend may run it once per traced kernel
  (``checked_once``).

Lookups are cached per backend and key. Executor modules register themselves on import:
``interpreter`` imports those of ``simulator/language``, ``simulator/isa`` and ``collectives``,
each backend package its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from nki.errors import NKIError
from nki.ir import Instr, TensorDecl

from .backends import BACKENDS, REFERENCE, name_of

if TYPE_CHECKING:
    from .memory import Ctx

Executor = Callable[[Instr, "Ctx"], None]
Declines = Callable[[Instr], "str | None"]  # why a backend does not run it (None: it does)
Key = tuple[str, str]
ANY = "*"  # an executor / lowering of every op of its kind
NUMBA = name_of("simulator.compiled")  # the backend whose entries are lowerings (``lowers``)


class Entry(NamedTuple):
    run: Callable[..., None]
    declines: Declines | None


_RUNS: dict[str, dict[Key, Callable[..., None]]] = {b.name: {} for b in BACKENDS}
_DECLINES: dict[str, dict[Key, Declines]] = {b.name: {} for b in BACKENDS}
PREPARE: dict[str, Executor] = {}
_ENTRIES: dict[tuple[str, str, str], Entry | None] = {}  # (backend, kind, op) -> entry
_RESOLVED: dict[tuple[str, str, str], Callable[..., None] | None] = {}  # ... -> prepared run

EXECUTORS = _RUNS[REFERENCE]  # the interpreter's executors
LOWERINGS = _RUNS[NUMBA]  # the Numba backend's lowerings

# instruction kinds at which the instances of a launch wait for each other (``nl.all_reduce``)
COLLECTIVES = frozenset({"all_reduce", "lnc"})  # "lnc": between the cores of LNC=2


def executes(
    kind: str, op: str = ANY, *, backend: str = REFERENCE, declines: Declines | None = None
) -> Callable[[Executor], Executor]:
    """Register ``backend``'s executor of instruction ``kind`` (one ``op`` or all), with the
    predicate that says which of those instructions it declines (hosts)."""
    runs, why = _RUNS[backend], _DECLINES[backend]  # (a KeyError: not a registered backend)

    def deco(fn: Executor) -> Executor:
        runs[(kind, op)] = fn
        if declines is not None:
            why[(kind, op)] = declines
        _ENTRIES.clear()
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
    return executes(kind, op, backend=NUMBA)


def entries(backend: str) -> dict[Key, Entry]:
    """Every entry ``backend`` registered, by key."""
    return {k: Entry(fn, _DECLINES[backend].get(k)) for k, fn in _RUNS[backend].items()}


def entry_of(instr: Instr, backend: str = REFERENCE) -> Entry | None:
    """``backend``'s entry for ``instr`` (its op's, else its kind's), or None."""
    key = (backend, instr.kind, instr.op)
    if key in _ENTRIES:
        return _ENTRIES[key]
    runs = _RUNS[backend]
    at = (instr.kind, instr.op) if (instr.kind, instr.op) in runs else (instr.kind, ANY)
    fn = runs.get(at)
    got = None if fn is None else Entry(fn, _DECLINES[backend].get(at))
    _ENTRIES[key] = got
    return got


def entry_run(instr: Instr, backend: str) -> Callable[..., None] | None:
    """``backend``'s own executor of ``instr``, without its kind's check (None: none)."""
    entry = entry_of(instr, backend)
    return None if entry is None else entry.run


def executor_of(instr: Instr, backend: str = REFERENCE) -> Executor | None:
    """``backend``'s executor of ``instr`` (with its kind's preparation), or None when there is
    none."""
    key = (backend, instr.kind, instr.op)
    if key in _RESOLVED:
        return _RESOLVED[key]
    entry = entry_of(instr, backend)
    fn = None if entry is None else entry.run
    pre = PREPARE.get(instr.kind)
    if fn is not None and pre is not None:
        fn = _prepared(pre, fn)
    _RESOLVED[key] = fn
    return fn


def declined(instr: Instr, backend: str) -> str | None:
    """Why ``backend`` does not run ``instr`` itself (None: it does)."""
    entry = entry_of(instr, backend)
    what = f"'{instr.api or instr.kind + '.' + instr.op}'"
    if entry is None:
        return f"{what} has no {backend} executor"
    why = entry.declines(instr) if entry.declines is not None else None
    return None if why is None else f"{what} {why}"


class _Declarations:
    """A context that only holds the tensors' declarations (what a kind's check reads)."""

    def __init__(self, decl: Callable[[str], TensorDecl]) -> None:
        self.decl = decl


def checked_once(
    instr: Instr, backend: str, decl: Callable[[str], TensorDecl]
) -> Callable[..., None] | None:
    """``executor_of``, without its kind's check when the check passes for ``instr``: a check
    reads only the instruction and its tensors' declarations (``decl``), the same on every run,
    so a backend that makes its walk once per traced kernel runs it once, there. A failing
    check stays in the executor, so its error comes at the instruction, in the run's order."""
    entry = entry_of(instr, backend)
    pre = PREPARE.get(instr.kind)
    if entry is None or pre is None:
        return None if entry is None else entry.run
    try:
        pre(instr, _Declarations(decl))  # type: ignore[arg-type]
    except NKIError:
        return executor_of(instr, backend)
    return entry.run


def _prepared(pre: Executor, fn: Executor) -> Executor:
    def run(instr: Instr, ctx: Ctx) -> None:
        pre(instr, ctx)
        fn(instr, ctx)

    return run


def lowering_of(instr: Instr) -> Callable[..., None] | None:
    """The Numba lowering of ``instr``, or None (the instruction is hosted)."""
    entry = entry_of(instr, NUMBA)
    return None if entry is None else entry.run
