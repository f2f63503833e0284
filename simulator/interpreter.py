"""The NumPy reference interpreter: walks the kernel IR and defines the semantics.

Each instruction runs its executor from the registry (``executors.py``; the executors live in
``simulator/language`` and ``simulator/isa``) on the instance's :class:`~simulator.memory.Ctx`.
``execute`` is this backend's entry point; ``execute_instruction`` runs one instruction on
arrays another backend owns (the Numba backend hosts what it does not compile through it), and
``execute_nodes`` a subtree of the IR (the batched backend hosts device loops through it)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from nki.errors import NKIError, NKIMemoryError, NKIRuntimeError
from nki.ir import Access, Alloc, Instr, KernelIR, Loop, Node, RuntimeLoop, Sym

# executor modules register themselves on import
from . import collectives, isa, language, progress  # noqa: F401
from .checks.lnc_races import dynamic_tensors, same_write_tensors
from .checks.lnc_writes import DynamicAccesses, SameWrites
from .checks.unwritten import check_outputs_written
from .config import SimConfig
from .executors import COLLECTIVES, executor_of
from .instances import Instance, RunInfo, Schedule, run_instances
from .memory import Ctx
from .poison import REPORT, rule_of


def execute(
    ir: KernelIR,
    shared: dict[str, np.ndarray],
    config: SimConfig,
    sched: Schedule,
    info: RunInfo,
) -> bool:
    """Run ``ir`` over the instances of ``sched``, updating ``shared`` (the launch's shared HBM
    storage) in place. Always runs the kernel (returns True)."""
    shadow_shared = {
        n: np.zeros(a.shape, dtype=bool)
        for n, a in shared.items()
        if config.checks == "full" and n not in ir.params
    }

    writers: dict[str, set[int]] = {}
    both = same_write_tensors(ir) if ir.cores else frozenset()
    same_writes = SameWrites(shared, both) if both else None
    dyn = dynamic_tensors(ir) if ir.cores else frozenset()
    dynamic = DynamicAccesses(shared, dyn) if dyn else None

    def start(inst: Instance, core: int) -> tuple[Ctx, Iterator[Instr]]:
        mine = ir.cores[core] if ir.cores else ir  # per-core traces: this core's own
        ctx = Ctx(mine, config, shared, inst, core, sched.rng, shadow_shared)
        ctx.collective_loops = sched.collective_loops
        ctx.writers = writers
        ctx.same_writes = same_writes
        ctx.dynamic = dynamic
        return ctx, _released(_walk(mine.body, ctx), ctx)

    run_instances(sched, start, ir.grid.shape, info)
    if config.checks == "full":
        check_outputs_written(ir, shadow_shared, writers)
    return True


def execute_instruction(
    ir: KernelIR,
    config: SimConfig,
    instr: Instr,
    arrays: dict[str, np.ndarray],
    env: dict[Sym, int],
    state: dict[str, Any],
    instance: Instance,
    core: int,
) -> None:
    """Run one instruction with the reference semantics on caller-owned storage: ``arrays``
    (the storage of every tensor it touches, in storage dtype), the symbol values ``env`` and
    the instance's engine ``state`` (kept by the caller between calls). Errors carry the
    instruction's location, instance and core."""
    ctx = Ctx(ir, config, {}, instance, core, None)
    ctx.arrays = arrays
    ctx.env = env
    ctx.state = state
    _exec_instr(instr, ctx)


def execute_nodes(
    ir: KernelIR,
    config: SimConfig,
    nodes: tuple[Node, ...],
    arrays: dict[str, np.ndarray],
    env: dict[Sym, int],
    state: dict[str, Any],
    instance: Instance,
    core: int,
    first_trip: int = 0,
) -> None:
    """Run a subtree of the IR (a device loop with its body) for one instance, as
    ``execute_instruction`` runs one instruction: allocations inside it go into ``arrays``.
    ``first_trip``: a while loop (``nodes`` is that one loop) goes on from that trip, the
    earlier ones having run elsewhere. The subtree must hold no collective (it would wait for
    other instances)."""
    ctx = Ctx(ir, config, {}, instance, core, None)
    ctx.arrays = arrays
    ctx.env = env
    ctx.state = state
    walk = _walk(nodes, ctx)
    if first_trip:
        (loop,) = nodes
        assert isinstance(loop, RuntimeLoop) and loop.cond is not None
        walk = _walk_runtime_loop(loop, ctx, first_trip)
    for instr in walk:
        raise NKIRuntimeError(
            f"'{instr.api or instr.kind}' waits for other instances inside a hosted subtree",
            code="err_internal",
            loc=instr.loc,
        )


