"""Trace state and control flow: the state of one kernel trace, the per-thread trace stack,
the kernel's API generation, and Python control flow on loop iterators (decided, or the loops
unrolled; the loops themselves are in ``loops``).

A kernel body runs once per input signature with symbolic program ids and loop iterators;
each thread traces on its own stack, so kernels traced in parallel threads never see each
other's state."""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import NKIControlFlowError, NKIError, SrcLoc, user_loc
from ..ir import Affine, Cond, IndexExpr, LoopSym, Node, PidSym, TensorDecl
from ..symbolic import TRACE_HOOKS, Pred, Scalar
from .bool_masks import (
    check_pending,
    clear_pending,
    expand_covers,
    join_pending,
    left_of_boolean,
    negate,
)
from .held_output import held_output, release


class TraceState:
    """Everything recorded while one kernel body runs."""

    def __init__(self, name: str, target: Any, grid_shape: tuple[int, ...]) -> None:
        self.name = name
        self.target = target  # nki.targets.Target
        self.no_reorder_depth = 0  # open `with nl.no_reorder():` blocks
        self.grid_shape = grid_shape
        self.tensors: dict[str, TensorDecl] = {}
        self.bodies: list[list[Node]] = [[]]
        self.loops: list[LoopSym] = []
        self.loop_kinds: list[str] = []
        self.written: dict[str, SrcLoc] = {}
        self.params: list[str] = []
        self._next_id = 0
        # classic ``if`` on loop iterators: inclusive range and call site of every symbolic loop,
        # and the call sites to unroll in this trace (see NeedsUnroll)
        self.loop_ranges: dict[LoopSym, tuple[int, int]] = {}
        self.loop_sites: dict[LoopSym, tuple[str, int, int]] = {}
        # device loops (nl.fori_loop / while_loop): their trips are known only when they run
        self.device_loops: set[LoopSym] = set()
        self.open_whiles: list[tuple[Any, Any]] = []  # `while reg:` loops: (statement, context)
        self.unroll_sites: frozenset[tuple[str, int, int]] = _THREAD.unroll_sites[-1]
        # nl.loop_reduce results not yet assigned: tile name -> (op, source, mask, update)
        self.loop_reduce_results: dict[str, tuple[str, Any, Any, Any]] = {}
        # the kernel's API generation ("classic" / "current", None until decided) and the
        # construct that decided it (what, where): see ``note_generation``. Until decided the
        # kernel behaves as ``default_generation``: current (``import nki``), classic in
        # classic mode (the compat runner, NKI_CLASSIC=1)
        self.generation: str | None = None
        self.generation_why: tuple[str, SrcLoc | None] | None = None
        self.default_generation = "classic" if classic_mode() else "current"
        # the physical core this trace is for (current API, LNC=2: one trace per core, where
        # nl.program_id(0) is this int); None: one trace with symbolic program ids
        self.core: int | None = None
        # a construct whose meaning depends on the generation was traced while undecided (loops
        # unrolled for the current API count: they are the unroll sites of this retrace)
        self.generation_sensitive = bool(self.unroll_sites)
        preset = _THREAD.preset[-1]
        if preset is not None:  # a retrace of a kernel whose generation was found later
            self.generation, self.generation_why = preset
        # iterations of unrolled loops traced so far (see MAX_UNROLLED_ITERATIONS)
        self.unrolled_iterations = 0
        # a symbolic loop left early (break / return), reported at the next instruction
        self.early_exit: NKIError | None = None
        # an instruction was traced with a mask built with `or` (see bool_masks.MaskCover)
        self.mask_covers = False
        # documented rules broken while the generation they hold in was undecided, and
        # warnings, told when the trace ends (see api_checks)
        self.rule_breaches: list[tuple[Any, str, SrcLoc]] = []
        # instruction handles made so far, and the edges ``depends_on`` made between their
        # instructions (producer, consumer, schedule-only): see ``dependencies.py``
        self.handles = 0
        self.dependencies: list[tuple[Any, Any, bool]] = []
        self.instr_names: dict[int, tuple[Any, str]] = {}  # id(instr) -> (it, its name=)

    def check_early_exit(self) -> None:
        """Raise the error of a symbolic loop left by ``break`` / ``return`` (see
        ``symbolic_loop``): at the next instruction or when the kernel returns."""
        if self.early_exit is not None:
            raise self.early_exit

    def static_bounds(self, aff: Affine) -> tuple[int, int] | None:
        """Inclusive (min, max) of ``aff`` over the trace-time ranges of its loop iterators;
        None when it depends on a program id or a device loop (values known only at run time)."""
        syms = aff.symbols()
        if any(s not in self.loop_ranges or s in self.device_loops for s in syms):
            return None
        return aff.bounds(self.loop_ranges)

    def fresh(self, prefix: str) -> str:
        while True:
            name = f"{prefix}{self._next_id}"
            self._next_id += 1
            if name not in self.tensors:
                return name

    def declare(self, decl: TensorDecl) -> None:
        self.tensors[decl.name] = decl

    def append(self, node: Node) -> None:
        self.bodies[-1].append(node)


