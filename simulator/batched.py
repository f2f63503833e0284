"""The batched backend: each IR instruction runs once for a whole batch of SPMD instances and
independent ``affine_range`` iterations, as NumPy operations over leading batch axes.

The grid axes and every ``affine_range`` loop whose iterations write no on-chip tile allocated
outside the loop become batch axes (a symbol has one value per position on its axis); other
loops (a PSUM accumulation over K, ``sequential_range``) are iterated around the batched body.
A tile allocated at batch depth ``p`` has ``p`` leading batch axes. An unmasked access is a
strided view of its tensor over batch and tile; a masked access gathers / scatters through index
arrays, its mask evaluated batch-wide once. Batch axes are chunked under ``BUDGET`` bytes
(except the grid axes an ``nl.all_reduce`` reduces over: its groups are whole in a batch).

The executors repeat the interpreter's numerics (fp32 compute, the same NumPy calls,
``numerics.cast`` on write), so results are bit-identical. An instruction without a batched
executor is hosted (``batched_host.py``): run per position by the interpreter's executor. A
device loop is iterated around its batched body while its bounds or condition agree across
positions, else run per position by the interpreter's walker (``batched_subtrees.py``). Views
are views of their base's batched storage. ``batched_plan.py`` decides the batch axes, hosted
instructions and skipped copies; ``execute`` declines (returns False, the reason in
``RunInfo.reason``) kernels whose semantics need the per-instance walk (core meetings of LNC=2,
HBM one position sees another write, ``shuffle_seed``...); the next backend runs them."""

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
    Node,
    PidSym,
    RuntimeLoop,
    Sym,
)
from nki.optable import OPS

from . import interpreter, numerics
from .batched_host import Host, StateUsed
from .batched_ops import EXECUTORS, contiguous, selection_for
from .batched_plan import Declined, Plan, plan
from .batched_subtrees import alias_storage
from .config import SimConfig
from .coverage import HOLDS_THROUGHOUT, instructions_of
from .executors import COLLECTIVES
from .instances import RunInfo, Schedule

