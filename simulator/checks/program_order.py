"""Program order of a current-API kernel's symbolic loops.

In the current API every loop is Python's ``range``: iterations run one after another, so an
iteration may read what an earlier one wrote. nki-sim traces the loops once (see
``nki/tracer/loops.py``) and runs an ``affine_range`` loop as a batch of independent iterations;
that gives the same result only when no iteration sees another's writes. Here each loop of a
current-API kernel gets the kind its accesses allow:

* an ``nl.affine_range`` loop one of whose iterations reads (or, for an on-chip tile allocated
  outside it, observes a rewrite of) what another writes runs in order (``sequential``). Two
  iterations writing the same HBM element stay an error, as in the classic API
  (``err_unexpected_output_dependencies``, ``races.check_loop_carried``); accumulating writes
  (``+=``, a matmul accumulating into PSUM) do not order the loop;
* a ``range`` / ``nl.sequential_range`` loop whose iterations touch no common element at all
  (accumulations included: their rounding depends on the order) runs as an ``affine`` loop.

The test per pair of accesses is the per-dimension analysis of ``races.py``; what it cannot
decide (indirect accesses, different views of one storage, symbols it does not model, loops
beyond its enumeration limit) counts as a dependency."""

from __future__ import annotations

import dataclasses

from nki.ir import HBM_BUFFERS, Access, Instr, KernelIR, Loop, Node

from .races import (
    UNDECIDED,
    _allocs,
    _form,
    _is_candidate,
    _mask_uses,
    _reduces,
    _rest,
    _Timeline,
    _writes,
    first_conflict,
)


def with_program_order(ir: KernelIR) -> KernelIR:
    """``ir`` (a current-API trace) with each loop's kind set as the module docstring says."""
    timeline = _Timeline.of(ir)
    body = _rebuild(ir, ir.body, timeline)
    return ir if body is ir.body else dataclasses.replace(ir, body=body, _by_name={})


def _rebuild(ir: KernelIR, nodes: tuple[Node, ...], timeline: _Timeline) -> tuple[Node, ...]:
    out, changed = [], False
    for n in nodes:
        m = n
        if isinstance(n, Loop) and not n.is_runtime:
            kind = _kind(ir, n, timeline)
            inner = _rebuild(ir, n.body, timeline)
            if kind != n.kind or inner is not n.body:
                m = dataclasses.replace(n, kind=kind, body=inner)
        changed |= m is not n
        out.append(m)
    return tuple(out) if changed else nodes


@dataclasses.dataclass(frozen=True)
class _Use:
    instr: Instr
    acc: Access
    write: bool
    accumulates: bool
    loops: tuple[Loop, ...]


def _uses(nodes: tuple[Node, ...], loops: tuple[Loop, ...] = ()) -> list[_Use]:
    out: list[_Use] = []
    for n in nodes:
        if isinstance(n, Loop):
            out += _uses(n.body, loops + (n,))
        elif isinstance(n, Instr):
            # (a current-API nisa.tensor_tensor into its own source keeps program order)
            acc_dst = n.accumulates or _reduces(n, isa=False)
            for a in n.writes():
                out.append(_Use(n, a, True, acc_dst and a is n.dst, loops))
            for a in n.reads():
                if not (acc_dst and a is n.dst):  # the accumulation's own read of its dst
                    out.append(_Use(n, a, False, False, loops))
    return out


def _kind(ir: KernelIR, loop: Loop, timeline: _Timeline) -> str:
    if loop.trip_count < 2:
        return loop.kind
    private = {ir.storage_of(t) for t in _allocs(loop.body)}
    uses = [u for u in _uses(loop.body) if ir.storage_of(u.acc.tensor) not in private]
    parallel = loop.kind == "affine"
    if parallel and _hbm_write_conflict(ir, loop, frozenset(private)):
        return loop.kind  # reported by check_loop_carried, whatever else the loop carries
    for a in (u for u in uses if u.write):
        base = ir.storage_of(a.acc.tensor)
        on_chip = ir.tensor(base).buffer not in HBM_BUFFERS
        for b in uses:
            if ir.storage_of(b.acc.tensor) != base:
                continue
            if parallel and b.write and (not on_chip or (a.accumulates and b.accumulates)):
                continue  # HBM: check_loop_carried's error; accumulations: as affine promises
            if not _may_meet(ir, loop, a, b):
                continue
            if b.write and on_chip and timeline.observed(base, loop) is None:
                continue  # scratch every iteration rewrites before reading it
            return "sequential"
    return "affine"


def _hbm_write_conflict(ir: KernelIR, loop: Loop, private: frozenset[str]) -> bool:
    """Two iterations write one HBM element (``races.check_loop_carried``'s error)."""
    ws = [
        (i, acc, inner)
        for i, acc, inner in _writes(loop.body, ())
        if _is_candidate(ir, i, acc, False, private)
        and not _mask_uses(i, {loop.sym})
        and ir.tensor(ir.storage_of(acc.tensor)).buffer in HBM_BUFFERS
    ]
    varying = [(loop.sym, loop.start, loop.step)]
    for k, (_, wa, la) in enumerate(ws):
        for _, wb, lb in ws[k:]:
            if wa.tensor != wb.tensor or len(wa.index) != len(wb.index):
                continue
            fa, fb = _form(wa, varying, _rest(ir, la)), _form(wb, varying, _rest(ir, lb))
            found = first_conflict(fa, fb, [loop.trip_count])
            if found is not None and found != UNDECIDED:  # (undecided: check_loop_carried says so)
                return True
    return False


def _may_meet(ir: KernelIR, loop: Loop, a: _Use, b: _Use) -> bool:
    """Whether two different iterations of ``loop`` may touch a common element through the
    accesses of ``a`` and ``b`` (True when the analysis cannot tell)."""
    if a.acc.indirect or b.acc.indirect or a.acc.tensor != b.acc.tensor:
        return True
    if len(a.acc.index) != len(b.acc.index):
        return True
    varying = [(loop.sym, loop.start, loop.step)]
    fa = _form(a.acc, varying, _rest(ir, a.loops))
    fb = _form(b.acc, varying, _rest(ir, b.loops))
    if any(x.fixed != y.fixed for x, y in zip(fa, fb)):
        return True  # (other symbols differ between the two: cannot tell)
    return first_conflict(fa, fb, [loop.trip_count]) is not None  # (undecided: may meet)
