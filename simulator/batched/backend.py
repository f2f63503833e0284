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
executor in the registry, or one its entry declines (``ops.py``), is hosted (``host.py``): run
per position by the interpreter's executor. A device loop is iterated around its batched body
while its bounds or condition agree across positions, else run per position by the
interpreter's walker (``subtrees.py``). Views are views of their base's batched storage.
``plan.py`` decides the batch axes, hosted instructions and skipped copies; ``execute``
declines (returns False, the reason in ``RunInfo.reason``) kernels whose semantics need the
per-instance walk (core meetings of LNC=2, HBM one position sees another write,
``shuffle_seed``...); the next backend runs them."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

import numpy as np

from nki.errors import NKIError, NKIMemoryError, NKIRuntimeError
from nki.ir import (
    Access,
    Alloc,
    Instr,
    KernelIR,
    Node,
    PidSym,
    RuntimeLoop,
)
from nki.optable import errors_ignored

from .. import interpreter, progress
from ..backends import AUTO
from ..checks.coverage import instructions_of
from ..compiled import backend as numba_backend
from ..config import SimConfig
from ..executors import COLLECTIVES, PREPARE, checked_once, entry_run, executor_of
from ..instances import RunInfo, Schedule
from .context import BCtx, alloc_info
from .host import Host, StateUsed
from .keys import sym_key
from .moves import transposes
from .ops import BATCHED
from .plan import Declined, Plan, plan
from .prepared import prepare

BUDGET = 64 << 20  # bytes of batched tiles one chunk may hold (stays near cache-friendly sizes)


# ---- the walk --------------------------------------------------------------------------------

# A plan's walk is made once (``_steps``): each node of a body becomes a step tuple whose first
# item says what it is, with what running it needs decided beforehand:
#   (_INSTR, instr, whole, executor, prepared)  its batched executor (``whole``: fills a fresh
#                                           tile) and its prepared run (``prepared.py``) or None
#   (_ELIDED, instr, whole)                 a load whose tile is a view of its HBM source
#   (_ROUTED, instr, flags)                 another route (``_exec``'s flags)
#   (_ALLOC, tensor, fresh, fused store, alloc_info)    a tile allocation the walk makes
#   (_BATCH, sym, start, step, count, body, whole, key)   a loop (or grid axis) as a batch axis
#   (_LOOP, sym, values, body, key)         a loop iterated around its batched body
#   (_DEVICE, loop, body)                   a device loop (``_run_device_loop``)
# (``key``: the loop symbol's ``sym_key``)
_INSTR, _ELIDED, _ROUTED, _ALLOC, _BATCH, _LOOP, _DEVICE = range(7)
Steps = tuple[tuple, ...]
Tick = Callable[[int], None] | None  # the running launch's progress counter (None: not shown)


def _steps(
    nodes: tuple[Node, ...], p: Plan, routes: dict[int, int], info: Callable, ir: KernelIR
) -> Steps:
    """The walk of ``nodes`` (``info``: ``alloc_info`` of a tensor)."""
    out: list[tuple] = []
    for n in nodes:
        if isinstance(n, Instr):
            how = routes.get(id(n), 0)
            code = {0: _INSTR, _ELIDE: _ELIDED}.get(how & ~_WHOLE, _ROUTED)
            if code == _INSTR:  # (its executor and its kind's check, once, with the walk)
                run = checked_once(n, BATCHED, ir.tensor)
                # (prepared only when the kind's check passed: a failing one stays in ``run``)
                fast = prepare(n, run, ir.tensor) if run is entry_run(n, BATCHED) else None
                out.append((code, n, bool(how & _WHOLE), run, fast))
            else:
                out.append((code, n, how if code == _ROUTED else bool(how & _WHOLE)))
        elif isinstance(n, Alloc):
            if n.tensor in p.viewed or n.tensor in p.moved_names:
                continue  # the elided load / the move filling it makes the tile a view
            out.append((_ALLOC, n.tensor, id(n) in p.fresh, p.fused.get(id(n)), info(n.tensor)))
        elif isinstance(n, _GridLoop):
            whole = n.sym.axis in p.whole_axes
            body = _steps(n.body, p, routes, info, ir)
            out.append((_BATCH, n.sym, 0, 1, n.size, body, whole, sym_key(n.sym)))
        elif id(n) in p.subtrees:
            out.append((_DEVICE, n, _steps(n.body, p, routes, info, ir)))
        elif id(n) in p.batch_loops:
            body = _steps(n.body, p, routes, info, ir)
            out.append((_BATCH, n.sym, n.start, n.step, n.trip_count, body, False, sym_key(n.sym)))
        else:
            body = _steps(n.body, p, routes, info, ir)
            out.append((_LOOP, n.sym, range(n.start, n.stop, n.step), body, sym_key(n.sym)))
    return tuple(out)


