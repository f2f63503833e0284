"""Planning the batched backend (``batched.py``): which loops become batch axes, which tiles
need no fill, which loads are views of HBM and which tiles live in their store's destination;
and whether the kernel is inside the batched subset at all (``Declined`` says why not)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nki.ir import Access, Alloc, Instr, KernelIR, Loop, Node, TensorDecl

from .. import numerics
from ..checks.coverage import fully_written, instructions_of, nodes_of
from ..config import SimConfig
from ..executors import declined
from ..host import storage_bytes
from ..lifetimes import peak
from . import hbm as batched_hbm
from .host import not_hostable, uses_engine_state
from .moves import on_chip_moves, whole_tile
from .ops import BATCHED
from .subtrees import check_views, contiguous_views, device_loops


class Declined(Exception):
    """The kernel is outside the batched subset (the message says why)."""


@dataclass(frozen=True)
class Plan:
    batch_loops: frozenset[int]  # ids of loops that become batch axes
    fresh: frozenset[int]  # ids of Alloc nodes whose tile is fully written before any read
    # bytes of one instance's private HBM and on-chip tiles live at once (one iteration of every
    # loop)
    tile_bytes: int
    whole: frozenset[int] = frozenset()  # ids of instructions filling a fresh tile entirely
    # ids of loads whose fresh tile can simply be a view of the HBM tensor (the tensor is never
    # written, the tile is written by this load only, same storage dtype: no copy at all)
    elided: frozenset[int] = frozenset()
    # id(Alloc) -> the store that alone reads the tile: the tile is a view of the store's
    # destination, so the instruction filling it writes straight into HBM
    fused: dict[int, Instr] = field(default_factory=dict)
    skipped: frozenset[int] = frozenset()  # ids of those stores (done by the fused tile)
    fused_names: frozenset[str] = frozenset()
    viewed: frozenset[str] = frozenset()  # tiles of elided loads (no storage of their own)
    # ids of on-chip copies / transposes whose destination is a view of their source
    # (``moves.py``); their destinations are not allocated
    moved: frozenset[int] = frozenset()
    moved_names: frozenset[str] = frozenset()
    # ids of instructions run per position with the interpreter's executor (``batched_host``)
    hosted: frozenset[int] = frozenset()
    stateful: frozenset[int] = frozenset()  # ids of hosted instructions using engine state
    # why checks="full" could find something at run time here (None: provably nothing)
    unproven: str | None = None
    # shared-HBM tensors both written and read (accumulated...): ``batched.execute`` keeps a
    # copy of them for the error replay and for handing the launch to the next backend
    reread: frozenset[str] = frozenset()
    # ids of device loops: batched when their bounds are the same at every position, else run
    # per position by the interpreter (``stateful``: with the instance's engine state)
    subtrees: frozenset[int] = frozenset()
    # grid axes a collective reduces over: their groups must be whole in a batch (not chunked)
    whole_axes: frozenset[int] = frozenset()


# id(ir) -> (ir, precise_fp, its plan or why it declines); the entry keeps its IR alive, so an
# id is never another IR's while the entry exists; cleared past _MAX_PLANS entries
_PLANS: dict[int, tuple[KernelIR, bool, Plan | str]] = {}
_MAX_PLANS = 512


def plan(ir: KernelIR, config: SimConfig) -> Plan:
    key = id(ir)
    got = _PLANS.get(key)
    if got is None or got[0] is not ir or got[1] != config.precise_fp:
        try:
            p: Plan | str = _plan(ir, config)
        except Declined as e:
            p = str(e)
        got = (ir, config.precise_fp, p)
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = got
    if isinstance(got[2], str):
        raise Declined(got[2])
    return got[2]


# NumPy's limit on an array's dimensions (NPY_MAXDIMS: 64 from NumPy 2, 32 before)
_MAX_DIMS = 64 if int(np.__version__.split(".")[0]) >= 2 else 32


def _check_rank(ir: KernelIR) -> None:
    """A batched array has an axis per grid axis and enclosing loop, then the tile's axes."""
    loops = max((len(lp) for _, lp in instructions_of(ir)), default=0)
    rank = max((len(t.shape) for t in ir.tensors), default=0)
    if len(ir.grid.shape) + loops + rank > _MAX_DIMS:
        raise Declined(
            f"a grid of rank {len(ir.grid.shape)} with {loops} nested loop(s) and tensors of "
            f"rank {rank} needs batched arrays of more than NumPy's {_MAX_DIMS} dimensions"
        )