class _ThreadTraces(threading.local):
    """The traces running in one thread (a kernel called inside a kernel nests), the loop call
    sites to unroll in the trace being retried (and why), and the generation a retrace starts
    with."""

    def __init__(self) -> None:
        self.stack: list[TraceState] = []
        self.unroll_sites: list[frozenset[Site]] = [frozenset()]
        self.unroll_reasons: list[dict[Site, str]] = [{}]
        # the generation of the kernel being retraced and what decided it (see RetraceAs)
        self.preset: list[tuple[str, tuple[str, SrcLoc | None]] | None] = [None]


Site = tuple[str, int, int]  # a loop's call site: file, line, column
_THREAD = _ThreadTraces()
_CLASSIC_MODE = [os.environ.get("NKI_CLASSIC", "0") == "1"]
# iterations of unrolled loops one trace may run: beyond it the kernel gets a located error
# naming the loop instead of a trace that would run for hours
MAX_UNROLLED_ITERATIONS = 1 << 17


def classic_mode() -> bool:
    """Whether classic-compiler behaviours are on (see :func:`set_classic_mode`)."""
    return _CLASSIC_MODE[-1]


def set_classic_mode(on: bool) -> None:
    """Classic-compiler mode: behaviours of the classic NKI compiler that real kernels (AWS's
    flash attention and allocated kernels) rely on, but that nki-sim otherwise reports as
    errors:

    * a kernel that uses no construct of the current API only is a classic-API kernel (without
      classic mode it is a current-API kernel, as with AWS's ``nki`` package);
    * Python ``if`` on loop iterators (``if i * 128 >= j * 512:``): a condition that holds for
      every iteration (or for none) is decided at trace time; one that varies makes the loops
      involved unroll (the kernel is retraced with them unrolled, so the ``if`` sees concrete
      iterators). Conditions on tile indices or program ids stay errors.
    * ``psum += matmul(...)`` into a PSUM tile that was allocated but not initialised starts a
      PSUM accumulation group (the first matmul overwrites, later ones accumulate), instead of
      reading uninitialised memory.
    * a matmul operand that lives in PSUM (``nc_transpose`` result) is copied to SBUF first.
    * a loop iterator that is an inner loop's bound, or divided (``//``, ``%``), makes its
      loop unroll.

    Off by default; ``frontends.compat.install()`` (``python -m frontends.compat script.py``)
    and ``NKI_CLASSIC=1`` turn it on. It is recorded in the traced IR, so a kernel keeps the
    mode it was traced with. The setting is process-wide (every thread's later traces)."""
    _CLASSIC_MODE[-1] = bool(on)


@contextmanager
def unrolling(sites: frozenset[Site], reasons: dict[Site, str] | None = None) -> Iterator[None]:
    """Traces started inside unroll the loops at ``sites`` (see ``NeedsUnroll``)."""
    _THREAD.unroll_sites.append(sites)
    _THREAD.unroll_reasons.append(reasons or {})
    try:
        yield
    finally:
        _THREAD.unroll_sites.pop()
        _THREAD.unroll_reasons.pop()


