"""The batched backend: each IR instruction runs once for a whole batch of SPMD instances and
independent ``affine_range`` iterations, as NumPy operations over leading batch axes.

The grid axes and every ``affine_range`` loop whose iterations write no on-chip tile allocated
outside the loop become batch axes (a symbol then has one value per position on its axis);
other loops (a PSUM accumulation over K, ``sequential_range``) are iterated in Python around
the batched body. An on-chip tile allocated at batch depth ``p`` is stored with ``p`` leading
batch axes. An unmasked access is a strided view (``as_strided``) of its tensor over the batch
and the tile, computed from the affine index; a masked access gathers / scatters through index
arrays with the mask evaluated batch-wide once. Batch axes are chunked so the tiles a chunk
holds stay under ``BUDGET`` bytes.

The executors here repeat the reference interpreter's numerics (``simulator/language``): fp32
compute, the same NumPy calls on contiguous operands, ``numerics.cast`` on write, so results are
bit-identical. ``execute`` declines (returns False, with the reason in ``RunInfo.reason``)
kernels outside the subset; the next backend runs them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from nki.errors import NKIError, NKIIndexError, NKIRuntimeError
from nki.ir import (
    Access,
    Alloc,
    Const,
    IndexExpr,
    Instr,
    KernelIR,
    Loop,
    Node,
    PidSym,
    RuntimeLoop,
    Sym,
)
from nki.optable import OPS

from . import numerics
from .batched_ops import EXECUTORS, unsupported_instr
from .config import SimConfig
from .instances import RunInfo, Schedule

NAME = "batched"
BUDGET = 64 << 20  # bytes of batched tiles one chunk may hold (stays near cache-friendly sizes)


class Declined(Exception):
    """The kernel is outside the batched subset (the message says why)."""


# ---- planning --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    batch_loops: frozenset[int]  # ids of loops that become batch axes
    fresh: frozenset[int]  # ids of Alloc nodes whose tile is fully written before any read
    tile_bytes: int  # bytes of one instance's on-chip tiles (one iteration of every loop)
    whole: frozenset[int] = frozenset()  # ids of instructions filling a fresh tile entirely
    # ids of loads whose fresh tile can simply be a view of the HBM tensor (the tensor is never
    # written, the tile is written by this load only, same storage dtype: no copy at all)
    elided: frozenset[int] = frozenset()


_PLANS: dict[int, tuple[KernelIR, bool, Plan | str]] = {}


def plan(ir: KernelIR, config: SimConfig) -> Plan:
    key = id(ir)
    got = _PLANS.get(key)
    if got is None or got[1] != config.precise_fp:
        try:
            p: Plan | str = _plan(ir, config)
        except Declined as e:
            p = str(e)
        got = (ir, config.precise_fp, p)
        _PLANS[key] = got
    if isinstance(got[2], str):
        raise Declined(got[2])
    return got[2]


def _plan(ir: KernelIR, config: SimConfig) -> Plan:
    if any(isinstance(n, RuntimeLoop) for n, _ in ir.walk()):
        raise Declined(
            "device loops (nl.fori_loop with a register bound, nl.while_loop) run per trip"
        )
    for d in ir.tensors:
        if d.alias_of is not None:
            raise Declined(f"tensor '{d.name}' is a reshape / dtype view")
        if d.buffer not in ("sbuf", "psum", "shared_hbm"):
            raise Declined(f"tensor '{d.name}' lives in {d.buffer}")
    hbm_written: set[str] = set()
    hbm_read: set[str] = set()
    for instr, _ in ir.instructions():
        why = unsupported_instr(instr, ir)
        if why:
            raise Declined(why)
        for s in instr.srcs:
            if isinstance(s, Access) and ir.tensor(s.tensor).buffer == "shared_hbm":
                hbm_read.add(s.tensor)
        if instr.dst is not None and ir.tensor(instr.dst.tensor).buffer == "shared_hbm":
            if instr.accumulate is not None:
                raise Declined("an accumulating write to HBM (order across instances matters)")
            hbm_written.add(instr.dst.tensor)
    both = hbm_written & hbm_read
    if both:
        raise Declined(f"HBM tensor '{sorted(both)[0]}' is both written and read")
    _check_static_bounds(ir)
    batch: set[int] = set()
    fresh: set[int] = set()
    whole: set[int] = set()
    _classify(ir, ir.body, batch, fresh, whole)
    _check_distinct_writes(ir, batch)
    _check_tiles_stay_in_their_loop(ir, batch)
    writes: dict[str, int] = {}
    for instr, _ in ir.instructions():
        if instr.dst is not None:
            writes[instr.dst.tensor] = writes.get(instr.dst.tensor, 0) + 1
    elided = set()
    for instr, _ in ir.instructions():
        src = instr.srcs[0] if instr.srcs else None
        if id(instr) in whole and instr.kind == "dma" and isinstance(src, Access):
            assert instr.dst is not None
            sd, dd = ir.tensor(src.tensor), ir.tensor(instr.dst.tensor)
            same = numerics.storage_dtype(sd.dtype, config.precise_fp) == numerics.storage_dtype(
                dd.dtype, config.precise_fp
            )
            if sd.buffer == "shared_hbm" and src.tensor not in hbm_written and same:
                if writes[dd.name] == 1 and not numerics.dma_copies_bits(sd.dtype, dd.dtype):
                    elided.add(id(instr))
    tile_bytes = sum(
        math.prod(d.shape) * numerics.storage_dtype(d.dtype, config.precise_fp).itemsize
        for d in ir.tensors
        if d.on_chip
    )
    return Plan(
        frozenset(batch), frozenset(fresh), max(tile_bytes, 1), frozenset(whole), frozenset(elided)
    )


def _check_static_bounds(ir: KernelIR) -> None:
    """Unmasked accesses become unchecked strided views: they must be in bounds for every
    instance and iteration (else the interpreter runs the kernel and reports where)."""
    ranges: dict[Sym, tuple[int, int]] = {
        PidSym(a): (0, n - 1) for a, n in enumerate(ir.grid.shape)
    }
    for n, _ in ir.walk():
        if isinstance(n, Loop):
            ranges[n.sym] = n.value_range()
    for instr, _ in ir.instructions():
        if instr.mask is not None:
            continue
        for acc in (instr.dst, *instr.srcs):
            if not isinstance(acc, Access):
                continue
            shape = ir.tensor(acc.tensor).shape
            for e, size in zip(acc.index, shape):
                lo, hi = e.bounds(ranges)
                if lo < 0 or hi >= size:
                    raise Declined(f"an access to '{acc.tensor}' may be out of bounds")


def _check_distinct_writes(ir: KernelIR, batch: set[int]) -> None:
    """Every instance / batched iteration must write its own HBM elements: when several write
    the same ones, the last in program order wins, which one batched assignment does not fix."""
    grid = {PidSym(a) for a, n in enumerate(ir.grid.shape) if n > 1}
    for instr, loops in ir.instructions():
        if instr.dst is None or ir.tensor(instr.dst.tensor).buffer != "shared_hbm":
            continue
        want = grid | {lp.sym for lp in loops if id(lp) in batch and lp.trip_count > 1}
        used = {sym for e in instr.dst.index for sym, c in e.base.terms if c}
        if want - used:
            raise Declined(
                f"several instances / iterations write the same elements of '{instr.dst.tensor}'"
            )


def _check_tiles_stay_in_their_loop(ir: KernelIR, batch: set[int]) -> None:
    """A tile allocated in a batched loop has a batch axis only inside it (after the loop the
    interpreter would see the last iteration's tile)."""
    home: dict[str, frozenset[int]] = {}
    for n, loops in ir.walk():
        if isinstance(n, Alloc):
            home[n.tensor] = frozenset(id(lp) for lp in loops if id(lp) in batch)
    for instr, loops in ir.instructions():
        inside = {id(lp) for lp in loops}
        for acc in (instr.dst, *instr.srcs):
            if isinstance(acc, Access) and not home.get(acc.tensor, frozenset()) <= inside:
                raise Declined(f"tile '{acc.tensor}' is used after the loop that allocates it")


def _written_on_chip(nodes: tuple[Node, ...], ir: KernelIR) -> set[str]:
    out: set[str] = set()
    for n in nodes:
        if isinstance(n, Instr) and n.dst is not None and ir.tensor(n.dst.tensor).on_chip:
            out.add(n.dst.tensor)
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
    ir: KernelIR, nodes: tuple[Node, ...], batch: set[int], fresh: set[int], whole: set[int]
) -> None:
    for i, n in enumerate(nodes):
        if isinstance(n, Loop):
            carried = _written_on_chip(n.body, ir) - _allocated(n.body)
            if n.kind == "affine" and not carried:
                batch.add(id(n))
            _classify(ir, n.body, batch, fresh, whole)
        elif isinstance(n, Alloc) and i + 1 < len(nodes):
            nxt = nodes[i + 1]
            if isinstance(nxt, Instr) and _overwrites_whole(nxt, n.tensor, ir):
                fresh.add(id(n))
                whole.add(id(nxt))