NAME = "batched"
BUDGET = 64 << 20  # bytes of batched tiles one chunk may hold (stays near cache-friendly sizes)


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
        self.fused: frozenset[str] = frozenset()  # tiles that are views of their store's HBM
        # fresh tiles without storage yet (shape, dtype): the instruction that fills them
        # either hands over its result array or gets empty storage to write into
        self.pending: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        self.host: Host | None = None  # runs the hosted instructions (``batched_host``)
        # reshape / dtype views: name -> (the base storage it was made from, the view)
        self.aliases: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.device_loops = [0, 0]  # device loop runs: (batched, per position)

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
        arr = self.arrays.get(acc.tensor)
        if arr is None:
            arr = self._storage(acc.tensor)
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
        shape = self.decl(acc.tensor).shape
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
        return HOLDS_THROUGHOUT[op](lo, hi)

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
        sel = selection_for(sel, len(self.dims), acc.shape)
        arr = self.arrays.get(acc.tensor)
        return (self._storage(acc.tensor) if arr is None else arr)[self.indices(acc, sel)]

    def write(
        self, acc: Access, values: Any, sel: np.ndarray | None = None, accumulate: str | None = None
    ) -> None:
        full = (*self.dims, *acc.shape)
        vals = np.asarray(values)
        if vals.shape != full:  # (a fresh full-shape result stays itself: it may become the tile)
            vals = np.broadcast_to(vals, full)
        into = _INTO.get(accumulate) if sel is None else None  # type: ignore[arg-type]
        if into is not None and vals.dtype == np.float32:
            dst = self.view(acc)
            if dst.dtype == np.float32:  # fp32 += fp32: the same sums, in place
                into(dst, vals, out=dst)
                return
        if accumulate is not None:
            old = self.read(acc, sel)
            exact = vals.dtype.kind in "iub" and old.dtype.kind in "iub"
            a = numerics.to_compute(old, exact_int=exact)
            b = numerics.to_compute(np.asarray(vals), exact_int=exact)
            vals = OPS[accumulate].fn(a, b)
        stored = numerics.cast(vals, self.decl(acc.tensor).dtype, self.config.precise_fp)
        pend = self.pending.pop(acc.tensor, None)
        if pend is not None:
            if (
                sel is None
                and stored.shape == pend[0]
                and stored.dtype == pend[1]
                and stored.flags.c_contiguous
                and stored.flags.owndata
            ):
                self.arrays[acc.tensor] = stored  # a fresh result becomes the tile: no copy
                return
            self.arrays[acc.tensor] = np.empty(*pend)
        if sel is None:
            self.view(acc)[...] = stored
            return
        idx = self.indices(acc, sel)
        arr = self.arrays.get(acc.tensor)
        arr = self._storage(acc.tensor) if arr is None else arr
        arr[tuple(i[sel] for i in idx)] = np.broadcast_to(stored, full)[sel]

    def into(self, acc: Access) -> np.ndarray | None:
        """Where the running instruction may compute its fp32 result in place: the view of a
        fused tile it fills entirely (None: compute, then ``write``)."""
        if not self.whole or acc.tensor not in self.fused:
            return None
        out = self.view(acc)
        return out if out.dtype == np.float32 else None

    def value(
        self, src: Any, sel: np.ndarray | None = None, exact_int: bool = False, contig: bool = True
    ) -> Any:
        """An operand as compute values (fp32, or int64 when exact_int and integral), with
        batch axes; constants stay scalars."""
        if isinstance(src, Access):
            raw = self.read(src, sel)
            return numerics.to_compute(contiguous(raw) if contig else raw, exact_int=exact_int)
        if isinstance(src, Const):
            v = src.value
            if exact_int and isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                return np.int64(v)
            return np.float32(v)
        raise NKIRuntimeError(f"unsupported operand {src!r}", code="err_internal")

    def has_storage(self, name: str) -> bool:
        """Whether tensor ``name`` has (or may get) storage in this batch: a tensor, a pending
        tile or a view of one (not a tile a hosted device loop allocates)."""
        base = self.ir.storage_of(name)
        return base in self.arrays or base in self.pending

    def _storage(self, name: str) -> np.ndarray:
        """The storage of a tile still pending or of a reshape / dtype view (else the unknown
        tensor's KeyError)."""
        d = self.decl(name)
        if d.alias_of is not None:
            return self._alias(d)
        pend = self.pending.pop(name, None)
        if pend is None:
            raise KeyError(name)
        self.arrays[name] = np.empty(*pend)
        return self.arrays[name]

    def _alias(self, d: Any) -> np.ndarray:
        """A reshape / dtype view: the same memory as its base's current storage, batch axes
        kept (an HBM tensor's at depth 0); made once per base storage, so a tile's views
        follow each new allocation and each position sees one view object per allocation."""
        base = self.arrays.get(d.alias_of)
        if base is None:
            base = self._storage(d.alias_of)
        got = self.aliases.get(d.name)
        if got is not None and got[0] is base:
            return got[1]
        p = self.depth[d.alias_of]
        out = alias_storage(base, p, d, self.config.precise_fp)
        self.aliases[d.name] = (base, out)
        self.depth[d.name] = p
        return out

    def allocate(self, name: str, fresh: bool, store: Instr | None = None) -> None:
        d = self.decl(name)
        if d.buffer == "shared_hbm" and name in self.arrays:
            return  # shared across instances: allocated once per launch
        if store is not None:  # the tile lives where its store would copy it
            assert store.dst is not None
            self.arrays[name] = self.view(store.dst)
            self.depth[name] = len(self.dims)
            return
        shape = (*self.dims, *d.shape)
        sd = numerics.storage_dtype(d.dtype, self.config.precise_fp)
        if fresh:  # the next instruction writes the whole tile: storage when it does
            self.arrays.pop(name, None)
            self.pending[name] = (shape, sd)
        else:
            self.arrays[name] = np.full(shape, numerics.fill_value(d.dtype), dtype=sd)
        self.depth[name] = len(self.dims)


# accumulating writes done in place on fp32 storage (fp32 in, fp32 out: no rounding step)
_INTO = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
         "maximum": np.maximum, "minimum": np.minimum}  # fmt: skip


_CMP = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
        "==": np.equal, "!=": np.not_equal}  # fmt: skip


# ---- the walk --------------------------------------------------------------------------------


