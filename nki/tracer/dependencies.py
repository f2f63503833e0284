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

The edges become instruction attributes when the trace ends (``labelled``): the producer's
``dep_label`` and the consumer's ``after`` (the labels it waits for). The cost model's
scheduler starts a consumer after its producers' latest runs end."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import NKIControlFlowError, NKIError, NKITypeError, user_loc
from ..ir import Instr, Loop, Node
from .state import TraceState, current

API = "NkiInstruction.depends_on"


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


def depend(consumer: Any, producers: tuple[Any, ...]) -> None:
    """Record ``consumer.depends_on(*producers)`` in the running trace (errors at the call)."""
    st = current()
    if st is None or consumer.handle.trace is not st:
        raise NKIError(
            f"{API} on {consumer!r} must be called while its kernel is traced (inside the "
            "kernel that made the handle)",
            code="err_outside_kernel",
            loc=user_loc(),
        )
    for p in producers:
        _check(consumer, p, st)
    for p in producers:
        if p.instr is not None and consumer.instr is not None:
            st.dependencies.append((p.instr, consumer.instr))


def _check(consumer: Any, p: Any, st: TraceState) -> None:
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
            f"producer {p!r} ({_where(p)}) was traced after its consumer {consumer!r} "
            f"({_where(consumer)}); nki-sim runs instructions in program order, so a producer "
            "must come first in the kernel"
        )
    outer, inner = p.handle.device_loops, consumer.handle.device_loops
    if inner[: len(outer)] != outer:
        raise NKIControlFlowError(
            f"{API}: producer {p!r} ({_where(p)}) is inside a device loop (nl.fori_loop / "
            f"while_loop) that does not also hold its consumer {consumer!r} ({_where(consumer)}); "
            "an edge cannot leave a device loop: the producer must sit at the consumer's loop "
            "nesting or in an enclosing scope",
            code="err_dependency_crosses_device_loop",
            loc=user_loc(),
        )


def _invalid(what: str) -> NKIError:
    return NKIError(f"{API}: {what}", code="err_invalid_dependency", loc=user_loc())


def _where(h: Any) -> str:
    loc = getattr(h.instr, "loc", None)
    return "line ?" if loc is None else f"line {loc.line}"


def labelled(st: TraceState, body: tuple[Node, ...]) -> tuple[Node, ...]:
    """``body`` with the trace's edges as attributes: each producer gets a ``dep_label``, each
    consumer ``after``, the labels of its producers."""
    if not st.dependencies:
        return body
    labels: dict[int, int] = {}
    after: dict[int, list[int]] = {}
    for prod, cons in st.dependencies:
        k = labels.setdefault(id(prod), len(labels))
        if k not in after.setdefault(id(cons), []):
            after[id(cons)].append(k)

    def instr(n: Instr) -> Instr:
        extra: tuple[tuple[str, Any], ...] = ()
        if id(n) in labels:
            extra += (("dep_label", labels[id(n)]),)
        if id(n) in after:
            extra += (("after", tuple(after[id(n)])),)
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
