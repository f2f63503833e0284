"""What the Neuron compiler does to a kernel before it runs, as far as the cost model charges
for it. The scheduler times the traced IR after these rewrites (:func:`lower`), each a function
here naming the rule it applies and its source (the tags of :mod:`.table`):

- **partition broadcasts in PSUM**: ``t.broadcast_to((P, F))`` of a one-partition tile runs on
  the Tensor engine as a matmul with a ones stationary, writing PSUM [arch-v2, "Alternative
  use case"]; a result that fits one PSUM bank stays there, so its consumers read a PSUM
  operand (a ``tensor_tensor`` with one PSUM input streams in N, not 2N cycles [isa-cost]).
  A wider result is evacuated to SBUF (costed in :mod:`.model`).
- **PSUM zero-init folding**: a PSUM tile zeroed and then only accumulated into by matmuls is
  an accumulation group (the pattern the matmul tutorial names as the way to trigger PSUM
  accumulation [mm-tut]); its first matmul overwrites, the zeroing costs nothing.
- **loop-invariant hoisting**: a compute instruction whose inputs do not change inside its
  innermost loop runs once before the loop, unless keeping its result live would push the live
  on-chip tiles past capacity (the reason the fused Mamba tutorial's v2 is faster than v1 at
  length 512 while doing the same instructions [mamba-tut]).
- **common subexpressions**: in straight-line code (loops the trace unrolled), an instruction
  repeating an earlier one on unchanged sources is dropped and its readers read the earlier
  result, under the same capacity condition (hoisting's counterpart for unrolled code).
- **spills**: where the live SBUF tiles exceed the usable bytes per partition (program-order
  live ranges of :mod:`simulator.checks.capacity`), the compiler saves the excess of the tiles used
  furthest ahead to HBM and reloads it at their next use; the save + reload transfer runs in
  program order at that allocation and the tile's producer waits for it (the stalls on spill /
  reload queues the Mamba tutorial's v2 profile at length 8192 shows [mamba-tut])."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, replace

from nki.ir import Access, Affine, Alloc, Const, IndexExpr, Instr, KernelIR, Loop, Node
from nki.targets import get_target

from ..checks.capacity import bytes_per_partition, live_ranges, physical_bytes
from .model import engine_of, is_matmul, partitions
from .table import NOT_HOISTED_OPS, SPILL, CostTable


@dataclass(frozen=True)
class Lowering:
    """The IR as the scheduler times it, and what the compiler rules changed."""

    ir: KernelIR
    psum_broadcasts: tuple[str, ...] = ()  # broadcast tiles placed in PSUM
    folded_zero_inits: int = 0
    hoisted: tuple[Instr, ...] = ()
    spills: tuple[Instr, ...] = ()
    common_subexpressions: int = 0  # repeated instructions dropped


def lower(ir: KernelIR, t: CostTable) -> Lowering:
    """Apply the compiler rules above, in order."""
    ir, bcast = broadcasts_in_psum(ir)
    ir, folded = fold_psum_zero_init(ir)
    # tiles are allocated (and spilled) for the program as written; hoisting then moves
    # instructions within that allocation
    ir, spills = insert_spills(ir)
    ir, hoisted = hoist_loop_invariants(ir)
    ir, common = eliminate_common_subexpressions(ir)
    return Lowering(ir, bcast, folded, hoisted, spills, common)


# ---- helpers ------------------------------------------------------------------------------------
def _writes(ins: Instr) -> list[Access]:
    out = [ins.dst] if ins.dst is not None else []
    return out + [v for _, v in ins.attrs if isinstance(v, Access)]


def _writers(ir: KernelIR) -> dict[str, int]:
    """Number of instructions writing each storage (base tensor), spills aside."""
    n: dict[str, int] = {}
    for ins, _ in ir.instructions():
        for a in _writes(ins) if ins.kind != SPILL else ():
            base = ir.storage_of(a.tensor)
            n[base] = n.get(base, 0) + 1
    return n


def _map(body: tuple[Node, ...], fn) -> tuple[Node, ...]:
    """``body`` with every node replaced by ``fn(node)`` (a tuple of nodes), loops rebuilt."""
    out: list[Node] = []
    for n in body:
        if isinstance(n, Loop):
            n = replace(n, body=_map(n.body, fn))
        out.extend(fn(n))
    return tuple(out)


def _with(ir: KernelIR, **changes) -> KernelIR:
    return replace(ir, _by_name={}, **changes)


# ---- partition broadcasts ---------------------------------------------------------------------
def is_partition_broadcast(ins: Instr, ir: KernelIR) -> bool:
    """``broadcast_to`` of a one-partition tile across partitions."""
    if ins.kind != "copy" or ins.op != "broadcast_to" or ins.dst is None:
        return False
    src = ins.srcs[0]
    return isinstance(src, Access) and partitions(src, ir) == 1 < partitions(ins.dst, ir)


def broadcasts_in_psum(ir: KernelIR) -> tuple[KernelIR, tuple[str, ...]]:
    """Place the result of each partition broadcast that fits one PSUM bank in PSUM."""
    bank = get_target(ir.target).psum_bank_bytes
    writers = _writers(ir)
    moved = []
    for ins, _ in ir.instructions():
        if not is_partition_broadcast(ins, ir):
            continue
        d = ir.tensor(ins.dst.tensor)
        if d.kind == "param" or d.alias_of or d.buffer != "sbuf" or writers.get(d.name) != 1:
            continue
        if bytes_per_partition(d) <= bank:
            moved.append(d.name)
    if not moved:
        return ir, ()
    tensors = tuple(replace(d, buffer="psum") if d.name in moved else d for d in ir.tensors)
    return _with(ir, tensors=tensors), tuple(moved)


# ---- PSUM zero-init folding -------------------------------------------------------------------
def fold_psum_zero_init(ir: KernelIR) -> tuple[KernelIR, int]:
    """Drop the zeroing of PSUM tiles that only matmuls accumulate into afterwards."""
    other_writes: dict[str, list[Instr]] = {}
    zeroed: list[Instr] = []
    for ins, _ in ir.instructions():
        for a in _writes(ins):
            base = ir.storage_of(a.tensor)
            if ir.tensor(base).buffer != "psum":
                continue
            src = ins.srcs[0] if ins.srcs else None
            if ins.kind == "memset" and isinstance(src, Const) and src.value == 0:
                zeroed.append(ins)
            else:
                other_writes.setdefault(base, []).append(ins)
    drop = {
        id(z)
        for z in zeroed
        if all(
            is_matmul(w) and w.accumulate
            for w in other_writes.get(ir.storage_of(z.dst.tensor), [None])
            if w is not None
        )
        and other_writes.get(ir.storage_of(z.dst.tensor))
    }
    if not drop:
        return ir, 0
    body = _map(ir.body, lambda n: () if id(n) in drop else (n,))
    return _with(ir, body=body), len(drop)


# ---- loop-invariant hoisting ------------------------------------------------------------------
def _loop_writes(lp: Loop, ir: KernelIR) -> set[str]:
    out: set[str] = set()
    stack = list(lp.body)
    while stack:
        n = stack.pop()
        if isinstance(n, Loop):
            stack.extend(n.body)
        elif isinstance(n, Instr) and n.kind != SPILL:
            out.update(ir.storage_of(a.tensor) for a in _writes(n))
    return out


def _depends_on(acc: Access, sym: object) -> bool:
    return any(sym in e.base.symbols() for e in acc.index) or bool(acc.indirect)


def _pure_compute(ins: Instr, ir: KernelIR) -> bool:
    """A compute instruction whose result depends on its sources only, written whole into a
    tile of its own (what hoisting and common-subexpression elimination may move or drop)."""
    if engine_of(ins) in ("dma", "none") or ins.op in NOT_HOISTED_OPS or ins.kind == SPILL:
        return False
    if ins.dst is None or ins.accumulate or ins.mask is not None:
        return False
    if any(isinstance(v, Access) for _, v in ins.attrs):
        return False  # secondary outputs / inputs: keep it simple
    return ir.tensor(ins.dst.tensor).alias_of is None


def _invariant(ins: Instr, lp: Loop, ir: KernelIR, allocated: set[str], written: set[str]) -> bool:
    """Whether ``ins`` (directly in ``lp``'s body) computes the same tile in every iteration
    into a tile of its own."""
    if not _pure_compute(ins, ir):
        return False
    if ins.dst.tensor not in allocated or _depends_on(ins.dst, lp.sym):
        return False
    for s in ins.srcs:
        if isinstance(s, IndexExpr) and lp.sym in s.base.symbols():
            return False
        if isinstance(s, Access) and (_depends_on(s, lp.sym) or ir.storage_of(s.tensor) in written):
            return False
    return True


def _live_totals(ir: KernelIR, buf: str) -> Iterator[tuple[int, int]]:
    """(program position, live bytes per partition) at each automatic allocation in ``buf``,
    in program order (the sweep of ``simulator.checks.capacity.check_capacity``)."""
    physical = physical_bytes(ir)
    mine = sorted(
        (lv for lv in live_ranges(ir) if lv.decl.buffer == buf and lv.decl.placement is None),
        key=lambda lv: lv.start,
    )
    live: list[tuple[int, int]] = []
    total = 0
    for lv in mine:
        while live and live[0][0] < lv.start:
            total -= heapq.heappop(live)[1]
        size = physical.get(lv.decl.name, bytes_per_partition(lv.decl))
        heapq.heappush(live, (lv.end, size))
        total += size
        yield lv.start, total


def _peaks(ir: KernelIR) -> dict[str, int]:
    """Peak live bytes per partition of each on-chip buffer (automatic allocations)."""
    return {buf: max((t for _, t in _live_totals(ir, buf)), default=0) for buf in ("sbuf", "psum")}


def _fits(before: dict[str, int], after: dict[str, int], ir: KernelIR) -> bool:
    t = get_target(ir.target)
    caps = {"sbuf": t.sbuf_usable_per_partition, "psum": t.psum_bytes_per_partition}
    return all(after[b] <= max(caps[b], before[b]) for b in caps)


def hoist_loop_invariants(ir: KernelIR) -> tuple[KernelIR, tuple[Instr, ...]]:
    """Move each loop-invariant compute instruction (and its tile's allocation) in front of its
    loop, innermost loops first and outwards while it stays invariant, as long as the live
    on-chip tiles still fit."""
    hoisted: list[Instr] = []
    rejected: set[tuple[int, object]] = set()
    while True:
        moved = False
        peaks = None
        for sym, ins in [(lp.sym, ins) for lp, ins in _candidates(ir)]:
            if (id(ins), sym) in rejected:
                continue
            lp = next(n for n, _ in ir.walk() if isinstance(n, Loop) and n.sym == sym)
            alloc = next(n for n in lp.body if isinstance(n, Alloc) and n.tensor == ins.dst.tensor)
            body = _map_hoist(ir.body, lp, alloc, ins)
            if body == ir.body:  # not in this body (another core's trace)
                rejected.add((id(ins), sym))
                continue
            new = _with(ir, body=body)
            peaks = peaks or _peaks(ir)
            after = _peaks(new)
            if _fits(peaks, after, ir):
                ir, peaks, moved = new, after, True
                hoisted.append(ins)
            else:
                rejected.add((id(ins), sym))
        if not moved:
            return ir, tuple(dict.fromkeys(hoisted))


def _map_hoist(body: tuple[Node, ...], lp: Loop, alloc: Alloc, ins: Instr) -> tuple[Node, ...]:
    out: list[Node] = []
    for n in body:
        if n is lp:
            inner = tuple(m for m in n.body if m is not alloc and m is not ins)
            out.extend((alloc, ins, replace(n, body=inner)))
        elif isinstance(n, Loop):
            out.append(replace(n, body=_map_hoist(n.body, lp, alloc, ins)))
        else:
            out.append(n)
    return tuple(out)


def _candidates(ir: KernelIR):
    """(loop, instruction) pairs: loop-invariant instructions directly in a loop's body,
    innermost loops first."""
    loops = [n for n, _ in ir.walk() if isinstance(n, Loop) and not n.is_runtime]
    writers = _writers(ir)
    for lp in reversed(loops):
        allocated = {n.tensor for n in lp.body if isinstance(n, Alloc)}
        written = _loop_writes(lp, ir)
        for ins in lp.body:
            if isinstance(ins, Instr) and _invariant(ins, lp, ir, allocated, written):
                if writers.get(ir.storage_of(ins.dst.tensor)) == 1:
                    yield lp, ins


# ---- common subexpressions --------------------------------------------------------------
def eliminate_common_subexpressions(ir: KernelIR) -> tuple[KernelIR, int]:
    """In straight-line code (one body, loops aside), drop a compute instruction that repeats
    an earlier one on sources unchanged since, reading the earlier result instead: what
    hoisting does for a loop, for code the trace unrolled. Applied only if the longer-lived
    results still fit on chip."""
    writers = _writers(ir)
    viewed = {d.alias_of for d in ir.tensors if d.alias_of}
    rename: dict[str, str] = {}
    dropped: set[int] = set()

    def scan(body: tuple[Node, ...]) -> None:
        version: dict[str, int] = {}
        seen: dict[tuple, tuple[str, tuple[int, ...]]] = {}
        for n in body:
            if isinstance(n, Loop):
                for w in _loop_writes(n, ir):
                    version[w] = version.get(w, 0) + 1
                scan(n.body)
                continue
            if not isinstance(n, Instr):
                continue
            srcs = tuple(_renamed(s, rename) for s in n.srcs)
            bases = [ir.storage_of(s.tensor) for s in srcs if isinstance(s, Access)]
            d = n.dst.tensor if n.dst is not None else None
            if (
                d is not None
                and _pure_compute(n, ir)
                and writers.get(d) == 1
                and d not in viewed
                and not any(s.indirect for s in srcs if isinstance(s, Access))
            ):
                decl = ir.tensor(d)
                key = (n.kind, n.op, repr(srcs), repr(n.attrs), decl.shape, decl.dtype)
                vers = tuple(version.get(b, 0) for b in bases)
                hit = seen.get(key)
                if hit is not None and hit[1] == vers and version.get(hit[0], 0) == 1:
                    rename[d] = hit[0]
                    dropped.add(id(n))
                    continue
                seen[key] = (d, vers)
            for a in _writes(n):
                b = ir.storage_of(a.tensor)
                version[b] = version.get(b, 0) + 1

    scan(ir.body)
    if not dropped:
        return ir, 0

    def rewrite(n: Node) -> tuple[Node, ...]:
        if id(n) in dropped or (isinstance(n, Alloc) and n.tensor in rename):
            return ()
        if not isinstance(n, Instr):
            return (n,)
        attrs = tuple((k, _renamed(v, rename)) for k, v in n.attrs)
        srcs = tuple(_renamed(s, rename) for s in n.srcs)
        return (replace(n, srcs=srcs, attrs=attrs),)

    new = _with(ir, body=_map(ir.body, rewrite))
    if not _fits(_peaks(ir), _peaks(new), ir):
        return ir, 0
    return new, len(dropped)


def _renamed(v: object, rename: dict[str, str]) -> object:
    if not isinstance(v, Access):
        return v
    ind = tuple((d, _renamed(a, rename)) for d, a in v.indirect)
    return replace(v, tensor=rename.get(v.tensor, v.tensor), indirect=ind)


# ---- spills ------------------------------------------------------------------------------
def _full_access(name: str, ir: KernelIR) -> Access:
    shape = ir.tensor(name).shape
    index = tuple(
        IndexExpr(Affine(), tuple(int(j == d) for j in range(len(shape))), shape)
        for d in range(len(shape))
    )
    return Access(name, shape, index)


def _use_positions(ir: KernelIR) -> dict[str, list[int]]:
    """Program positions (numbered as :func:`simulator.checks.capacity.live_ranges` numbers nodes:
    pre-order) of the instructions touching each on-chip storage."""
    uses: dict[str, list[int]] = {}
    pos = 0

    def rec(body: tuple[Node, ...]) -> None:
        nonlocal pos
        for n in body:
            pos += 1
            if isinstance(n, Loop):
                rec(n.body)
            elif isinstance(n, Instr):
                accs = [*_writes(n), *(a for a in n.srcs if isinstance(a, Access))]
                accs += [a for x in accs for _, a in x.indirect]
                for b in {ir.storage_of(a.tensor) for a in accs}:
                    uses.setdefault(b, []).append(pos)

    rec(ir.body)
    return uses


def spill_points(ir: KernelIR) -> dict[int, tuple[int, int]]:
    """Program positions (numbered as :func:`simulator.checks.capacity.live_ranges` numbers
    nodes) of the SBUF allocations that push the live tiles past the usable bytes per partition: the
    bytes per partition that must go out there and the live total. The bytes sent out belong
    to the live tiles used furthest ahead (a tile used again only in a later iteration of its
    loop counts as used at the loop's end); they stay out, so later overflows add to them,
    until their tile is used again (the reload). Over one pass of a loop body the bytes sent
    out add up to its peak excess; in unrolled code each repeated section spills anew."""
    usable = get_target(ir.target).sbuf_usable_per_partition
    physical = physical_bytes(ir)
    ranges = sorted(
        (lv for lv in live_ranges(ir) if lv.decl.buffer == "sbuf" and lv.decl.placement is None),
        key=lambda lv: lv.start,
    )
    uses = _use_positions(ir)
    live: dict[str, tuple[int, int]] = {}  # tile -> (end of its live range, bytes)
    out_bytes: dict[str, int] = {}  # tile -> bytes of it out in HBM
    out_at: dict[str, int] = {}  # tile -> where they went out
    out = {}
    for lv in ranges:
        pos, name = lv.start, lv.decl.name
        for t in list(out_bytes):  # dead, or used (so reloaded) since it went out
            if live[t][0] < pos or any(out_at[t] < u < pos for u in uses.get(t, ())):
                del out_bytes[t]
        for t in [t for t, (end, _) in live.items() if end < pos]:
            del live[t]
        live[name] = (lv.end, physical.get(name, bytes_per_partition(lv.decl)))
        total = sum(b for _, b in live.values())
        need = total - sum(out_bytes.values()) - usable
        if need <= 0:
            continue
        out[pos] = (need, total)
        # furthest next use first; past its last use in this pass, a tile that lives on
        # (used by later iterations of its loop) is next used at its live range's end
        victims = sorted(
            (t for t in live if t != name),
            key=lambda t: -min((u for u in uses.get(t, ()) if u > pos), default=live[t][0]),
        )
        for t in victims:
            room = live[t][1] - out_bytes.get(t, 0)
            take = min(room, need)
            if take > 0:
                out_bytes[t] = out_bytes.get(t, 0) + take
                out_at[t] = pos
                need -= take
            if need <= 0:
                break
    return out


def insert_spills(ir: KernelIR) -> tuple[KernelIR, tuple[Instr, ...]]:
    """Insert a save + reload instruction after each allocation that overflows SBUF. It writes
    the new tile, so the tile's producer waits for it; the scheduler starts it when everything
    issued before it has finished (the spill runs in program order there)."""
    points = spill_points(ir)
    if not points:
        return ir, ()
    spills: list[Instr] = []
    pos = 0

    def rec(body: tuple[Node, ...]) -> tuple[Node, ...]:
        nonlocal pos
        out: list[Node] = []
        for n in body:
            pos += 1  # the numbering of simulator.checks.capacity.live_ranges: nodes in pre-order
            if isinstance(n, Loop):
                out.append(replace(n, body=rec(n.body)))
                continue
            out.append(n)
            if isinstance(n, Alloc) and pos in points:
                extra, total = points[pos]
                d = ir.tensor(n.tensor)
                sp = Instr(
                    SPILL,
                    "save_reload",
                    _full_access(n.tensor, ir),
                    (),
                    (
                        ("bytes_per_partition", extra),
                        ("partitions", d.shape[d.par_dim]),
                        ("live_bytes", total),
                    ),
                    loc=n.loc or d.loc,
                    api="compiler spill",
                )
                spills.append(sp)
                out.append(sp)
        return tuple(out)

    body = rec(ir.body)
    return _with(ir, body=body), tuple(spills)


__all__ = ["Lowering", "lower", "SPILL"]
