"""The memory model of one SPMD instance: tensor storage, reshape / dtype views, tile reads and
writes with bounds checks, masks and operand values.

HBM tensors shared by every instance live for the whole launch; SBUF / PSUM / private-HBM
allocations are fresh (NaN-filled for floats) each time their ``Alloc`` runs, per instance.
An ``Alloc`` first drops the storage of the instance's tiles that are dead there
(``simulator/lifetimes.py``), so host memory follows the live tiles, not a loop's trip count.
Under ``checks="full"`` a boolean shadow per tensor records which elements were written; reads
of unwritten elements go through the instance's :class:`~simulator.poison.Poison` state."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from nki import dtypes
from nki.errors import NKIIndexError, NKIRuntimeError
from nki.ir import (
    Access,
    Const,
    IndexExpr,
    Instr,
    KernelIR,
    LoopSym,
    Mask,
    PidSym,
    Sym,
    TensorDecl,
)
from nki.optable import OPS

from . import numerics
from .config import SimConfig
from .host import alias_array, host_array
from .lifetimes import lifetimes
from .poison import Poison

# ``Ctx.state`` keys holding per-allocation engine state of a tile (key + tile name): dropped
# with the tile's storage
PSUM_GROUP = "psum_group."

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


_COMPARE = {
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
    "==": np.equal,
    "!=": np.not_equal,
}


def eval_mask(mask: Mask, shape: tuple[int, ...], env: dict[Sym, int]) -> np.ndarray:
    """Which elements of a tile of ``shape`` the mask selects."""
    out = np.ones(shape, dtype=bool)
    for c in mask.conds:
        r = _COMPARE[c.op](eval_index(c.expr, env), 0)
        out &= np.broadcast_to(r, shape) if np.ndim(r) else bool(r)
    return out


class Ctx:
    """Execution state of one SPMD instance: its view of memory, symbol values, per-instance
    engine state and uninitialised-value tracking."""

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
        self.poison = Poison()
        self.writers: dict[str, set[int]] = {}  # full checks: tensor -> lines that wrote it
        self.epoch = 0  # meetings of the two LNC=2 cores this instance has passed
        self.same_writes: Any = None  # lnc_writes.SameWrites of a launch that needs it
        self.dynamic: Any = None  # lnc_writes.DynamicAccesses of a launch that needs it
        self.held: set[str] = set()  # tiles this walk allocated that may be dropped when dead

    # ---- storage --------------------------------------------------------------------------
    def decl(self, name: str) -> TensorDecl:
        return self.ir.tensor(name)

    def array(self, name: str) -> np.ndarray:
        """The storage of tensor ``name`` (a view's storage is made on first use)."""
        a = self.arrays.get(name)
        if a is None:
            d = self.decl(name)
            if d.alias_of is None:
                raise NKIRuntimeError(
                    f"tensor '{name}' is used before it is allocated", code="err_internal"
                )
            a = alias_array(self.array(d.alias_of), d, self.config.precise_fp)
            self.arrays[name] = a
            base = self.shadow.get(d.alias_of)
            if base is not None and base.size == a.size:  # a reshaped view shares its shadow
                self.shadow[name] = base.reshape(d.shape)
        return a

    def allocate(self, decl: TensorDecl) -> None:
        if decl.buffer == "shared_hbm" and decl.name in self.arrays:
            return  # shared across instances: allocated once per launch
        if decl.on_chip:
            self._drop_dead(decl.name)
        self.arrays[decl.name] = host_array(decl, self.config)
        if self.full_checks and decl.alias_of is None:
            # (a tile also read as another width is not tracked: a bool per element cannot
            # follow bytes, and a false alarm is worse than a missed one)
            other_width = decl.name in self._aliases()[1]
            self.shadow[decl.name] = np.full(decl.shape, other_width, dtype=bool)
        if decl.on_chip:  # reshaped views of the tile follow its new storage
            for alias in self._aliases()[0].get(decl.name, ()):
                self.arrays.pop(alias, None)
                self.shadow.pop(alias, None)

    def _drop_dead(self, name: str) -> None:
        """Drop the storage of the tiles this walk holds that are dead at ``name``'s Alloc
        (never read again before their own next Alloc): their arrays, views, shadows and
        per-allocation engine state."""
        lt = lifetimes(self.ir)
        x = lt.alloc_at(name)
        if x is None:
            return
        for tile in lt.dead(self.held, x):
            self.held.discard(tile)
            for n in (tile, *lt.views.get(tile, ())):
                self.arrays.pop(n, None)
                self.shadow.pop(n, None)
                self.state.pop(PSUM_GROUP + n, None)
        self.held.add(name)

    def _aliases(self) -> tuple[dict[str, list[str]], set[str]]:
        """Each tile's reshape / dtype views, and the tiles viewed at another width."""
        got = self.state.get("aliases")
        if got is None:
            got = {}
            widths = set()
            for d in self.ir.tensors:
                if d.alias_of is not None and d.on_chip:
                    got.setdefault(d.alias_of, []).append(d.name)
                    if dtypes.itemsize(d.dtype) != dtypes.itemsize(self.decl(d.alias_of).dtype):
                        widths.add(d.alias_of)
            got = self.state["aliases"] = (got, widths)
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

    def basic(self, acc: Access) -> tuple[Any, ...] | None:
        """The bounds-checked basic (slice) subscript of an access into its tensor's array;
        None when the access needs fancy indexing."""
        basic = self._basic(acc)
        if basic is not None:
            self._check_bounds(acc, list(_slice_ends(basic)), None)
        return basic

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
                    f"out-of-bound access for tensor {self.ir.label(acc.tensor)} on dimension "
                    f"{dim}: index "
                    f"range [{lo}, {hi}] exceeds the dimension size of {n}",
                    code="err_tensor_access_out_of_bound",
                )

    def indices(self, acc: Access, sel: np.ndarray | None) -> tuple[np.ndarray, ...]:
        """Bounds-checked index arrays (tile-shaped, one per tensor dim) of the elements an
        access touches; masked-out lanes point at element 0 and are not checked."""
        idx: list[Any] = [eval_index(e, self.env) for e in acc.index]
        for dim, ind in acc.indirect:
            idx[dim] = idx[dim] + self.offsets(ind, acc.shape, sel)
        self._check_bounds(acc, idx, sel)
        full = [np.broadcast_to(np.asarray(v, dtype=np.int64), acc.shape) for v in idx]
        if sel is not None:
            full = [np.where(sel, v, 0) for v in full]  # masked-out lanes touch nothing real
        return tuple(full)

    def offsets(
        self, ind: Access, shape: tuple[int, ...], sel: np.ndarray | None = None
    ) -> np.ndarray:
        """The values of the index tile ``ind`` of an indirect access of ``shape`` as offsets
        over that shape (``sel``: the access's selected lanes; the index rows any of them
        uses are read)."""
        vals = self.read(ind, lanes_of(sel, ind.shape)).astype(np.int64)
        return np.broadcast_to(vals.reshape(offset_shape(vals.shape, len(shape))), shape)

    def read(self, acc: Access, sel: np.ndarray | None = None) -> np.ndarray:
        """The tile an access reads (storage dtype, tile shape). ``sel`` may be the mask of a
        wider tile the operand broadcasts to (a (P, 1) value stored over (P, F))."""
        if sel is not None and sel.shape != tuple(acc.shape):
            sel = lanes_of(sel, acc.shape)
        arr = self.array(acc.tensor)
        if self.dynamic is not None:
            root = self.decl(acc.tensor).alias_of or acc.tensor
            if root in self.dynamic.roots:
                self.dynamic.read(self, root, acc, arr, sel)
        basic = self._basic(acc) if sel is None else None
        if basic is not None:
            self._check_bounds(acc, list(_slice_ends(basic)), None)
            out = arr[basic].reshape(acc.shape)
            if self.full_checks and acc.tensor in self.shadow:
                self._check_init(acc, self.shadow[acc.tensor][basic].reshape(acc.shape), None)
            return out
        idx = (self._rows(acc) if sel is None and acc.indirect else None) or self.indices(acc, sel)
        out = arr[idx]
        if self.full_checks and acc.tensor in self.shadow:
            self._check_init(acc, self.shadow[acc.tensor][idx], sel)
        return out

    def _rows(self, acc: Access) -> tuple[Any, ...] | None:
        """The bounds-checked subscript of a row gather (dimension 0 alone indirect, one index
        per partition, each other dimension walking its own tile axis forwards): one index
        array and slices, several times cheaper than an index array per dimension; None for
        other indirect accesses."""
        if not row_gather(acc):
            return None
        cols: list[slice] = []
        ends: list[np.ndarray] = []
        for d, e in enumerate(acc.index[1:], 1):
            k = e.coeffs[d] if acc.shape[d] > 1 else 1
            c = int(e.base.evaluate(self.env))
            cols.append(slice(c, c + k * (acc.shape[d] - 1) + 1, k))
            ends.append(np.array([c, c + k * (acc.shape[d] - 1)]))
        ind = acc.indirect[0][1]
        base = np.asarray(eval_index(acc.index[0], self.env), dtype=np.int64).reshape(-1)
        rows = base + self.read(ind).astype(np.int64).reshape(-1)
        self._check_bounds(acc, [rows, *ends], None)
        return (rows, *cols)

    def _check_init(self, acc: Access, written: np.ndarray, sel: np.ndarray | None) -> None:
        ok = written if sel is None else (written | ~sel)
        if ok.all() or self.poison.absorb(self.instr, acc, ~ok):
            return
        pos = tuple(int(i) for i in np.argwhere(~ok)[0])
        origin = self.poison.origin.get(acc.tensor)
        how = (
            f"holds a value computed from uninitialised memory at line {origin.line}"
            if origin is not None
            else "was never written before this instruction reads it"
        )
        raise NKIRuntimeError(
            f"read of uninitialised memory: {self.ir.label(acc.tensor)} {self._element(acc, pos)}"
            f" {how}",
            code="err_uninitialized_read",
            related=(("computed from uninitialised memory", origin),) if origin else (),
        )

    def _element(self, acc: Access, pos: tuple[int, ...]) -> str:
        """An element of an access as the kernel's author knows it: its position in the access
        written with the kernel's loop iterators and their values now (``[a, b, i0, i1] with
        a=0, b=1``), then the tensor's coordinates (unless indirect)."""
        syms = sorted({s for e in acc.index for s in e.base.symbols() if isinstance(s, LoopSym)})
        text = str(acc)[len(acc.tensor) :]
        names = [s.name for s in syms]
        for s in syms:  # (a name two of the loops share keeps the internal one)
            if s.name.isidentifier() and names.count(s.name) == 1:
                text = re.sub(rf"\b{s}\b", s.name, text)
        now = ", ".join(
            f"{s.name if names.count(s.name) == 1 else s}={self.env[s]}"
            for s in syms
            if s in self.env
        )
        where = f"element {pos} of the access {text}" + (f" with {now}" if now else "")
        if acc.indirect:
            return where
        coords = [int(np.broadcast_to(eval_index(e, self.env), acc.shape)[pos]) for e in acc.index]
        return f"{where} (the tensor's element {coords})"

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
            old = self.read(acc, sel)
            exact = vals.dtype.kind in "iub" and old.dtype.kind in "iub"
            a = numerics.to_compute(old, exact_int=exact)
            b = numerics.to_compute(np.asarray(vals), exact_int=exact)
            with np.errstate(all="ignore"):
                vals = OPS[accumulate].fn(a, b)
        stored = numerics.cast(vals, decl.dtype, self.config.precise_fp)
        root = decl.alias_of or acc.tensor
        if self.same_writes is not None and root in self.same_writes.roots:
            self.same_writes.check(self, root, acc, arr, np.asarray(stored), sel)
        if self.dynamic is not None and root in self.dynamic.roots:
            self.dynamic.write(self, root, acc, arr, np.asarray(stored), sel)
        if self.full_checks and self.instr is not None and self.instr.loc is not None:
            self.writers.setdefault(decl.alias_of or acc.tensor, set()).add(self.instr.loc.line)
        basic = self._basic(acc) if sel is None else None
        if basic is not None:
            self._check_bounds(acc, list(_slice_ends(basic)), None)
            target_shape = arr[basic].shape
            arr[basic] = np.reshape(stored, target_shape)
            if acc.tensor in self.shadow:
                self.shadow[acc.tensor][basic] = self.poison.written(acc).reshape(target_shape)
            return
        idx = self.indices(acc, sel)
        if sel is None:
            arr[idx] = stored
            if acc.tensor in self.shadow:
                self.shadow[acc.tensor][idx] = self.poison.written(acc)
        else:
            sidx = tuple(i[sel] for i in idx)
            arr[sidx] = np.broadcast_to(stored, acc.shape)[sel]
            if acc.tensor in self.shadow:
                self.shadow[acc.tensor][sidx] = self.poison.written(acc)[sel]

    # ---- operands -------------------------------------------------------------------------
    def mask(self, instr: Instr, shape: tuple[int, ...] | None = None) -> np.ndarray | None:
        """The elements of the instruction's tile (the destination's, unless ``shape``) its
        mask selects; None when unmasked."""
        if instr.mask is None:
            return None
        if shape is None:
            assert instr.dst is not None
            shape = instr.dst.shape
        return eval_mask(instr.mask, shape, self.env)

    def value(self, src: Any, sel: np.ndarray | None = None, exact_int: bool = False) -> Any:
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
        raise NKIRuntimeError(f"unsupported operand {src!r}", code="err_internal")


