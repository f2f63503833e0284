"""Planning the parts of a batched launch (``backend.py``) that are not plain batched
instructions: device loops, and reshape / dtype views (their storage: ``context.alias_storage``).

A device loop (``nl.fori_loop`` with a register bound, ``nl.while_loop``: ``RuntimeLoop``) runs
batched, iterated like a ``sequential_range`` loop, for the trips every position of the batch
shares (a fori_loop's bound registers are read when it starts, a while loop's condition before
every trip); the other trips run with its body once per batch position (``Host.run_trips`` /
``Host.run_nodes``), reading that position's registers (one-element SBUF tiles). Both are
exact when:
- every HBM write inside is distinct per instance and batched iteration (the plan's
  ``_check_distinct_writes``: the device loop's symbol is sequential, never a batch axis; an
  access whose index uses it is hosted, its range being unknown before the run);
- each position runs its trips in order (the shared ones first);
- no tile allocated inside is used after the loop (it lives in the position's storage only);
- a loop whose body uses engine state is not inside a batched ``affine_range`` loop (the loops
  around it are iterated, as for a hosted instruction using engine state);
- no collective is inside (it waits for the other instances of its group, which per-position
  trips would not reach together).

Views (``t.reshape``, ``t.view(dtype)``, ``t.ap``...) are the same memory as their base in
another shape or type. A view of an HBM tensor is a view of the launch's array; a view of a
tile is a view of the tile part of its batched storage, which must then be contiguous storage
of its own: a tile with views is never a view of HBM (elided load, store fusion), and an HBM
tensor with views is never the home of a fused tile (the order of writes through its names
stays the program's)."""

from __future__ import annotations

from dataclasses import dataclass

from nki.ir import Access, Alloc, Instr, KernelIR, Loop, RuntimeLoop

from ..checks.coverage import nodes_of
from ..executors import COLLECTIVES
from .host import uses_engine_state


@dataclass(frozen=True)
class DeviceLoops:
    loops: frozenset[int] = frozenset()  # ids of every device loop (nested ones too)
    stateful: frozenset[int] = frozenset()  # ids of those whose body uses engine state
    around: frozenset[int] = frozenset()  # ids of the loops around a stateful one (iterated)
    touched: frozenset[str] = frozenset()  # tensors touched inside them (names and bases)


def _where(n: Loop) -> str:
    return f"the device loop at line {n.loc.line}" if n.loc is not None else "a device loop"


def device_loops(ir: KernelIR, declined: type[Exception]) -> DeviceLoops:
    """The device loops of ``ir``, each of which may run per position; raises ``declined`` (the
    plan's exception) when one needs what a hosted loop cannot give (see the module
    docstring)."""
    loops: dict[int, tuple[RuntimeLoop, tuple[Loop, ...]]] = {}
    for n, outer in nodes_of(ir):
        if isinstance(n, RuntimeLoop):
            loops[id(n)] = (n, outer)
    if not loops:
        return DeviceLoops()
    allocated: dict[str, list[RuntimeLoop]] = {}  # tile (base) -> the device loops around it
    stateful: set[int] = set()
    names: set[str] = set()
    inside: dict[int, set[int]] = {}  # id(node) -> ids of the device loops around it
    for n, outer in nodes_of(ir):
        mine = [lp for lp in outer if id(lp) in loops]
        if not mine:
            continue
        inside[id(n)] = {id(lp) for lp in mine}
        if isinstance(n, Alloc):
            allocated[n.tensor] = mine
        elif isinstance(n, Instr):
            if n.kind in COLLECTIVES:  # (its group would meet in per-position trips)
                raise declined(
                    f"'{n.api or n.kind}' at line {n.loc.line if n.loc else '?'} is inside "
                    f"{_where(mine[-1])}: a collective waits for the other instances"
                )
            if uses_engine_state(n):
                stateful |= inside[id(n)]
            names |= {u.access.tensor for u in n.uses()}
    for lp, _ in loops.values():
        names |= {a.tensor for a in _registers(lp)}
    for n, _ in nodes_of(ir):
        if not isinstance(n, Instr):
            continue
        for acc in (u.access for u in n.uses()):
            for home in allocated.get(ir.storage_of(acc.tensor), ()):
                if id(home) not in inside.get(id(n), ()):
                    raise declined(
                        f"tile {ir.label(ir.storage_of(acc.tensor))} allocated inside "
                        f"{_where(home)} is used after it (line {n.loc.line if n.loc else '?'})"
                    )
    return DeviceLoops(
        frozenset(loops),
        frozenset(stateful),
        frozenset(id(lp) for i in stateful for lp in loops[i][1]),
        frozenset(names | {ir.storage_of(t) for t in names}),
    )


def _registers(n: RuntimeLoop) -> list[Access]:
    return [a for a in (n.lower, n.upper, n.cond) if a is not None]


def check_views(ir: KernelIR, declined: type[Exception]) -> None:
    """An HBM tensor written through one name and read through another (a view) is outside
    the batched subset: instances would read each other's writes."""
    written: dict[str, set[str]] = {}
    read: dict[str, set[str]] = {}
    for instr, _ in (p for p in nodes_of(ir) if isinstance(p[0], Instr)):
        reads, writes = instr.reads(), instr.writes()
        for accs, into in ((reads, read), (writes, written)):
            for a in accs:
                if ir.tensor(a.tensor).buffer == "shared_hbm":
                    into.setdefault(ir.storage_of(a.tensor), set()).add(a.tensor)
    for base in sorted(set(written) & set(read)):
        if len(written[base] | read[base]) > 1:
            raise declined(
                f"HBM tensor {ir.label(base)} is written and read through a reshape / dtype view"
            )


def contiguous_views(
    ir: KernelIR, elided: set[int], fused: dict[int, Instr]
) -> tuple[set[int], dict[int, Instr]]:
    """``elided`` loads and ``fused`` stores without those that would make the base of a view
    strided storage or reorder writes through a view (see the module docstring)."""
    viewed = {d.alias_of for d in ir.tensors if d.alias_of is not None}
    if not viewed:
        return elided, fused

    def plain(name: str) -> bool:
        return ir.tensor(name).alias_of is None and name not in viewed

    keep = set()
    for instr, _ in (p for p in nodes_of(ir) if isinstance(p[0], Instr)):
        if id(instr) in elided and instr.dst is not None and plain(instr.dst.tensor):
            keep.add(id(instr))
    out = {}
    for k, store in fused.items():
        src = store.srcs[0]
        if store.dst is not None and isinstance(src, Access):
            if plain(store.dst.tensor) and plain(src.tensor):
                out[k] = store
    return keep, out
