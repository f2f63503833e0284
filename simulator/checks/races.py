"""Write conflicts: loop-carried dependencies in ``affine_range`` (HBM, SBUF and PSUM) and SPMD
races (shared HBM).

``affine_range`` promises the compiler that iterations are independent, so it may reorder or
overlap them; two iterations that write the same HBM element make the result depend on that
order, and the real compiler rejects the loop (``err_unexpected_output_dependencies``). The
same holds for an on-chip tile allocated outside the loop when one iteration can see what
another wrote: the loop body reads the tile before writing it, or the code after the loop reads
it (a tile allocated inside the loop is per iteration; a scratch tile every iteration rewrites
before reading it is renamed by the compiler). SPMD instances run on their own (possibly on
different physical cores sharing HBM), so two instances writing the same shared HBM element
race.

The analysis is static and exact per tensor dimension: an access's index in one dimension is
``const + c . v + r`` where ``v`` are the symbols that differ between the two writers (the loop's
iterator, or the program ids), and ``r`` ranges over a lattice ``g * Z`` inside ``[rlo, rhi]``
(tile axes and inner loops). Two writers may touch the same element iff, in every dimension,
the difference of their ``const + c . v`` parts lies in the other's ``r`` window on that lattice.
Masked writes whose mask depends on the varying symbols, indirect (data-dependent) writes and
accumulating writes (``+=``, ``dst_rmw_op``, ``nl.atomic_rmw``: order-independent) are not
reported."""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

import numpy as np

from nki.errors import NKIDependencyError, NKIWarning, SrcLoc, warn_at
from nki.ir import HBM_BUFFERS, Access, Alloc, Instr, KernelIR, Loop, PidSym, Sym
from nki.optable import OPS


@dataclass(frozen=True)
class _DimForm:
    const: int  # index value at varying index 0 and zero rest
    coeffs: tuple[int, ...]  # per varying symbol, per step of its index
    fixed: tuple  # terms over symbols equal for both writers
    rlo: int
    rhi: int
    g: int  # lattice of the rest (0: the rest is always 0)


def _form(
    acc: Access,
    varying: list[tuple[Sym, int, int]],  # (sym, start, step)
    rest: dict[Sym, tuple[int, int, int]],  # sym -> (start, step, trip)
) -> list[_DimForm]:
    vpos = {s: i for i, (s, _, _) in enumerate(varying)}
    out = []
    for e in acc.index:
        const = e.base.const
        coeffs = [0] * len(varying)
        fixed = []
        rlo = rhi = 0
        g = 0
        for s, c in e.base.terms:
            if s in vpos:
                _, start, step = varying[vpos[s]]
                const += c * start
                coeffs[vpos[s]] += c * step
            elif s in rest:
                start, step, trip = rest[s]
                const += c * start
                if trip > 1:
                    k = c * step
                    rlo += min(0, k * (trip - 1))
                    rhi += max(0, k * (trip - 1))
                    g = math.gcd(g, abs(k))
            else:
                fixed.append((s, c))
        for c, n in zip(e.coeffs, e.shape):
            if c and n > 1:
                rlo += min(0, c * (n - 1))
                rhi += max(0, c * (n - 1))
                g = math.gcd(g, abs(c))
        out.append(_DimForm(const, tuple(coeffs), tuple(fixed), rlo, rhi, g))
    return out


UNDECIDED = "undecided"  # a search that met its enumeration limit (said so, never silent)
_MAX_PAIRS = 1 << 24  # position pairs enumerated for two accesses of different index forms
_MAX_DIFFERENCES = 1 << 26  # position differences enumerated per group of axes (same forms)
_CHUNK = 1 << 18  # rows per step of either enumeration (bounded memory)

Pair = tuple[tuple[int, ...], tuple[int, ...]]