def _overwrites_whole(instr: Instr, name: str, ir: KernelIR) -> bool:
    """``instr`` writes every element of tile ``name`` without reading it first."""
    dst = instr.dst
    if dst is None or dst.tensor != name or instr.mask is not None or instr.accumulate:
        return False
    if any(isinstance(s, Access) and s.tensor == name for s in instr.srcs):
        return False
    if instr.kind in ("matmul",) and instr.attr("psum_group", False):
        return False
    shape = ir.tensor(name).shape
    if dst.shape != shape:
        return False
    for d, e in enumerate(dst.index):
        want = tuple(1 if k == d else 0 for k in range(len(shape)))
        if e.base.terms or e.base.const or e.coeffs != want:
            return False
    return True


# ---- batch state -----------------------------------------------------------------------------


class BCtx:
    """The state of one batch: its axes' sizes, each batch symbol's axis and values (start +
    step * position), scalar symbols, and tile storage with leading batch axes."""

    def __init__(self, ir: KernelIR, config: SimConfig, shared: dict[str, np.ndarray]) -> None:
        self.ir = ir
        self.config = config
        self.dims: list[int] = []
        self.axis: dict[Sym, tuple[int, int, int]] = {}  # sym -> (axis, start, step)
        self.scalar: dict[Sym, int] = {}
        self.arrays: dict[str, np.ndarray] = dict(shared)
        self.depth: dict[str, int] = {n: 0 for n in shared}  # batch axes of each storage
        self.instr: Instr | None = None
        self.whole = False  # the running instruction fills a fresh tile entirely

    def decl(self, name: str) -> Any:
        return self.ir.tensor(name)

    # affine index -> (constant, per-batch-axis coefficient)
    def affine(self, base: Any) -> tuple[int, list[int]]:
        c = base.const
        coef = [0] * len(self.dims)
        for s, k in base.terms:
            if s in self.scalar:
                c += k * self.scalar[s]
            else:
                ax, start, step = self.axis[s]
                c += k * start
                coef[ax] += k * step
        return c, coef

    def view(self, acc: Access) -> np.ndarray:
        """The access over the whole batch as a strided view: shape dims + tile shape."""
        arr = self.arrays[acc.tensor]
        p = self.depth[acc.tensor]
        st = arr.strides
        bstr = [st[b] if b < p else 0 for b in range(len(self.dims))]
        tstr = [0] * len(acc.shape)
        first: list[slice] = [slice(None)] * p
        for d, e in enumerate(acc.index):
            c, coef = self.affine(e.base)
            sd = st[p + d]
            first.append(slice(c, None))  # (c is the element at batch / tile position 0)
            for b, k in enumerate(coef):
                bstr[b] += k * sd
            for t, k in enumerate(e.coeffs):
                tstr[t] += k * sd
        start = arr[tuple(first)]
        custom = start.dtype.isbuiltin != 1  # (ml_dtypes types: stride through their bits)
        if custom:
            start = start.view(np.dtype(f"u{start.itemsize}"))
        out = np.lib.stride_tricks.as_strided(
            start, shape=(*self.dims, *acc.shape), strides=(*bstr, *tstr), writeable=True
        )
        return out.view(arr.dtype) if custom else out

    def indices(self, acc: Access, sel: np.ndarray) -> tuple[np.ndarray, ...]:
        """Index arrays (batch + tile shape) into the access's storage; masked-out lanes point
        at element 0. Selected lanes are bounds-checked."""
        p = self.depth[acc.tensor]
        nb = len(self.dims)
        full_shape = (*self.dims, *acc.shape)
        out: list[np.ndarray] = []
        for b in range(p):
            sh = [1] * len(full_shape)
            sh[b] = self.dims[b]
            out.append(np.arange(self.dims[b]).reshape(sh))
        shape = self.arrays[acc.tensor].shape[p:]
        for d, e in enumerate(acc.index):
            c, coef = self.affine(e.base)
            v: Any = np.int64(c)
            for b, k in enumerate(coef):
                if k:
                    sh = [1] * len(full_shape)
                    sh[b] = self.dims[b]
                    v = v + k * np.arange(self.dims[b]).reshape(sh)
            for t, k in enumerate(e.coeffs):
                if k:
                    sh = [1] * len(full_shape)
                    sh[nb + t] = acc.shape[t]
                    v = v + k * np.arange(acc.shape[t]).reshape(sh)
            vv = np.broadcast_to(v, full_shape)[sel]
            if vv.size and (vv.min() < 0 or vv.max() >= shape[d]):
                raise NKIIndexError(
                    f"out-of-bound access for tensor '{acc.tensor}' on dimension {d}: index "
                    f"range [{int(vv.min())}, {int(vv.max())}] exceeds the dimension size of "
                    f"{shape[d]}",
                    code="err_tensor_access_out_of_bound",
                )
            out.append(v)
        return tuple(np.where(sel, np.broadcast_to(v, full_shape), 0) for v in out)

    def mask(self, instr: Instr, shape: tuple[int, ...] | None = None) -> np.ndarray | None:
        """The batch-wide selection of a masked instruction (None: unmasked or all true)."""
        if instr.mask is None:
            return None
        if shape is None:
            assert instr.dst is not None
            shape = instr.dst.shape
        full = (*self.dims, *shape)
        out: np.ndarray | None = None
        for cond in instr.mask.conds:
            if self._always(cond.expr, cond.op, shape):
                continue  # true for the whole batch: costs nothing
            r = np.broadcast_to(_CMP[cond.op](self.index_values(cond.expr, len(shape)), 0), full)
            out = r.copy() if out is None else out & r
        return None if out is None or out.all() else out

    def _always(self, e: IndexExpr, op: str, shape: tuple[int, ...]) -> bool:
        """``e op 0`` holds at every batch position and tile element (from the affine
        expression's extremes)."""
        c, coef = self.affine(e.base)
        lo = hi = c
        for k, n in [*zip(coef, self.dims), *zip(e.coeffs, shape)]:
            lo += min(0, k * (n - 1))
            hi += max(0, k * (n - 1))
        return _ALWAYS[op](lo, hi)

    def index_values(self, e: IndexExpr, rank: int) -> Any:
        """Values of an index expression over batch + tile axes (broadcastable)."""
        nb = len(self.dims)
        c, coef = self.affine(e.base)
        v: Any = np.int64(c)
        for b, k in enumerate(coef):
            if k:
                sh = [1] * (nb + rank)
                sh[b] = self.dims[b]
                v = v + k * np.arange(self.dims[b]).reshape(sh)
        for t, k in enumerate(e.coeffs):
            if k:
                sh = [1] * (nb + rank)
                sh[nb + t] = e.shape[t]
                v = v + k * np.arange(e.shape[t]).reshape(sh)
        return v

    def read(self, acc: Access, sel: np.ndarray | None = None) -> np.ndarray:
        if sel is None:
            return self.view(acc)
        return self.arrays[acc.tensor][self.indices(acc, sel)]

    def write(
        self, acc: Access, values: Any, sel: np.ndarray | None = None, accumulate: str | None = None
    ) -> None:
        full = (*self.dims, *acc.shape)
        vals = np.broadcast_to(np.asarray(values), full)
        if accumulate is not None:
            old = self.read(acc, sel)
            exact = vals.dtype.kind in "iub" and old.dtype.kind in "iub"
            a = numerics.to_compute(old, exact_int=exact)
            b = numerics.to_compute(np.asarray(vals), exact_int=exact)
            vals = OPS[accumulate].fn(a, b)
        stored = numerics.cast(vals, self.decl(acc.tensor).dtype, self.config.precise_fp)
        own = self.arrays[acc.tensor]
        if (
            self.whole
            and sel is None
            and stored.shape == own.shape
            and stored.dtype == own.dtype
            and stored.flags.c_contiguous
            and stored.flags.owndata
        ):
            self.arrays[acc.tensor] = stored  # a fresh result becomes the tile: no copy
            return
        if sel is None:
            self.view(acc)[...] = stored
            return
        idx = self.indices(acc, sel)
        self.arrays[acc.tensor][tuple(i[sel] for i in idx)] = np.broadcast_to(stored, full)[sel]

    def value(
        self, src: Any, sel: np.ndarray | None = None, exact_int: bool = False, contig: bool = True
    ) -> Any:
        """An operand as compute values (fp32, or int64 when exact_int and integral), with
        batch axes; constants stay scalars."""
        if isinstance(src, Access):
            raw = self.read(src, sel)
            return numerics.to_compute(_contig(raw) if contig else raw, exact_int=exact_int)
        if isinstance(src, Const):
            v = src.value
            if exact_int and isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                return np.int64(v)
            return np.float32(v)
        raise NKIRuntimeError(f"unsupported operand {src!r}", code="err_internal")

    def allocate(self, name: str, fresh: bool) -> None:
        d = self.decl(name)
        if d.buffer == "shared_hbm" and name in self.arrays:
            return  # shared across instances: allocated once per launch
        shape = (*self.dims, *d.shape)
        sd = numerics.storage_dtype(d.dtype, self.config.precise_fp)
        if fresh:  # the next instruction writes the whole tile: no fill needed
            self.arrays[name] = np.empty(shape, dtype=sd)
        else:
            self.arrays[name] = np.full(shape, numerics.fill_value(d.dtype), dtype=sd)
        self.depth[name] = len(self.dims)


