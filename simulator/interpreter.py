"""The NumPy reference interpreter: walks the kernel IR and defines the semantics.

Memory model: HBM tensors shared by every instance live for the whole launch; SBUF / PSUM /
private-HBM allocations are fresh (NaN-filled for floats) each time their ``Alloc`` runs, per
instance, on the instance's physical core. Instructions are executed by handlers registered per
instruction kind (see ``handlers_*.py``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nki import dtypes
from nki.errors import NKIError, NKIIndexError, NKIMemoryError, NKIRuntimeError
from nki.ir import (
    Access,
    Alloc,
    Const,
    IndexExpr,
    Instr,
    KernelIR,
    Loop,
    Mask,
    Node,
    PidSym,
    Sym,
    TensorDecl,
)

from . import numerics
from .config import SimConfig

Handler = Callable[[Instr, "Ctx"], None]
HANDLERS: dict[str, Handler] = {}


def handler(kind: str) -> Callable[[Handler], Handler]:
    """Register the executor of one instruction kind."""

    def deco(fn: Handler) -> Handler:
        HANDLERS[kind] = fn
        return fn

    return deco


@dataclass
class RunInfo:
    """What a launch did: instance placement on physical cores and the execution order."""

    grid: tuple[int, ...]
    placement: dict[tuple[int, ...], int] = field(default_factory=dict)
    order: list[tuple[int, ...]] = field(default_factory=list)
    num_cores: int = 1
    target: str = ""
    backend: str = "numpy"  # which executor ran the launch: "numpy" or "numba"

    def instances_on(self, core: int) -> list[tuple[int, ...]]:
        return [i for i in self.order if self.placement[i] == core]


_IOTA_CACHE: dict[tuple[tuple[int, ...], int], np.ndarray] = {}


def _iota(shape: tuple[int, ...], d: int) -> np.ndarray:
    key = (shape, d)
    a = _IOTA_CACHE.get(key)
    if a is None:
        sh = [1] * len(shape)
        sh[d] = shape[d]
        a = np.arange(shape[d], dtype=np.int64).reshape(sh)
        if len(_IOTA_CACHE) < 4096:
            _IOTA_CACHE[key] = a
    return a


def eval_index(e: IndexExpr, env: dict[Sym, int]) -> np.ndarray | int:
    """Values of an index expression over its tile shape (broadcastable array, or an int)."""
    v: Any = e.base.evaluate(env)
    for d, c in enumerate(e.coeffs):
        if c:
            v = v + c * _iota(e.shape, d)
    return v


def eval_mask(mask: Mask, shape: tuple[int, ...], env: dict[Sym, int]) -> np.ndarray:
    out = np.ones(shape, dtype=bool)
    for c in mask.conds:
        v = eval_index(c.expr, env)
        if c.op == "<":
            r = v < 0
        elif c.op == "<=":
            r = v <= 0
        elif c.op == ">":
            r = v > 0
        elif c.op == ">=":
            r = v >= 0
        elif c.op == "==":
            r = v == 0
        else:
            r = v != 0
        out &= np.broadcast_to(r, shape) if np.ndim(r) else bool(r)
    return out


class Ctx:
    """Execution state of one SPMD instance."""

    def __init__(
        self,
        ir: KernelIR,
        config: SimConfig,
        shared: dict[str, np.ndarray],
        instance: tuple[int, ...],
        core: int,
        rng: np.random.Generator | None,
        shadow_shared: dict[str, np.ndarray] | None = None,
    ) -> None:
        self.ir = ir
        self.config = config
        self.arrays: dict[str, np.ndarray] = dict(shared)
        self.instance = instance
        self.core = core
        self.rng = rng
        self.env: dict[Sym, int] = {PidSym(a): i for a, i in enumerate(instance)}
        self.full_checks = config.checks == "full"
        # full checks: which elements of on-chip and kernel-created HBM tensors have been
        # written (uninitialised-read detection); shared-HBM maps are shared by all instances
        self.shadow: dict[str, np.ndarray] = dict(shadow_shared or {})
        self.state: dict[str, Any] = {}  # per-instance engine state (rng, accumulators...)
        self.instr: Instr | None = None
        self.collective_loops: frozenset[int] = frozenset()  # (shuffle mode keeps their order)
        # On-chip instructions may compute on uninitialised lanes (e.g. the masked-off rows of
        # a ragged tile): like valgrind's memcheck, their results are marked uninitialised
        # ("poisoned", per element / row / matmul row or column, see _poison_rule) instead of
        # reported, and the report comes when such data reaches HBM or an instruction without
        # a propagation rule.
        self.propagate = ""  # the current instruction's poison rule (see _poison_rule)
        self.poison: np.ndarray | None = None
        self.poison_root: Any = None  # where the current instruction's poison came from
        self.poison_origin: dict[str, Any] = {}  # tensor -> SrcLoc where its poison came from

    # ---- memory ---------------------------------------------------------------------------
    def decl(self, name: str) -> TensorDecl:
        return self.ir.tensor(name)

    def array(self, name: str) -> np.ndarray:
        a = self.arrays.get(name)
        if a is None:
            d = self.decl(name)
            if d.alias_of is None:
                raise NKIRuntimeError(f"tensor '{name}' is used before it is allocated")
            a = alias_array(self.array(d.alias_of), d, self.config.precise_fp)
            self.arrays[name] = a
            if d.alias_of in self.shadow and d.on_chip:  # a reshaped tile shares its shadow
                self.shadow[name] = self.shadow[d.alias_of].reshape(d.shape)
        return a

    def allocate(self, decl: TensorDecl) -> None:
        if decl.buffer == "shared_hbm" and decl.name in self.arrays:
            return  # shared across instances: allocated once per launch
        self.arrays[decl.name] = host_array(decl, self.config)
        if self.full_checks and decl.alias_of is None:
            self.shadow[decl.name] = np.zeros(decl.shape, dtype=bool)
        if decl.on_chip:  # reshaped views of the tile follow its new storage
            for alias in self._aliases().get(decl.name, ()):
                self.arrays.pop(alias, None)
                self.shadow.pop(alias, None)

    def _aliases(self) -> dict[str, list[str]]:
        got = self.state.get("aliases")
        if got is None:
            got = {}
            for d in self.ir.tensors:
                if d.alias_of is not None and d.on_chip:
                    got.setdefault(d.alias_of, []).append(d.name)
            self.state["aliases"] = got
        return got

    # ---- accesses -------------------------------------------------------------------------
    def _basic(self, acc: Access) -> tuple[Any, ...] | None:
        """Basic (slice) indexing for the common case: each tile axis walks one tensor dim in
        order with a positive stride. None when fancy indexing is needed."""
        if acc.indirect:
            return None
        out: list[Any] = []
        last = -1
        used = [False] * len(acc.shape)
        for e in acc.index:
            nz = [(d, c) for d, c in enumerate(e.coeffs) if c]
            b = e.base.evaluate(self.env)
            if not nz:
                out.append(b)
                continue
            if len(nz) != 1:
                return None
            d, c = nz[0]
            if c <= 0 or d <= last:
                return None
            last = d
            used[d] = True
            out.append(slice(b, b + c * (acc.shape[d] - 1) + 1, c))
        if any(n > 1 and not u for n, u in zip(acc.shape, used)):
            return None
        return tuple(out)

    def _check_bounds(self, acc: Access, idx: list[Any], sel: np.ndarray | None) -> None:
        if sel is not None and not sel.any():
            return  # fully masked off: nothing is read or written
        shape = self.array(acc.tensor).shape
        for dim, (v, n) in enumerate(zip(idx, shape)):
            if isinstance(v, (int, np.integer)):
                lo = hi = int(v)
            else:
                vv = np.asarray(v)
                if sel is not None:
                    vv = np.broadcast_to(vv, acc.shape)[sel]
                if vv.size == 0:
                    continue
                lo, hi = int(vv.min()), int(vv.max())
            if lo < 0 or hi >= n:
                raise NKIIndexError(
                    f"out-of-bound access for tensor '{acc.tensor}' on dimension {dim}: index "
                    f"range [{lo}, {hi}] exceeds the dimension size of {n}",
                    code="err_tensor_access_out_of_bound",
                )

    def _fancy(self, acc: Access, sel: np.ndarray | None) -> tuple[np.ndarray, ...]:
        idx: list[Any] = [eval_index(e, self.env) for e in acc.index]
        for dim, ind in acc.indirect:
            isel = sel if sel is not None and ind.shape == sel.shape else None  # (P,1) index tiles
            vals = self.read(ind, isel).astype(np.int64)
            idx[dim] = idx[dim] + np.broadcast_to(vals, acc.shape)
        self._check_bounds(acc, idx, sel)
        full = [np.broadcast_to(np.asarray(v, dtype=np.int64), acc.shape) for v in idx]
        if sel is not None:
            full = [np.where(sel, v, 0) for v in full]  # masked-out lanes touch nothing real
        return tuple(full)

    def read(self, acc: Access, sel: np.ndarray | None = None) -> np.ndarray:
        """The tile an access reads (storage dtype, tile shape)."""
        arr = self.array(acc.tensor)
        basic = self._basic(acc) if sel is None else None
        if basic is not None:
            self._check_bounds(acc, list(_slice_ends(basic)), None)
            out = arr[basic].reshape(acc.shape)
            if self.full_checks and acc.tensor in self.shadow:
                self._check_init(acc, self.shadow[acc.tensor][basic].reshape(acc.shape), None)
            return out
        idx = self._fancy(acc, sel)
        out = arr[idx]
        if self.full_checks and acc.tensor in self.shadow:
            self._check_init(acc, self.shadow[acc.tensor][idx], sel)
        return out

    def _check_init(self, acc: Access, written: np.ndarray, sel: np.ndarray | None) -> None:
        ok = written if sel is None else (written | ~sel)
        if ok.all():
            return
        bad = self._propagated(acc, ~ok) if self.propagate else None
        if bad is not None:
            self.poison = bad if self.poison is None else (self.poison | bad)
            if self.poison_root is None:
                self.poison_root = self.poison_origin.get(acc.tensor) or self.instr.loc
            return
        pos = tuple(int(i) for i in np.argwhere(~ok)[0])
        origin = self.poison_origin.get(acc.tensor)
        how = (
            f"holds a value computed from uninitialised memory at line {origin.line}"
            if origin is not None
            else "was never written before this instruction reads it"
        )
        raise NKIRuntimeError(
            f"read of uninitialised memory: '{acc.tensor}' element {pos} of the tile {acc} {how}",
            code="err_uninitialized_read",
            related=(("computed from uninitialised memory", origin),) if origin else (),
        )

    def write(
        self,
        acc: Access,
        values: np.ndarray | float | int,
        sel: np.ndarray | None = None,
        accumulate: str | None = None,
    ) -> None:
        """Store computed values (any numeric dtype) with rounding to the tensor's dtype."""
        decl = self.decl(acc.tensor)
        arr = self.array(acc.tensor)
        vals = np.broadcast_to(np.asarray(values), acc.shape)
        if accumulate is not None:
            from nki.optable import OPS

            old = self.read(acc, sel)
            exact = vals.dtype.kind in "iub" and old.dtype.kind in "iub"
            a = numerics.to_compute(old, exact_int=exact)
            b = numerics.to_compute(np.asarray(vals), exact_int=exact)
            with np.errstate(all="ignore"):
                vals = OPS[accumulate].fn(a, b)
        stored = numerics.cast(vals, decl.dtype, self.config.precise_fp)
        basic = self._basic(acc) if sel is None else None
        if basic is not None:
            self._check_bounds(acc, list(_slice_ends(basic)), None)
            target_shape = arr[basic].shape
            arr[basic] = np.reshape(stored, target_shape)
            if acc.tensor in self.shadow:
                self.shadow[acc.tensor][basic] = self._written(acc).reshape(target_shape)
            return
        idx = self._fancy(acc, sel)
        if sel is None:
            arr[idx] = stored
            if acc.tensor in self.shadow:
                self.shadow[acc.tensor][idx] = self._written(acc)
        else:
            sidx = tuple(i[sel] for i in idx)
            arr[sidx] = np.broadcast_to(stored, acc.shape)[sel]
            if acc.tensor in self.shadow:
                self.shadow[acc.tensor][sidx] = self._written(acc)[sel]

    def _written(self, acc: Access) -> np.ndarray:
        """Shadow values for a write: initialised except where the sources were poisoned."""
        if self.poison is None or self.poison.shape != acc.shape:
            return np.ones(acc.shape, dtype=bool)
        if self.poison.any() and self.poison_root is not None:
            self.poison_origin.setdefault(acc.tensor, self.poison_root)
        return ~self.poison

    def _propagated(self, acc: Access, bad: np.ndarray) -> np.ndarray | None:
        """The destination elements that a read with uninitialised elements ``bad`` poisons
        under the current instruction's rule, or None when the read must be reported."""
        instr, rule = self.instr, self.propagate
        if instr is None or instr.dst is None:
            return None
        shape = tuple(instr.dst.shape)
        if acc == instr.dst or rule == "element":  # (an accumulating read of the destination)
            try:
                return np.broadcast_to(bad, shape)
            except ValueError:
                return None
        if rule == "row":  # per partition: output row p depends on input row p only
            if bad.ndim == 0 or not shape:
                return None
            rows = bad.reshape(bad.shape[0], -1).any(axis=1)
            if bad.shape[0] != shape[0]:
                if bad.shape[0] != 1:
                    return None
                rows = np.full(shape[0], rows[0])
            return np.broadcast_to(rows.reshape((-1,) + (1,) * (len(shape) - 1)), shape)
        if rule == "transpose" and bad.ndim == 2 and bad.T.shape == shape:
            return bad.T
        if rule == "matmul" and len(shape) == 2 and bad.ndim == 2:
            # out[m, n] = sum_k x[k, m] * y[k, n]: a bad element of the contraction (partition)
            # axis of an operand column poisons that output row (stationary) or column (moving)
            which = next((i for i, s in enumerate(instr.srcs) if s is acc), None)
            if which is None:
                which = next((i for i, s in enumerate(instr.srcs) if s == acc), None)
            transposed = instr.kind == "isa" or instr.attr("transpose_x", False)
            if which == 0:
                rows = bad.any(axis=0) if transposed else bad.any(axis=1)
                if rows.shape == (shape[0],):
                    return np.broadcast_to(rows[:, None], shape)
            elif which == 1:
                cols = bad.any(axis=0)
                if cols.shape == (shape[1],):
                    return np.broadcast_to(cols[None, :], shape)
        return None

    def mask(self, instr: Instr, shape: tuple[int, ...] | None = None) -> np.ndarray | None:
        if instr.mask is None:
            return None
        shape = shape if shape is not None else instr.dst.shape  # type: ignore[union-attr]
        return eval_mask(instr.mask, shape, self.env)

    def value(self, src: Any, sel: np.ndarray | None = None, exact_int: bool = False):
        """An operand as compute values: fp32 (or int64 when exact_int and integral)."""
        if isinstance(src, Access):
            return numerics.to_compute(self.read(src, sel), exact_int=exact_int)
        if isinstance(src, Const):
            v = src.value
            if exact_int and isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                return np.int64(v)
            if isinstance(v, np.generic) and v.dtype.kind in "iu" and exact_int:
                return np.int64(v)
            return np.float32(v)
        if isinstance(src, IndexExpr):
            return np.asarray(eval_index(src, self.env), dtype=np.int64)
        raise NKIRuntimeError(f"unsupported operand {src!r}")


