"""Symbolic loops: ``nl.affine_range`` / ``nl.sequential_range``, and in a current-API kernel
Python's ``range``, traced once with a symbolic iterator and recorded as one Loop node; unrolled
where Python needs the iterator's int (see ``state.NeedsUnroll``)."""

from __future__ import annotations

import builtins
import inspect
import types
from collections.abc import Iterator
from typing import Any

from ..errors import NKIControlFlowError, NKIError, SrcLoc, column, user_frame, user_loc
from ..ir import Access, Affine, IndexExpr, Instr, Loop, LoopSym
from ..symbolic import Scalar
from . import python_state
from .handles import TileOps
from .loop_exits import early_exit_error, loop_variable
from .state import (
    _THREAD,
    MAX_UNROLLED_ITERATIONS,
    NeedsUnroll,
    TraceState,
    current,
    effective_generation,
    state,
    unroll_request,
)


def _frame_loc(frame: Any) -> SrcLoc:
    col = column(frame.f_code, frame.f_lasti)
    return SrcLoc(frame.f_code.co_filename, frame.f_lineno, col, frame.f_code.co_name)


def loop(kind: str, r: range) -> Any:
    """What ``nl.affine_range`` / ``nl.sequential_range`` (``kind`` "affine" / "sequential")
    and, in a kernel body, Python's ``range`` / ``nl.range`` (``kind`` "range") iterate.

    Classic API: the two ``nl`` loops are symbolic loops (one symbolic iterator, the body traced
    once), ``range`` is Python's. Current API: all three are Python's ``range`` as far as the
    kernel can tell; the iterable of a ``for`` statement is nevertheless traced once as a
    symbolic loop (a ``range`` loop keeps program order: a sequential loop) and unrolled only
    where Python needs the iterator's int, or where the body carries Python state to the next
    iteration (``nki.tracer.python_state``). Any other use (``list(...)``, ``zip``) is the
    range itself."""
    st = current()
    if st is None:
        return r
    gen = effective_generation(st)
    if kind == "range" and gen == "classic":
        return r
    frame = user_frame(1)
    if frame is None:
        return r
    if gen == "classic":  # (located where it is iterated: `it = nl.affine_range(n)` first)
        return symbolic_loop(kind, r.start, r.stop, r.step)
    loc = _frame_loc(frame)
    site = (loc.file, loc.line, loc.col)
    for_offset = python_state.for_statement(frame)
    if for_offset is None:
        if kind != "range" and st.generation is None:
            st.generation_sensitive = True  # a classic kernel's nl loop would be symbolic
        return r
    if st.generation is None and kind == "range":
        st.generation_sensitive = True  # a classic kernel's range would be unrolled
    if site in st.unroll_sites:
        return _unrolled(st, r, loc)
    kind = "sequential" if kind == "range" else kind
    return symbolic_loop(kind, r.start, r.stop, r.step, loc=loc, watch=(frame, for_offset))


def _unrolled(st: TraceState, r: range, loc: SrcLoc) -> Iterator[int]:
    """A loop unrolled for its iterators' ints, within MAX_UNROLLED_ITERATIONS per trace."""
    for i in r:
        st.unrolled_iterations += 1
        if st.unrolled_iterations > MAX_UNROLLED_ITERATIONS:
            why = _THREAD.unroll_reasons[-1].get((loc.file, loc.line, loc.col), "")
            name = loop_variable(loc)
            raise NKIError(
                f"the loop{f' over {name!r}' if name else ''} ({len(r)} iterations, "
                f"range({r.start}, {r.stop}, {r.step})) is unrolled because "
                f"{why or 'Python needs its iterator as an int'}; the unrolled loops of this "
                f"kernel trace more than {MAX_UNROLLED_ITERATIONS} iterations, so nki-sim "
                "stops. Keep the iterator symbolic there: bound partial tiles with slices "
                "computed without min() / if on it, or index with the iterator instead of "
                "a Python list",
                code="err_loop_too_large_to_unroll",
                loc=loc,
            )
        yield i