def _contig(a: np.ndarray) -> np.ndarray:
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


_CMP = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
        "==": np.equal, "!=": np.not_equal}  # fmt: skip


_ALWAYS = {
    "<": lambda lo, hi: hi < 0,
    "<=": lambda lo, hi: hi <= 0,
    ">": lambda lo, hi: lo > 0,
    ">=": lambda lo, hi: lo >= 0,
    "==": lambda lo, hi: lo == hi == 0,
    "!=": lambda lo, hi: lo > 0 or hi < 0,
}


# ---- the walk --------------------------------------------------------------------------------


def _run_nodes(nodes: tuple[Node, ...], ctx: BCtx, p: Plan) -> None:
    for n in nodes:
        if isinstance(n, Instr):
            _exec(n, ctx, p)
        elif isinstance(n, Alloc):
            ctx.allocate(n.tensor, id(n) in p.fresh)
        elif isinstance(n, _GridLoop):
            _run_batched(n.sym, 0, 1, n.size, n.body, ctx, p)
        elif id(n) in p.batch_loops:
            _run_batched(n.sym, n.start, n.step, n.trip_count, n.body, ctx, p)
        else:
            for v in range(n.start, n.stop, n.step):
                ctx.scalar[n.sym] = v
                _run_nodes(n.body, ctx, p)
            ctx.scalar.pop(n.sym, None)