class NeedsUnroll(NKIControlFlowError):
    """Python needs the integer value of loop iterators (an ``if`` on a condition that varies
    across iterations, ``min``, ``int``, a list index), or the body of a current-API loop
    carries Python state to the next iteration: the trace restarts with the loops at ``sites``
    unrolled (``why`` says what needed it)."""

    def __init__(self, message: str, sites: frozenset[Site], why: str = "", **kw: Any) -> None:
        super().__init__(message, **kw)
        self.sites = sites
        self.why = why or message


def effective_generation(st: TraceState) -> str:
    """The generation the trace follows: the decided one, else the default (see TraceState)."""
    return st.generation or st.default_generation


def _where(loc: SrcLoc | None) -> str:
    return f"{os.path.basename(loc.file)}:{loc.line}" if loc is not None else "the kernel"


def _unrollable(st: TraceState, syms: Any) -> bool:
    """``syms`` are loop iterators the trace can unroll: at least one, and all of them iterators
    of trace-time loops (not device loops)."""
    return (
        bool(syms)
        and all(isinstance(s, LoopSym) and s in st.loop_sites for s in syms)
        and not any(s in st.device_loops for s in syms)
    )


def unroll_request(
    st: TraceState, syms: Any, why: str, classic: bool = False
) -> NeedsUnroll | None:
    """The request to unroll the symbolic loops of ``syms`` because ``why`` (a current-API
    kernel: its iterators are Python ints; with ``classic``, a classic one too); None for a
    classic kernel otherwise or when ``syms`` are not all trace-time loop iterators."""
    if (effective_generation(st) == "classic" and not classic) or not _unrollable(st, syms):
        return None
    loc = user_loc()
    why = f"{why} at {_where(loc)}"
    sites = frozenset(st.loop_sites[s] for s in syms)  # type: ignore[index]
    return NeedsUnroll(f"{why}: the loop is unrolled", sites, why=why, loc=loc)


# what classic mode gives a meaning of its own on a loop iterator (``unroll_for_division``), as
# ``symbolic._non_affine`` names the operator when it asks for the iterator's value
_CLASSIC_MODE_OPS = ("'//'", "'%'")
# a loop's bound from an outer loop's iterator (``for j in nl.sequential_range(i)``, as
# ``language.core._range_args`` names it): classic mode unrolls the outer loop, as the classic
# compiler took such triangular loops
_RANGE_BOUNDS = tuple(f"nl.{r}_range " for r in ("affine", "sequential", "static"))


def concrete_value(x: Any, what: str) -> None:
    """Python needs the integer value of the traced scalar ``x`` (``what`` needs it): restart
    per core (a program id of an LNC=2 launch) or with its loops unrolled (current API). In
    classic mode a kernel no construct has decided yet restarts as current here: only the
    current API lets a loop iterator be a Python int (AWS's current examples index lists of
    tiles with it), and the classic API would reject it."""
    aff = getattr(x, "aff", None)
    st = current()
    if aff is None or st is None:
        return
    syms = aff.symbols()
    request_per_core(f"{what} on nl.program_id", syms)
    if (
        st.generation is None
        and st.default_generation == "classic"
        and what not in _CLASSIC_MODE_OPS
        and _unrollable(st, syms)
    ):
        raise RetraceAs("current", (f"{what} on a loop iterator (a Python int)", user_loc()))
    bound = classic_mode() and what.startswith(_RANGE_BOUNDS)
    req = unroll_request(st, syms, f"{what} needs the value of a loop iterator", bound)
    if req is not None:
        raise req


class RetraceAs(Exception):
    """The kernel turned out to be of the other generation than the one it was being traced as
    (``generation``), after a construct whose meaning depends on it: the trace restarts with the
    generation decided from the start."""

    def __init__(self, generation: str, why: tuple[str, SrcLoc | None]) -> None:
        super().__init__(why[0])
        self.generation = generation
        self.why = why