def _run_nodes(steps: Steps, ctx: BCtx, p: Plan, tick: Tick) -> None:
    for st in steps:
        code = st[0]
        if code <= _ELIDED:
            instr = st[1]
            if tick is not None:
                tick(math.prod(ctx.dims))
            ctx.instr = instr
            ctx.whole = st[2]
            if code == _ELIDED:
                _elide(instr, ctx)
                continue
            try:
                fast = st[4]
                if fast is None or not fast(ctx):
                    st[3](instr, ctx)  # (np.errstate)
            except Exception as e:
                _failed(e, instr)
        elif code == _ROUTED:
            _exec(st[1], st[2], ctx, p, tick)
        elif code == _ALLOC:
            ctx.allocate(st[1], st[2], st[3], st[4])
        elif code == _BATCH:
            _run_batched(st, ctx, p, tick)
        elif code == _LOOP:
            key, body, values = st[4], st[3], ctx.values  # (``set_scalar``, inline)
            ctx.syms[key] = st[1]
            for v in st[2]:
                values[key] = v
                _run_nodes(body, ctx, p, tick)
            values.pop(key, None)
        else:
            _run_device_loop(st[1], st[2], ctx, p, tick)


def _run_device_loop(n: RuntimeLoop, body: Steps, ctx: BCtx, p: Plan, tick: Tick) -> None:
    """A device loop, iterated around its batched body for the trips every position of the
    batch shares: a fori_loop's values below every position's upper bound when the lower
    bounds agree (bound registers read when it starts), a while loop's trips while every
    condition register holds (read before each trip). The positions' other trips run per
    position with the interpreter's walker."""
    if n.cond is not None:
        _run_while(n, body, ctx, p, tick)
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
            ctx.set_scalar(n.sym, v)
            _run_nodes(body, ctx, p, tick)
        ctx.set_scalar(n.sym, None)
        start = np.full_like(lo, int(lo[0]) + len(shared) * n.step)
    if (start < hi).any():  # (trips left for some positions)
        assert ctx.host is not None
        ctx.host.run_trips(n, ctx, id(n) in p.stateful, start, hi)
        ctx.device_loops[1] += 1
    else:
        ctx.device_loops[0] += 1


def _run_while(n: RuntimeLoop, body: Steps, ctx: BCtx, p: Plan, tick: Tick) -> None:
    trips = 0
    while True:
        cond = _registers(n.cond, ctx)  # type: ignore[arg-type]
        go = None if cond is None else cond != 0
        if go is not None and not go.any():
            break
        if go is None or not go.all() or trips == n.max_iterations:
            # (past the limit, the interpreter's walk reports the loop at its first position)
            ctx.set_scalar(n.sym, None)
            assert ctx.host is not None
            ctx.host.run_nodes(n, ctx, id(n) in p.stateful, trips)
            ctx.device_loops[1] += 1
            return
        ctx.set_scalar(n.sym, trips)
        _run_nodes(body, ctx, p, tick)
        trips += 1
    ctx.set_scalar(n.sym, None)
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