def _run_nodes(nodes: tuple[Node, ...], ctx: BCtx, p: Plan) -> None:
    for n in nodes:
        if isinstance(n, Instr):
            _exec(n, ctx, p)
        elif isinstance(n, Alloc):
            if n.tensor in p.viewed:
                continue  # the elided load right after it makes the tile a view
            ctx.allocate(n.tensor, id(n) in p.fresh, p.fused.get(id(n)))
        elif isinstance(n, _GridLoop):
            whole = n.sym.axis in p.whole_axes
            _run_batched(n.sym, 0, 1, n.size, n.body, ctx, p, whole)
        elif id(n) in p.subtrees:
            _run_device_loop(n, ctx, p)  # type: ignore[arg-type]
        elif id(n) in p.batch_loops:
            _run_batched(n.sym, n.start, n.step, n.trip_count, n.body, ctx, p)
        else:
            for v in range(n.start, n.stop, n.step):
                ctx.scalar[n.sym] = v
                _run_nodes(n.body, ctx, p)
            ctx.scalar.pop(n.sym, None)


def _run_device_loop(n: RuntimeLoop, ctx: BCtx, p: Plan) -> None:
    """A device loop, iterated around its batched body for the trips every position of the
    batch shares: a fori_loop's values below every position's upper bound when the lower
    bounds agree (bound registers read when it starts), a while loop's trips while every
    condition register holds (read before each trip). The positions' other trips run per
    position with the interpreter's walker."""
    if n.cond is not None:
        _run_while(n, ctx, p)
        return
    lo, hi = (
        _bound(acc, c, ctx) for acc, c in ((n.lower, n.lower_const), (n.upper, n.upper_const))
    )
    if lo is None or hi is None:  # (a float register that is not finite: as the interpreter)
        assert ctx.host is not None
        ctx.host.run_nodes(n, ctx, id(n) in p.stateful)
        ctx.device_loops[1] += 1
        return
    start = lo
    if (lo == lo[0]).all():
        shared = range(int(lo[0]), int(hi.min()), n.step)
        for v in shared:
            ctx.scalar[n.sym] = v
            _run_nodes(n.body, ctx, p)
        ctx.scalar.pop(n.sym, None)
        start = np.full_like(lo, int(lo[0]) + len(shared) * n.step)
    if (start < hi).any():  # (trips left for some positions)
        assert ctx.host is not None
        ctx.host.run_trips(n, ctx, id(n) in p.stateful, start, hi)
        ctx.device_loops[1] += 1
    else:
        ctx.device_loops[0] += 1


def _run_while(n: RuntimeLoop, ctx: BCtx, p: Plan) -> None:
    trips = 0
    while True:
        cond = _registers(n.cond, ctx)  # type: ignore[arg-type]
        go = None if cond is None else cond != 0
        if go is not None and not go.any():
            break
        if go is None or not go.all() or trips == n.max_iterations:
            # (past the limit, the interpreter's walk reports the loop at its first position)
            ctx.scalar.pop(n.sym, None)
            assert ctx.host is not None
            ctx.host.run_nodes(n, ctx, id(n) in p.stateful, trips)
            ctx.device_loops[1] += 1
            return
        ctx.scalar[n.sym] = trips
        _run_nodes(n.body, ctx, p)
        trips += 1
    ctx.scalar.pop(n.sym, None)
    ctx.device_loops[0] += 1


def _registers(acc: Access, ctx: BCtx) -> np.ndarray | None:
    """A register's value at every position of the batch (flat, in the positions' order), as
    ``int()`` reads it; None when a float register holds NaN or infinity."""
    vals = np.asarray(ctx.view(acc)).reshape(-1)
    if vals.dtype.kind == "f" or vals.dtype.isbuiltin != 1:  # (ml_dtypes floats too)
        vals = vals.astype(np.float64)
        if not np.isfinite(vals).all():
            return None
    return vals.astype(np.int64)


def _bound(acc: Access | None, const: int, ctx: BCtx) -> np.ndarray | None:
    """A fori_loop bound at every position: its register's values, or the constant."""
    if acc is None:
        return np.full(max(1, math.prod(ctx.dims)), const, dtype=np.int64)
    return _registers(acc, ctx)


