"""SBUF / PSUM capacity per core, from the live on-chip allocations of a traced kernel.

The real compiler allocates every on-chip tile in the SBUF or PSUM of the core that runs the
kernel. Where the live tiles do not fit it spills some to HBM when it can, and otherwise fails
(``[GCA035] ... couldn't be allocated in SB``); the official simulator says nothing. Here a
tile is *live* from its ``Alloc`` to its last use in program order; a use inside a loop that
does not contain the ``Alloc`` keeps the tile live until that loop ends (every iteration may
read it). At every allocation point the bytes per partition of the live tiles must fit the
target's usable size, with one exception: the blocks of a blocked tensor
(``nl.ndarray((n, nl.par_dim(P), F))``) are tiles the compiler spills and reloads one by one
(AWS's performance guide shows such a buffer spilling; its memory hierarchy page says the
compiler spills any on-chip memory to the next one down), so only one block of each counts
against the capacity, and the rest not fitting is a ``SpillWarning``.

PSUM rules (NeuronCore-v2..v4): each PSUM tile (each block of a blocked PSUM tensor) must fit in
one 2 KiB bank per partition, and the live PSUM tiles must fit the 16 KiB (8 banks) per
partition."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from nki import dtypes
from nki.errors import NKIMemoryError, SpillWarning, SrcLoc, warn_at
from nki.ir import Access, Alloc, Instr, KernelIR, Loop, Node, TensorDecl, tensor_label
from nki.targets import Target, get_target, isa_rules

from ..host import host_available_bytes, storage_bytes
from ..lifetimes import peak


def bytes_per_partition(decl: TensorDecl) -> int:
    """Bytes one partition holds for an on-chip tensor: every dim but the partition dim."""
    n = 1
    for d, size in enumerate(decl.shape):
        if d != decl.par_dim:
            n *= size
    return n * dtypes.itemsize(str(decl.dtype))


def block_bytes(decl: TensorDecl) -> int:
    """Bytes per partition of one block (the dims after the partition dim)."""
    n = 1
    for size in decl.shape[decl.par_dim + 1 :]:
        n *= size
    return n * dtypes.itemsize(str(decl.dtype))


@dataclass
class _Live:
    decl: TensorDecl
    start: int
    end: int
    loc: SrcLoc | None
    first_use: int | None = None  # program position of the first access (None: never used)


def _uses(instr: Instr) -> set[str]:
    """The tensors an instruction reads or writes."""
    return {u.access.tensor for u in instr.uses()}


def live_ranges(ir: KernelIR) -> list[_Live]:
    """Program-order live range [alloc, last use] of every on-chip allocation."""
    alloc_pos: dict[str, tuple[int, tuple[int, ...]]] = {}
    live: dict[str, _Live] = {}
    pos = 0

    def base(name: str) -> str:
        d = ir.tensor(name)
        return d.alias_of if d.alias_of else name

    def rec(nodes: tuple[Node, ...], loop_stack: list[tuple[int, list[str], int]]) -> None:
        nonlocal pos
        for n in nodes:
            pos += 1
            if isinstance(n, Alloc):
                d = ir.tensor(n.tensor)
                if d.on_chip and d.alias_of is None:
                    ids = tuple(id_ for id_, _, _ in loop_stack)
                    alloc_pos[d.name] = (pos, ids)
                    live[d.name] = _Live(d, pos, pos, n.loc or d.loc)
            elif isinstance(n, Instr):
                for name in _uses(n):
                    b = base(name)
                    if b not in live:
                        continue
                    end = first = pos
                    a_ids = alloc_pos[b][1]
                    # used inside loops the alloc is outside of: live from the outermost's
                    # start until its end
                    for lid, ends, start in loop_stack:
                        if lid not in a_ids:
                            ends.append(b)
                            first = start
                            break
                    live[b].end = max(live[b].end, end)
                    if live[b].first_use is None:
                        live[b].first_use = first
            elif isinstance(n, Loop):
                pending: list[str] = []
                loop_stack.append((id(n), pending, pos))
                rec(n.body, loop_stack)
                loop_stack.pop()
                for b in pending:
                    live[b].end = max(live[b].end, pos)  # pos is now the loop's end

    rec(ir.body, [])
    return list(live.values())


def physical_bytes(ir: KernelIR) -> dict[str, int]:
    """Bytes per partition the compiler must reserve for blocked on-chip tensors whose blocks
    are used one loop iteration at a time: ``buf[i]`` of ``nl.ndarray((n, par_dim(P), F))``
    indexed only by the iterator ``i`` of a loop inside the tensor's scope needs one block per
    iteration, not n (the block dimension counts logical tiles, not physical ones). Only
    block dims indexed everywhere by the same ``c * i + k`` qualify; other tensors are absent
    (they need their full size)."""
    uses: dict[str, list[tuple[Access, tuple[Loop, ...]]]] = {}
    alloc_loops: dict[str, tuple[Loop, ...]] = {}

    def rec(nodes: tuple[Node, ...], loops: tuple[Loop, ...]) -> None:
        for n in nodes:
            if isinstance(n, Alloc):
                alloc_loops[n.tensor] = loops
            elif isinstance(n, Loop):
                rec(n.body, loops + (n,))
            elif isinstance(n, Instr):
                for u in n.uses():
                    uses.setdefault(u.access.tensor, []).append((u.access, loops))

    rec(ir.body, ())
    out: dict[str, int] = {}
    for d in ir.tensors:
        if not d.on_chip or d.par_dim == 0 or d.alias_of is not None or d.name not in uses:
            continue
        accs = uses[d.name]
        outer = alloc_loops.get(d.name, ())
        common = [lp for lp in accs[0][1] if all(lp in loops for _, loops in accs)]
        inner = [lp for lp in common if lp not in outer]
        nblocks = 1
        for n in d.shape[: d.par_dim]:
            nblocks *= n
        per_iteration, used = nblocks, set()
        for b in range(d.par_dim):
            bases = {a.index[b].base for a, _ in accs}
            if len(bases) != 1 or any(any(a.index[b].coeffs) for a, _ in accs):
                continue
            syms = [s for s, c in bases.pop().terms if c]
            if len(syms) != 1 or syms[0] in used or d.shape[b] <= 1:
                continue
            if any(lp.sym == syms[0] for lp in inner):
                used.add(syms[0])
                per_iteration //= d.shape[b]
        if used:
            out[d.name] = block_bytes(d) * per_iteration
    return out


def _fmt(lv: _Live, physical: dict[str, int]) -> str:
    at = f" (allocated at line {lv.loc.line})" if lv.loc is not None else ""
    d = lv.decl
    size = physical.get(d.name)
    per = f" ({size} B: blocks used one loop iteration at a time)" if size is not None else ""
    size_b = bytes_per_partition(d)
    return f"{tensor_label(d)} {d.buffer} {d.dtype}{list(d.shape)}: {size_b} B{per}{at}"


_LISTED = 24  # groups of live allocations an error names; the rest are summed


def _listing(alive: list[_Live], physical: dict[str, int]) -> str:
    """The live allocations, identical ones (a tile allocated in a loop, kept in a list) as one
    entry with their count; past ``_LISTED`` entries, the smallest are summed."""
    groups: dict[str, list[int]] = {}  # entry -> [count, bytes of one]
    for lv in alive:
        size = physical.get(lv.decl.name, bytes_per_partition(lv.decl))
        groups.setdefault(_fmt(lv, physical), [0, size])[0] += 1
    big = set(sorted(groups, key=lambda t: -groups[t][0] * groups[t][1])[:_LISTED])
    shown = [f"{t} x{n} ({n * b} B)" if n > 1 else t for t, (n, b) in groups.items() if t in big]
    rest = [n * b for t, (n, b) in groups.items() if t not in big]
    if rest:
        shown.append(f"{len(rest)} more entries of {sum(rest)} B in all")
    return "; ".join(shown)


def check_capacity(ir: KernelIR, target: str | Target | None = None) -> None:
    """SBUF and PSUM bytes per partition of the live tiles fit the core; PSUM tiles fit a bank.

    Raises :class:`NKIMemoryError` (``err_sbuf_capacity_exceeded`` / ``err_psum_capacity_exceeded``
    / ``err_psum_tile_exceeds_bank``) naming the bytes requested, available and the live tiles."""
    t = target if isinstance(target, Target) else get_target(target or ir.target)
    ranges = live_ranges(ir)
    # NeuronCore-v4 matmuls may write across banks (moving free up to the whole PSUM)
    moving = isa_rules(t.name).matmul_moving_fmax
    tile_cap = t.psum_bank_bytes if moving * 4 <= t.psum_bank_bytes else t.psum_bytes_per_partition
    for lv in ranges:
        if lv.decl.buffer == "psum" and block_bytes(lv.decl) > tile_cap:
            raise NKIMemoryError(
                f"PSUM tile {tensor_label(lv.decl)} {lv.decl.dtype}{list(lv.decl.shape)} needs "
                f"{block_bytes(lv.decl)} bytes per partition, but a PSUM tile on {t.name} must fit "
                f"in {tile_cap} bytes per partition (one {t.psum_bank_bytes}-byte bank: at most "
                f"{t.psum_bank_bytes // 4} fp32 elements; trn3 matmuls may span the whole PSUM)",
                code="err_psum_tile_exceeds_bank",
                loc=lv.loc,
            )
    _check_placements(ranges, t)
    physical = physical_bytes(ir)
    for buf, cap, code in (
        ("sbuf", t.sbuf_usable_per_partition, "err_sbuf_capacity_exceeded"),
        ("psum", t.psum_bytes_per_partition, "err_psum_capacity_exceeded"),
    ):
        # directly allocated tensors are placed by the kernel (and may share memory on
        # purpose); the automatic allocations are summed
        mine = sorted(
            (lv for lv in ranges if lv.decl.buffer == buf and lv.decl.placement is None),
            key=lambda lv: lv.start,
        )
        full = [physical.get(lv.decl.name, bytes_per_partition(lv.decl)) for lv in mine]
        # the compiler spills the blocks of a blocked tensor that do not fit to the next
        # memory down (AWS's performance guide, memory hierarchy): one block of each stays
        resident = [
            min(n, block_bytes(lv.decl)) if lv.decl.par_dim > 0 else n for lv, n in zip(mine, full)
        ]
        over = _first_over(mine, resident, cap)
        if over is not None:
            k, alive, total = over
            lv = mine[k]
            extra = f" ({t.psum_banks} banks of {t.psum_bank_bytes} B)" if buf == "psum" else ""
            blocked = any(resident[i] < full[i] for i in alive)
            spilled = (
                ", counting one block of each blocked tensor (the compiler spills the others)"
                if blocked
                else ""
            )
            raise NKIMemoryError(
                f"{buf.upper()} capacity exceeded on {t.name}: allocating "
                f"{tensor_label(lv.decl)} brings the live tiles to {total} bytes per partition "
                f"requested{spilled}, but only "
                f"{cap} bytes per partition are available{extra}; live allocations: "
                f"{_listing([mine[i] for i in alive], physical)}",
                code=code,
                loc=lv.loc,
            )
        if buf == "psum" and tile_cap == t.psum_bank_bytes:
            _check_banks(mine, resident, t, physical)
        if resident != full:
            _warn_spills(buf, mine, full, resident, cap, t, physical)


def _check_banks(mine: list[_Live], sizes: list[int], t: Target, physical: dict[str, int]) -> None:
    """Where a PSUM tile lies inside one bank, two tiles over half a bank each cannot share
    one: the live ones of them need a bank each (nine of 1536 bytes need nine of eight banks,
    though their bytes fit)."""
    half = t.psum_bank_bytes // 2
    over = _first_over(mine, [int(n > half) for n in sizes], t.psum_banks)
    if over is None:
        return
    k, alive, count = over
    big = [mine[i] for i in alive if sizes[i] > half]
    raise NKIMemoryError(
        f"PSUM capacity exceeded on {t.name}: allocating {tensor_label(mine[k].decl)} brings "
        f"the live tiles of over half a bank ({half} bytes per partition) to {count}; each lies "
        f"inside one {t.psum_bank_bytes}-byte bank and no two of them share one, but there are "
        f"{t.psum_banks} banks; live allocations: {_listing(big, physical)}",
        code="err_psum_capacity_exceeded",
        loc=mine[k].loc,
    )


def _first_over(mine: list[_Live], sizes: list[int], cap: int) -> tuple[int, list[int], int] | None:
    """The first allocation (in program order) at which the live tiles, of ``sizes`` bytes
    per partition, exceed ``cap``: (its index, the live tiles' indices, their bytes)."""
    # sweep in allocation order, keeping the live tiles in a heap by end: O(n log n)
    live: list[tuple[int, int, int]] = []  # (end, index in mine, bytes)
    total = 0
    for k, lv in enumerate(mine):
        while live and live[0][0] < lv.start:
            total -= heapq.heappop(live)[2]
        heapq.heappush(live, (lv.end, k, sizes[k]))
        total += sizes[k]
        if total > cap:
            return k, sorted(i for _, i, _ in live), total
    return None


def _warn_spills(
    buf: str,
    mine: list[_Live],
    full: list[int],
    resident: list[int],
    cap: int,
    t: Target,
    physical: dict[str, int],
) -> None:
    """A ``SpillWarning`` where the blocked tensors' blocks do not all fit in ``buf`` beside
    the other live tiles: the compiler then saves blocks to the next memory down (SBUF's to
    HBM, PSUM's to SBUF) and reloads them."""
    over = _first_over(mine, full, cap)
    if over is None:
        return
    k, alive, total = over
    blocked = [mine[i] for i in alive if full[i] > resident[i]]
    names = ", ".join(_fmt(lv, physical) for lv in blocked)
    down = "HBM" if buf == "sbuf" else "SBUF"
    warn_at(
        f"{buf.upper()} over capacity on {t.name}: allocating {tensor_label(mine[k].decl)} "
        f"brings the live tiles to {total} bytes per partition, over the {cap} usable; the "
        f"compiler keeps what fits and spills blocks of {names} to {down}, reloading them at "
        "their next use (correct, but slower). Allocating a blocked buffer inside the loop "
        "that uses it avoids the spills.",
        SpillWarning,
        mine[k].loc,
    )


def _check_address_overlaps(ranges: list[_Live]) -> None:
    """Two tensors placed with ``nl.ndarray(address=...)`` in the same buffer share no
    partition x byte cell (PSUM: no bank) while both are in use. A placed tensor is in use
    from its first access to its last: placing it only names memory, so allocators that
    rotate several tensors through one address (allocated together, used one after another)
    are fine."""

    def span(lv: _Live) -> tuple[int, int]:
        return (lv.start if lv.first_use is None else lv.first_use, lv.end)

    placed = sorted((lv for lv in ranges if lv.decl.address is not None), key=span)
    for i, a in enumerate(placed):
        for b in placed[i + 1 :]:
            if span(b)[0] > span(a)[1]:
                break
            da, db = a.decl, b.decl
            if da.buffer != db.buffer or da.address is None or db.address is None:
                continue
            pa, pb = da.address[0], db.address[0]
            if pa + da.shape[da.par_dim] <= pb or pb + db.shape[db.par_dim] <= pa:
                continue
            qa, qb = da.placement or (), db.placement or ()
            if da.buffer == "psum":
                shared = sorted(set(qa) & set(qb))
                if not shared:
                    continue
                where = f"PSUM banks {shared}"
            else:
                lo, hi = max(qa[0], qb[0]), min(qa[1], qb[1])
                if lo >= hi:
                    continue
                where = f"SBUF bytes [{lo}, {hi})"
            raise NKIMemoryError(
                f"{tensor_label(db)} {db.dtype}{list(db.shape)} at address={db.address} overlaps "
                f"the live tensor {tensor_label(da)} {da.dtype}{list(da.shape)} at address="
                f"{da.address} "
                f"(allocated at line {da.loc.line if da.loc else '?'}): both use {where} of "
                "the same partitions",
                code="err_address_overlap",
                loc=b.loc,
            )


def _check_placements(ranges: list[_Live], t: Target) -> None:
    """Directly allocated tensors lie inside the memory: PSUM banks 0..banks-1, SBUF byte
    ranges within the usable bytes per partition."""
    _check_address_overlaps(ranges)
    for lv in ranges:
        d, place = lv.decl, lv.decl.placement
        if place is None:
            continue
        if d.buffer == "psum" and (min(place) < 0 or max(place) >= t.psum_banks):
            raise NKIMemoryError(
                f"PSUM tensor {tensor_label(d)} {d.dtype}{list(d.shape)} is placed on banks "
                f"{list(place)}, but {t.name} has banks 0..{t.psum_banks - 1}",
                code="err_psum_capacity_exceeded",
                loc=lv.loc,
            )
        if d.buffer == "sbuf" and (place[0] < 0 or place[1] > t.sbuf_usable_per_partition):
            raise NKIMemoryError(
                f"SBUF tensor {tensor_label(d)} {d.dtype}{list(d.shape)} is placed at bytes "
                f"[{place[0]}, {place[1]}) of each partition, but only "
                f"{t.sbuf_usable_per_partition} bytes per partition are usable on {t.name}",
                code="err_sbuf_capacity_exceeded",
                loc=lv.loc,
            )


def check_hbm(ir: KernelIR, target: str | Target | None = None) -> None:
    """The HBM tensors a kernel creates fit the chip's HBM (32 / 96 / 144 GiB on trn1/2/3).

    Shared-HBM tensors exist once per launch, private-HBM tensors once per grid instance.
    Raises :class:`NKIMemoryError` ``err_hbm_capacity_exceeded`` at the allocation that
    overflows, with the bytes requested and available."""
    t = target if isinstance(target, Target) else get_target(target or ir.target)
    copies = 1
    for n in ir.grid.shape:
        copies *= n
    total = 0
    for d in ir.tensors:
        if d.on_chip or d.kind == "param" or d.alias_of is not None:
            continue
        size = dtypes.INFO[d.dtype].bits // 8
        for n in d.shape:
            size *= n
        total += size if d.buffer == "shared_hbm" else size * copies
        if total > t.hbm_bytes:
            raise NKIMemoryError(
                f"HBM capacity exceeded on {t.name}: tensor {tensor_label(d)} {d.dtype}"
                f"{list(d.shape)} brings the kernel's HBM tensors to {total} bytes requested, but "
                "the device has "
                f"{t.hbm_bytes} bytes of HBM",
                code="err_hbm_capacity_exceeded",
                loc=d.loc,
            )


HOST_CHECK_MIN_BYTES = 256 << 20  # below this a launch is not worth a /proc/meminfo read

# (id(ir), precise_fp) -> (ir, the bytes of each tensor a launch allocates, their total)
_HOST_BYTES: dict[tuple[int, bool], tuple[KernelIR, list, int]] = {}


def _host_bytes(ir: KernelIR, precise_fp: bool, copies: int) -> tuple[list, int]:
    """(tensor, bytes) of every tensor a launch of ``ir`` holds at its peak (private HBM once
    per instance; on-chip tiles once per instance, those live at the allocation where the most
    are: dead tiles give their storage back, ``simulator/lifetimes.py``) and their total;
    counted once per traced kernel."""
    hit = _HOST_BYTES.get((id(ir), precise_fp))
    if hit is not None and hit[0] is ir:
        return hit[1], hit[2]

    def size(d: TensorDecl) -> int:
        return storage_bytes(d, precise_fp)

    sized = [
        (d, size(d) if d.buffer == "shared_hbm" else size(d) * copies)
        for d in ir.tensors
        if d.kind != "param" and d.alias_of is None and not d.on_chip
    ]
    # (an LNC launch traced per core: the core holding the most)
    (_, tiles), core = max(
        ((peak(c, size), c) for c in ir.cores or (ir,)), key=lambda got: got[0][0]
    )
    sized += [(core.tensor(n), size(core.tensor(n)) * copies) for n in tiles]
    total = sum(n for _, n in sized)
    if len(_HOST_BYTES) > 512:
        _HOST_BYTES.clear()
    _HOST_BYTES[(id(ir), precise_fp)] = (ir, sized, total)
    return sized, total


def check_host_memory(ir: KernelIR, precise_fp: bool = False) -> bool:
    """The host memory a launch holds at its peak fits the memory available now.

    The simulator keeps every shared HBM tensor once and, for each grid instance, its private
    HBM tensors and its live on-chip tiles (a tile's storage is dropped once it is dead:
    ``simulator/lifetimes.py``), so the peak is at most ``shared + instances x per-instance``.
    Raises :class:`NKIMemoryError` ``err_host_memory_exhausted`` before anything is allocated
    (instead of the OOM killer ending the process), at the tensor whose bytes bring the total
    past the available memory, with the totals. Returns True when the launch is too small to need
    the host's memory read (then every launch of ``ir`` passes)."""
    copies = 1
    for n in ir.grid.shape:
        copies *= n
    sized, total = _host_bytes(ir, precise_fp, copies)
    if total <= HOST_CHECK_MIN_BYTES:
        return True
    avail = host_available_bytes()
    if total <= avail:
        return False
    running, k = 0, 0
    while running + sized[k][1] <= avail:  # total > avail: stops inside the list
        running += sized[k][1]
        k += 1
    d, n = sized[k]
    shared = sum(n for e, n in sized if e.buffer == "shared_hbm")
    per_instance = (total - shared) // copies
    raise NKIMemoryError(
        f"the simulator would need {total} bytes of host memory for this launch "
        f"({shared} bytes of shared HBM tensors + {copies} instance(s) x {per_instance} bytes of "
        f"private HBM and live on-chip tensors), but only {avail} bytes are available; tensor "
        f"{tensor_label(d)} {d.buffer} {d.dtype}{list(d.shape)} "
        f"({n // (copies if d.buffer != 'shared_hbm' else 1)} bytes"
        f"{' per instance' if d.buffer != 'shared_hbm' else ''}) brings the total past it. "
        "Use smaller shapes or a smaller launch grid",
        code="err_host_memory_exhausted",
        loc=d.loc,
    )
