"""Scheduling dependencies between instructions: ``NkiInstruction.depends_on`` (nki 0.7).

A ``nisa`` call of the current API returns a handle on the instruction it recorded;
``consumer.depends_on(*producers)`` says the consumer runs after every producer finishes, an
edge the compiler could not see in the data (on hardware a semaphore wait). The rules checked
when the edge is made:

* producers are instruction handles of the same kernel trace, and none is the consumer;
* the producer was traced before the consumer: nki-sim runs a core's instructions in program
  order, which then satisfies every edge (an edge pointing back would need a reordering);
* the producer sits at the consumer's device-loop nesting or in an enclosing scope: an edge
  out of an ``nl.fori_loop`` / ``while_loop`` (or between sibling ones) is refused, as its
  semaphore could fire a different number of times than it is waited for. Python loops and
  the static range loops do not count (unrolled at trace time on hardware).

An edge's kind (``nisa.dependency``): ``runtime`` (the default) is the semaphore wait above;
``schedule`` only orders issue, so it emits no wait and may leave a device loop. The edges
become instruction attributes when the trace ends (``labelled``): the producer's
``dep_label``, the consumer's ``after`` (runtime) and ``issued_after`` (schedule). The cost
model's scheduler starts a consumer after its runtime producers' latest runs end, and no
earlier than its schedule producers' latest runs start."""

from __future__ import annotations

import enum
from dataclasses import replace
from typing import Any

from ..errors import NKIControlFlowError, NKIError, NKITypeError, user_loc
from ..ir import Instr, Loop, Node
from .state import TraceState, current

API = "NkiInstruction.depends_on"


class dependency(enum.Enum):  # noqa: N801
    """The kind of an explicit edge (``NkiInstruction.depends_on``, ``Kernel.with_schedule``):
    ``runtime`` waits on a semaphore until the producer finishes; ``schedule`` only orders
    issue (the consumer is issued no earlier than the producer, and may overlap it on another
    engine)."""

    runtime = "runtime"
    schedule = "schedule"


class Handle:
    """Where an instruction handle was made: its trace, its position among the trace's handles
    and the device loops around it."""

    __slots__ = ("trace", "order", "device_loops")

    def __init__(self) -> None:
        st = current()
        self.trace: TraceState | None = st
        self.order = 0
        self.device_loops: tuple[Any, ...] = ()
        if st is not None:
            st.handles += 1
            self.order = st.handles
            if st.device_loops:  # (most kernels have none)
                self.device_loops = tuple(s for s in st.loops if s in st.device_loops)


def depend(consumer: Any, producers: tuple[Any, ...], kind: Any = None) -> None:
    """Record ``consumer.depends_on(*producers, kind=kind)`` in the running trace (errors at
    the call)."""
    schedule = edge_kind(kind, API)
    st = current()
    if st is None or consumer.handle.trace is not st:
        raise NKIError(
            f"{API} on {consumer!r} must be called while its kernel is traced (inside the "
            "kernel that made the handle)",
            code="err_outside_kernel",
            loc=user_loc(),
        )
    for p in producers:
        _check(consumer, p, st, schedule)
    for p in producers:
        if p.instr is not None and consumer.instr is not None:
            st.dependencies.append((p.instr, consumer.instr, schedule))


def edge_kind(kind: Any, api: str) -> bool:
    """Whether ``kind`` (a ``nisa.dependency`` member, or None: a runtime edge) makes a
    schedule-only edge; anything else is a located error."""
    if kind is None or kind is dependency.runtime:
        return False
    if kind is dependency.schedule:
        return True
    raise NKITypeError(
        f"{api}: kind must be nisa.dependency.runtime or nisa.dependency.schedule (or left "
        f"out), got {kind!r}",
        code="err_invalid_dependency",
        loc=user_loc(),
    )


