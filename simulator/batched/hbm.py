"""Shared HBM in the batched backend (``batched.py``, planned by ``batched_plan.py``): which
kernels that write HBM and read it back, accumulate into it or scatter into it run batched
exactly, and which copies such a kernel can still skip.

A batch position is one instance and one iteration of every batched loop around an
instruction. Batched, each instruction runs for every position before the next instruction
runs, so two positions see each other's HBM accesses in another order than the interpreter's
(which runs each instance whole, each loop iteration whole); within one position program order
is kept. So the batched run is exact when no element one position writes is read or written by
another position. That is decided from the affine accesses (``races._form`` /
``races.first_conflict``): two accesses can only meet at distinct positions along the batch
axes they share (the grid's, and the batched loops around both), and accesses with the same
coefficients depend only on the difference of the positions, enumerated per group of axes that
share no tensor dimension. A hosted instruction that runs its positions in the interpreter's
order (``_in_interpreter_order``) may meet itself at other positions (a scatter whose indices
collide, an accumulation by every instance into one tile): the last writer, or the order of
the additions, is the interpreter's; its accesses against other instructions' are proved apart
as above."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from nki.ir import Access, Instr, KernelIR, Loop, PidSym, Sym

from ..checks import races
from ..checks.coverage import instructions_of, nodes_of

_MAX_DIFFERENCES = 1 << 21  # position differences enumerated per pair of accesses


@dataclass(frozen=True)
class _HbmUse:
    instr: Instr
    acc: Access
    loops: tuple[Loop, ...]
    writes: bool


def check_positions(
    ir: KernelIR, batch: set[int], hosted: set[int]
) -> tuple[frozenset[str], str | None]:
    """(shared-HBM tensors both written and read, why the kernel cannot run batched or None):
    every element one batch position writes must be read or written by no other position
    (except by the same hosted instruction running its positions in the interpreter's
    order)."""
    uses: dict[str, list[_HbmUse]] = {}
    for instr, loops in instructions_of(ir):
        for acc, w in [*((a, False) for a in instr.reads()), *((a, True) for a in instr.writes())]:
            d = ir.tensor(acc.tensor)
            base = d.alias_of or d.name
            if ir.tensor(base).buffer == "shared_hbm":
                uses.setdefault(base, []).append(_HbmUse(instr, acc, loops, w))
    reread: set[str] = set()
    for name, us in uses.items():
        ws = [u for u in us if u.writes]
        if not ws:
            continue
        if any(not u.writes for u in us):
            reread.add(name)
        # (a hosted instruction running its positions in the interpreter's order meets itself
        # in that order: a scatter's last writer, an accumulation's order of additions)
        ordered = {id(u.instr) for u in us if _in_interpreter_order(ir, u, batch, hosted)}
        if len({u.acc.tensor for u in us}) > 1:
            why = f"HBM tensor {ir.label(name)} is written and accessed through a view"
            return frozenset(reread), why
        pairs = _overlapping_pairs(ir, us)
        # (another line first, writes before reads: the clearer reason)
        pairs.sort(key=lambda p: (p[0].instr is p[1].instr, not p[1].writes))
        for w, o in pairs:
            if w.instr is o.instr and id(w.instr) in ordered:
                continue
            why = _positions_meet(ir, w, o, batch)
            if why:
                return frozenset(reread), why
    return frozenset(reread), None


FAR = 1 << 62  # the bound of an index whose range is unknown (indirect, device loop)


def _overlapping_pairs(ir: KernelIR, us: list[_HbmUse]) -> list[tuple[_HbmUse, _HbmUse]]:
    """(write, access) pairs of one tensor whose footprints over all positions overlap in every
    dimension (each write against itself, later writes and every read): only those can meet.
    One vectorised box test per write keeps this near-linear for kernels of many stores."""
    lo = np.empty((len(us), len(us[0].acc.index)), dtype=np.int64)
    hi = np.empty_like(lo)
    for k, u in enumerate(us):
        known = {s: r.bounds for s, r in ir.symbol_ranges(u.loops).items() if not r.runtime}
        indirect = dict(u.acc.indirect)
        for d, e in enumerate(u.acc.index):
            if d in indirect or any(s not in known for s in e.base.symbols()):
                lo[k, d], hi[k, d] = -FAR, FAR
            else:
                lo[k, d], hi[k, d] = e.bounds(known)
    writes = np.array([u.writes for u in us])
    out = []
    for i, w in enumerate(us):
        if not w.writes:
            continue
        meets = np.all((lo <= hi[i]) & (hi >= lo[i]), axis=1)
        meets &= ~writes | (np.arange(len(us)) >= i)
        out += [(w, us[j]) for j in np.flatnonzero(meets)]
    return out


def _line(u: _HbmUse) -> str:
    return f"line {u.instr.loc.line}" if u.instr.loc is not None else f"'{u.instr.api}'"


def _shared_axes(ir: KernelIR, a: _HbmUse, b: _HbmUse, batch: set[int]) -> list[tuple]:
    """The batch axes two accesses share, as ``races._form``'s (symbol, start, step) with their
    extents."""
    axes = [((PidSym(g), 0, 1), n) for g, n in enumerate(ir.grid.shape) if n > 1]
    inner = {id(lp) for lp in b.loops}
    axes += [
        ((lp.sym, lp.start, lp.step), lp.trip_count)
        for lp in a.loops
        if id(lp) in inner and id(lp) in batch and lp.trip_count > 1
    ]
    return axes


def _positions_meet(ir: KernelIR, w: _HbmUse, o: _HbmUse, batch: set[int]) -> str | None:
    """Why write ``w`` and access ``o`` may touch one element at two distinct batch positions
    (None: provably they cannot)."""
    axes = _shared_axes(ir, w, o, batch)
    if not axes:
        return None  # one position each time: program order decides, as in the interpreter
    varying = [v for v, _ in axes]
    extents = [n for _, n in axes]
    what = "write" if o.writes else "read"
    pair = f"{_line(w)} and the {what} at {_line(o)}"
    name = ir.label(w.acc.tensor)
    if w.acc.indirect or o.acc.indirect:
        return (
            f"an indirect (data-dependent) access to {name}: {pair} may touch the "
            "same elements at different instances / iterations"
        )
    if len(w.acc.index) != len(o.acc.index):
        return f"HBM tensor {name}: {pair} index it with different ranks"

    def rest(u: _HbmUse) -> dict[Sym, tuple[int, int, int]]:
        # (a device loop's trips are unknown: its symbol stays outside the forms, undecided)
        scope = ir.symbol_ranges(u.loops)
        out = {s: (r.start, r.step, r.trips) for s, r in scope.items() if not r.runtime}
        for s, _ in axes:
            out.pop(s[0], None)
        return out

    fw, fo = races._form(w.acc, varying, rest(w)), races._form(o.acc, varying, rest(o))
    met = first_meeting(fw, fo, extents)
    if met is None:
        return None
    if o.writes:
        return (
            f"several instances / iterations write the same elements of {name} "
            f"({pair}){'' if met else ' (not provably distinct)'}"
        )
    return (
        f"HBM tensor {name} is written and read: {pair} "
        f"{'touch the same elements at different' if met else 'are not provably apart across'}"
        " instances / iterations"
    )


def first_meeting(fa: list, fb: list, extents: list[int]) -> bool | None:
    """Whether two accesses in ``races._form`` meet at two distinct positions: True when they
    do, None when they provably do not, False when that cannot be decided here (symbols of
    unknown range, too many positions). Accesses with the same coefficients (a read and a
    write of the same tile, one write against itself) depend only on the positions' difference
    ``delta``; the batch axes then split into groups that share no tensor dimension, each
    group's differences enumerated on its own (``races.first_conflict``)."""
    # (a dimension indexed by a symbol of unknown range, a device loop's, may always meet)
    kept = [(x, y) for x, y in zip(fa, fb) if not (x.fixed or y.fixed)]
    met = _meeting([x for x, _ in kept], [y for _, y in kept], extents)
    return False if met and len(kept) < len(fa) else met