def unroll_for_division(op: str, a: object, b: object) -> NKIError | None:
    """Classic mode: ``i % 2`` or ``i // 4`` on loop iterators (AWS's ``nc_matmul`` example
    computes ``tile_position`` this way) is not affine, so the loops of those iterators are
    unrolled and the trace restarts with the iterators as plain ints. None otherwise (the
    caller reports the expression as non-affine)."""
    if not classic_mode() or not isinstance(a, Scalar):
        return None
    if not isinstance(b, int) or isinstance(b, bool) or b <= 0:
        return None
    st = state(f"'{op}' on a loop iterator")
    syms = a.aff.symbols()
    if not syms or not all(isinstance(s, LoopSym) and s in st.loop_sites for s in syms):
        return None
    sites = frozenset(st.loop_sites[s] for s in syms)  # type: ignore[index]
    return NeedsUnroll(
        f"'{op} {b}' on a loop iterator is not affine; the loop is unrolled", sites, loc=user_loc()
    )


class NeedsPerCore(NKIControlFlowError):
    """A current-API kernel launched on two cores needs a concrete ``nl.program_id`` (Python
    control flow on it) or makes its cores interact (``nisa.core_barrier``, ``nisa.sendrecv``,
    ``nki.collectives``): the launch traces it once per physical core instead."""


def wants_per_core(st: TraceState, syms: Any = None) -> bool:
    """Whether this trace of a possibly-LNC=2 launch should restart as one trace per core:
    a symbolic-pid trace of a kernel that is not classic, over one grid axis of 2, and (when
    ``syms`` is given) a value involving the program id."""
    if st.core is not None or effective_generation(st) == "classic":
        return False
    if tuple(st.grid_shape) != (2,):
        return False
    return syms is None or any(isinstance(s, PidSym) for s in syms)


def request_per_core(what: str, syms: Any = None) -> None:
    """Raise :class:`NeedsPerCore` when :func:`wants_per_core` (``what``: the construct)."""
    st = current()
    if st is not None and wants_per_core(st, syms):
        if st.generation is None:
            st.generation_sensitive = True
        raise NeedsPerCore(f"{what} needs one trace per core", loc=user_loc())


def _per_core_hook(x: Any) -> None:
    aff = getattr(x, "aff", None)
    if aff is not None:
        request_per_core("Python control flow on nl.program_id", aff.symbols())


def _control_flow_message(st: TraceState, syms: set, static: bool) -> str:
    """Why Python control flow cannot decide a condition on traced values, naming what it
    depends on, and how to write it instead."""
    what, fixes = [], []
    loops = sorted((s for s in syms if isinstance(s, LoopSym)), key=lambda s: s.id)
    for s in loops:
        site = st.loop_sites.get(s)
        line = f", line {site[1]}" if site else ""
        name = f"'{s.name}'" if s.name not in ("affine", "sequential") else "the iterator"
        what.append(f"loop iterator {name} (a symbolic loop{line})")
    pids = sorted(s.axis for s in syms if not isinstance(s, LoopSym))
    what += [f"nl.program_id({a})" for a in pids]
    if not static:
        what.append("tile indices (nl.arange / nl.mgrid)")
    if loops:
        fixes.append(
            "iterate with nl.static_range so the iterator is a Python int (the loop is "
            "unrolled), or turn on classic mode (nki.classic.set_classic_mode(True) or "
            "NKI_CLASSIC=1), where an `if` "
            "on loop iterators unrolls the loop as the classic compiler did"
        )
    if loops or pids or not static:
        fixes.append("guard the instructions with a mask instead (mask=(i * 128 + ip < n))")
    if pids:
        fixes.append("or index with nl.program_id so every instance runs the same code")
    deps = " and ".join(what) or "a traced value"
    return (
        f"Python control flow (if / while / not / a conditional expression) on a condition "
        f"that depends on {deps}: its value differs between iterations / instances, and the "
        f"body is traced once for all of them, so Python cannot decide it while tracing. "
        f"To write it: {'; '.join(fixes)}"
    )