def _slice_ends(basic: tuple[Any, ...]) -> Iterable[Any]:
    """Index extremes of a basic subscript, for bounds checks (a slice -> array of ends)."""
    for s in basic:
        if isinstance(s, slice):
            last = s.start + ((s.stop - 1 - s.start) // s.step) * s.step
            yield np.array([s.start, last], dtype=np.int64)
        else:
            yield s


# --------------------------------------------------------------------------------------------
# Walking the IR
# --------------------------------------------------------------------------------------------


def _exec(nodes: tuple[Node, ...], ctx: Ctx) -> Iterator[Instr]:
    """Run ``nodes`` for one instance. A generator: it stops at each collective instruction
    (``nl.all_reduce``) after reading its input, until ``_run_instances`` has combined the
    inputs of every instance of the group, then writes the result and goes on."""
    for n in nodes:
        if isinstance(n, Instr):
            _exec_instr(n, ctx)
            if n.kind in COLLECTIVES:
                yield n
                _exec_instr(n, ctx)
        elif isinstance(n, Loop):
            it: Iterable[int] = range(n.start, n.stop, n.step)
            if ctx.rng is not None and n.kind == "affine" and id(n) not in ctx.collective_loops:
                # (iterations holding a collective keep their order: instances meet there)
                it = [int(v) for v in ctx.rng.permutation(np.array(list(it), dtype=np.int64))]
            for v in it:
                ctx.env[n.sym] = v
                yield from _exec(n.body, ctx)
            ctx.env.pop(n.sym, None)
        elif isinstance(n, Alloc):
            ctx.allocate(ctx.decl(n.tensor))


def _exec_instr(instr: Instr, ctx: Ctx) -> None:
    fn = HANDLERS.get(instr.kind)
    ctx.instr = instr
    if ctx.full_checks:
        ctx.poison = ctx.poison_root = None
        ctx.propagate = _poison_rule(instr, ctx)
    try:
        if fn is None:
            raise NKIRuntimeError(f"no executor for instruction kind '{instr.kind}'")
        with np.errstate(all="ignore"):
            fn(instr, ctx)
    except NKIError as e:
        raise e.with_context(loc=instr.loc, instance=ctx.instance, core=ctx.core) from None
    except Exception as e:  # never let NumPy / internal errors escape without a location
        raise NKIRuntimeError(
            f"error while executing '{instr.api or instr.kind + '.' + instr.op}': "
            f"{type(e).__name__}: {e}",
            code="err_runtime",
            loc=instr.loc,
            instance=ctx.instance,
            core=ctx.core,
        ) from e


# How uninitialised ("poisoned") input elements reach the result, per instruction, for
# instructions whose operands and result are on chip (writes to HBM report instead):
# "element": the same position (broadcast); "row": the whole result row of the partition;
# "matmul": the output rows / columns of the operand columns; "transpose": the mirror element.
_ELEMENT_KINDS = ("ew", "copy", "dma", "select", "dropout")
_ROW_KINDS = ("reduce", "softmax", "rms_norm")
_ISA_ELEMENT = ("tensor_tensor", "tensor_scalar", "scalar_tensor_tensor", "activation",
                "tensor_copy", "tensor_copy_predicated", "reciprocal", "affine_select",
                "dropout")  # fmt: skip
_ISA_ROW = ("activation_reduce", "tensor_scalar_reduce", "tensor_reduce", "tensor_tensor_scan",
            "select_reduce", "bn_stats", "bn_aggr", "max8", "nc_find_index8",
            "nc_match_replace8", "range_select")  # fmt: skip


def _poison_rule(instr: Instr, ctx: Ctx) -> str:
    if not _on_chip_dst(instr, ctx):
        return ""
    k, op = instr.kind, instr.op
    if k in _ELEMENT_KINDS or (k == "isa" and op in _ISA_ELEMENT):
        return "element"
    if k in _ROW_KINDS or (k == "isa" and op in _ISA_ROW):
        return "row"
    if k == "matmul" or (k == "isa" and op == "nc_matmul" and not instr.attr("transpose")):
        return "matmul"
    if k == "transpose" or (k == "isa" and op == "nc_transpose"):
        return "transpose"
    return ""


def _on_chip_dst(instr: Instr, ctx: Ctx) -> bool:
    dst = instr.dst
    if not isinstance(dst, Access) or not ctx.decl(dst.tensor).on_chip:
        return False
    return all(not isinstance(s, Access) or ctx.decl(s.tensor).on_chip for s in instr.srcs)


def host_array(decl: TensorDecl, config: SimConfig) -> np.ndarray:
    """Fresh storage for a tensor, filled with the uninitialised-memory sentinel. Running out
    of host memory is reported at the tensor's declaration, not as a bare MemoryError."""
    sd = numerics.storage_dtype(decl.dtype, config.precise_fp)
    nbytes = sd.itemsize * math.prod(decl.shape)
    err = None
    if nbytes > (256 << 20) and nbytes > _host_available_bytes():
        err = "more than the host's available memory"  # filling it would invoke the OOM killer
    else:
        try:
            return np.full(decl.shape, numerics.fill_value(decl.dtype), dtype=sd)
        except MemoryError:
            err = "MemoryError"
    raise NKIMemoryError(
        f"the simulator cannot allocate {nbytes} bytes of host memory for {decl.buffer} "
        f"tensor '{decl.name}' {decl.dtype}{list(decl.shape)} ({err})",
        code="err_host_memory_exhausted",
        loc=decl.loc,
    )


def _host_available_bytes() -> int:
    """MemAvailable from /proc/meminfo (Linux); elsewhere, no limit is assumed."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


def run(
    ir: KernelIR, inputs: dict[str, np.ndarray], config: SimConfig
) -> tuple[dict[str, np.ndarray], RunInfo]:
    """Execute a traced kernel over its grid. ``inputs`` maps parameter names to arrays in
    storage dtype (they are updated in place where the kernel writes them)."""
    _ensure_handlers()
    from .capacity import check_host_memory

    check_host_memory(ir, config.precise_fp)  # cumulative, before allocating anything
    shared: dict[str, np.ndarray] = dict(inputs)
    for d in ir.tensors:
        if d.buffer == "shared_hbm" and d.kind in ("output", "local") and d.alias_of is None:
            shared[d.name] = host_array(d, config)
    shadow_shared = {
        n: np.zeros(a.shape, dtype=bool)
        for n, a in shared.items()
        if config.checks == "full" and n not in inputs
    }
    grid = ir.grid
    instances = list(grid.instances()) if grid.dims else [()]
    info = RunInfo(grid.shape, num_cores=max(1, grid.num_cores), target=ir.target)
    rng = np.random.default_rng(config.shuffle_seed) if config.shuffle_seed is not None else None
    if rng is not None:
        instances = [instances[i] for i in rng.permutation(len(instances))]
    # instances run core by core; each core runs its share serially
    by_core: dict[int, list[tuple[int, ...]]] = {}
    for inst in instances:
        core = grid.core_of(inst) if grid.dims else 0
        info.placement[inst] = core
        by_core.setdefault(core, []).append(inst)
    if config.backend != "numpy":  # compiled loop nests when they apply (numba_backend.py)
        from .numba_backend import maybe_run

        order = [inst for core in sorted(by_core) for inst in by_core[core]]
        if maybe_run(ir, shared, config, order):
            info.order, info.backend = order, "numba"
            return shared, info
    order = [(inst, core) for core in sorted(by_core) for inst in by_core[core]]

    collective_loops = _collective_loops(ir) if rng is not None else frozenset()

    def make_ctx(inst: tuple[int, ...], core: int) -> Ctx:
        ctx = Ctx(ir, config, shared, inst, core, rng, shadow_shared)
        ctx.collective_loops = collective_loops
        return ctx

    _run_instances(ir, order, make_ctx, info)
    return shared, info


COLLECTIVES = ("all_reduce",)


def _collective_loops(ir: KernelIR) -> frozenset[int]:
    """ids of the loops that hold a collective (their iterations keep their order)."""
    return frozenset(
        id(lp)
        for n, loops in ir.walk()
        if isinstance(n, Instr) and n.kind in COLLECTIVES
        for lp in loops
    )


def _run_instances(
    ir: KernelIR,
    order: list[tuple[tuple[int, ...], int]],
    make_ctx: Callable[[tuple[int, ...], int], Ctx],
    info: RunInfo,
) -> None:
    """Run the instances in ``order``: each until it ends or reaches a collective, then the
    collectives of every group, then on again. Without collectives each instance runs to the
    end before the next starts."""
    running: dict[tuple[int, ...], Iterator[Instr]] = {}
    ctxs: dict[tuple[int, ...], Ctx] = {}
    for inst, core in order:
        ctxs[inst] = make_ctx(inst, core)
        running[inst] = _exec(ir.body, ctxs[inst])
        info.order.append(inst)
    while running:
        waiting: dict[tuple[int, ...], Instr] = {}
        for inst in list(running):
            at = next(running[inst], None)
            if at is None:
                del running[inst]
            else:
                waiting[inst] = at
        if waiting:
            from .collectives import combine

            combine(waiting, ctxs, ir.grid.shape)


_LOADED = False


def _ensure_handlers() -> None:
    global _LOADED
    if not _LOADED:
        from . import collectives, handlers_core  # noqa: F401

        try:
            from . import handlers_lang  # noqa: F401
        except ImportError as e:  # pragma: no cover - optional during development
            if "handlers_lang" not in str(e):
                raise
        try:
            from . import handlers_isa  # noqa: F401
        except ImportError as e:  # pragma: no cover
            if "handlers_isa" not in str(e):
                raise
        _LOADED = True


def storage_input(arr: np.ndarray, dtype_name: str, config: SimConfig) -> np.ndarray:
    """Copy a user's array into simulator storage for an HBM parameter."""
    sd = numerics.storage_dtype(dtype_name, config.precise_fp)
    return np.array(arr, dtype=sd, copy=True, order="C")


def alias_array(base: np.ndarray, decl: TensorDecl, precise_fp: bool) -> np.ndarray:
    """The storage of an alias tensor (``t.reshape(shape)`` / ``t.view(dtype)``): the same
    memory as ``base`` in the alias's shape and type."""
    sd = numerics.storage_dtype(decl.dtype, precise_fp)
    if base.dtype != sd:  # tensor.view(dtype): the same bytes as another type
        base = base.reshape(-1).view(sd)
    return base.reshape(decl.shape)


def output_view(
    arrays: dict[str, np.ndarray], ir: KernelIR, name: str, precise_fp: bool
) -> np.ndarray:
    """A returned tensor's storage; a returned reshape / dtype view of a tensor keeps its own
    shape and type."""
    d = ir.tensor(name)
    if d.alias_of is None:
        return arrays[name]
    return alias_array(arrays[d.alias_of], d, precise_fp)


def output_array(a: np.ndarray, dtype_name: str) -> np.ndarray:
    """A kernel output as the user sees it: its declared dtype (undoing fast-fp storage)."""
    want = dtypes.storage(dtype_name)
    return np.array(a, dtype=want, copy=True) if a.dtype != want else a.copy()