def _meeting(fa: list, fb: list, extents: list[int]) -> bool | None:
    """``first_meeting`` on forms of known symbols only."""
    got = races.first_conflict(fa, fb, extents, _MAX_DIFFERENCES)
    return False if got == races.UNDECIDED else (None if got is None else True)


def _in_interpreter_order(ir: KernelIR, u: _HbmUse, batch: set[int], hosted: set[int]) -> bool:
    """A hosted instruction runs its positions in ascending order along the batch axes
    (``batched_host.Host.run``): the interpreter's order when only one axis varies around it,
    chunked in order, with no iterated loop inside it and instances on one core."""
    if id(u.instr) not in hosted or any(core for d in ir.grid.dims for _, core in d.factors):
        return False
    grid = [n for n in ir.grid.shape if n > 1]
    inner = [lp for lp in u.loops if lp.is_runtime or lp.trip_count > 1]
    if grid:
        return len(grid) == 1 and not inner
    batched = [lp for lp in inner if id(lp) in batch]
    return not batched or (len(batched) == 1 and inner[-1] is batched[0])


# ---- copies skipped on tensors the kernel writes and reads ------------------------------


@dataclass(frozen=True)
class _Positions:
    """Program-order positions (loop bodies flattened in place) of one IR's nodes, and the
    sorted positions of the instructions that read each tensor, write each storage root, and
    use each tensor and each storage root: each question below is then a bisection, not a walk
    of the kernel (planning asks one per load and per store)."""

    order: dict[int, int]
    reads: dict[str, list[int]]
    root_writes: dict[str, list[int]]
    uses: dict[str, list[int]]
    root_uses: dict[str, list[int]]