def _run_batched(
    sym: Sym,
    start: int,
    step: int,
    count: int,
    body: tuple[Node, ...],
    ctx: BCtx,
    p: Plan,
    whole: bool = False,
) -> None:
    """Run ``body`` with ``sym`` as a new batch axis, in chunks under the memory budget
    (``whole``: in one chunk, for a collective's group)."""
    if count <= 0:
        return
    per = p.tile_bytes * max(1, math.prod(ctx.dims))
    chunk = count if whole else max(1, min(count, BUDGET // per))
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
    if id(instr) in p.skipped:  # its tile already lives in the destination
        return
    ctx.instr = instr
    if id(instr) in p.hosted:  # the interpreter's executor per position (errors located)
        assert ctx.host is not None
        ctx.host.run(instr, ctx, id(instr) in p.stateful)
        return
    ctx.whole = id(instr) in p.whole
    if id(instr) in p.elided:  # the tile is a view of the (never written) HBM tensor
        assert instr.dst is not None
        ctx.arrays[instr.dst.tensor] = ctx.view(instr.srcs[0])  # type: ignore[arg-type]
        ctx.depth[instr.dst.tensor] = len(ctx.dims)
        return
    try:
        EXECUTORS[instr.kind](instr, ctx)  # (under the launch's np.errstate)
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
    reason in ``info.reason``) when the next backend must run it. A shared-HBM tensor the
    kernel both writes and reads is copied before the run (one extra copy of each such tensor
    per launch) so that the replay of an error, or the next backend after a late decline,
    starts from the data the launch was given."""
    reason = _decline_reason(ir, config, sched)
    if reason is None:
        try:
            p = plan(ir, config)
        except Declined as e:
            reason = str(e)
        else:
            if config.checks == "full" and p.unproven is not None:
                reason = f"checks='full' tracks uninitialised values per instance: {p.unproven}"
    if reason is not None:
        info.reason = f"batched: {reason}"
        return False
    ctx = BCtx(ir, config, shared)
    ctx.fused = p.fused_names
    ctx.host = Host(ir, dict(sched.order))
    n = len(info.order)
    info.order.extend(sched.instances)
    # (what the kernel both writes and reads, as it was: a rerun must start from it)
    saved = {name: shared[name].copy() for name in sorted(p.reread)}
    try:
        with np.errstate(all="ignore"):  # once per launch, not per instruction
            _run_nodes(_body_with_grid(ir), ctx, p)
    except StateUsed:
        # (the next backend reruns the kernel from the start)
        del info.order[n:]
        _restore(shared, saved)
        info.reason = "batched: a hosted instruction in a batched loop uses engine state"
        return False
    except NKIError as e:
        del info.order[n:]
        _restore(shared, saved)
        _first_error(ir, shared, config, sched, e)
        raise
    n_host = len(p.hosted)
    hosted = f", {n_host} instruction(s) hosted per instance and iteration" if n_host else ""
    if p.subtrees:
        same, per = ctx.device_loops
        hosted += (
            f", device loops run {same} time(s) batched (the same bounds at every position) "
            f"and {per} time(s) per instance by the interpreter"
        )
    info.reason = (
        "batched: every instruction ran once per batch of instances and iterations "
        f"({len(p.batch_loops)} affine_range loop(s) batched with the grid, {len(p.elided)} "
        f"load(s) read in place, {len(p.fused)} result(s) written straight into HBM{hosted})"
    )
    return True


def _first_error(
    ir: KernelIR, shared: dict[str, np.ndarray], config: SimConfig, sched: Schedule, err: NKIError
) -> None:
    """Raise the error the interpreter meets first: batched, instructions run for every
    position before the next one, so ``err`` may come from a later instance (or a later
    instruction of the same one) than the interpreter's. The interpreter reruns the instances
    up to ``err``'s (all when unknown) on the same storage, where the tensors the kernel both
    writes and reads are back as they were before the batched run (``Plan.reread``); what the
    batched run wrote elsewhere no instruction reads. Returns when it meets no error. (With a
    collective, instances meet there: all of them rerun, in the interpreter's interleaving.)"""
    order = sched.order
    meets = any(i.kind in COLLECTIVES for i, _ in instructions_of(ir))
    if err.instance is not None and not meets:
        at = [i for i, (inst, _) in enumerate(order) if inst == tuple(err.instance)]
        if at:
            order = order[: at[0] + 1]
    info = RunInfo(ir.grid.shape, num_cores=max(1, ir.grid.num_cores), target=ir.target)
    interpreter.execute(ir, shared, config, Schedule(order, None, frozenset()), info)


def _restore(shared: dict[str, np.ndarray], saved: dict[str, np.ndarray]) -> None:
    for name, arr in saved.items():
        shared[name][...] = arr


def _decline_reason(ir: KernelIR, config: SimConfig, sched: Schedule) -> str | None:
    if config.backend not in ("auto", "batched"):
        return f"backend={config.backend!r}"
    if sched.rng is not None:
        return "shuffle_seed runs instances in a shuffled order (interpreter)"
    return None
