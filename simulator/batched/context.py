"""The state of one batch of the batched backend: its axes, its symbols' values per position, and
tile storage with leading batch axes; accesses as strided views or index arrays over the batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nki.errors import NKIIndexError, NKIRuntimeError
from nki.ir import Access, Const, IndexExpr, Instr, KernelIR, Sym, TensorDecl, tensor_label
from nki.optable import OPS

from .. import numerics
from ..config import SimConfig
from ..host import alias_array, within
from ..lifetimes import Lifetimes, lifetimes
from ..memory import PSUM_GROUP, offset_shape
from . import masks
from .keys import ACCESS_FACTS, StateOf, access_facts, sym_key, terms_of

# accumulating writes done in place on fp32 storage (fp32 in, fp32 out: no rounding step)
_INTO = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
         "maximum": np.maximum, "minimum": np.minimum}  # fmt: skip


def contiguous(a: np.ndarray) -> np.ndarray:
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def takes_over(pend: tuple[tuple[int, ...], np.dtype], vals: object) -> bool:
    """Whether ``vals`` can become the storage of a pending tile (``pend``: its shape and
    storage dtype) as it is: a C-ordered array of its own memory, that shape and dtype."""
    return (
        type(vals) is np.ndarray
        and vals.shape == pend[0]
        and vals.dtype == pend[1]
        and vals.flags.c_contiguous
        and vals.flags.owndata
    )


# The layouts of strided views: (id(access), id(box) (None: the whole view), batch depth of its
# storage, batch axes' sizes, the values / axes of the access's symbols, the storage's shape and
# strides) -> (the access, the box, shape, strides, offset, first position, slicing index).
# Bounded; the access and box are kept so that their ids are not reused while the entry lives;
# only the boxes of kept selections are keyed (a one-off box would churn the table). Shared by
# the launching threads (an entry is complete when stored; a lost insert is recomputed).
_LAYOUTS: dict[tuple, tuple] = {}
_LAYOUTS_MAX = 4096

# What every batch of a kernel under a storage setting looks up: tensor -> its storage dtype
# (filled as the launches ask), the tensors' declarations by name, the tiles' lifetimes.
KernelFacts = tuple[dict[str, np.dtype], Callable[[str], TensorDecl], Lifetimes]
# (id(ir), precise_fp) -> (ir, its facts): bounded, the IR kept so that its id is not reused
_KERNELS: dict[tuple[int, bool], tuple[KernelIR, KernelFacts]] = {}


def _kernel_facts(ir: KernelIR, precise_fp: bool) -> KernelFacts:
    hit = _KERNELS.get((id(ir), precise_fp))
    if hit is None or hit[0] is not ir:
        if len(_KERNELS) >= 512:
            _KERNELS.clear()
        facts = ({}, ir.by_name().__getitem__, lifetimes(ir))
        hit = _KERNELS[(id(ir), precise_fp)] = (ir, facts)
    return hit[1]


class BCtx:
    """The state of one batch: its axes' sizes, each batch symbol's axis and values (start +
    step * position), scalar symbols, and tile storage with leading batch axes."""

    def __init__(self, ir: KernelIR, config: SimConfig, shared: dict[str, np.ndarray]) -> None:
        self.ir = ir
        self.config = config
        self.dims: list[int] = []
        # each bound symbol's value under its ``sym_key``: an int for the whole batch, or
        # (axis, start, step) for a batch axis; what the walk's lookups read
        self.values: dict[tuple, int | tuple[int, int, int]] = {}
        self.syms: dict[tuple, Sym] = {}  # sym_key -> the symbol (``axis`` and ``scalar``)
        self.arrays: dict[str, np.ndarray] = dict(shared)
        self.depth: dict[str, int] = dict.fromkeys(shared, 0)  # batch axes of each storage
        self.instr: Instr | None = None
        self.whole = False  # the running instruction fills a fresh tile entirely
        self.fused: frozenset[str] = frozenset()  # tiles that are views of their store's HBM
        # fresh tiles without storage yet (shape, dtype): the instruction that fills them
        # either hands over its result array or gets empty storage to write into
        self.pending: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        self.host: Any = None  # the Host (host.py) that runs the hosted instructions
        # reshape / dtype views: name -> (the base storage it was made from, the view)
        self.aliases: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.device_loops = [0, 0]  # device loop runs: (batched, per position)
        # the box of the running instruction's selection when ``masks`` keeps none (masks.box)
        self.boxes: dict[int, tuple[np.ndarray, tuple[slice, ...] | None]] = {}
        stored, decl, lts = _kernel_facts(ir, config.precise_fp)
        self._stored = stored  # tensor -> its storage dtype
        # PSUM accumulation groups: tile -> [its storage, which of its elements have started,
        # whether all have]
        self.psum_groups: dict[str, list] = {}
        # (a bound lookup: called several times per instruction)
        self.decl: Callable[[str], TensorDecl] = decl
        self._lifetimes = lts
        self._last_alloc: int | None = None  # the position of the last Alloc run

    def set_scalar(self, sym: Sym, value: int | None) -> None:
        """Bind ``sym`` to ``value`` for the whole batch (None: unbind it)."""
        key = sym_key(sym)
        if value is None:
            self.values.pop(key, None)
        else:
            self.values[key] = value
            self.syms[key] = sym

    def set_axis(self, sym: Sym, where: tuple[int, int, int] | None) -> None:
        """Make ``sym`` batch axis ``where`` = (axis, start, step) (None: no longer)."""
        key = sym_key(sym)
        if where is None:
            del self.values[key]
        else:
            self.values[key] = where
            self.syms[key] = sym

    @property
    def axis(self) -> dict[Sym, tuple[int, int, int]]:
        """The batch symbols: sym -> (axis, start, step)."""
        syms = self.syms
        return {syms[k]: v for k, v in self.values.items() if type(v) is tuple}

    @property
    def scalar(self) -> dict[Sym, int]:
        """The symbols bound for the whole batch: sym -> value."""
        syms = self.syms
        return {syms[k]: v for k, v in self.values.items() if type(v) is not tuple}

    # affine index -> (constant, per-batch-axis coefficient)
    def affine(self, base: Any) -> tuple[int, list[int]]:
        c = base.const
        coef = [0] * len(self.dims)
        values = self.values
        for key, k in terms_of(base):
            v = values[key]
            if type(v) is tuple:  # a batch axis
                ax, start, step = v
                c += k * start
                coef[ax] += k * step
            else:
                c += k * v
        return c, coef

    def view(self, acc: Access, box: tuple[slice, ...] | None = None) -> np.ndarray:
        """The access over the whole batch as a strided view: shape dims + tile shape (with
        ``box``, one slice per batch and tile axis: only that box of it, which must be in
        bounds)."""
        name = acc.tensor
        arr = self.arrays.get(name)
        if arr is None:
            arr = self._storage(name)
        p = self.depth[name]
        facts = ACCESS_FACTS.get(id(acc))
        if facts is None or facts[0] is not acc:
            facts = access_facts(acc)
        if (
            box is None
            and facts[1]
            and p == len(self.dims)
            and arr.shape == (*self.dims, *acc.shape)
        ):  # (the storage itself: a view of it, not the storage, which a write may hand over)
            return arr[...]
        return self._strided(arr, acc, box, p, facts[2])

    def strided(
        self, arr: np.ndarray, acc: Access, box: tuple[slice, ...] | None = None
    ) -> np.ndarray:
        """``view`` of ``acc`` (and ``box``) into ``arr``, an array shaped like the access's
        storage."""
        return self._strided(arr, acc, box, self.depth[acc.tensor], access_facts(acc)[2])

    def _strided(
        self,
        arr: np.ndarray,
        acc: Access,
        box: tuple[slice, ...] | None,
        p: int,
        state_of: StateOf,
    ) -> np.ndarray:
        """``strided`` (``p``: the batch depth of the access's storage; ``state_of``: the
        values of the access's symbols in ``BCtx.values``, ``access_facts``)."""
        # (the layout depends on no data: kept per access, box and batch state)
        state = None if state_of is None else state_of(self.values)
        key = (id(acc), id(box), p, tuple(self.dims), state, arr.shape, arr.strides)
        hit = _LAYOUTS.get(key)
        if hit is None or hit[0] is not acc or hit[1] is not box:
            layout = self._layout(arr.strides, acc, box, p)
            index = self._slicing(arr.shape, acc, p) if box is None else None
            hit = (acc, box, *layout, index)  # (box kept: its id is not reused meanwhile)
            if box is None or masks.kept_box(box):  # (not a one-off box)
                if len(_LAYOUTS) >= _LAYOUTS_MAX:
                    _LAYOUTS.clear()
                _LAYOUTS[key] = hit
        _, _, shape, strides, offset, first, index = hit
        if index is not None:  # (plain slicing: several times cheaper than a buffer view)
            return arr[index]
        if offset >= 0 and arr.flags.c_contiguous:
            try:  # (a view straight on the contiguous storage: several times cheaper)
                return np.ndarray(shape, arr.dtype, buffer=arr, offset=offset, strides=strides)
            except (ValueError, TypeError):  # (outside the buffer, or not a buffer)
                pass
        start = arr[first]
        custom = start.dtype.isbuiltin != 1  # (ml_dtypes types: stride through their bits)
        start = start.view(np.dtype(f"u{start.itemsize}")) if custom else start
        out = np.lib.stride_tricks.as_strided(start, shape=shape, strides=strides, writeable=True)
        if not within(out, arr):  # (as_strided checks nothing: never touch memory past it)
            raise NKIRuntimeError(f"a view of '{acc.tensor}' past its storage", code="err_internal")
        return out.view(arr.dtype) if custom else out

    def _layout(
        self, st: tuple[int, ...], acc: Access, box: tuple[slice, ...] | None, p: int
    ) -> tuple[tuple[int, ...], tuple[int, ...], int, tuple[slice, ...]]:
        """(shape, strides, byte offset of the first position, index of the first position) of
        ``strided``'s view into storage of strides ``st`` (an offset < 0: below the storage's
        start somewhere, so not a view straight on its buffer)."""
        nb = len(self.dims)
        lo = [0] * (nb + len(acc.shape)) if box is None else [b.start for b in box]
        shape = (*self.dims, *acc.shape) if box is None else tuple(b.stop - b.start for b in box)
        bstr = [st[b] if b < p else 0 for b in range(nb)]
        tstr = [0] * len(acc.shape)
        first: list[slice] = [slice(lo[b], None) for b in range(p)]
        offset = sum(lo[b] * st[b] for b in range(p))  # bytes to the first position
        for d, e in enumerate(acc.index):
            c, coef = self.affine(e.base)
            sd = st[p + d]
            for b, k in enumerate(coef):
                bstr[b] += k * sd
                c += k * lo[b]
            for t, k in enumerate(e.coeffs):
                tstr[t] += k * sd
                c += k * lo[nb + t]
            first.append(slice(c, None))  # (c is the element at the first position)
            offset += c * sd if c >= 0 else -(1 << 62)
        return shape, (*bstr, *tstr), offset, tuple(first)

    def _slicing(
        self, arr_shape: tuple[int, ...], acc: Access, p: int
    ) -> tuple[slice | None, ...] | None:
        """An index that gives ``strided``'s whole view of ``acc`` by plain slicing into storage
        of shape ``arr_shape``, when there is one: each tile axis walks its own tensor axis
        forwards, in bounds; the storage's batch axes are walked whole and the other batch
        axes have one position (None otherwise)."""
        nb, dims = len(self.dims), self.dims
        if len(acc.shape) != len(acc.index) or len(arr_shape) != p + len(acc.index):
            return None
        if tuple(arr_shape[:p]) != tuple(dims[:p]):
            return None
        if any(n != 1 for n in dims[p:]):
            return None
        out: list[slice | None] = [slice(None)] * p + [None] * (nb - p)
        for d, e in enumerate(acc.index):
            c, coef = self.affine(e.base)
            if any(coef[:p]) or any(k for t, k in enumerate(e.coeffs) if t != d):
                return None
            n, k = acc.shape[d], e.coeffs[d] if acc.shape[d] > 1 else 1
            if k < 1 or c < 0 or c + k * (n - 1) >= arr_shape[p + d]:
                return None
            out.append(slice(c, c + k * (n - 1) + 1, k))
        return tuple(out)

    def box(self, acc: Access, sel: np.ndarray) -> tuple[slice, ...] | None:
        """``masks.box``: the selection as one box the access takes in bounds, or None."""
        return masks.box(self, acc, sel)

    def indices(self, acc: Access, sel: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """Index arrays (batch + tile shape, broadcastable) into the access's storage, an
        indirect dimension's with its index tile's values added (``memory.Ctx.indices``); with
        ``sel`` (batch + tile shape), masked-out lanes point at element 0. Selected lanes are
        bounds-checked."""
        p, rank = self.depth[acc.tensor], len(acc.shape)
        full_shape = (*self.dims, *acc.shape)
        out: list[np.ndarray] = []
        for b in range(p):  # (the storage's own batch axes: each position its own)
            sh = [1] * len(full_shape)
            sh[b] = self.dims[b]
            out.append(np.arange(self.dims[b]).reshape(sh))
        offsets = dict(acc.indirect)
        for d, e in enumerate(acc.index):
            v = np.asarray(self.index_values(e, rank), dtype=np.int64)
            ind = offsets.get(d)
            if ind is not None:
                vals = np.asarray(self.view(ind)).astype(np.int64)
                v = v + vals.reshape((*self.dims, *offset_shape(ind.shape, rank)))
            self.check_bounds(acc, d, v if sel is None else np.broadcast_to(v, full_shape)[sel])
            out.append(v)
        if sel is None:
            return tuple(out)
        return tuple(np.where(sel, np.broadcast_to(v, full_shape), 0) for v in out)

    def check_bounds(self, acc: Access, d: int, v: np.ndarray) -> None:
        """Raise NKIIndexError when an index ``v`` into dimension ``d`` of the access's tensor
        falls outside it."""
        n = self.decl(acc.tensor).shape[d]
        if v.size and (v.min() < 0 or v.max() >= n):
            raise NKIIndexError(
                f"out-of-bound access for tensor {tensor_label(self.decl(acc.tensor))} on "
                f"dimension {d}: index range [{int(v.min())}, {int(v.max())}] exceeds the "
                f"dimension size of {n}",
                code="err_tensor_access_out_of_bound",
            )

    def mask(self, instr: Instr, shape: tuple[int, ...] | None = None) -> np.ndarray | None:
        """The batch-wide selection of a masked instruction (None: unmasked or all true):
        ``masks.mask``."""
        return None if instr.mask is None else masks.mask(self, instr, shape)

    def extremes(self, e: IndexExpr, shape: tuple[int, ...]) -> tuple[int, int]:
        """The least and the greatest value of an index expression over the batch and a tile
        of ``shape``."""
        c, coef = self.affine(e.base)
        lo = hi = c
        for k, n in [*zip(coef, self.dims), *zip(e.coeffs, shape)]:
            lo += min(0, k * (n - 1))
            hi += max(0, k * (n - 1))
        return lo, hi

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
        sel = masks.selection_for(sel, len(self.dims), acc.shape)
        got = masks.read_boxes(self, acc, sel)
        if got is not None:
            return got
        arr = self.arrays.get(acc.tensor)
        return (self._storage(acc.tensor) if arr is None else arr)[self.indices(acc, sel)]

    def _storage_dtype(self, name: str) -> np.dtype:
        sd = self._stored.get(name)
        if sd is None:
            sd = numerics.storage_dtype(self.decl(name).dtype, self.config.precise_fp)
            self._stored[name] = sd
        return sd

    def copy_box(self, dst: Access, src: Access, sel: np.ndarray) -> bool:
        """``write(dst, read(src, sel), sel)`` in one copy, done when ``sel`` is a box both
        accesses take in bounds and their storage dtypes agree (True); else nothing (False)."""
        if src.shape != dst.shape:
            return False
        box = self.box(src, sel)
        if box is None or self.box(dst, sel) is not box:
            return False
        part = self.view(src, box)
        if part.dtype != self._storage_dtype(dst.tensor):
            return False
        pend = self.pending.pop(dst.tensor, None)
        if pend is not None:
            self.arrays[dst.tensor] = np.empty(*pend)
        self.view(dst, box)[...] = part  # (NumPy buffers an overlapping copy)
        return True

    def write(
        self, acc: Access, values: Any, sel: np.ndarray | None = None, accumulate: str | None = None
    ) -> None:
        vals = values if type(values) is np.ndarray else np.asarray(values)
        if accumulate is not None:
            full = (*self.dims, *acc.shape)
            if vals.shape != full:
                vals = np.broadcast_to(vals, full)
            into = _INTO.get(accumulate) if sel is None else None
            if into is not None and vals.dtype == np.float32:
                dst = self.view(acc)
                if dst.dtype == np.float32:  # fp32 += fp32: the same sums, in place
                    into(dst, vals, out=dst)
                    return
            old = self.read(acc, sel)
            exact = vals.dtype.kind in "iub" and old.dtype.kind in "iub"
            a = numerics.to_compute(old, exact_int=exact)
            b = numerics.to_compute(np.asarray(vals), exact_int=exact)
            vals = OPS[accumulate].fn(a, b)
        sd = self._stored.get(acc.tensor)
        if sd is None:
            sd = self._storage_dtype(acc.tensor)
        if vals.dtype == sd:  # (``cast`` leaves values of the storage dtype as they are)
            stored = vals
        else:
            stored = numerics.cast(vals, self.decl(acc.tensor).dtype, self.config.precise_fp)
        pend = self.pending.pop(acc.tensor, None)
        if pend is not None:
            if sel is None and stored.ndim == 0:  # (one value fills the fresh tile)
                self.arrays[acc.tensor] = numerics.filled(pend[0], stored, pend[1])
                return
            if sel is None and takes_over(pend, stored):
                self.arrays[acc.tensor] = stored  # a fresh result becomes the tile: no copy
                return
            self.arrays[acc.tensor] = np.empty(*pend)
        if sel is None:
            self.view(acc)[...] = stored  # (broadcast by the assignment)
            return
        full = (*self.dims, *acc.shape)
        whole = stored if stored.shape == full else np.broadcast_to(stored, full)
        if masks.write_boxes(self, acc, sel, whole):
            return
        idx = self.indices(acc, sel)
        arr = self.arrays.get(acc.tensor)
        arr = self._storage(acc.tensor) if arr is None else arr
        arr[tuple(i[sel] for i in idx)] = whole[sel]

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
            raw = self.view(src) if sel is None else self.read(src, sel)
            if contig and not raw.flags.c_contiguous:
                raw = np.ascontiguousarray(raw)
            if raw.dtype == np.float32:  # (``to_compute``'s common case, without the call)
                return raw
            return numerics.to_compute(raw, exact_int=exact_int)
        if isinstance(src, Const):
            v = src.value
            if exact_int and isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                return np.int64(v)
            return np.float32(v)
        raise NKIRuntimeError(f"unsupported operand {src!r}", code="err_internal")

    def storage(self, name: str) -> np.ndarray:
        """The storage of tensor ``name`` (a tile still pending gets it now; a reshape / dtype
        view is its view of its base)."""
        arr = self.arrays.get(name)
        return self._storage(name) if arr is None else arr

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

    def allocate(self, name: str, fresh: bool, store: Instr | None, info: AllocInfo) -> None:
        """Run tile ``name``'s Alloc (``info``: ``alloc_info``'s, decided with the walk)."""
        hbm, x, tile_shape, sd, fill = info
        if hbm and name in self.arrays:
            return  # shared across instances: allocated once per launch
        if x is not None:  # (an on-chip tile's: the dead ones go at its Alloc)
            self._drop_dead(x)
        if store is not None:  # the tile lives where its store would copy it
            assert store.dst is not None
            self.arrays[name] = self.view(store.dst)
            self.depth[name] = len(self.dims)
            return
        shape = (*self.dims, *tile_shape)
        if fresh:  # the next instruction writes the whole tile: storage when it does
            self.arrays.pop(name, None)
            self.pending[name] = (shape, sd)
        else:
            self.arrays[name] = numerics.filled(shape, fill, sd)
        self.depth[name] = len(self.dims)

    def as_matrix(self, acc: Access, inner: list[int]) -> np.ndarray | None:
        """Lay the storage of the 2-D tile ``acc`` accesses whole out again so that its batch
        axes ``inner`` lie between its partitions and its free axis: the tiles of one position
        of the other batch axes then make one (P, columns) matrix (``gemm._one_matrix``: one
        BLAS call adds a product to all of them). Its new view, or None when it already is so
        laid out or is not a tile's own storage (a view of HBM, of another tile's, or one with
        reshape / dtype views). The same values; the tile's accumulation group follows."""
        name, nb = acc.tensor, len(self.dims)
        arr = self.arrays.get(name)
        if (
            arr is None
            or len(acc.shape) != 2
            or self.depth[name] != nb
            or arr.shape != (*self.dims, *acc.shape)
            or name in self._lifetimes.views
            or self.decl(name).buffer != "psum"
            or not access_facts(acc)[1]  # (the whole tile)
            or all(arr.strides[b] < arr.strides[nb] for b in inner)  # (laid out so already)
            or arr.base is not None  # (a view: of HBM, of another tile, of a product)
        ):
            return None
        order = [b for b in range(nb) if b not in inner] + [nb, *inner, nb + 1]
        new = np.empty([arr.shape[b] for b in order], dtype=arr.dtype).transpose(np.argsort(order))
        new[...] = arr
        self.arrays[name] = new
        entry = self.psum_groups.get(name)
        if entry is not None and entry[0] is arr:
            entry[0] = new
        return new[...]

    def _drop_dead(self, x: int) -> None:
        """Drop the storage of the tiles that are dead at the Alloc at position ``x`` (never
        read again before their own next Alloc, ``simulator/lifetimes.py``), with their views,
        the hosted instructions' per-position views and their PSUM accumulation groups (tiles
        that are views of HBM or of another tile included: the memory goes with its last
        view)."""
        lt, after = self._lifetimes, self._last_alloc
        self._last_alloc = x
        if after is not None and after < x:  # (walked forwards: only the tiles ending between)
            dead = lt.ending(after, x)
        else:  # (after a loop's jump back: every stored tile)
            dead = lt.dead([*self.arrays, *self.pending], x)
        if not dead:
            return
        host, views = self.host, lt.views
        arrays, pending, aliases, groups = self.arrays, self.pending, self.aliases, self.psum_groups
        for tile in dead:
            for n in (tile, *views[tile]) if tile in views else (tile,):
                arrays.pop(n, None)
                if pending:  # (the three are mostly empty: no call then)
                    pending.pop(n, None)
                if aliases:
                    aliases.pop(n, None)
                if groups:
                    groups.pop(n, None)
                if host is not None:
                    host.views.pop(n, None)
                    if self.decl(n).buffer == "psum":  # (hosted accumulation groups)
                        for state in host.states.values():
                            state.pop(PSUM_GROUP + n, None)


# what an Alloc of a tensor needs, the same every run: whether it is shared HBM, the position of
# its Alloc when the tiles dead there are dropped (None: never), its shape, storage dtype and
# what fresh memory of its dtype holds
AllocInfo = tuple[bool, int | None, tuple[int, ...], np.dtype, object]


def alloc_info(ir: KernelIR, name: str, precise_fp: bool) -> AllocInfo:
    """``BCtx.allocate``'s facts about tensor ``name`` of ``ir``."""
    d = ir.tensor(name)
    w = lifetimes(ir).windows.get(name)
    sd = numerics.storage_dtype(d.dtype, precise_fp)
    fill = numerics.fill_value(d.dtype)
    return (d.buffer == "shared_hbm", None if w is None else w[0], tuple(d.shape), sd, fill)


def alias_storage(base: np.ndarray, p: int, decl: Any, precise_fp: bool) -> np.ndarray:
    """``host.alias_array`` on the tile part of batched storage (the trailing axes after ``p``
    batch axes): the plan keeps the base of every view contiguous storage of its own, so this
    is always a view (checked: a copy would lose the writes)."""
    out = alias_array(base, decl, precise_fp, lead=p)
    if out.size and not np.may_share_memory(out, base):
        raise NKIRuntimeError(
            f"view '{decl.name}' of non-contiguous batched storage", code="err_internal"
        )
    return out