def _check(consumer: Any, p: Any, st: TraceState, schedule: bool) -> None:
    if type(p) is not type(consumer):
        raise NKITypeError(
            f"{API} takes instruction handles (what a nki.isa call returns); got "
            f"{type(p).__name__} {p!r}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    if p is consumer or (p.instr is not None and p.instr is consumer.instr):
        raise _invalid(f"{consumer!r} cannot depend on itself")
    if p.handle.trace is not st:
        raise _invalid(f"producer {p!r} was made by another kernel's trace")
    if p.handle.order > consumer.handle.order:
        raise _invalid(
            f"producer {p!r} ({_where(p.instr)}) was traced after its consumer {consumer!r} "
            f"({_where(consumer.instr)}); nki-sim runs instructions in program order, so a "
            "producer must come first in the kernel"
        )
    outer, inner = p.handle.device_loops, consumer.handle.device_loops
    if not schedule and inner[: len(outer)] != outer:  # (a semaphore wait must fire once)
        raise NKIControlFlowError(
            f"{API}: producer {p!r} ({_where(p.instr)}) is inside a device loop (nl.fori_loop / "
            f"while_loop) that does not also hold its consumer {consumer!r} "
            f"({_where(consumer.instr)}); an edge cannot leave a device loop: the producer must "
            "sit at the consumer's loop nesting or in an enclosing scope",
            code="err_dependency_crosses_device_loop",
            loc=user_loc(),
        )


def _invalid(what: str) -> NKIError:
    return NKIError(f"{API}: {what}", code="err_invalid_dependency", loc=user_loc())


def _where(instr: Any) -> str:
    loc = getattr(instr, "loc", None)
    return "line ?" if loc is None else f"line {loc.line}"


# ``Kernel.with_schedule``'s edges: ((consumer name, producer names), ...), schedule-only, and
# where the kernel author called it
Schedule = tuple[tuple[tuple[str, tuple[str, ...]], ...], bool, Any]
SCHEDULE_API = "Kernel.with_schedule"


def schedule_of(edges: Any, kind: Any) -> Schedule:
    """``kernel.with_schedule(edges, kind=kind)``'s edges, checked: a list of pairs (the
    consumer's ``name=``, a producer's name or a list of them); the default kind is
    ``schedule`` (scheduler edges), ``nisa.dependency.runtime`` makes semaphore waits."""
    loc = user_loc()
    out = []
    for edge in edges if isinstance(edges, (list, tuple)) else (None,):
        ok = isinstance(edge, (list, tuple)) and len(edge) == 2 and isinstance(edge[0], str)
        prods = edge[1] if ok else None
        prods = (prods,) if isinstance(prods, str) else prods
        if not ok or not isinstance(prods, (list, tuple)) or not prods:
            raise NKITypeError(
                f"{SCHEDULE_API} takes a list of pairs (consumer name, producer name or list of "
                f"names), the instructions' name= arguments; got {edges!r}",
                code="err_invalid_argument",
                loc=loc,
            )
        if not all(isinstance(p, str) for p in prods):
            raise NKITypeError(
                f"{SCHEDULE_API}: producer names must be strings, got {edge[1]!r}",
                code="err_invalid_argument",
                loc=loc,
            )
        out.append((edge[0], tuple(prods)))
    schedule = edge_kind(dependency.schedule if kind is None else kind, SCHEDULE_API)
    return tuple(out), schedule, loc


def _named_edges(st: TraceState, sched: Schedule) -> None:
    """Add the trace's ``with_schedule`` edges to its dependencies: each instruction named as
    a consumer after each one named as its producer (errors at the ``with_schedule`` call).
    The names were kept in trace order, the program order ``depends_on`` checks too."""
    edges, schedule, loc = sched
    named: dict[str, list[tuple[int, Instr]]] = {}
    for i, (n, name) in enumerate(st.instr_names.values()):
        named.setdefault(name, []).append((i, n))
    for cons, prods in edges:
        for name in (cons, *prods):
            if name not in named:
                known = ", ".join(sorted(named)) or "none"
                raise NKIError(
                    f"{SCHEDULE_API}: no instruction of the kernel is named '{name}' (the "
                    f"name= of a nki.isa call; named here: {known})",
                    code="err_invalid_dependency",
                    loc=loc,
                )
        for i, c in named[cons]:
            for name in prods:
                for j, p in named[name]:
                    if j > i:
                        raise NKIError(
                            f"{SCHEDULE_API}: '{name}' ({_where(p)}) is traced after "
                            f"'{cons}' ({_where(c)}), which is to follow it; nki-sim runs "
                            "instructions in program order, so a producer must come first",
                            code="err_invalid_dependency",
                            loc=loc,
                        )
                    if p is not c:
                        st.dependencies.append((p, c, schedule))


def labelled(
    st: TraceState, body: tuple[Node, ...], schedule: Schedule | None = None
) -> tuple[Node, ...]:
    """``body`` with the trace's edges (and ``schedule``'s, ``Kernel.with_schedule``) as
    attributes: each producer gets a ``dep_label``, each consumer ``after`` (the labels of
    its runtime producers) and ``issued_after`` (those of its schedule-only ones)."""
    if schedule is not None:
        _named_edges(st, schedule)
    if not st.dependencies:
        return body
    labels: dict[int, int] = {}
    after: dict[tuple[int, str], list[int]] = {}
    for prod, cons, schedule in st.dependencies:
        k = labels.setdefault(id(prod), len(labels))
        got = after.setdefault((id(cons), "issued_after" if schedule else "after"), [])
        if k not in got:
            got.append(k)

    def instr(n: Instr) -> Instr:
        extra: tuple[tuple[str, Any], ...] = ()
        if id(n) in labels:
            extra += (("dep_label", labels[id(n)]),)
        for attr in ("after", "issued_after"):
            if (id(n), attr) in after:
                extra += ((attr, tuple(after[(id(n), attr)])),)
        return replace(n, attrs=n.attrs + extra) if extra else n

    def walk(nodes: tuple[Node, ...]) -> tuple[Node, ...]:
        out: list[Node] = []
        for n in nodes:
            if isinstance(n, Instr):
                n = instr(n)
            elif isinstance(n, Loop):
                n = replace(n, body=walk(n.body))
            out.append(n)
        return tuple(out)

    return walk(body)