def decide_condition(pred: Any) -> bool:
    """``bool(pred)`` for a mask predicate used in Python control flow (``if i < n:``,
    ``min(128, n - i * 128)``).

    In a current-API kernel and in classic mode (``nki.classic.classic_mode``): a predicate over
    loop iterators alone that is true (false) for every iteration is True (False); one that
    varies raises NeedsUnroll so the loops involved are unrolled. Everything else (tile indices,
    program ids, a classic kernel) is the usual control-flow error."""
    st = state("control flow")
    value = left_of_boolean(pred)
    if value is not None:  # `mask=(a and b)` / `(a or b)`: rebuilt when the last one is made
        return value
    syms = {s for c in pred.conds for s in c.expr.base.symbols()}
    request_per_core("Python control flow on nl.program_id", syms)
    static = all(not any(c.expr.coeffs) for c in pred.conds)
    loops_only = all(
        isinstance(s, LoopSym) and s in st.loop_ranges and s not in st.device_loops for s in syms
    )
    msg = _control_flow_message(st, syms, static)
    if not (static and loops_only and (classic_mode() or effective_generation(st) != "classic")):
        raise NKIControlFlowError(msg, loc=user_loc())
    verdicts = []
    for c in pred.conds:
        lo, hi = c.expr.base.bounds(st.loop_ranges)
        true_all = {
            "<": hi < 0, "<=": hi <= 0, ">": lo > 0, ">=": lo >= 0,
            "==": lo == hi == 0, "!=": hi < 0 or lo > 0,
        }[c.op]  # fmt: skip
        false_all = {
            "<": lo >= 0, "<=": lo > 0, ">": hi <= 0, ">=": hi < 0,
            "==": hi < 0 or lo > 0, "!=": lo == hi == 0,
        }[c.op]  # fmt: skip
        verdicts.append(True if true_all else False if false_all else None)
    if False in verdicts:
        return False
    if all(v is True for v in verdicts):
        return True
    sites = frozenset(
        st.loop_sites[s] for c, v in zip(pred.conds, verdicts) if v is None
        for s in c.expr.base.symbols()
    )  # fmt: skip
    loc = user_loc()
    why = f"a Python condition on a loop iterator (if / min / max / a comparison) at {_where(loc)}"
    raise NeedsUnroll(
        msg + " (the condition varies across loop iterations)", sites, why=why, loc=loc
    )


def _decide_scalar(x: Scalar) -> bool | None:
    """``if i:`` on a loop iterator of a current-API kernel: ``i != 0`` decided (or the loop
    unrolled) as ``decide_condition`` does; None for a classic kernel (an error there)."""
    st = current()
    if st is None or effective_generation(st) == "classic":
        return None
    return decide_condition(Pred((Cond(IndexExpr(x.aff, (), ()), "!="),)))


GENERATIONS = ("classic", "current")


def note_generation(gen: str, what: str, loc: SrcLoc | None = None) -> None:
    """A construct that exists in one API generation only (``what``, e.g. "destination-first
    nisa.tensor_tensor(dst, ...)") was traced. The first such construct decides the kernel's
    generation; a later one of the other generation is a located error naming both lines."""
    st = current()
    if st is None or st.generation == gen:
        return  # (the common case: no location needed)
    loc = loc or user_loc()
    if st.generation is None:
        if gen != st.default_generation and st.generation_sensitive:
            raise RetraceAs(gen, (what, loc))
        st.generation, st.generation_why = gen, (what, loc)
        return
    if st.generation != gen:
        raise NKIError(
            f"kernel '{st.name}' mixes the two NKI API generations: {what} is {gen}-API, but the "
            f"kernel is {st.generation}-API{decided_by()}; write the kernel in one "
            f"generation (nki.jit(api='{st.generation}') helps only where a construct of "
            "both generations was taken for the wrong one)",
            code="err_mixed_api_generations",
            loc=loc,
        )


def decided_by() -> str:
    """What decided the generation of the kernel being traced, with its place (`` since
    <what> at file:line``), or nothing when nothing has."""
    st = current()
    why = None if st is None else st.generation_why
    if why is None:
        return ""
    what, loc = why
    return f" since {what} at " + (f"{loc.file}:{loc.line}" if loc is not None else "the kernel")


