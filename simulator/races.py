"""Write conflicts on HBM: loop-carried dependencies in ``affine_range`` and SPMD races.

``affine_range`` promises the compiler that iterations are independent, so it may reorder or
overlap them; two iterations that write the same HBM element make the result depend on that
order, and the real compiler rejects the loop (``err_unexpected_output_dependencies``). SPMD
instances run on their own (possibly on different physical cores sharing HBM), so two instances
writing the same shared HBM element race.

The analysis is static and exact per tensor dimension: an access's index in one dimension is
``const + c . v + r`` where ``v`` are the symbols that differ between the two writers (the loop's
iterator, or the program ids), and ``r`` ranges over a lattice ``g * Z`` inside ``[rlo, rhi]``
(tile axes and inner loops). Two writers may touch the same element iff, in every dimension,
the difference of their ``const + c . v`` parts lies in the other's ``r`` window on that lattice.
Masked writes whose mask depends on the varying symbols, indirect (data-dependent) writes and
accumulating writes (order-independent) are not reported."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from nki.errors import NKIDependencyError
from nki.ir import HBM_BUFFERS, Access, Instr, KernelIR, Loop, PidSym, Sym

_MAX_POINTS = 2048  # varying-index vectors enumerated per analysis (N^2 pairs)


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


def _first_conflict(
    fa: list[_DimForm], fb: list[_DimForm], extents: list[int], same: bool
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """A pair of distinct varying-index vectors (a, b) where the writes may overlap."""
    if any(x.fixed != y.fixed for x, y in zip(fa, fb)):
        return None  # other symbols differ between the writers: not decidable here, stay quiet
    n = math.prod(extents)
    if n < 2 or n > _MAX_POINTS:
        return None
    pts = np.array(list(itertools.product(*(range(e) for e in extents))), dtype=np.int64)
    ok = ~np.eye(n, dtype=bool)  # a != b
    for x, y in zip(fa, fb):
        va = pts @ np.array(x.coeffs, dtype=np.int64) + x.const
        vb = pts @ np.array(y.coeffs, dtype=np.int64) + y.const
        # va + ra == vb + rb  <=>  va - vb == rb - ra, rb - ra in [y.rlo - x.rhi, y.rhi - x.rlo]
        d = va[:, None] - vb[None, :]
        g = math.gcd(x.g, y.g)
        hit = (d >= y.rlo - x.rhi) & (d <= y.rhi - x.rlo)
        hit &= (d % g == 0) if g else (d == 0)
        ok &= hit
        if not ok.any():
            return None
    i, j = (int(v) for v in np.argwhere(ok)[0])
    return tuple(int(v) for v in pts[i]), tuple(int(v) for v in pts[j])


def _writes(nodes, loops: tuple[Loop, ...]):
    for n in nodes:
        if isinstance(n, Loop):
            yield from _writes(n.body, loops + (n,))
        elif isinstance(n, Instr):
            yield n, loops


def _is_candidate(ir: KernelIR, instr: Instr, shared_only: bool) -> bool:
    dst = instr.dst
    if not isinstance(dst, Access) or dst.indirect or _accumulates(instr):
        return False
    if instr.kind == "const":  # nl.shared_constant: the same compile-time data, not a write
        return False
    d = ir.tensor(dst.tensor)
    base = ir.tensor(d.alias_of) if d.alias_of else d
    if base.buffer not in HBM_BUFFERS:
        return False
    if shared_only:
        return base.kind == "param" or base.buffer == "shared_hbm"
    return True


def _accumulates(instr: Instr) -> bool:
    """A read-modify-write store (``+=``, ``dst_rmw_op=``): order-independent up to rounding."""
    return instr.accumulate is not None or bool(instr.attr("rmw"))


def _base_name(ir: KernelIR, name: str) -> str:
    d = ir.tensor(name)
    return d.alias_of or name


def _mask_uses(instr: Instr, syms: set[Sym]) -> bool:
    if instr.mask is None:
        return False
    return any(s in syms for c in instr.mask.conds for s in c.expr.base.symbols())


def _rest(loops: tuple[Loop, ...]) -> dict[Sym, tuple[int, int, int]]:
    return {lp.sym: (lp.start, lp.step, lp.trip_count) for lp in loops}


def check_loop_carried(ir: KernelIR) -> None:
    """No two iterations of an ``affine_range`` loop write the same HBM element."""

    def visit(nodes, outer: tuple[Loop, ...]) -> None:
        for n in nodes:
            if not isinstance(n, Loop):
                continue
            if n.kind == "affine" and n.trip_count > 1:
                _check_loop(ir, n, outer)
            visit(n.body, outer + (n,))

    visit(ir.body, ())


def _check_loop(ir: KernelIR, loop: Loop, outer: tuple[Loop, ...]) -> None:
    ws = [
        (i, inner)
        for i, inner in _writes(loop.body, ())
        if _is_candidate(ir, i, False) and not _mask_uses(i, {loop.sym})
    ]
    varying = [(loop.sym, loop.start, loop.step)]
    for ia, (a, ia_loops) in enumerate(ws):
        for b, ib_loops in ws[ia:]:
            if _base_name(ir, a.dst.tensor) != _base_name(ir, b.dst.tensor):
                continue
            if a.dst.tensor != b.dst.tensor or len(a.dst.index) != len(b.dst.index):
                continue
            fa = _form(a.dst, varying, _rest(ia_loops))
            fb = _form(b.dst, varying, _rest(ib_loops))
            hit = _first_conflict(fa, fb, [loop.trip_count], a is b)
            if hit is None:
                continue
            va = loop.start + hit[0][0] * loop.step
            vb = loop.start + hit[1][0] * loop.step
            second = (
                ("the same statement in another iteration; loop", loop.loc)
                if a is b
                else ("conflicting write", b.loc)
            )
            related = (second,) if a is b else (second, ("affine_range loop", loop.loc))
            raise NKIDependencyError(
                f"loop-carried dependency in affine_range: iterations {va} and {vb} of "
                f"'{loop.sym.name or loop.sym}' (range({loop.start}, {loop.stop}, {loop.step})) "
                f"both write the same elements of HBM tensor '{a.dst.tensor}' "
                f"('{a.dst}'{'' if a is b else f' and {b.dst}'}); affine_range iterations must "
                "be independent: index the write with the loop variable or use "
                "nl.sequential_range",
                code="err_unexpected_output_dependencies",
                loc=a.loc,
                related=tuple(r for r in related if r[1] is not None),
            )


def check_spmd_races(ir: KernelIR) -> None:
    """No two SPMD instances write the same element of a shared HBM tensor."""
    shape = ir.grid.shape
    if not shape or math.prod(shape) < 2:
        return
    pids = {PidSym(a) for a in range(len(shape))}
    ws = [
        (i, loops)
        for i, loops in _writes(ir.body, ())
        if _is_candidate(ir, i, True) and not _mask_uses(i, pids)
    ]
    varying = [(PidSym(a), 0, 1) for a in range(len(shape))]
    for ia, (a, la) in enumerate(ws):
        for b, lb in ws[ia:]:
            if a.dst.tensor != b.dst.tensor or len(a.dst.index) != len(b.dst.index):
                continue
            fa = _form(a.dst, varying, _rest(la))
            fb = _form(b.dst, varying, _rest(lb))
            hit = _first_conflict(fa, fb, list(shape), a is b)
            if hit is None:
                continue
            other = "the same statement in" if a is b else "a write at this line in"
            raise NKIDependencyError(
                f"race between SPMD instances: grid instances {hit[0]} and {hit[1]} both write "
                f"the same elements of shared HBM tensor '{a.dst.tensor}' ('{a.dst}'"
                f"{'' if a is b else f' and {b.dst}'}); the result depends on which instance "
                "runs last. Index the write with nl.program_id so instances write disjoint tiles",
                code="err_spmd_write_race",
                loc=a.loc,
                related=((f"{other} instance {hit[1]}", b.loc),) if b.loc is not None else (),
            )
