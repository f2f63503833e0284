"""Races between the two cores of a current-API LNC=2 launch traced once per core.

The cores run at the same time and share HBM. Two accesses to the same shared-HBM element, on
different cores, at least one a write, race unless ``nisa.core_barrier`` orders them. Barriers
pair up in order (a core's k-th barrier meets the other core's k-th), so an access's *epoch* is
the number of barriers its core passed before it; accesses of different epochs are ordered.
An epoch is affine in the enclosing loops' iterations, so the analysis treats it as one more
index dimension: two accesses conflict when every tensor dimension may overlap (the per-
dimension lattice test of ``races.py``) and their epochs may be equal.

Not decided here (no report): accesses after a barrier inside a device loop (``fori_loop`` with
a register bound, ``while_loop``), whose epochs depend on run-time trip counts; indirect
(data-dependent) accesses; accesses through a reshape of another shape; and, as in
``races.py``, accumulating writes against each other. Only ``core_barrier`` orders HBM
accesses; ``sendrecv`` and the collectives exchange data but do not order other accesses."""

from __future__ import annotations

import math

from nki.errors import NKIDependencyError
from nki.ir import HBM_BUFFERS, Access, Instr, KernelIR, Loop, Node

from .races import _DimForm, _form, _is_candidate, _reads, _rest

BARRIER = ("lnc", "core_barrier")  # the IR (kind, op) of nisa.core_barrier

_Epoch = tuple[int, tuple[tuple[int, int], ...]] | None  # (const, ((per trip, trips), ...))


def _is_barrier(n: Node) -> bool:
    return isinstance(n, Instr) and (n.kind, n.op) == BARRIER


def _barriers(nodes: tuple[Node, ...]) -> int | None:
    """Barriers one pass over ``nodes`` runs (None: it depends on a device loop's trips)."""
    total = 0
    for n in nodes:
        if isinstance(n, Loop):
            inner = _barriers(n.body)
            if inner is None or (inner and n.is_runtime):
                return None
            total += inner * n.trip_count
        elif _is_barrier(n):
            total += 1
    return total


def _accesses(ir: KernelIR) -> list[tuple[Instr, tuple[Loop, ...], _Epoch]]:
    """Every instruction of ``ir`` with its loops and epoch (None: not known statically)."""
    out: list[tuple[Instr, tuple[Loop, ...], _Epoch]] = []

    def rec(nodes: tuple[Node, ...], loops: tuple[Loop, ...], epoch: _Epoch) -> _Epoch:
        for n in nodes:
            if isinstance(n, Loop):
                per = _barriers(n.body)
                if epoch is None or per is None or (per and n.is_runtime):
                    rec(n.body, loops + (n,), None)
                    epoch = None if per != 0 else epoch
                elif per == 0:
                    rec(n.body, loops + (n,), epoch)
                else:
                    const, terms = epoch
                    rec(n.body, loops + (n,), (const, terms + ((per, n.trip_count),)))
                    epoch = (const + per * n.trip_count, terms)
            elif _is_barrier(n):
                epoch = None if epoch is None else (epoch[0] + 1, epoch[1])
            elif isinstance(n, Instr):
                out.append((n, loops, epoch))
        return epoch

    rec(ir.body, (), (0, ()))
    return out


def _epoch_form(epoch: tuple[int, tuple[tuple[int, int], ...]]) -> _DimForm:
    const, terms = epoch
    hi, g = 0, 0
    for per, trips in terms:
        if trips > 1:
            hi += per * (trips - 1)
            g = math.gcd(g, per)
    return _DimForm(const, (), (), 0, hi, g)


def _overlap(fa: list[_DimForm], fb: list[_DimForm]) -> bool:
    """Whether the two accesses may touch one element in the same epoch (last dim: epoch)."""
    for x, y in zip(fa, fb):
        d = x.const - y.const
        g = math.gcd(x.g, y.g)
        if not y.rlo - x.rhi <= d <= y.rhi - x.rlo or (d % g if g else d):
            return False
    return True


def _shared(ir: KernelIR, acc: Access) -> bool:
    d = ir.tensor(acc.tensor)
    base = ir.tensor(d.alias_of) if d.alias_of else d
    return base.buffer in HBM_BUFFERS and (base.kind == "param" or base.buffer == "shared_hbm")


def _events(ir: KernelIR) -> list[tuple[Instr, Access, bool, list[_DimForm]]]:
    """(instruction, access, is a write, forms incl. the epoch) of every shared-HBM access."""
    out = []
    for instr, loops, epoch in _accesses(ir):
        if epoch is None:
            continue
        rest = _rest(loops)
        ef = _epoch_form(epoch)
        if _is_candidate(ir, instr, True):
            assert isinstance(instr.dst, Access)
            out.append((instr, instr.dst, True, _form(instr.dst, [], rest) + [ef]))
        for acc in _reads(instr):
            if not acc.indirect and _shared(ir, acc):
                out.append((instr, acc, False, _form(acc, [], rest) + [ef]))
    return out


def check_core_races(ir: KernelIR) -> None:
    """No two accesses of different cores to one shared-HBM element, one a write, in the same
    barrier epoch (``ir.cores``: the per-core traces of an LNC=2 launch)."""
    if len(ir.cores) < 2:
        return
    events = [_events(c) for c in ir.cores]
    for ca, cb in ((0, 1), (1, 0)):
        for a, acc_a, write_a, fa in events[ca]:
            if not write_a:
                continue
            for b, acc_b, write_b, fb in events[cb]:
                if write_b and ca > cb:
                    continue  # write/write pairs are checked once
                if acc_a.tensor != acc_b.tensor or len(acc_a.index) != len(acc_b.index):
                    continue
                if _overlap(fa, fb):
                    _report(ir, (ca, a, acc_a), (cb, b, acc_b, write_b))


def _report(
    ir: KernelIR, first: tuple[int, Instr, Access], second: tuple[int, Instr, Access, bool]
) -> None:
    ca, a, acc_a = first
    cb, b, acc_b, write_b = second
    what = "writes" if write_b else "reads"
    raise NKIDependencyError(
        f"race between the two cores of an LNC=2 launch: core {ca} writes '{acc_a}' (line "
        f"{a.loc.line if a.loc else '?'}) and core {cb} {what} '{acc_b}' (line "
        f"{b.loc.line if b.loc else '?'}), the same elements of shared HBM tensor "
        f"{ir.label(acc_a.tensor)}, with no nisa.core_barrier between them; the cores run at "
        "the same time, so the result depends on their timing. Give each core its own part "
        "(index with nl.program_id) or order the accesses with nisa.core_barrier",
        code="err_spmd_write_race",
        loc=a.loc,
        related=((f"core {cb}'s access", b.loc),) if b.loc is not None else (),
    )