def generation(sensitive: bool = False) -> str | None:
    """The generation of the kernel being traced (None: not decided yet, or no trace). With
    ``sensitive``, the caller builds something different per generation: an undecided kernel
    answers its default generation, and if it later turns out to be the other one the trace
    restarts (see RetraceAs)."""
    st = current()
    if st is None:
        return None
    if st.generation is None and sensitive:
        st.generation_sensitive = True
        return st.default_generation
    return st.generation


def private_arguments() -> bool:
    """Whether the kernel being traced sees its array arguments in private HBM: a current-API
    launch of one instance (NKI 0.7 wraps them as ``nl.hbm`` tensors, ``shared_hbm`` under
    LNC=2; classic kernels see shared HBM). An undecided kernel answers for its default
    generation without asking for a retrace: the engines' own buffer checks read this too,
    and they only ask HBM or not."""
    st = current()
    if st is None or math.prod(st.grid_shape) != 1:
        return False
    return effective_generation(st) == "current"


def state(api: str = "this call") -> TraceState:
    stack = _THREAD.stack
    if not stack:
        raise NKIError(
            f"{api} can only be used inside a kernel being traced by @nki.jit "
            "(call the kernel, or nki.simulate_kernel(kernel, *args))",
            code="err_outside_kernel",
            loc=user_loc(),
        )
    return stack[-1]


def current() -> TraceState | None:
    """The trace running in this thread, or None outside a kernel."""
    stack = _THREAD.stack
    return stack[-1] if stack else None


def tracing() -> bool:
    return bool(_THREAD.stack)


@contextmanager
def new_trace(st: TraceState) -> Iterator[TraceState]:
    _THREAD.stack.append(st)
    try:
        yield st
        st.check_early_exit()
        check_pending()
        if st.mask_covers:  # masks built with `or`: one instruction per disjoint piece
            st.bodies[0][:] = expand_covers(st.bodies[0], st.tensors)
    except Exception as e:
        pending = st.early_exit  # a current-API loop left by break: retried unrolled first
        if isinstance(pending, NeedsUnroll) and not isinstance(e, (NeedsUnroll, NeedsPerCore)):
            raise pending from None
        raise
    finally:
        _THREAD.stack.pop()
        clear_pending()


# the symbolic values (a layer below) ask the trace how to decide Python control flow on them
TRACE_HOOKS["decide_condition"] = decide_condition
TRACE_HOOKS["unroll_for_division"] = unroll_for_division
TRACE_HOOKS["concrete_value"] = concrete_value
TRACE_HOOKS["decide_scalar"] = _decide_scalar
TRACE_HOOKS["per_core"] = _per_core_hook
TRACE_HOOKS["join_and"] = join_pending
TRACE_HOOKS["negate_mask"] = negate


def trace_with_unrolling(do_trace: Any) -> Any:
    """Run ``do_trace()``; restart it with the loops a ``NeedsUnroll`` names unrolled (bounded:
    each retry adds at least one new call site), or with the generation a ``RetraceAs``
    found (once). What an attempt prints is written once that attempt ends the trace (or
    fails); a restarted attempt's is dropped."""
    sites: frozenset[Site] = frozenset()
    reasons: dict[Site, str] = {}
    preset: tuple[str, tuple[str, SrcLoc | None]] | None = None
    while True:
        printed: list[str] = []
        try:
            with unrolling(sites, reasons), held_output() as printed:
                _THREAD.preset.append(preset)
                try:
                    traced = do_trace()
                finally:
                    _THREAD.preset.pop()
        except NeedsUnroll as e:
            if e.sites <= sites:
                release(printed)
                raise
            for s in e.sites - sites:
                reasons[s] = e.why
            sites = sites | e.sites
            continue
        except RetraceAs as e:
            if preset is not None:
                raise NKIError(f"internal: second retrace of kernel: {e}") from None
            preset, sites, reasons = (e.generation, e.why), frozenset(), {}
            continue
        except NeedsPerCore:
            raise  # (the per-core traces print what the kernel prints)
        except BaseException:
            release(printed)
            raise
        release(printed)
        return traced