def _walk(nodes: tuple[Node, ...], ctx: Ctx) -> Iterator[Instr]:
    """Run ``nodes`` for one instance. A generator: it stops at each collective instruction
    (``nl.all_reduce``) after reading its input, until the scheduler has combined the inputs
    of every instance of the group, then writes the result and goes on."""
    for n in nodes:
        if isinstance(n, Instr):
            _exec_instr(n, ctx)
            if n.kind in COLLECTIVES:
                yield n
                _exec_instr(n, ctx)
        elif isinstance(n, RuntimeLoop):
            yield from _walk_runtime_loop(n, ctx)
        elif isinstance(n, Loop):
            it: Iterable[int] = range(n.start, n.stop, n.step)
            if ctx.rng is not None and n.kind == "affine" and id(n) not in ctx.collective_loops:
                # (iterations holding a collective keep their order: instances meet there)
                it = [int(v) for v in ctx.rng.permutation(np.array(list(it), dtype=np.int64))]
            for v in it:
                ctx.env[n.sym] = v
                yield from _walk(n.body, ctx)
            ctx.env.pop(n.sym, None)
        elif isinstance(n, Alloc):
            ctx.allocate(ctx.decl(n.tensor))


def _released(walk: Iterator[Instr], ctx: Ctx) -> Iterator[Instr]:
    """An instance's walk that drops its private memory (tiles, private HBM, shadows) when it
    ends: a launch holds one instance's on-chip state at a time, not the whole grid's."""
    yield from walk
    ctx.arrays, ctx.shadow, ctx.state = {}, {}, {}


def _register(acc: Access, ctx: Ctx, loop: RuntimeLoop) -> int:
    v = np.asarray(ctx.read(acc)).reshape(-1)[0]
    try:
        return int(v)
    except (ValueError, OverflowError):  # a float register holding NaN or infinity
        raise NKIRuntimeError(
            f"the register {ctx.ir.label(acc.tensor)} of this device loop holds {v}, which is "
            "not an integer trip bound or condition",
            code="err_runtime",
        ).with_context(loc=loop.loc, instance=ctx.instance, core=ctx.core) from None


def _walk_runtime_loop(n: RuntimeLoop, ctx: Ctx, first_trip: int = 0) -> Iterator[Instr]:
    """A device loop: bounds read from registers when it starts (fori_loop), or its condition
    register before every iteration (while_loop; from trip ``first_trip``)."""
    if n.cond is None:
        lo = n.lower_const if n.lower is None else _register(n.lower, ctx, n)
        hi = n.upper_const if n.upper is None else _register(n.upper, ctx, n)
        for v in range(lo, hi, n.step):
            ctx.env[n.sym] = v
            yield from _walk(n.body, ctx)
    else:
        trips = first_trip
        while _register(n.cond, ctx, n) != 0:
            if trips == n.max_iterations:
                raise NKIRuntimeError(
                    f"nl.while_loop ran {trips} iterations without its condition register "
                    "becoming 0; the loop does not terminate",
                    code="err_runtime_loop_limit",
                ).with_context(loc=n.loc, instance=ctx.instance, core=ctx.core)
            ctx.env[n.sym] = trips
            yield from _walk(n.body, ctx)
            trips += 1
    ctx.env.pop(n.sym, None)


def _exec_instr(instr: Instr, ctx: Ctx) -> None:
    fn = executor_of(instr)
    ctx.instr = instr
    progress.tick()
    try:
        if fn is None:
            raise NKIRuntimeError(
                f"no executor for instruction kind '{instr.kind}'", code="err_internal"
            )
        if ctx.full_checks:
            ctx.poison.start(rule_of(instr) if _on_chip(instr, ctx) else REPORT)
        with np.errstate(all="ignore"):
            fn(instr, ctx)
    except NKIError as e:
        raise e.with_context(loc=instr.loc, instance=ctx.instance, core=ctx.core) from None
    except MemoryError as e:
        what = f"executing '{instr.api or instr.kind + '.' + instr.op}'"
        raise NKIMemoryError.host_exhausted(e, what, instr.loc).with_context(
            instance=ctx.instance, core=ctx.core
        ) from None
    except Exception as e:  # never let NumPy / internal errors escape without a location
        raise NKIRuntimeError(
            f"error while executing '{instr.api or instr.kind + '.' + instr.op}': "
            f"{type(e).__name__}: {e}",
            code="err_runtime",
            loc=instr.loc,
            instance=ctx.instance,
            core=ctx.core,
        ) from e


def _on_chip(instr: Instr, ctx: Ctx) -> bool:
    """Operands and result all on chip (uninitialised values may propagate; HBM reports)."""
    dst = instr.dst
    if not isinstance(dst, Access) or not ctx.decl(dst.tensor).on_chip:
        return False
    return all(not isinstance(s, Access) or ctx.decl(s.tensor).on_chip for s in instr.srcs)
