"""Races between the two cores of a current-API LNC=2 launch traced once per core.

The cores run at the same time and share HBM. Two accesses to the same shared-HBM element, on
different cores, at least one a write, race unless a *meeting* of the two cores orders them.
Meetings are the instructions the documentation defines as points both cores must reach
before either proceeds: ``nisa.core_barrier``; ``nisa.sendrecv`` between the two cores (calls
of one ``pipe_id`` group "must complete before any can proceed"; the default DMA mode runs on a
core barrier); and an ``nki.collectives`` call whose result on each core needs the other's data
(``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all`` and the ring permutes
``collective_permute_implicit(_reduce)`` over a group holding both cores;
``collective_permute`` with pairs in both directions). Not meetings: a collective over
groups of one core, a one-way ``collective_permute`` (only the receiver waits, and the analysis
does not model half-orders) and a ``sendrecv`` of a core with itself.

Meetings pair up in order (the run time checks that both cores reach the same ones in the same
order), so an access's *epoch* is twice the number of meetings its core passed before it, and a
meeting's own accesses (a collective's HBM sources and destinations) have the odd epoch between
the two: accesses of different epochs are ordered. As for ``core_barrier`` from the start, a
meeting orders every shared-HBM access before it in the kernel's order against every access
after it (the hardware blocks only the meeting's engine, and the compiler's dependency tracking
does the rest; the analysis does not model a kernel that relies on an access overtaking a
meeting). An epoch is affine in the enclosing loops' iterations, so the analysis treats it as
one more index dimension: two accesses conflict when, for some iteration of each one's loops,
every tensor dimension overlaps and the epochs are equal. Iterations are enumerated exactly up
to 512 per access; beyond that the per-dimension lattice bound of ``races.py`` decides (it may
report interleaved blocks that never meet).

A plain copy that writes back the very elements it reads (the HBM fence
``dma_copy(dst=t, src=t)`` of AWS's kernels) counts as a write of them only: what its read
takes from the other core is what it stores, and the run time requires both cores' writes of
an element to store the same bytes.

Indirect (data-dependent) accesses are placed at run time: the tensors such an access of one
core touches while the other core also accesses them (one of the two writing) are left to
``lnc_writes.DynamicAccesses``, which runs the launch on the interpreter and remembers each
element's reads and changes.

Not decided here (no report): accesses after a meeting inside a device loop (``fori_loop`` with
a register bound, ``while_loop``), whose epochs depend on run-time trip counts; kernels whose
cores run different numbers of meetings (the run time reports the mismatch); accesses through a
reshape of another shape; and, as in ``races.py``, accumulating writes against each other."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from nki.errors import NKIDependencyError
from nki.ir import HBM_BUFFERS, Access, Instr, KernelIR, Loop, Node

from .races import _DimForm, _form, _is_candidate, _rest

# collectives whose every rank writes the same values: both cores may write one destination
SAME_RESULT = frozenset({("lnc", "all_reduce"), ("lnc", "all_gather")})
# collectives whose result on a rank needs every rank of its group: a meeting of the group
GROUP_MEETINGS = frozenset(
    {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "permute_implicit",
     "permute_implicit_reduce"}
)  # fmt: skip

# (epoch at iteration 0 of every loop; ((id(loop), epoch steps per trip, trips), ...))
_Epoch = tuple[int, tuple[tuple[int, int, int], ...]] | None


def _sendrecv_meets(instr: Instr, core: int) -> bool:
    return instr.attr("recv_from") != core or instr.attr("send_to") != core


def _group_meets(instr: Instr, core: int) -> bool:
    return any(core in g and len(g) > 1 for g in instr.attr("groups"))


def _permute_meets(instr: Instr, core: int) -> bool:
    pairs = set(instr.attr("pairs"))
    return any(s != t and (t, s) in pairs for s, t in pairs)


# IR op of an ``lnc`` instruction -> whether, on ``core``, it is a meeting of both cores
MEETS = {
    "core_barrier": lambda instr, core: True,
    "sendrecv": _sendrecv_meets,
    "collective_permute": _permute_meets,
    **{op: _group_meets for op in GROUP_MEETINGS},
}


def _is_meeting(n: Node, core: int) -> bool:
    return isinstance(n, Instr) and n.kind == "lnc" and MEETS.get(n.op, lambda i, c: False)(n, core)


def _meetings(nodes: tuple[Node, ...], core: int) -> int | None:
    """Epoch steps (2 per meeting) one pass over ``nodes`` runs (None: it depends on a device
    loop's trips)."""
    total = 0
    for n in nodes:
        if isinstance(n, Loop):
            inner = _meetings(n.body, core)
            if inner is None or (inner and n.is_runtime):
                return None
            total += inner * n.trip_count
        elif _is_meeting(n, core):
            total += 2
    return total


def _accesses(ir: KernelIR, core: int) -> list[tuple[Instr, tuple[Loop, ...], _Epoch]]:
    """Every instruction of ``ir`` (core ``core``'s trace) with its loops and epoch (None: not
    known statically). A meeting's own accesses get the odd epoch between before and after."""
    out: list[tuple[Instr, tuple[Loop, ...], _Epoch]] = []

    def rec(nodes: tuple[Node, ...], loops: tuple[Loop, ...], epoch: _Epoch) -> _Epoch:
        for n in nodes:
            if isinstance(n, Loop):
                per = _meetings(n.body, core)
                if epoch is None or per is None or (per and n.is_runtime):
                    rec(n.body, loops + (n,), None)
                    epoch = None if per != 0 else epoch
                elif per == 0:
                    rec(n.body, loops + (n,), epoch)
                else:
                    const, terms = epoch
                    rec(n.body, loops + (n,), (const, terms + ((id(n), per, n.trip_count),)))
                    epoch = (const + per * n.trip_count, terms)
            elif _is_meeting(n, core):
                if epoch is not None and n.op != "core_barrier":  # the barrier's data: a token
                    out.append((n, loops, (epoch[0] + 1, epoch[1])))
                epoch = None if epoch is None else (epoch[0] + 2, epoch[1])
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


_MAX_POINTS = 512  # loop iterations enumerated per access (else the lattice bound)


@dataclass(frozen=True)
class _Event:
    """One shared-HBM access of a core: ``points`` (iterations x (dims + epoch)) are the exact
    index bases and epoch of every iteration of its loops, each widened by the tile window of
    ``tile``; without ``points`` (too many iterations) ``forms`` bound them per dimension."""

    instr: Instr
    acc: Access
    write: bool
    forms: list[_DimForm]
    points: np.ndarray | None
    tile: list[tuple[int, int, int]]  # per dim: (lo, hi, lattice) of the tile axes
    digits: list[tuple[tuple[int, int], ...]]  # per dim: the tile axes' (|coeff|, count)


def _points(
    ir: KernelIR, acc: Access, loops: tuple[Loop, ...], epoch: tuple[int, tuple]
) -> np.ndarray | None:
    """The index bases and epoch of ``acc`` at every iteration of its (static) loops."""
    scope = ir.symbol_ranges(loops)
    if any(scope[lp.sym].runtime for lp in loops):
        return None
    ranges = [scope[lp.sym].values for lp in loops]
    if math.prod(len(r) for r in ranges) > _MAX_POINTS:
        return None
    rows = []
    for values in itertools.product(*ranges):
        env = {lp.sym: v for lp, v in zip(loops, values)}
        bases = [e.base.evaluate(env) for e in acc.index]
        rows.append(bases + [_epoch_at(epoch, loops, values)])
    return np.array(rows, dtype=np.int64).reshape(len(rows), len(acc.index) + 1)


def _epoch_at(epoch: tuple[int, tuple], loops: tuple[Loop, ...], values: tuple[int, ...]) -> int:
    const, terms = epoch
    by_loop = dict(terms)
    return const + sum(
        by_loop.get(id(lp), 0) * ((v - lp.start) // lp.step) for lp, v in zip(loops, values)
    )


def _tile(acc: Access) -> list[tuple[int, int, int]]:
    out = []
    for e in acc.index:
        lo = hi = g = 0
        for c, n in zip(e.coeffs, e.shape):
            if c and n > 1:
                lo += min(0, c * (n - 1))
                hi += max(0, c * (n - 1))
                g = math.gcd(g, abs(c))
        out.append((lo, hi, g))
    return out + [(0, 0, 0)]  # the epoch: exact


def _digits(acc: Access) -> list[tuple[tuple[int, int], ...]]:
    return [
        tuple(sorted((abs(c), n) for c, n in zip(e.coeffs, e.shape) if c and n > 1))
        for e in acc.index
    ]


def _digits_meet(dk: np.ndarray, da: tuple, db: tuple) -> np.ndarray | None:
    """Exact test of one dimension whose tile axes are digits of a mixed radix (each
    coefficient more than twice the span of the smaller ones, as a flat access pattern
    [[row, n], [1, m]] with m < row / 2 has): whether ``dk = sum c_k * delta_k`` with
    ``|delta_k| < count_k``. The representation is unique, so it is found greedily from the
    largest digit. None when the axes of the two accesses are not such digits."""
    if [c for c, _ in da] != [c for c, _ in db] or len(da) < 2:
        return None
    terms = [(c, max(na, nb) - 1) for (c, na), (_, nb) in zip(da, db)]
    span = 0
    for c, m in terms:
        if c <= 2 * span:
            return None
        span += c * m
    ok = np.ones(dk.shape, dtype=bool)
    rest = dk.copy()
    for i in range(len(terms) - 1, -1, -1):
        c, m = terms[i]
        below = sum(cj * mj for cj, mj in terms[:i])
        delta = np.rint(rest / c).astype(np.int64)
        rest = rest - c * delta
        ok &= (np.abs(delta) <= m) & (np.abs(rest) <= below)
    return ok & (rest == 0)


def _events(ir: KernelIR, core: int) -> list[_Event]:
    """Every shared-HBM access of core ``core``'s trace ``ir`` whose epoch is known
    statically."""
    out = []
    for instr, loops, epoch in _accesses(ir, core):
        if epoch is None:
            continue
        rest = _rest(ir, loops)
        ef = _epoch_form((epoch[0], tuple((per, n) for _, per, n in epoch[1])))
        exact = (epoch[0], tuple((key, per) for key, per, _ in epoch[1]))
        accs = []
        if (instr.kind, instr.op) not in SAME_RESULT:
            accs += [(a, True) for a in instr.writes() if _is_candidate(ir, instr, a, True)]
        accs += [(a, False) for a in instr.reads() if not a.indirect and _shared(ir, a)]
        for acc, write in accs:
            forms = _form(acc, [], rest) + [ef]
            points = _points(ir, acc, loops, exact)
            out.append(_Event(instr, acc, write, forms, points, _tile(acc), _digits(acc)))
    return out


def _conflict(a: _Event, b: _Event) -> bool:
    if a.points is None or b.points is None:
        return _overlap(a.forms, b.forms)
    # base_a + ra == base_b + rb  <=>  base_a - base_b in [b.lo - a.hi, b.hi - a.lo]
    d = a.points[:, None, :] - b.points[None, :, :]
    hit = np.ones(d.shape[:2], dtype=bool)
    for k, ((alo, ahi, ag), (blo, bhi, bg)) in enumerate(zip(a.tile, b.tile)):
        dk = d[:, :, k]
        exact = _digits_meet(dk, a.digits[k], b.digits[k]) if k < len(a.digits) else None
        if exact is not None:
            hit &= exact
            continue
        g = math.gcd(ag, bg)
        hit &= (dk >= blo - ahi) & (dk <= bhi - alo)
        hit &= (dk % g == 0) if g else (dk == 0)
    return bool(hit.any())


# copies whose source may be their own destination (the "HBM fence" dma_copy(dst=t, src=t))
_COPIES = frozenset({"dma_copy", "tensor_copy"})


def _rewrites(read: _Event) -> bool:
    """The read is of a plain copy that writes back the very elements it reads (an identity
    copy such as AWS's ``nisa.dma_copy(dst=result, src=result)`` fence): what it reads from the
    other core is what it stores, so the pair is the two cores' writes of those elements,
    which the run time requires to store the same bytes."""
    i = read.instr
    return i.op in _COPIES and not i.accumulates and read.acc in i.writes()


# id(ir) -> (ir, shared tensors both cores may write in one epoch, shared tensors an indirect
# access of one core touches while the other core also accesses them): checked at run time
_SAME_WRITES: dict[int, tuple[KernelIR, frozenset[str], frozenset[str]]] = {}


def same_write_tensors(ir: KernelIR) -> frozenset[str]:
    """The shared-HBM tensors (storage roots) of ``ir`` that both cores may write between the
    same two meetings: the run time requires both writes of an element to store the same bytes
    (``lnc_writes.SameWrites``)."""
    got = _SAME_WRITES.get(id(ir))
    return got[1] if got is not None and got[0] is ir else frozenset()


def dynamic_tensors(ir: KernelIR) -> frozenset[str]:
    """The shared-HBM tensors (storage roots) of ``ir`` an indirect access of one core touches
    while the other core also accesses them, one of the two writing: their elements' reads and
    changes are checked at run time (``lnc_writes.DynamicAccesses``)."""
    got = _SAME_WRITES.get(id(ir))
    return got[2] if got is not None and got[0] is ir else frozenset()


def _dynamic(ir: KernelIR) -> frozenset[str]:
    """``dynamic_tensors``' set, from each core's trace."""
    seen = []  # per core: roots read / written indirectly, roots read / written at all
    for core in ir.cores:
        ind_r: set[str] = set()
        ind_w: set[str] = set()
        reads: set[str] = set()
        writes: set[str] = set()
        for instr, _ in core.instructions():
            kinds = ((instr.reads(), ind_r, reads), (instr.writes(), ind_w, writes))
            for accs, ind, every in kinds:
                for acc in accs:
                    if _shared(core, acc):
                        root = core.storage_of(acc.tensor)
                        every.add(root)
                        if acc.indirect:
                            ind.add(root)
        seen.append((ind_r, ind_w, reads, writes))
    out: set[str] = set()
    for a, b in ((0, 1), (1, 0)):
        ind_r, ind_w, _, _ = seen[a]
        _, _, reads, writes = seen[b]
        out |= (ind_r & writes) | (ind_w & (reads | writes))
    return frozenset(out)


def check_core_races(ir: KernelIR) -> None:
    """No two accesses of different cores to one shared-HBM element in the same epoch, one a
    write and the other a read (``ir.cores``: the per-core traces of an LNC=2 launch). Two
    writes of one element are left to the run time, which requires them to store the same
    values: both cores storing the same result (AWS's kernels do, for small inputs they do not
    split) gives one outcome whatever the timing."""
    if len(ir.cores) < 2:
        return
    if len({_meetings(c.body, k) for k, c in enumerate(ir.cores)}) > 1:
        return  # the cores cannot pair their meetings: the run time reports where they part
    both_write: set[str] = set()
    events = [_events(c, k) for k, c in enumerate(ir.cores)]
    for ca, cb in ((0, 1), (1, 0)):
        for ea in events[ca]:
            if not ea.write:
                continue
            for eb in events[cb]:
                if eb.write and ca > cb:
                    continue  # write/write pairs are checked once
                if ea.acc.tensor != eb.acc.tensor or len(ea.acc.index) != len(eb.acc.index):
                    continue
                if _conflict(ea, eb):
                    if eb.write or _rewrites(eb):
                        both_write.add(ir.storage_of(ea.acc.tensor))
                        continue
                    _report(ir, (ca, ea.instr, ea.acc), (cb, eb.instr, eb.acc, eb.write))
    dynamic = _dynamic(ir)
    if both_write or dynamic:
        if len(_SAME_WRITES) > 256:
            _SAME_WRITES.clear()
        _SAME_WRITES[id(ir)] = (ir, frozenset(both_write), dynamic)


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
        f"{ir.label(acc_a.tensor)}, with no nisa.core_barrier (nor sendrecv or collective between "
        "the two cores) between them; the cores run at the same time, so the result depends "
        "on their timing. Give each core its own part (index with nl.program_id) or order the "
        "accesses with nisa.core_barrier",
        code="err_core_race",
        loc=a.loc,
        related=((f"core {cb}'s access", b.loc),) if b.loc is not None else (),
    )