def symbolic_loop(
    kind: str,
    start: int,
    stop: int,
    step: int,
    device: bool = False,
    *,
    loc: SrcLoc | None = None,
    watch: tuple[Any, int] | None = None,
) -> Iterator[Scalar]:
    """Generator of one symbolic loop: it yields one symbolic iterator and records the body
    traced in between as a Loop node (``nl.affine_range`` / ``sequential_range`` and the device
    loops of ``nl.fori_loop``, ``device=True``). ``watch``: the user frame and its ``FOR_ITER``
    offset of a current-API ``for`` statement, whose body must leave the Python state it read
    as it found it (else the trace restarts with the loop unrolled)."""
    st = state(f"nl.{kind}_range")
    loc = loc or user_loc(2)
    if len(range(start, stop, step)) == 0:
        return
    site = (loc.file, loc.line, loc.col)
    if site in st.unroll_sites:  # classic `if` on this loop's iterator: trace per iteration
        yield from range(start, stop, step)  # type: ignore[misc]
        return
    sym = LoopSym(st._next_id, loop_variable(loc) or kind)
    st._next_id += 1
    r = range(start, stop, step)
    st.loop_ranges[sym] = (min(r[0], r[-1]), max(r[0], r[-1]))
    st.loop_sites[sym] = site
    names: frozenset[str] = frozenset()
    before: dict[str, Any] = {}
    if watch is not None:
        carried, read = python_state.loop_body(watch[0].f_code, watch[1])
        names = carried | read
        before = python_state.snapshot(watch[0], names)
    st.bodies.append([])
    st.loops.append(sym)
    st.loop_kinds.append(kind)
    done = False
    try:
        yield Scalar(Affine.of(sym))
        done = True
        if watch is not None and effective_generation(st) != "classic":
            var = python_state.changed(before, python_state.snapshot(watch[0], names))
            if var is not None:
                why = f"its body changes the Python variable {var!r} that the next iteration reads"
                raise NeedsUnroll(why, frozenset({site}), why=why, loc=loc)
    except GeneratorExit:  # `break` / `return` left the body: reported by the next emit
        if watch is not None and effective_generation(st) != "classic":
            # current API: the loop is unrolled, so Python leaves it
            why = "its body leaves the loop early (break / return)"
            exit_ = NeedsUnroll(why, frozenset({site}), why=why, loc=loc)
            st.early_exit = st.early_exit or exit_
        else:
            st.early_exit = st.early_exit or early_exit_error(kind, loc)
        raise
    finally:
        body = st.bodies.pop()
        st.loops.pop()
        st.loop_kinds.pop()
        if done or body:
            st.append(Loop(sym, start, stop, step, kind, tuple(body), loc))


def escaped_loops(st: TraceState, instr: Instr) -> None:
    """Current API: an instruction that uses the iterator of a symbolic loop after the loop
    ended (a value computed in the body and used after it, which unrolled is the last
    iteration's) restarts the trace with that loop unrolled."""
    if not st.loop_sites or effective_generation(st) == "classic":
        return
    open_loops = st.loops
    closed = {s for s in instr_symbols(instr) if isinstance(s, LoopSym) and s not in open_loops}
    req = unroll_request(st, tuple(closed), "a value computed in the loop is used after it")
    if req is not None:
        raise req


def instr_symbols(instr: Instr) -> set[Any]:
    """The symbols (loop iterators, program ids) of an instruction's accesses and mask."""
    out: set[Any] = set()

    def add(x: Any) -> None:
        if isinstance(x, Access):
            for e in x.index:
                out.update(s for s, _ in e.base.terms)
            for _, ind in x.indirect:
                add(ind)
        elif isinstance(x, IndexExpr):
            out.update(s for s, _ in x.base.terms)

    add(instr.dst)
    for x in instr.srcs:
        add(x)
    for _, v in instr.attrs:
        add(v)
    if instr.mask is not None:
        for c in instr.mask.conds:
            out.update(s for s, _ in c.expr.base.terms)
    return out


def _range(*args: Any) -> Any:
    """A kernel body's ``range`` (see ``kernel_body``)."""
    if any(isinstance(a, TileOps) for a in args):  # (a register: a bound known on device only)
        raise NKIControlFlowError(
            "range() of a register or tile: its value exists only when the kernel runs; loop "
            "on it with nl.dynamic_range / nl.fori_loop",
            code="err_dynamic_control_flow_not_supported",
            loc=user_loc(),
        )
    return loop("range", builtins.range(*args))


def kernel_body(fn: Any) -> Any:
    """``fn`` (a kernel's function or bound method) calling ``loop("range", ...)`` for its bare
    ``range``, so a current-API ``for i in range(n)`` is a symbolic loop; ``fn`` itself when it
    does not use ``range`` or its module defines one. The copy shares ``fn``'s code, globals,
    defaults and closure; only its builtins differ (functions it calls keep Python's range)."""
    target = fn.__func__ if inspect.ismethod(fn) else fn
    if not isinstance(target, types.FunctionType) or "range" not in target.__code__.co_names:
        return fn
    g = target.__globals__
    if "range" in g:
        return fn
    had = "__builtins__" in g
    old = g.get("__builtins__", builtins)
    custom = dict(old if isinstance(old, dict) else vars(old))
    custom["range"] = _range
    # a function takes its builtins from its globals when it is created (CPython 3.10+)
    g["__builtins__"] = custom
    try:
        new = types.FunctionType(
            target.__code__, g, target.__name__, target.__defaults__, target.__closure__
        )
    finally:
        if had:
            g["__builtins__"] = old
        else:
            del g["__builtins__"]
    new.__kwdefaults__ = target.__kwdefaults__
    new.__dict__.update(target.__dict__)
    for attr in ("__qualname__", "__doc__", "__module__", "__annotations__"):
        setattr(new, attr, getattr(target, attr))
    return types.MethodType(new, fn.__self__) if inspect.ismethod(fn) else new