_LAST: tuple[object, _Positions | None] = (None, None)


def _positions(ir: KernelIR) -> _Positions:
    global _LAST
    got = _LAST
    if got[0] is ir and got[1] is not None:
        return got[1]
    order: dict[int, int] = {}
    lists: tuple[dict[str, list[int]], ...] = ({}, {}, {}, {})
    reads, root_writes, uses, root_uses = lists
    for i, (n, _) in enumerate(nodes_of(ir)):
        order[id(n)] = i
        if not isinstance(n, Instr):
            continue
        for a in n.reads():
            reads.setdefault(a.tensor, []).append(i)
        for a in n.writes():
            root_writes.setdefault(ir.storage_of(a.tensor), []).append(i)
        for name in {u.access.tensor for u in n.uses()}:
            uses.setdefault(name, []).append(i)
            root_uses.setdefault(ir.storage_of(name), []).append(i)
    for d in lists:  # (a position appended twice by one instruction: once is enough)
        for k, v in d.items():
            d[k] = sorted(set(v))
    pos = _Positions(order, reads, root_writes, uses, root_uses)
    _LAST = (ir, pos)
    return pos


def _any_in(positions: list[int], lo: int, hi: int) -> bool:
    """Some position in ``positions`` (sorted) lies in [lo, hi)."""
    i = bisect.bisect_left(positions, lo)
    return i < len(positions) and positions[i] < hi


def written_while_viewed(ir: KernelIR, load: Instr) -> bool:
    """Some instruction writes the HBM tensor ``load`` reads after the load and up to the last
    reader of its tile (in program order): a tile that is a view of the tensor would see it.
    (Also when the tile is read before the load in program order: a later loop trip.)"""
    assert load.dst is not None
    pos = _positions(ir)
    base = ir.storage_of(load.srcs[0].tensor)  # type: ignore[union-attr]
    start = pos.order[id(load)]
    readers = pos.reads.get(load.dst.tensor, [])
    if readers and readers[0] < start:
        return True  # (read in a later trip of a loop, before it is reloaded)
    end = max(readers[-1], start) if readers else start
    return _any_in(pos.root_writes.get(base, []), start + 1, end + 1)


def elided_views(ir: KernelIR, elided: set[int]) -> dict[str, set[str]]:
    """The tiles the copies ``elided`` make views of HBM, by the storage root they view."""
    views: dict[str, set[str]] = {}
    for i, _ in instructions_of(ir):
        if id(i) in elided:
            root = ir.storage_of(i.srcs[0].tensor)  # type: ignore[union-attr]
            views.setdefault(root, set()).add(i.dst.tensor)  # type: ignore[union-attr]
    return views


def seen_before_store(
    ir: KernelIR, alloc: int, store: Instr, hbm_read: set[str], views: dict[str, set[str]]
) -> bool:
    """A tile fused into its store's destination is written there by its producer (the
    instruction after its allocation): too early when the destination tensor is read and the
    producer, or an instruction between it and the store, accesses that tensor (directly or
    through a tile that is a view of it: ``views``, from :func:`elided_views`)."""
    assert store.dst is not None
    base = ir.storage_of(store.dst.tensor)
    if base not in hbm_read:
        return False
    pos = _positions(ir)
    lo, hi = pos.order[alloc] + 1, pos.order[id(store)]
    if _any_in(pos.root_uses.get(base, []), lo, hi):
        return True
    return any(_any_in(pos.uses.get(v, []), lo, hi) for v in views.get(base, ()))