def _plan(ir: KernelIR, config: SimConfig) -> Plan:
    _check_rank(ir)
    sub = device_loops(ir, Declined)  # run per position by the interpreter
    check_views(ir, Declined)
    hosted: set[int] = set()
    stateful: set[int] = set()
    hbm_read: set[str] = set()
    shared_regs = _shares_registers(ir)
    for instr, loops in instructions_of(ir):
        # (an access that may be out of bounds is hosted: the interpreter's checks report it)
        why = declined(instr, BATCHED) or _maybe_out_of_bounds(ir, instr, loops)
        if not why and shared_regs and instr.attr("reduce_op") is not None:
            why = "its accumulator registers are read by another instruction"
        if why:
            never = not_hostable(instr)
            if never:
                raise Declined(never)
            hosted.add(id(instr))
            if uses_engine_state(instr):
                stateful.add(id(instr))
        bases = {ir.storage_of(a.tensor) for a in instr.reads()}
        hbm_read |= {b for b in bases if ir.tensor(b).buffer == "shared_hbm"}
    batch: set[int] = set()
    fresh: set[int] = set()
    whole: set[int] = set()
    around = {id(lp) for i, loops in instructions_of(ir) if id(i) in stateful for lp in loops}
    around |= sub.around
    stateful |= sub.stateful
    _classify(ir, ir.body, batch, fresh, whole, hosted, stateful | around)
    reread, why = batched_hbm.check_positions(ir, batch, hosted)
    if why:
        raise Declined(why)
    _check_tiles_stay_in_their_loop(ir, batch)
    writes: dict[str, int] = {}
    host_touched: set[str] = set()
    for instr, _ in instructions_of(ir):
        for w in instr.writes():
            writes[w.tensor] = writes.get(w.tensor, 0) + 1
        if id(instr) in hosted:
            host_touched |= {u.access.tensor for u in instr.uses()}
    host_touched |= sub.touched
    elided = set()
    for instr, _ in instructions_of(ir):
        src = instr.srcs[0] if instr.srcs else None
        if id(instr) in whole and _is_copy(instr) and isinstance(src, Access):
            assert instr.dst is not None
            sd, dd = ir.tensor(src.tensor), ir.tensor(instr.dst.tensor)
            same = numerics.storage_dtype(sd.dtype, config.precise_fp) == numerics.storage_dtype(
                dd.dtype, config.precise_fp
            )
            # only a tile may become a view of its source: an HBM destination is the caller's
            if (
                sd.buffer == "shared_hbm"
                and dd.on_chip
                and same
                and not batched_hbm.written_while_viewed(ir, instr)
            ):
                if writes[dd.name] == 1 and not numerics.dma_copies_bits(sd.dtype, dd.dtype):
                    elided.add(id(instr))
    fused = _fuse_stores(ir, ir.body, fresh, elided, writes, config)
    # (a tile a hosted instruction touches is never a view of its store's HBM destination)
    fused = {k: v for k, v in fused.items() if v.srcs[0].tensor not in host_touched}  # type: ignore[union-attr]
    # (nor one whose producer would write a read tensor before another access sees it)
    views = batched_hbm.elided_views(ir, elided)
    fused = {
        k: v
        for k, v in fused.items()
        if not batched_hbm.seen_before_store(ir, k, v, hbm_read, views)
    }
    elided, fused = contiguous_views(ir, elided, fused)
    loaded = {instr.dst.tensor for instr, _ in instructions_of(ir) if id(instr) in elided}
    # (a tile living in its store's destination is filled in place, never a view of another)
    fused_tiles = {s.srcs[0].tensor for s in fused.values()}  # type: ignore[union-attr]
    moved = on_chip_moves(ir, whole, writes, host_touched | fused_tiles, config)
    moved_names = {i.dst.tensor for i, _ in instructions_of(ir) if id(i) in moved}  # type: ignore[union-attr]
    views = set(loaded) | moved_names
    views |= {s.srcs[0].tensor for s in fused.values()}  # type: ignore[union-attr]

    def size(d: TensorDecl) -> int:
        if not _per_position(d) or d.name in views or d.alias_of is not None:
            return 0
        return storage_bytes(d, config.precise_fp)

    # (tiles dead at an allocation give their storage back: the peak of the live ones)
    tile_bytes = sum(size(d) for d in ir.tensors if not d.on_chip) + peak(ir, size)[0]
    return Plan(
        frozenset(batch),
        frozenset(fresh),
        max(tile_bytes, 1),
        frozenset(whole),
        frozenset(elided),
        fused,
        frozenset(id(s) for s in fused.values()),
        frozenset(s.srcs[0].tensor for s in fused.values()),  # type: ignore[union-attr]
        frozenset(loaded),
        hosted=frozenset(hosted),
        stateful=frozenset(stateful),
        unproven="device loops (their trips are known only at run time)"
        if sub.loops
        else _full_checks_unproven(ir, fresh, hosted),
        reread=reread,
        moved=moved,
        moved_names=frozenset(moved_names),
        subtrees=sub.loops,
        whole_axes=frozenset(
            a for i, _ in instructions_of(ir) if i.kind == "all_reduce" for a in i.attr("axes")
        ),
    )