def _run_batched(
    sym: Sym, start: int, step: int, count: int, body: tuple[Node, ...], ctx: BCtx, p: Plan
) -> None:
    """Run ``body`` with ``sym`` as a new batch axis, in chunks under the memory budget."""
    if count <= 0:
        return
    per = p.tile_bytes * max(1, math.prod(ctx.dims))
    chunk = max(1, min(count, BUDGET // per))
    for first in range(0, count, chunk):
        n = min(chunk, count - first)
        ctx.dims.append(n)
        ctx.axis[sym] = (len(ctx.dims) - 1, start + first * step, step)
        try:
            _run_nodes(body, ctx, p)
        finally:
            ctx.dims.pop()
            del ctx.axis[sym]


def _exec(instr: Instr, ctx: BCtx, p: Plan) -> None:
    ctx.instr = instr
    ctx.whole = id(instr) in p.whole
    if id(instr) in p.elided:  # the tile is a view of the (never written) HBM tensor
        assert instr.dst is not None
        ctx.arrays[instr.dst.tensor] = ctx.view(instr.srcs[0])  # type: ignore[arg-type]
        ctx.depth[instr.dst.tensor] = len(ctx.dims)
        return
    try:
        with np.errstate(all="ignore"):
            EXECUTORS[instr.kind](instr, ctx)
    except NKIError as e:
        raise e.with_context(loc=instr.loc) from None
    except Exception as e:
        raise NKIRuntimeError(
            f"error while executing '{instr.api or instr.kind + '.' + instr.op}': "
            f"{type(e).__name__}: {e}",
            code="err_runtime",
            loc=instr.loc,
        ) from e


def _body_with_grid(ir: KernelIR) -> tuple[Node, ...]:
    """The kernel body wrapped in one batched loop per grid axis (instances are independent)."""
    body = ir.body
    for a in reversed(range(len(ir.grid.shape))):
        body = (_GridLoop(PidSym(a), ir.grid.shape[a], body),)  # type: ignore[assignment]
    return body


@dataclass(frozen=True)
class _GridLoop:
    sym: PidSym
    size: int
    body: tuple[Node, ...]


def execute(
    ir: KernelIR, shared: dict[str, np.ndarray], config: SimConfig, sched: Schedule, info: RunInfo
) -> bool:
    """The backend interface (see ``launch.py``): True when the kernel ran batched; False (the
    reason in ``info.reason``) when the next backend must run it."""
    reason = _decline_reason(ir, config, sched)
    if reason is None:
        try:
            p = plan(ir, config)
        except Declined as e:
            reason = str(e)
    if reason is not None:
        info.reason = f"batched: {reason}"
        return False
    ctx = BCtx(ir, config, shared)
    info.order.extend(sched.instances)
    _run_nodes(_body_with_grid(ir), ctx, p)
    info.reason = "batched: every instruction ran once per batch of instances and iterations"
    return True


def _decline_reason(ir: KernelIR, config: SimConfig, sched: Schedule) -> str | None:
    if config.backend not in ("auto", "batched"):
        return f"backend={config.backend!r}"
    if config.checks == "full":
        return "checks='full' tracks uninitialised reads per instance (interpreter)"
    if sched.rng is not None:
        return "shuffle_seed runs instances in a shuffled order (interpreter)"
    return None
