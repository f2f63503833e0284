"""Hosted instructions of the batched backend (``batched.py``): an instruction without a batched
executor (``nl.gather``, bit-vector ops, scatters, masked reductions, most ``nki.isa``
instructions...) runs once per batch position with the interpreter's own executor
(``interpreter.execute_instruction``), on that position's tiles (a batched tile's leading batch
axes indexed: a view, no copy) and the shared HBM arrays, with the position's program ids and
loop iterators bound. It computes, checks and reports exactly what the interpreter does.

What stays exact, and why:
- Tiles and HBM: the plan already proves positions independent (no on-chip tile carried across
  batched iterations, distinct HBM writes per position, no HBM tensor both written and read);
  hosted instructions' secondary outputs and indirect index tiles count in those proofs
  (``Instr.reads`` / ``Instr.writes``).
- Engine state (accumulator registers, PSUM accumulation groups, random generators) is kept
  per instance, as in the interpreter. Batching grid axes keeps each instance's order of
  instructions; batching an ``affine_range`` loop would not, so a loop around an instruction
  that uses engine state (``uses_engine_state``) is iterated, not batched. Any other hosted
  instruction inside a batched loop runs with a state dict that refuses use
  (:class:`StateUsed`): the launch then goes to the next backend.
- Storage identity: the executor of a PSUM accumulation group recognises a tile's allocation
  by its array object, so each position's view is made once per allocation.
- Device loops (``run_trips``, ``run_nodes``): the trips of a device loop that positions do
  not share run per position through ``interpreter.execute_nodes``; tiles its body allocates
  live in that position's storage (``batched_subtrees`` proves nothing reads them after it).
- Errors: the first failing position raises the interpreter's error with its line and
  instance; ``batched.execute`` then replays the instances up to that one on the interpreter
  so the error reported is the one the interpreter meets first."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from nki.ir import Instr, KernelIR, Node, PidSym, RuntimeLoop, Sym

from ..executors import COLLECTIVES, executor_of
from ..interpreter import execute_instruction, execute_nodes

if TYPE_CHECKING:
    from .context import BCtx

# instruction kinds whose executors need other instances or a global order: never hosted
_ORDERED = {
    "print": "prints in the interpreter's instance order",
    "atomic_rmw": "updates HBM in the interpreter's instance order",
}

# instructions whose executors read or write per-instance engine state (``Ctx.state``)
_STATEFUL_KINDS = frozenset({"seed", "rand", "dropout"})
_STATEFUL_ISA = frozenset({
    "rng", "rand2", "set_rng_seed", "rand_set_state", "rand_get_state", "dropout",
    "activation", "activate2", "exponential", "tensor_scalar_cumulative", "select_reduce",
    "tensor_scalar_reduce",
})  # fmt: skip
_STATE_ATTRS = ("psum_group", "reduce_res", "reduce_cmd", "reduce_op")


def not_hostable(instr: Instr) -> str | None:
    """Why ``instr`` cannot be hosted (None: it can)."""
    what = f"'{instr.api or instr.kind + '.' + instr.op}'"
    if instr.kind in COLLECTIVES:
        return f"{what} waits for other instances (collective)"
    if instr.kind in _ORDERED:
        return f"{what} {_ORDERED[instr.kind]}"
    if executor_of(instr) is None:
        return f"{what} has no executor"
    return None


def uses_engine_state(instr: Instr) -> bool:
    """``instr``'s executor may read or write the instance's engine state."""
    if instr.kind in _STATEFUL_KINDS:
        return True
    if instr.kind == "isa" and instr.op in _STATEFUL_ISA:
        return True
    return any(instr.attr(k) not in (None, False, "idle") for k in _STATE_ATTRS)


class StateUsed(BaseException):
    """A hosted instruction inside a batched loop used engine state the plan did not expect.
    (A BaseException: the executors' error wrapping must let it through.)"""


class _NoState(dict):
    """A state dict that refuses any use (see the module docstring)."""

    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise StateUsed

    __getitem__ = __setitem__ = __contains__ = get = pop = setdefault = _refuse  # type: ignore[assignment]


class _LocalState(_NoState):
    """What a hosted device loop sees in a batched loop: engine state refused, the
    interpreter's table of each tile's reshape / dtype views (not engine state) allowed."""

    _OWN = "aliases"

    def get(self, key: str, default: Any = None) -> Any:
        if key != self._OWN:
            raise StateUsed
        return dict.get(self, key, default)

    def __setitem__(self, key: str, value: Any) -> None:
        if key != self._OWN:
            raise StateUsed
        dict.__setitem__(self, key, value)


class _PositionArrays(dict):
    """The storage one position's executor sees: each tensor's view made on first use."""

    def __init__(self, host: Host, pos: tuple[int, ...]) -> None:
        super().__init__()
        self.host, self.pos = host, pos

    def get(self, name: str, default: Any = None) -> Any:  # (what ``Ctx.array`` calls)
        got = dict.get(self, name)
        if got is None:
            got = self.host.view(name, self.pos)
            if got is None:
                return default
            self[name] = got
        return got

    def __contains__(self, name: object) -> bool:  # (``Ctx.allocate`` asks for shared HBM)
        return self.get(name) is not None


class Host:
    """Runs hosted instructions of one batched launch: per-instance engine state and the
    per-position views of each tile allocation."""

    def __init__(self, ir: KernelIR, cores: dict[tuple[int, ...], int]) -> None:
        self.ir = ir
        self.cores = cores
        self.states: dict[tuple[int, ...], dict[str, Any]] = {}
        # tensor -> (the batched storage, its per-position views)
        self.views: dict[str, tuple[np.ndarray, dict[tuple[int, ...], np.ndarray]]] = {}
        self.ctx: BCtx | None = None

    def view(self, name: str, pos: tuple[int, ...]) -> np.ndarray | None:
        """Position ``pos``'s tile of tensor ``name`` (one object per allocation and
        position); None for a tensor without storage."""
        ctx = self.ctx
        assert ctx is not None
        arr = ctx.arrays.get(name)
        if arr is None:
            if not ctx.has_storage(name):
                return None  # (a tile a hosted device loop allocates: the position's own)
            arr = ctx._storage(name)
        p = ctx.depth.get(name, 0)
        if p == 0:
            return arr
        got = self.views.get(name)
        if got is None or got[0] is not arr:
            got = (arr, {})
            self.views[name] = got
        key = pos[:p]
        v = got[1].get(key)
        if v is None:
            v = got[1][key] = arr[key]
        return v

    def run(self, instr: Instr, ctx: BCtx, stateful: bool) -> None:
        """``instr`` once per position of the batch, in the interpreter's order (instances,
        then iterations, ascending)."""
        for pos, env, inst, state in self._positions(ctx, stateful, _NoState):
            execute_instruction(
                self.ir,
                ctx.config,
                instr,
                _PositionArrays(self, pos),  # type: ignore[arg-type]
                env,
                state,
                inst,
                self.cores.get(inst, 0),
            )

    def run_nodes(self, node: Node, ctx: BCtx, stateful: bool, first_trip: int = 0) -> None:
        """A device loop with its whole body, once per position of the batch with the
        interpreter's walker (registers are tiles: each position reads its own); a while loop
        from trip ``first_trip``. Tiles it allocates live in the position's storage only (the
        plan proves nothing reads them after the loop)."""
        for pos, env, inst, state in self._positions(ctx, stateful, _LocalState):
            execute_nodes(
                self.ir,
                ctx.config,
                (node,),
                _PositionArrays(self, pos),  # type: ignore[arg-type]
                env,
                state,
                inst,
                self.cores.get(inst, 0),
                first_trip,
            )

    def run_trips(
        self, n: RuntimeLoop, ctx: BCtx, stateful: bool, starts: np.ndarray, stops: np.ndarray
    ) -> None:
        """The trips ``range(starts[k], stops[k], n.step)`` of fori_loop ``n`` at each position
        ``k`` of the batch (flat, in order), its body run with the interpreter's walker, as
        ``interpreter._walk_runtime_loop`` runs them (the bounds were read when it started)."""
        positions = self._positions(ctx, stateful, _LocalState)
        for k, (pos, env, inst, state) in enumerate(positions):
            trips = range(int(starts[k]), int(stops[k]), n.step)
            arrays = _PositionArrays(self, pos)
            for v in trips:
                env[n.sym] = v
                execute_nodes(
                    self.ir,
                    ctx.config,
                    n.body,
                    arrays,
                    env,
                    state,
                    inst,
                    self.cores.get(inst, 0),  # type: ignore[arg-type]
                )

    def _positions(
        self, ctx: BCtx, stateful: bool, refusing: type[dict]
    ) -> Iterator[tuple[tuple[int, ...], dict[Sym, int], tuple[int, ...], dict[str, Any]]]:
        """(position, its symbol values, its instance, the state its executors see) for every
        position of the batch: the instance's engine state unless an ``affine_range`` loop is
        batched around (then a ``refusing`` dict, see the module docstring)."""
        self.ctx = ctx
        ngrid = len(self.ir.grid.shape)
        in_loop = len(ctx.dims) > ngrid  # an affine_range loop is batched around it
        syms: list[tuple[Sym, int, int, int]] = [(s, *v) for s, v in ctx.axis.items()]
        base: dict[Sym, int] = dict(ctx.scalar)
        for pos in itertools.product(*(range(n) for n in ctx.dims)):
            env = dict(base)
            for s, ax, start, step in syms:
                env[s] = start + step * pos[ax]
            inst = tuple(env[PidSym(a)] for a in range(ngrid))
            if stateful or not in_loop:
                state = self.states.setdefault(inst, {})
            else:
                state = refusing()
            yield pos, env, inst, state