def _full_checks_unproven(ir: KernelIR, fresh: set[int], hosted: set[int]) -> str | None:
    """Why the run-time checks of ``checks="full"`` might report something on this kernel, or
    None when they provably cannot: every on-chip tile is filled entirely by the instruction
    right after its allocation and read only later in its scope, HBM reads are of parameters
    (the caller's data), every output is entirely written (``coverage.fully_written``) and no
    instruction leaves engine registers unset. The batched run then equals a checked one."""
    for instr, _ in instructions_of(ir):
        if id(instr) in hosted:
            return f"'{instr.api or instr.op}' runs hosted (its checks are per instance)"
    order: dict[int, int] = {}
    scope: dict[str, tuple[int, tuple[int, ...]]] = {}  # tile -> (alloc position, its loops)
    for pos, (n, loops) in enumerate(nodes_of(ir)):
        order[id(n)] = pos
        if isinstance(n, Alloc) and ir.tensor(n.tensor).on_chip:
            if id(n) not in fresh:
                return f"tile '{n.tensor}' is not entirely written right after its allocation"
            scope[n.tensor] = (pos, tuple(id(lp) for lp in loops))
    for instr, loops in instructions_of(ir):
        if any(not u.operand and u.role != "index" for u in instr.uses()):
            return f"'{instr.api or instr.op}' has a secondary operand (e.g. reduce_res)"
        here = tuple(id(lp) for lp in loops)
        for s in instr.reads():
            d = ir.tensor(s.tensor)
            if not d.on_chip:
                if d.name not in ir.params:
                    return f"HBM tensor '{d.name}' is read"
                continue
            got = scope.get(d.name)
            if got is None or order[id(instr)] < got[0] or here[: len(got[1])] != got[1]:
                return f"tile '{d.name}' may be read outside the scope of its allocation"
    for name in ir.outputs:
        if name not in ir.params and not fully_written(ir, name):
            return f"output '{name}' is not provably written entirely"
    return None


def _fuse_stores(
    ir: KernelIR,
    nodes: tuple[Node, ...],
    fresh: set[int],
    elided: set[int],
    writes: dict[str, int],
    config: SimConfig,
) -> dict[int, Instr]:
    """Fresh tiles that are computed whole, then stored whole (same storage dtype) by the one
    instruction that reads them, into an HBM tensor that store alone writes: such a tile can
    live in its store's destination (same nest of loops, so the same batch)."""
    reads: dict[str, int] = {}
    reader: dict[str, Instr] = {}
    for instr, _ in instructions_of(ir):
        for s in instr.reads():
            reads[s.tensor] = reads.get(s.tensor, 0) + 1
            reader[s.tensor] = instr
    out: dict[int, Instr] = {}

    def visit(nodes: tuple[Node, ...]) -> None:
        at = {id(n): i for i, n in enumerate(nodes)}
        for i, n in enumerate(nodes):
            if isinstance(n, Loop):
                visit(n.body)
            if not (isinstance(n, Alloc) and id(n) in fresh):
                continue
            filler = _first_touch(ir, nodes, i)
            if filler is None or id(filler) in elided:
                continue
            if writes.get(n.tensor) != 1 or reads.get(n.tensor) != 1:
                continue
            store = reader[n.tensor]  # the one reader: fused when it comes later at this level
            later = at.get(id(store), -1) > at[id(filler)]
            if later and _plain_store_of(store, n.tensor, ir, writes, config):
                out[id(n)] = store

    visit(nodes)
    return out