def offset_shape(shape: tuple[int, ...], rank: int) -> tuple[int, ...]:
    """The shape an index tile's values take against an indirect access of ``rank`` dims: one
    offset per partition, (P, 1), indexes dim 0 of an access of higher rank; one value (a
    register, (1, 1)) is the same offset for every element of an access of any rank."""
    if math.prod(shape) == 1:
        return (1,) * rank
    if len(shape) == 2 and shape[1] == 1 and rank > 2:
        return (shape[0],) + (1,) * (rank - 1)
    return tuple(shape)


def row_gather(acc: Access) -> bool:
    """An indirect access of the row-gather form, which a read takes by one index array and
    slices: dimension 0 alone is indirect, by an index tile of one index per partition
    ((P, 1), or (P, 1, ..., 1) of the access's rank), and each other dimension walks its own
    tile axis forwards."""
    if len(acc.indirect) != 1 or acc.indirect[0][0] != 0:
        return False
    rank, ind = len(acc.shape), acc.indirect[0][1]
    if rank < 2 or len(acc.index) != rank or any(acc.index[0].coeffs[1:]) or ind.indirect:
        return False
    if tuple(ind.shape) not in ((acc.shape[0], 1), (acc.shape[0],) + (1,) * (rank - 1)):
        return False
    for d, e in enumerate(acc.index[1:], 1):
        k = e.coeffs[d] if acc.shape[d] > 1 else 1
        if k < 1 or any(c for t, c in enumerate(e.coeffs) if t != d):
            return False
    return True


def lanes_of(sel: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray | None:
    """The mask ``sel`` of a tile seen by an operand of ``shape`` that broadcasts to it: an
    operand element is used when any lane it broadcasts to is selected (None: unmasked, or an
    operand that does not broadcast axis by axis)."""
    if sel is None or sel.shape == tuple(shape):
        return sel
    if len(shape) != sel.ndim or any(n not in (1, m) for n, m in zip(shape, sel.shape)):
        return None
    axes = tuple(d for d, (n, m) in enumerate(zip(shape, sel.shape)) if n == 1 and m != 1)
    return sel.any(axis=axes, keepdims=True)


def _slice_ends(basic: tuple[Any, ...]) -> Iterable[Any]:
    """Index extremes of a basic subscript, for bounds checks (a slice -> array of ends)."""
    for s in basic:
        if isinstance(s, slice):
            last = s.start + ((s.stop - 1 - s.start) // s.step) * s.step
            yield np.array([s.start, last], dtype=np.int64)
        else:
            yield s