def _run_batched(st: tuple, ctx: BCtx, p: Plan, tick: Tick) -> None:
    """Run a ``_BATCH`` step's body with its symbol as a new batch axis, in chunks under the
    memory budget (``whole``: in one chunk, for a collective's group)."""
    _, sym, start, step, count, body, whole, key = st
    if count <= 0:
        return
    dims, values = ctx.dims, ctx.values
    per = p.tile_bytes * max(1, math.prod(dims))
    chunk = count if whole or count * per <= BUDGET else max(1, BUDGET // per)
    ctx.syms[key] = sym
    for first in range(0, count, chunk):
        dims.append(min(chunk, count - first))
        values[key] = (len(dims) - 1, start + first * step, step)  # (``set_axis``, inline)
        try:
            _run_nodes(body, ctx, p, tick)
        finally:
            dims.pop()
            del values[key]


# how ``_exec`` runs an instruction of a plan (flags; 0: its batched executor)
_SKIP, _HOST, _WHOLE, _ELIDE, _MOVE = 1, 2, 4, 8, 16


def _routes(p: Plan) -> dict[int, int]:
    """id(instruction) -> how ``_run_nodes`` runs it under plan ``p`` (``_exec``'s flags)."""
    routes: dict[int, int] = {}
    for flag, ids in ((_SKIP, p.skipped), (_HOST, p.hosted), (_WHOLE, p.whole),
                      (_ELIDE, p.elided), (_MOVE, p.moved)):  # fmt: skip
        for i in ids:
            routes[i] = routes.get(i, 0) | flag
    return routes


def _exec(instr: Instr, how: int, ctx: BCtx, p: Plan, tick: Tick) -> None:
    """An instruction the plan runs another way than with its batched executor (``how``)."""
    if how & _SKIP:  # its tile already lives in the destination
        if tick is not None:
            tick(math.prod(ctx.dims))
        return
    ctx.instr = instr
    if how & _HOST:  # the interpreter's executor per position (errors located)
        assert ctx.host is not None
        ctx.host.run(instr, ctx, id(instr) in p.stateful)  # (it counts each position)
        return
    if tick is not None:
        tick(math.prod(ctx.dims))
    ctx.whole = bool(how & _WHOLE)
    if how & _ELIDE:
        _elide(instr, ctx)
        return
    try:
        if how & _MOVE:
            _move(instr, ctx)
            return
        executor_of(instr, BATCHED)(instr, ctx)  # type: ignore[misc]  # (under np.errstate)
    except Exception as e:
        _failed(e, instr)


def _elide(instr: Instr, ctx: BCtx) -> None:
    """The load's tile becomes a view of its (never written) HBM source."""
    assert instr.dst is not None
    ctx.arrays[instr.dst.tensor] = ctx.view(instr.srcs[0])  # type: ignore[arg-type]
    ctx.depth[instr.dst.tensor] = len(ctx.dims)


def _failed(e: Exception, instr: Instr) -> NoReturn:
    """Raise what an instruction's failure is to the user: an NKIError at the instruction's
    line, running out of memory as ``err_host_memory_exhausted``, anything else as
    ``err_runtime`` (its cause kept)."""
    what = f"'{instr.api or instr.kind + '.' + instr.op}'"
    if isinstance(e, NKIError):
        raise e.with_context(loc=instr.loc) from None
    if isinstance(e, MemoryError):
        raise NKIMemoryError.host_exhausted(e, f"executing {what} batched", instr.loc) from None
    raise NKIRuntimeError(
        f"error while executing {what}: {type(e).__name__}: {e}",
        code="err_runtime",
        loc=instr.loc,
    ) from e


def _move(instr: Instr, ctx: BCtx) -> None:
    """The destination tile becomes a view of its source (never written again: ``moves``)."""
    assert instr.dst is not None
    PREPARE[instr.kind](instr, ctx)  # (the engines' destination rules)
    view = ctx.view(instr.srcs[0])  # type: ignore[arg-type]
    ctx.arrays[instr.dst.tensor] = np.swapaxes(view, -1, -2) if transposes(instr) else view
    ctx.depth[instr.dst.tensor] = len(ctx.dims)


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


@dataclass(frozen=True)
class _Ready:
    """What every batched run of one traced kernel under one setting uses, made once: the
    plan, its walk (``_steps``), the shared tensors copied before a run (``Plan.reread``) and
    the run's ``RunInfo.reason`` (None: counted per run, for device loops)."""

    plan: Plan
    steps: Steps
    reread: tuple[str, ...]
    reason: str | None


# (id(ir), config.key) -> (ir, what its runs use, or why the backend declines it): bounded, the IR
# kept so that its id is not reused while the entry lives
_READY: dict[tuple[int, tuple], tuple[KernelIR, _Ready | str]] = {}


def _ready(ir: KernelIR, config: SimConfig) -> _Ready | str:
    hit = _READY.get((id(ir), config.key))
    if hit is not None and hit[0] is ir:
        return hit[1]
    got: _Ready | str
    try:
        p = plan(ir, config)
    except Declined as e:
        got = f"batched: {e}"
    else:
        why = _declined(ir, config, p)
        if why is not None:
            got = f"batched: {why}"
        else:
            steps = _steps(
                _body_with_grid(ir),
                p,
                _routes(p),
                lambda name: alloc_info(ir, name, config.precise_fp),
                ir,
            )
            reason = None if p.subtrees else _reason(p, None)
            got = _Ready(p, steps, tuple(sorted(p.reread)), reason)
    if len(_READY) >= 512:
        _READY.clear()
    _READY[(id(ir), config.key)] = (ir, got)
    return got


def _declined(ir: KernelIR, config: SimConfig, p: Plan) -> str | None:
    """Why a kernel the batched backend can plan still goes to the next backend (None: it
    does not)."""
    if config.checks == "full" and p.unproven is not None:
        return f"checks='full' tracks uninitialised values per instance: {p.unproven}"
    if config.precise_fp and any(t.dtype == "tfloat32" for t in ir.tensors):
        # (fp32 storage whose every write rounds to 10 mantissa bits: the interpreter's cast;
        # the batched writes keep fp32 values of an fp32 storage as they are)
        return "tfloat32 tensors"
    steps = _serial_steps(ir, p)
    if config.backend == AUTO and steps > WARM_SERIAL_STEPS:
        if numba_backend.unsupported_reason(ir, config) is None and (
            steps > SERIAL_STEPS or _warm(ir, config)
        ):
            return (
                f"{steps:,} instruction steps iterated in Python (loops that cannot batch): "
                "the Numba backend compiles them"
            )
    return None


def _warm(ir: KernelIR, config: SimConfig) -> bool:
    """The Numba backend's code for this kernel is compiled in this process already."""
    p, _ = numba_backend.plan(ir, config)
    return p is not None and numba_backend.is_compiled(p)


def execute(
    ir: KernelIR, shared: dict[str, np.ndarray], config: SimConfig, sched: Schedule, info: RunInfo
) -> bool:
    """The backend interface (see ``launch.py``): True when the kernel ran batched; False (the
    reason in ``info.reason``) when the next backend must run it. A shared-HBM tensor the
    kernel both writes and reads is copied before the run (one extra copy of each such tensor
    per launch) so that the replay of an error, or the next backend after a late decline,
    starts from the data the launch was given."""
    if sched.rng is not None:
        info.reason = "batched: shuffle_seed runs instances in a shuffled order (interpreter)"
        return False
    ready = _ready(ir, config)
    if isinstance(ready, str):
        info.reason = ready
        return False
    p = ready.plan
    instances, cores = sched.in_order
    ctx = BCtx(ir, config, shared)
    ctx.fused = p.fused_names
    if p.hosted or p.subtrees:
        ctx.host = Host(ir, cores)
    n = len(info.order)
    info.order.extend(instances)
    # (what the kernel both writes and reads, as it was: a rerun must start from it)
    saved = {name: shared[name].copy() for name in ready.reread} if ready.reread else {}
    try:
        with errors_ignored():  # once per launch, not per instruction
            _run_nodes(ready.steps, ctx, p, progress.counter())
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
    info.reason = ready.reason or _reason(p, tuple(ctx.device_loops))
    return True


def _reason(p: Plan, device_loops: tuple[int, ...] | None) -> str:
    """``RunInfo.reason`` of a batched run of plan ``p``."""
    n_host = len(p.hosted)
    hosted = f", {n_host} instruction(s) hosted per instance and iteration" if n_host else ""
    if device_loops is not None:
        same, per = device_loops
        hosted += (
            f", device loops run {same} time(s) batched (the same bounds at every position) "
            f"and {per} time(s) per instance by the interpreter"
        )
    return (
        "batched: every instruction ran once per batch of instances and iterations "
        f"({len(p.batch_loops)} affine_range loop(s) batched with the grid, {len(p.elided)} "
        f"load(s) read in place, {len(p.fused)} result(s) written straight into HBM{hosted})"
    )


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


# batched steps (instructions x iterations of the loops that stay loops) above which "auto"
# leaves a kernel to the Numba backend, which compiles per-iteration loops (about 17 us of
# Python per step here against nanoseconds compiled; a cold compile costs seconds)
SERIAL_STEPS = 100_000
# the same where the kernel's Numba code is compiled in this process already (no compile to pay)
WARM_SERIAL_STEPS = 10_000


def _serial_steps(ir: KernelIR, p: Plan) -> int:
    """Instruction executions of the batched walk: each instruction once per iteration of the
    loops around it that are not batch axes (a device loop counts one trip)."""
    steps = 0
    for _, loops in instructions_of(ir):
        steps += math.prod(
            1 if lp.is_runtime or id(lp) in p.batch_loops else lp.trip_count for lp in loops
        )
    return steps