def _plain_store_of(
    instr: Instr, name: str, ir: KernelIR, writes: dict[str, int], config: SimConfig
) -> bool:
    """``instr`` copies all of tile ``name`` unchanged into an HBM tensor only it writes."""
    dst = instr.dst
    if not _is_copy(instr) or dst is None or instr.mask is not None or instr.accumulate:
        return False
    src = instr.srcs[0]
    tile, out = ir.tensor(name), ir.tensor(dst.tensor)
    if not isinstance(src, Access) or src.tensor != name or src.indirect or dst.indirect:
        return False
    if out.buffer != "shared_hbm" or writes.get(dst.tensor) != 1 or dst.shape != tile.shape:
        return False
    if not whole_tile(src, tile.shape):
        return False
    same = numerics.storage_dtype(tile.dtype, config.precise_fp) == numerics.storage_dtype(
        out.dtype, config.precise_fp
    )
    return same and not numerics.dma_copies_bits(tile.dtype, out.dtype)


def _is_copy(instr: Instr) -> bool:
    """A plain DMA copying its source tile, element for element, into its destination."""
    if any(isinstance(a, Access) and a.indirect for a in (instr.dst, *instr.srcs)):
        return False  # (a gather or scatter: its elements come from the index tiles' values)
    if instr.kind == "dma":
        return True
    if instr.kind != "isa" or instr.op != "dma_copy" or instr.attr("rmw"):
        return False
    src = instr.srcs[0]
    return isinstance(src, Access) and instr.dst is not None and src.shape == instr.dst.shape


def _starts_group(instr: Instr) -> bool:
    """A current-API matmul accumulating into PSUM by group (``accumulate=None``)."""
    return (
        instr.kind == "isa"
        and instr.op == "nc_matmul"
        and instr.accumulate == "add"
        and bool(instr.attr("psum_group", False))
    )


# the instructions that fold into the Scalar engine's accumulator registers (simulator/isa)
_SCALAR_REGISTERS = ("activation", "activate2")


def _shares_registers(ir: KernelIR) -> bool:
    """Some instruction of the kernel folds into the Scalar engine's accumulator registers
    without resetting them first (``reduce_cmd`` other than reset_reduce, or ``activate2``): it
    sees what another one left there. The batched executors keep no engine state, so an
    ``activation_reduce`` they would run is then hosted with the instance's state."""
    for i, _ in instructions_of(ir):
        if i.kind != "isa" or i.op not in _SCALAR_REGISTERS or i.attr("reduce_op") is None:
            continue
        if i.op != "activation" or i.attr("reduce_cmd") != "reset_reduce":
            return True
    return False


def _maybe_out_of_bounds(ir: KernelIR, instr: Instr, loops: tuple[Loop, ...]) -> str | None:
    """Unmasked accesses of batched instructions are unchecked strided views: one that may be
    out of bounds for some instance or iteration is hosted instead (the interpreter's checks
    then report where)."""
    if instr.mask is not None:
        return None
    scope = ir.symbol_ranges(loops)
    far = (-batched_hbm.FAR, batched_hbm.FAR)  # (a device loop's trips: known when it runs)
    ranges = {s: far if r.runtime else r.bounds for s, r in scope.items()}
    for acc in (u.access for u in instr.uses() if u.operand):
        shape = ir.tensor(acc.tensor).shape
        for e, size in zip(acc.index, shape):
            # (an iterator used outside its loop: the interpreter reports it)
            lo, hi = e.bounds(ranges) if set(e.base.symbols()) <= ranges.keys() else (-1, -1)
            if lo < 0 or hi >= size:
                return f"an access to '{acc.tensor}' may be out of bounds"
    return None