def first_conflict(
    fa: list[_DimForm], fb: list[_DimForm], extents: list[int], limit: int = _MAX_DIFFERENCES
) -> Pair | str | None:
    """Two distinct positions (index vectors over ``extents``) at which the accesses ``fa`` and
    ``fb`` may touch the same element; None when they provably never do; ``UNDECIDED`` when
    deciding would enumerate more than the limits allow. Accesses with the same coefficients
    (a write against itself, a load and a store of one tile) depend only on the difference of
    the two positions, searched per group of axes that share no dimension (``limit``
    differences per group); others pair by pair (``_MAX_PAIRS``)."""
    if any(x.fixed != y.fixed for x, y in zip(fa, fb)):
        return None  # other symbols differ between the writers: not decidable here, stay quiet
    if math.prod(extents) < 2:
        return None
    if all(x.coeffs == y.coeffs for x, y in zip(fa, fb)):
        return _by_difference(fa, fb, extents, limit)
    if math.prod(extents) ** 2 > _MAX_PAIRS:
        return UNDECIDED
    return pairwise_conflict(fa, fb, extents)


def pairwise_conflict(fa: list[_DimForm], fb: list[_DimForm], extents: list[int]) -> Pair | None:
    """``first_conflict`` by comparing every pair of distinct positions (in chunks of rows)."""
    n = math.prod(extents)
    pts = np.array(list(itertools.product(*(range(e) for e in extents))), dtype=np.int64)
    va = [pts @ np.array(x.coeffs, dtype=np.int64) + x.const for x in fa]
    vb = [pts @ np.array(y.coeffs, dtype=np.int64) + y.const for y in fb]
    step = max(1, _CHUNK // n)
    for lo in range(0, n, step):
        ok = np.ones((min(step, n - lo), n), dtype=bool)
        ok[np.arange(len(ok)), np.arange(lo, lo + len(ok))] = False  # a != b
        for x, y, a, b in zip(fa, fb, va, vb):
            # va + ra == vb + rb  <=>  va - vb == rb - ra, rb - ra in [y.rlo - x.rhi, ...]
            ok &= holds(x, y, a[lo : lo + len(ok), None] - b[None, :])
            if not ok.any():
                break
        else:
            i, j = (int(v) for v in np.argwhere(ok)[0])
            return tuple(int(v) for v in pts[lo + i]), tuple(int(v) for v in pts[j])
    return None


def holds(x: _DimForm, y: _DimForm, d: np.ndarray | int) -> np.ndarray | bool:
    """Index difference ``d`` (a's base minus b's) is within the reach of both tiles."""
    g = math.gcd(x.g, y.g)
    hit = (d >= y.rlo - x.rhi) & (d <= y.rhi - x.rlo)
    return hit & ((d % g == 0) if g else (d == 0))


def _axis_groups(coeffs: list[tuple[int, ...]], n: int) -> list[list[int]]:
    """The axes some dimension uses, grouped so that no dimension uses two groups."""
    group = list(range(n))

    def root(a: int) -> int:
        while group[a] != a:
            a = group[a]
        return a

    for c in coeffs:
        used = [a for a in range(n) if c[a]]
        for a in used[1:]:
            group[root(a)] = root(used[0])
    out: dict[int, list[int]] = {}
    for a in range(n):
        if any(c[a] for c in coeffs):
            out.setdefault(root(a), []).append(a)
    return list(out.values())


def _by_difference(
    fa: list[_DimForm], fb: list[_DimForm], extents: list[int], limit: int
) -> Pair | str | None:
    """``first_conflict`` of accesses with the same coefficients: a nonzero difference
    ``delta = a - b`` satisfying every dimension. Groups of axes are independent: each needs a
    satisfying difference of its own, one of them nonzero (or an axis no dimension uses)."""
    dims = list(zip(fa, fb))
    if any(not holds(x, y, x.const - y.const) for x, y in dims if not any(x.coeffs)):
        return None
    delta = [0] * len(extents)
    free = [a for a in range(len(extents)) if extents[a] > 1 and not any(x.coeffs[a] for x in fa)]
    nonzero = bool(free)
    if free:
        delta[free[0]] = -1
    for axes in _axis_groups([x.coeffs for x in fa], len(extents)):
        mine = [(x, y) for x, y in dims if any(x.coeffs[a] for a in axes)]
        got = _group_differences(mine, axes, extents, limit, want_nonzero=not nonzero)
        if got is None or got == UNDECIDED:
            return got
        if any(got):
            nonzero = True
            for a, d in zip(axes, got):
                delta[a] = d
    if not nonzero:
        return None
    # a = b + delta with both inside the extents
    a = tuple(max(0, d) for d in delta)
    b = tuple(max(0, -d) for d in delta)
    return a, b


def _group_differences(
    dims: list[tuple[_DimForm, _DimForm]],
    axes: list[int],
    extents: list[int],
    limit: int,
    want_nonzero: bool,
) -> tuple[int, ...] | str | None:
    """A difference over ``axes`` satisfying ``dims``: a nonzero one if any (the zero one only
    when no nonzero one does, or when ``want_nonzero`` is False and it holds), None when no
    difference does, ``UNDECIDED`` past ``limit`` differences (enumerated in chunks)."""
    sizes = [2 * extents[a] - 1 for a in axes]
    total = math.prod(sizes)
    if total > limit:
        return UNDECIDED
    coeffs = [np.array([x.coeffs[a] for a in axes], dtype=np.int64) for x, _ in dims]
    zero_ok = all(holds(x, y, x.const - y.const) for x, y in dims)
    if zero_ok and not want_nonzero:
        return (0,) * len(axes)
    lows = np.array([1 - extents[a] for a in axes], dtype=np.int64)
    for lo in range(0, total, _CHUNK):
        flat = np.arange(lo, min(total, lo + _CHUNK), dtype=np.int64)
        delta = np.stack(np.unravel_index(flat, sizes), axis=1) + lows
        ok = np.any(delta != 0, axis=1)
        for (x, y), c in zip(dims, coeffs):
            ok &= holds(x, y, delta @ c + (x.const - y.const))
        hit = np.flatnonzero(ok)
        if len(hit):
            return tuple(int(v) for v in delta[hit[0]])
    return (0,) * len(axes) if zero_ok else None


def _writes(nodes, loops: tuple[Loop, ...]):
    """(instruction, written access, enclosing loops) for every write in ``nodes``."""
    for n in nodes:
        if isinstance(n, Loop):
            yield from _writes(n.body, loops + (n,))
        elif isinstance(n, Instr):
            for acc in n.writes():
                yield n, acc, loops


def _reads(nodes, loops: tuple[Loop, ...]):
    """(instruction, read access, enclosing loops) for every direct read in ``nodes`` (not the
    destination an accumulating write reads)."""
    for n in nodes:
        if isinstance(n, Loop):
            yield from _reads(n.body, loops + (n,))
        elif isinstance(n, Instr):
            for u in n.uses():
                if u.read and u.role != "dst" and not u.access.indirect:
                    yield n, u.access, loops


def _allocs(nodes) -> list[str]:
    """Tensors allocated anywhere inside ``nodes``."""
    out = []
    for n in nodes:
        if isinstance(n, Loop):
            out += _allocs(n.body)
        elif isinstance(n, Alloc):
            out.append(n.tensor)
    return out


def _is_candidate(
    ir: KernelIR,
    instr: Instr,
    dst: Access,
    shared_only: bool,
    private: frozenset[str] = frozenset(),
) -> bool:
    """A plain (non-accumulating, direct) write that may conflict. SPMD races concern shared
    HBM only; loop-carried dependencies concern every memory, except tensors allocated inside
    the loop (``private``: each iteration has its own, an HBM scratch tensor as an on-chip
    tile). Secondary outputs are plain writes even when the destination accumulates."""
    if dst.indirect or (dst is instr.dst and (instr.accumulates or _reduces(instr))):
        return False
    if instr.kind == "const":  # nl.shared_constant: the same compile-time data, not a write
        return False
    d = ir.tensor(dst.tensor)
    base = ir.tensor(d.alias_of) if d.alias_of else d
    if shared_only:
        return base.buffer in HBM_BUFFERS and (base.kind == "param" or base.buffer == "shared_hbm")
    return base.name not in private and (base.buffer in HBM_BUFFERS or base.on_chip)


# instructions of two tiles whose ALU op is an attribute: (kind, op) -> the attribute
_ALU_ATTR = {("isa", "tensor_tensor"): "op"}


def _reduces(instr: Instr, isa: bool = True) -> bool:
    """``t = op(t, x)`` with ``op`` an associative reducer (add, max, ...): the same
    order-independent reduction as ``t op= x`` (``nl.loop_reduce`` traces to this), written
    with ``nl.add`` or (``isa``) with ``nisa.tensor_tensor(op=nl.add)``."""
    attr = _ALU_ATTR.get((instr.kind, instr.op)) if isa else None
    name = instr.op if instr.kind == "ew" else instr.attr(attr) if attr else None
    row = OPS.get(name) if isinstance(name, str) else None
    return row is not None and row.identity is not None and instr.dst in instr.srcs


def _shown(ir: KernelIR, acc: Access) -> str:
    """An access as the user wrote it: the tensor's user name (see ``KernelIR.label``) and loop
    iterators by their variable names where the tracer knows them."""
    names = {str(n.sym): n.sym.name for n, _ in ir.walk() if isinstance(n, Loop) and n.sym.name}
    text = ir.label(acc.tensor).split("'")[1] + str(acc)[len(acc.tensor) :]
    return re.sub(r"\bl\d+\b", lambda m: names.get(m.group(0), m.group(0)), text)


def _mask_uses(instr: Instr, syms: set[Sym]) -> bool:
    if instr.mask is None:
        return False
    return any(s in syms for c in instr.mask.conds for s in c.expr.base.symbols())


def _rest(ir: KernelIR, loops: tuple[Loop, ...]) -> dict[Sym, tuple[int, int, int]]:
    """(start, step, trips) of the iterators of ``loops``."""
    ranges = ir.symbol_ranges(loops)
    return {lp.sym: (r.start, r.step, r.trips) for lp in loops for r in (ranges[lp.sym],)}


@dataclass
class _Timeline:
    """Instructions in program order: each loop's span of positions and, per base tensor, the
    positions that touch it (and whether they read it)."""

    span: dict[int, tuple[int, int]]  # id(loop) -> [first, end) positions of its body
    touches: dict[str, list[tuple[int, bool, Instr]]]

    @classmethod
    def of(cls, ir: KernelIR) -> _Timeline:
        span: dict[int, tuple[int, int]] = {}
        touches: dict[str, list[tuple[int, bool, Instr]]] = {}
        pos = 0

        def rec(nodes) -> None:
            nonlocal pos
            for n in nodes:
                if isinstance(n, Loop):
                    start = pos
                    rec(n.body)
                    span[id(n)] = (start, pos)
                elif isinstance(n, Instr):
                    reads = {ir.storage_of(a.tensor) for a in n.reads()}
                    for t in reads:
                        touches.setdefault(t, []).append((pos, True, n))
                    for t in dict.fromkeys(ir.storage_of(a.tensor) for a in n.writes()):
                        if t not in reads:
                            touches.setdefault(t, []).append((pos, False, n))
                    pos += 1

        rec(ir.body)
        return cls(span, touches)

    def observed(self, tensor: str, loop: Loop) -> tuple[str, Instr] | None:
        """How another iteration (or the code after the loop) can see what one iteration wrote
        to an on-chip tile: the loop body reads it before writing it, or the next access after
        the loop reads it. None when every iteration writes it before reading it and the code
        after the loop overwrites it first (scratch reuse, which the compiler renames)."""
        first, end = self.span[id(loop)]
        acc = self.touches.get(tensor, [])
        inside = [(reads, i) for p, reads, i in acc if first <= p < end]
        after = [(reads, i) for p, reads, i in acc if p >= end]
        if inside and inside[0][0]:
            return "each iteration reads it before writing it (the previous iteration's value)", (
                inside[0][1]
            )
        if after and after[0][0]:
            return "it is read after the loop, seeing whichever iteration ran last", after[0][1]
        return None


def check_loop_carried(ir: KernelIR) -> None:
    """No two iterations of an ``affine_range`` loop write the same element of a tensor
    allocated outside the loop (accumulating writes excepted)."""

    def visit(nodes, outer: tuple[Loop, ...]) -> None:
        for n in nodes:
            if not isinstance(n, Loop):
                continue
            if n.kind == "affine" and n.trip_count > 1:
                _check_loop(ir, n, outer, timeline)
            visit(n.body, outer + (n,))

    timeline = _Timeline.of(ir)
    visit(ir.body, ())


def _check_loop(ir: KernelIR, loop: Loop, outer: tuple[Loop, ...], timeline: _Timeline) -> None:
    private = frozenset(ir.storage_of(t) for t in _allocs(loop.body))
    ws = [
        (i, acc, inner)
        for i, acc, inner in _writes(loop.body, ())
        if _is_candidate(ir, i, acc, False, private) and not _mask_uses(i, {loop.sym})
    ]
    for ia, (a, wa, ia_loops) in enumerate(ws):
        for b, wb, ib_loops in ws[ia:]:
            if ir.storage_of(wa.tensor) != ir.storage_of(wb.tensor):
                continue
            if wa.tensor != wb.tensor or len(wa.index) != len(wb.index):
                continue
            same = a is b and wa is wb
            hit = _iterations(ir, loop, (a, wa, ia_loops), (b, wb, ib_loops))
            if hit is None:
                continue
            va, vb = hit
            second = (
                ("the same statement in another iteration; loop", loop.loc)
                if same
                else ("conflicting write", b.loc)
            )
            related = (second,) if same else (second, ("affine_range loop", loop.loc))
            base = ir.storage_of(wa.tensor)
            mem = ir.tensor(base).buffer
            on_chip = mem in ("sbuf", "psum")
            what = f"HBM tensor {ir.label(wa.tensor)}"
            fix, why = "", ""
            if on_chip and ir.generation == "current":
                continue  # program order in the current API (see program_order.py)
            if on_chip:
                seen = timeline.observed(base, loop)
                if seen is None:
                    continue  # scratch reuse: no iteration sees another's value
                what = f"{mem.upper()} tile {ir.label(wa.tensor)}"
                fix = ", allocate the tile inside the loop"
                why = f", allocated outside the loop: {seen[0]}"
                related += (("read", seen[1].loc),)
            raise NKIDependencyError(
                f"loop-carried dependency in affine_range: iterations {va} and {vb} of "
                f"'{loop.sym.name or loop.sym}' (range({loop.start}, {loop.stop}, {loop.step})) "
                f"both write the same elements of {what} "
                f"('{_shown(ir, wa)}'{'' if same else f' and {_shown(ir, wb)}'}){why}; "
                "affine_range iterations "
                f"must be independent: index the write with the loop variable{fix} or use "
                "nl.sequential_range (accumulating with += is allowed)",
                code="err_unexpected_output_dependencies",
                loc=a.loc,
                related=tuple(r for r in related if r[1] is not None),
            )
    if ir.generation != "current":  # (current-API loops run in program order, as range)
        _check_reads(ir, loop, ws, private, timeline)


def _check_reads(
    ir: KernelIR, loop: Loop, ws: list, private: frozenset[str], timeline: _Timeline
) -> None:
    """No iteration of a classic ``affine_range`` loop reads elements another iteration writes
    (``t[:, i + 1] = f(t[:, i])``): what it reads would depend on the iterations' order."""
    rs = [
        (c, ra, ic_loops)
        for c, ra, ic_loops in _reads(loop.body, ())
        # (a masked read is left out: its mask may keep it to the iteration's own elements)
        if ir.storage_of(ra.tensor) not in private and c.mask is None
    ]
    for a, wa, ia_loops in ws:
        for c, ra, ic_loops in rs:
            if ra.tensor != wa.tensor or len(ra.index) != len(wa.index):
                continue
            base = ir.storage_of(wa.tensor)
            on_chip = ir.tensor(base).buffer in ("sbuf", "psum")
            if on_chip and timeline.observed(base, loop) is None:
                continue  # scratch reuse: every iteration writes it before reading it
            hit = _iterations(ir, loop, (a, wa, ia_loops), (c, ra, ic_loops))
            if hit is None:
                continue
            vw, vr = hit
            name = loop.sym.name or loop.sym
            what = ir.tensor(base).buffer.upper() if on_chip else "HBM"
            raise NKIDependencyError(
                f"loop-carried dependency in affine_range: iteration {vr} of '{name}' "
                f"(range({loop.start}, {loop.stop}, {loop.step})) reads elements of {what} "
                f"tensor {ir.label(wa.tensor)} ('{_shown(ir, ra)}') that iteration {vw} writes "
                f"('{_shown(ir, wa)}'); affine_range iterations must be independent, so what "
                "it reads depends on their order: use nl.sequential_range",
                code="err_unexpected_output_dependencies",
                loc=c.loc,
                related=tuple(
                    r for r in (("write", a.loc), ("affine_range loop", loop.loc)) if r[1]
                ),
            )


def _iterations(
    ir: KernelIR, loop: Loop, one: tuple[Instr, Access, tuple], other: tuple[Instr, Access, tuple]
) -> tuple[int, int] | None:
    """Two distinct iterations of ``loop`` in which the accesses ``one`` and ``other`` (each an
    instruction, its access and the loops around it inside ``loop``) may touch the same
    element: their iterator values; None when they never do or it is not decided (said so)."""
    varying = [(loop.sym, loop.start, loop.step)]
    (a, acc_a, loops_a), (b, acc_b, loops_b) = one, other
    fa = _form(acc_a, varying, _rest(ir, loops_a))
    fb = _form(acc_b, varying, _rest(ir, loops_b))
    hit = first_conflict(fa, fb, [loop.trip_count])
    if hit == UNDECIDED:
        _undecided(f"affine_range loop '{loop.sym.name or loop.sym}'", a, b, loop.loc)
    if not isinstance(hit, tuple):
        return None
    return loop.start + hit[0][0] * loop.step, loop.start + hit[1][0] * loop.step


class UndecidedCheckWarning(NKIWarning):
    """A static check could not decide a question within its enumeration limits: the kernel
    runs, but that check did not cover the accesses named."""


def _undecided(what: str, a: Instr, b: Instr, loc: SrcLoc | None) -> None:
    lines = " and ".join(dict.fromkeys(f"line {i.loc.line}" for i in (a, b) if i.loc))
    warn_at(
        f"write-conflict check not decided for {what}: comparing the writes at "
        f"{lines or 'its writes'} across every pair of positions would enumerate more than "
        f"{_MAX_PAIRS:,} pairs (or {_MAX_DIFFERENCES:,} differences); they were not checked "
        "against each other",
        UndecidedCheckWarning,
        loc,
    )


def check_spmd_races(ir: KernelIR) -> None:
    """No two SPMD instances write the same element of a shared HBM tensor."""
    shape = ir.grid.shape
    if not shape or math.prod(shape) < 2:
        return
    pids = {PidSym(a) for a in range(len(shape))}
    ws = [
        (i, acc, loops)
        for i, acc, loops in _writes(ir.body, ())
        if _is_candidate(ir, i, acc, True) and not _mask_uses(i, pids)
    ]
    varying = [(PidSym(a), 0, 1) for a in range(len(shape))]
    for ia, (a, wa, la) in enumerate(ws):
        for b, wb, lb in ws[ia:]:
            same = a is b and wa is wb
            if wa.tensor != wb.tensor or len(wa.index) != len(wb.index):
                continue
            fa = _form(wa, varying, _rest(ir, la))
            fb = _form(wb, varying, _rest(ir, lb))
            hit = first_conflict(fa, fb, list(shape))
            if hit == UNDECIDED:
                _undecided(f"SPMD grid {list(shape)}", a, b, ir.loc)
            if not isinstance(hit, tuple):
                continue
            other = "the same statement in" if same else "a write at this line in"
            raise NKIDependencyError(
                f"race between SPMD instances: grid instances {hit[0]} and {hit[1]} both write "
                f"the same elements of shared HBM tensor {ir.label(wa.tensor)} "
                f"('{_shown(ir, wa)}'{'' if same else f' and {_shown(ir, wb)}'}); "
                "the result depends on which instance "
                "runs last. Index the write with nl.program_id so instances write disjoint tiles",
                code="err_spmd_write_race",
                loc=a.loc,
                related=((f"{other} instance {hit[1]}", b.loc),) if b.loc is not None else (),
            )