def _check_tiles_stay_in_their_loop(ir: KernelIR, batch: set[int]) -> None:
    """A tile allocated in a batched loop has a batch axis only inside it (after the loop the
    interpreter would see the last iteration's tile)."""
    home: dict[str, frozenset[int]] = {}
    for n, loops in nodes_of(ir):
        if isinstance(n, Alloc):
            home[n.tensor] = frozenset(id(lp) for lp in loops if id(lp) in batch)
    for instr, loops in instructions_of(ir):
        inside = {id(lp) for lp in loops}
        for acc in (u.access for u in instr.uses()):
            name = ir.storage_of(acc.tensor)
            if not home.get(name, frozenset()) <= inside:
                raise Declined(f"tile '{name}' is used after the loop that allocates it")


def _per_position(d: TensorDecl) -> bool:
    """Storage of each batch position: on-chip tiles and private HBM (``nl.hbm`` /
    ``nl.private_hbm``, one array per instance and allocation, as the interpreter's
    ``Ctx.allocate`` makes it); stored with leading batch axes like a tile."""
    return d.on_chip or d.buffer in ("hbm", "private_hbm")


def _written_on_chip(nodes: tuple[Node, ...], ir: KernelIR) -> set[str]:
    """Per-position tensors (tiles, private HBM) written in ``nodes``."""
    out: set[str] = set()
    for n in nodes:
        if isinstance(n, Instr):
            written = n.writes()
            out |= {ir.storage_of(w.tensor) for w in written if _per_position(ir.tensor(w.tensor))}
        elif isinstance(n, Loop):
            out |= _written_on_chip(n.body, ir)
    return out


def _allocated(nodes: tuple[Node, ...]) -> set[str]:
    out: set[str] = set()
    for n in nodes:
        if isinstance(n, Alloc):
            out.add(n.tensor)
        elif isinstance(n, Loop):
            out |= _allocated(n.body)
    return out


def _classify(
    ir: KernelIR,
    nodes: tuple[Node, ...],
    batch: set[int],
    fresh: set[int],
    whole: set[int],
    hosted: set[int],
    stateful: set[int],
) -> None:
    """(``stateful``: ids of instructions and of the loops around them that use engine state.)
    Batch loops: ``affine_range`` loops carrying no tile (nor private HBM) and holding no
    instruction using per-instance engine state (batching would reorder its uses). Fresh
    tiles: filled entirely by the batched instruction that first touches them after their
    allocation (a hosted one may write less than its destination access, so its tile keeps the
    fill)."""
    for i, n in enumerate(nodes):
        if isinstance(n, Loop):
            carried = _written_on_chip(n.body, ir) - _allocated(n.body)
            if n.kind == "affine" and not n.is_runtime and not carried and id(n) not in stateful:
                batch.add(id(n))
            _classify(ir, n.body, batch, fresh, whole, hosted, stateful)
        elif isinstance(n, Alloc):
            nxt = _first_touch(ir, nodes, i)
            if nxt is not None and id(nxt) not in hosted and _overwrites_whole(nxt, n.tensor, ir):
                fresh.add(id(n))
                whole.add(id(nxt))


_LOOKAHEAD = 16  # nodes searched after an allocation for the instruction that fills it


def _first_touch(ir: KernelIR, nodes: tuple[Node, ...], i: int) -> Instr | None:
    """The first instruction after the allocation ``nodes[i]`` that touches its tile, when only
    allocations and instructions of other tensors come between (``t = nl.ndarray(...)``
    several times, then the copies into them); None otherwise."""
    name = nodes[i].tensor  # type: ignore[union-attr]
    for n in nodes[i + 1 : i + 1 + _LOOKAHEAD]:
        if isinstance(n, Alloc):
            continue
        if not isinstance(n, Instr):
            return None
        if any(ir.storage_of(a.tensor) == name for a in (*n.reads(), *n.writes())):
            return n
    return None


def _overwrites_whole(instr: Instr, name: str, ir: KernelIR) -> bool:
    """``instr`` writes every element of tile ``name`` without reading it first (the first
    matmul of a PSUM accumulation group into a fresh tile overwrites it: nothing started)."""
    dst = instr.dst
    if dst is None or dst.tensor != name or instr.mask is not None:
        return False
    if instr.accumulate and not _starts_group(instr):
        return False
    # (a source that is the destination's own access, `dst=t, data=t`, reads it too)
    if any(u.read and u.role != "dst" and ir.storage_of(u.access.tensor) == name
           for u in instr.uses()):  # fmt: skip
        return False
    if instr.kind in ("matmul",) and instr.attr("psum_group", False):
        return False
    return whole_tile(dst, ir.tensor(name).shape)
