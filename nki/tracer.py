"""Tracing: the state of one kernel trace, tensor handles, subscripts and instruction emission.

A kernel body runs once per input signature with symbolic program ids and loop iterators.
Every ``nl.*`` / ``nisa.*`` call checks its operands here and records one IR instruction."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from . import dtypes
from .errors import (
    NKIControlFlowError,
    NKIError,
    NKIIndexError,
    NKIMemoryError,
    NKIScopeError,
    NKIShapeError,
    NKITypeError,
    SrcLoc,
    user_loc,
)
from .ir import (
    HBM_BUFFERS,
    Access,
    Affine,
    Alloc,
    Cond,
    Const,
    IndexExpr,
    Instr,
    Loop,
    LoopSym,
    Mask,
    Node,
    TensorDecl,
)
from .symbolic import DynSlice, Index, Pred, Scalar, _Traced, broadcast_shapes, expand_expr

PMAX = 128

# --------------------------------------------------------------------------------------------
# Trace state
# --------------------------------------------------------------------------------------------


class TraceState:
    """Everything recorded while one kernel body runs."""

    def __init__(self, name: str, target: Any, grid_shape: tuple[int, ...]) -> None:
        self.name = name
        self.target = target  # nki.targets.Target
        self.grid_shape = grid_shape
        self.tensors: dict[str, TensorDecl] = {}
        self.bodies: list[list[Node]] = [[]]
        self.loops: list[LoopSym] = []
        self.loop_kinds: list[str] = []
        self.written: dict[str, SrcLoc] = {}
        self.params: list[str] = []
        self._next_id = 0
        # classic ``if`` on loop iterators: inclusive range and call site of every symbolic loop,
        # and the call sites to unroll in this trace (see nki.classic.trace_with_unrolling)
        self.loop_ranges: dict[LoopSym, tuple[int, int]] = {}
        self.loop_sites: dict[LoopSym, tuple[str, int, int]] = {}
        self.unroll_sites: frozenset[tuple[str, int, int]] = UNROLL_SITES[-1]

    def fresh(self, prefix: str) -> str:
        while True:
            name = f"{prefix}{self._next_id}"
            self._next_id += 1
            if name not in self.tensors:
                return name

    def declare(self, decl: TensorDecl) -> None:
        self.tensors[decl.name] = decl

    def append(self, node: Node) -> None:
        self.bodies[-1].append(node)


_STATE: list[TraceState] = []
UNROLL_SITES: list[frozenset[tuple[str, int, int]]] = [frozenset()]


class NeedsUnroll(NKIControlFlowError):
    """Python ``if`` on a predicate over loop iterators that holds for some iterations only.
    In classic mode the trace is restarted with the loops at ``sites`` unrolled."""

    def __init__(self, message: str, sites: frozenset[tuple[str, int, int]], **kw: Any) -> None:
        super().__init__(message, **kw)
        self.sites = sites


def unroll_for_division(op: str, a: object, b: object) -> NKIError | None:
    """Classic mode: ``i % 2`` or ``i // 4`` on loop iterators (AWS's ``nc_matmul`` example
    computes ``tile_position`` this way) is not affine, so the loops of those iterators are
    unrolled and the trace restarts with the iterators as plain ints. None otherwise (the
    caller reports the expression as non-affine)."""
    from . import classic

    if not classic.classic_mode() or not isinstance(a, Scalar):
        return None
    if not isinstance(b, int) or isinstance(b, bool) or b <= 0:
        return None
    st = state(f"'{op}' on a loop iterator")
    syms = a.aff.symbols()
    if not syms or not all(isinstance(s, LoopSym) and s in st.loop_sites for s in syms):
        return None
    sites = frozenset(st.loop_sites[s] for s in syms)  # type: ignore[index]
    return NeedsUnroll(
        f"'{op} {b}' on a loop iterator is not affine; the loop is unrolled", sites, loc=user_loc()
    )


def decide_condition(pred: Any) -> bool:
    """``bool(pred)`` for a mask predicate used in Python control flow (``if i < n:``).

    Only in classic mode (``nki.classic.classic_mode``): a predicate over loop
    iterators alone that is true (false) for every iteration is True (False); one that varies
    raises NeedsUnroll so the loops involved are unrolled. Everything else (tile indices,
    program ids, strict mode) is the usual control-flow error."""
    from . import classic

    st = state("control flow")
    syms = {s for c in pred.conds for s in c.expr.base.symbols()}
    static = all(not any(c.expr.coeffs) for c in pred.conds)
    loops_only = all(isinstance(s, LoopSym) and s in st.loop_ranges for s in syms)
    msg = (
        "Python control flow (if / while / and / or / not) cannot depend on a mask predicate; "
        "kernel control flow is fixed at trace time. Use mask= for partial tiles and "
        "nl.affine_range / nl.sequential_range for loops"
    )
    if not (classic.classic_mode() and static and loops_only):
        raise NKIControlFlowError(msg, loc=user_loc())
    verdicts = []
    for c in pred.conds:
        lo, hi = c.expr.base.bounds(st.loop_ranges)
        true_all = {
            "<": hi < 0, "<=": hi <= 0, ">": lo > 0, ">=": lo >= 0,
            "==": lo == hi == 0, "!=": hi < 0 or lo > 0,
        }[c.op]  # fmt: skip
        false_all = {
            "<": lo >= 0, "<=": lo > 0, ">": hi <= 0, ">=": hi < 0,
            "==": hi < 0 or lo > 0, "!=": lo == hi == 0,
        }[c.op]  # fmt: skip
        verdicts.append(True if true_all else False if false_all else None)
    if False in verdicts:
        return False
    if all(v is True for v in verdicts):
        return True
    sites = frozenset(
        st.loop_sites[s] for c, v in zip(pred.conds, verdicts) if v is None
        for s in c.expr.base.symbols()
    )  # fmt: skip
    raise NeedsUnroll(msg + " (the condition varies across loop iterations)", sites, loc=user_loc())


def state(api: str = "this call") -> TraceState:
    if not _STATE:
        raise NKIError(
            f"{api} can only be used inside a kernel being traced by @nki.jit "
            "(call the kernel, or nki.simulate_kernel(kernel, *args))",
            code="err_outside_kernel",
            loc=user_loc(),
        )
    return _STATE[-1]


def tracing() -> bool:
    return bool(_STATE)


@contextmanager
def new_trace(st: TraceState) -> Iterator[TraceState]:
    _STATE.append(st)
    try:
        yield st
    finally:
        _STATE.pop()


# --------------------------------------------------------------------------------------------
# Loops
# --------------------------------------------------------------------------------------------


def symbolic_loop(kind: str, start: int, stop: int, step: int) -> Iterator[Scalar]:
    """Generator behind ``affine_range`` / ``sequential_range``: yields one symbolic iterator
    and records the body traced in between as a Loop node."""
    st = state(f"nl.{kind}_range")
    loc = user_loc(2)
    if len(range(start, stop, step)) == 0:
        return
    site = (loc.file, loc.line, loc.col)
    if site in st.unroll_sites:  # classic `if` on this loop's iterator: trace per iteration
        yield from range(start, stop, step)  # type: ignore[misc]
        return
    sym = LoopSym(st._next_id, kind)
    st._next_id += 1
    r = range(start, stop, step)
    st.loop_ranges[sym] = (min(r[0], r[-1]), max(r[0], r[-1]))
    st.loop_sites[sym] = site
    st.bodies.append([])
    st.loops.append(sym)
    st.loop_kinds.append(kind)
    done = False
    try:
        yield Scalar(Affine.of(sym))
        done = True
    finally:
        body = st.bodies.pop()
        st.loops.pop()
        st.loop_kinds.pop()
        if done or body:
            st.append(Loop(sym, start, stop, step, kind, tuple(body), loc))


# --------------------------------------------------------------------------------------------
# Tensors and views
# --------------------------------------------------------------------------------------------


class TileOps:
    """Python operators on tiles map to nki.language ops."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        # only reached for attributes tiles do not have: name the API, not a Python internal
        if name.startswith("_") or name in ("shape", "dtype"):
            raise AttributeError(name)
        from .errors import NKIAttributeError

        raise NKIAttributeError(
            f"NKI tiles and tensors have no attribute '{name}' ({type(self).__name__} "
            f"{list(getattr(self, 'shape', ()))}); see the README's list of tile methods",
            loc=user_loc(),
        )

    def _nl(self):
        from .language import ops

        return ops

    def __add__(self, o):
        if _dynamic_index(self, o):  # idx_tile[0, j] + i_f: a dynamic index
            return DynOffset(self, o)
        return self._nl().add(self, o)

    def __radd__(self, o):
        if _dynamic_index(self, o):
            return DynOffset(self, o)
        return self._nl().add(o, self)

    def __sub__(self, o):
        return self._nl().subtract(self, o)

    def __rsub__(self, o):
        return self._nl().subtract(o, self)

    def __mul__(self, o):
        return self._nl().multiply(self, o)

    def __rmul__(self, o):
        return self._nl().multiply(o, self)

    def __truediv__(self, o):
        return self._nl().divide(self, o)

    def __rtruediv__(self, o):
        return self._nl().divide(o, self)

    def __neg__(self):
        return self._nl().negative(self)

    def __pow__(self, o):
        return self._nl().power(self, o)

    def __lt__(self, o):
        return self._nl().less(self, o)

    def __le__(self, o):
        return self._nl().less_equal(self, o)

    def __gt__(self, o):
        return self._nl().greater(self, o)

    def __ge__(self, o):
        return self._nl().greater_equal(self, o)

    def __eq__(self, o):  # type: ignore[override]
        return self._nl().equal(self, o)

    def __ne__(self, o):  # type: ignore[override]
        return self._nl().not_equal(self, o)

    def __and__(self, o):
        return self._nl().bitwise_and(self, o)

    def __or__(self, o):
        return self._nl().bitwise_or(self, o)

    def __xor__(self, o):
        return self._nl().bitwise_xor(self, o)

    def __invert__(self):
        return self._nl().invert(self)

    def __lshift__(self, o):
        return self._nl().left_shift(self, o)

    def __rshift__(self, o):
        return self._nl().right_shift(self, o)

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        raise NKIControlFlowError(
            "the truth value of a tile is ambiguous and cannot drive Python control flow; "
            "use nl.where / masks, and '&', '|', '~' for element-wise logic",
            code="err_ambiguous_tensor_truth_value",
            loc=user_loc(),
        )

    def __iter__(self):
        raise NKIControlFlowError(
            "a tile cannot be iterated in Python; index it with nl.arange / slices",
            code="err_ambiguous_tensor_truth_value",
            loc=user_loc(),
        )

    # --- in-place updates: t[...] += v, psum += nl.matmul(...) -------------------------------
    def _rmw(self, value: object, op: str):
        # ``psum += nl.matmul(...)``: an op result nobody else holds is computed straight into
        # the target with accumulation (no temporary tile, as the compiler does)
        # (compute instructions only: a DMA result is still copied in by an engine)
        fusable = isinstance(value, NkiTensor) and sys.getrefcount(value) <= _FUSE_REFS + 1
        if fusable:
            body = state().bodies[-1]
            fusable = bool(body) and isinstance(body[-1], Instr) and body[-1].kind != "dma"
        assign(self.access_(), value, accumulate=op, api=f"{op} (in-place)", fusable=fusable)
        return _Assigned(self)

    def __iadd__(self, o):
        return self._rmw(o, "add")

    def __isub__(self, o):
        return self._rmw(o, "subtract")

    def __imul__(self, o):
        return self._rmw(o, "multiply")

    # --- classic tensor methods (nki.tensor) ---------------------------------------------------
    def broadcast_to(self, shape: tuple[int, ...]):
        """``t.broadcast_to(shape)``: ``nl.broadcast_to(t, shape)`` (NumPy broadcast rules; a
        one-partition tile is repeated across partitions)."""
        from .language import shaping

        return shaping.broadcast_to(self, shape)

    def astype(self, dtype: object):
        """``t.astype(dtype)``: a copy of the tile converted to ``dtype``."""
        from .language import core

        return core.copy(self, dtype=dtype)

    def expand_dims(self, axis: object):
        """``t.expand_dims(axis)``: ``nl.expand_dims(t, axis)`` (trailing axes only)."""
        from .language import shaping

        return shaping.expand_dims(self, axis)

    def assert_shape(self, shape: tuple[int, ...]):
        """``t.assert_shape(shape)``: trace-time check that the tile has ``shape``; returns it."""
        want = tuple(int(s) for s in shape)
        if tuple(self.shape) != want:  # type: ignore[attr-defined]
            raise NKIShapeError(
                f"assert_shape failed: tensor has shape {list(self.shape)}, "  # type: ignore
                f"expected {list(want)}",
                code="err_assert_shape",
                loc=user_loc(),
            )
        return self

    # --- shared accessors --------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)  # type: ignore[attr-defined]

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize  # type: ignore[attr-defined]

    def access_(self) -> Access:
        raise NotImplementedError

    def tensor_(self) -> NkiTensor:
        raise NotImplementedError


class NkiTensor(TileOps):
    """A tensor in HBM, SBUF or PSUM (kernel parameter, allocation or op result)."""

    __slots__ = ("decl", "scope", "temp", "__weakref__")

    def __init__(self, decl: TensorDecl, scope: tuple[LoopSym, ...], temp: bool = False) -> None:
        self.decl = decl
        self.scope = scope
        self.temp = temp  # produced by an op (candidate for writing straight into its target)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.decl.shape

    @property
    def dtype(self) -> dtypes.NkiDtype:
        return dtypes.NkiDtype(self.decl.dtype)

    @property
    def buffer(self) -> str:
        return self.decl.buffer

    @property
    def name(self) -> str:
        return self.decl.name

    def access_(self) -> Access:
        shape = self.decl.shape
        idx = []
        for d in range(len(shape)):
            coeffs = tuple(1 if j == d and shape[d] > 1 else 0 for j in range(len(shape)))
            idx.append(IndexExpr(Affine(), coeffs, shape))
        return Access(self.decl.name, shape, tuple(idx))

    def tensor_(self) -> NkiTensor:
        return self

    def __getitem__(self, key: object) -> View:
        return View(self, self.access_())[key]

    def __setitem__(self, key: object, value: object) -> None:
        if isinstance(value, _Assigned):
            return  # the in-place update already happened (t[...] += v)
        fusable = isinstance(value, NkiTensor) and sys.getrefcount(value) <= _FUSE_REFS
        assign(self[key].access_(), value, api="assignment", fusable=fusable)

    def reshape(self, shape: tuple[int, ...]) -> NkiTensor:
        """A view of the same HBM storage with another shape (same number of elements). For an
        on-chip tile see :func:`reshape_tile` (the partition dimension stays)."""
        st = state("tensor.reshape")
        shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        if self.decl.on_chip:
            return reshape_tile(self, shape)
        n_old = _prod(self.shape)
        if _prod(shape) != n_old:
            raise NKIShapeError(
                f"cannot reshape tensor '{self.name}' of shape {self.shape} ({n_old} elements) "
                f"to {shape} ({_prod(shape)} elements)",
                code="err_reshape_size_mismatch",
                loc=user_loc(),
            )
        if self.decl.buffer not in HBM_BUFFERS:
            raise NKIMemoryError(
                f"reshape is supported for HBM tensors; '{self.name}' is in {self.decl.buffer}",
                code="err_unsupported_memory",
                loc=user_loc(),
            )
        base = self.decl.alias_of or self.decl.name
        decl = TensorDecl(
            st.fresh(f"{base}_r"),
            shape,
            self.decl.dtype,
            self.decl.buffer,
            "alias",
            0,
            user_loc(),
            base,
        )
        st.declare(decl)
        return NkiTensor(decl, self.scope)

    def view(self, dtype: object) -> NkiTensor:
        """``t.view(dtype)``: the same HBM bytes reinterpreted as ``dtype`` (no conversion). With
        a different element size the last dimension is rescaled (its bytes must divide evenly)."""
        st = state("tensor.view")
        new_dt = dtypes.name_of(dtype)
        if self.decl.buffer not in HBM_BUFFERS:
            raise NKIMemoryError(
                f"view(dtype) is supported for HBM tensors; '{self.name}' is in {self.decl.buffer}",
                code="err_unsupported_memory",
                loc=user_loc(),
            )
        old_size, new_size = dtypes.itemsize(self.decl.dtype), dtypes.itemsize(new_dt)
        shape = tuple(self.shape)
        if old_size != new_size:
            last = shape[-1] * old_size
            if last % new_size:
                raise NKIShapeError(
                    f"cannot view tensor '{self.name}' {self.decl.dtype}{list(shape)} as "
                    f"{new_dt}: the last dimension's {last} bytes are not a multiple of "
                    f"{new_size}",
                    code="err_reshape_size_mismatch",
                    loc=user_loc(),
                )
            shape = shape[:-1] + (last // new_size,)
        base = self.decl.alias_of or self.decl.name
        decl = TensorDecl(
            st.fresh(f"{base}_v"), shape, new_dt, self.decl.buffer, "alias", 0, user_loc(), base
        )
        st.declare(decl)
        return NkiTensor(decl, self.scope)

    def __repr__(self) -> str:
        return f"<{self.decl.buffer} tensor {self.name} {self.decl.dtype}{list(self.shape)}>"


_FUSE_REFS = 3  # sys.getrefcount of an op result nobody else holds, seen from __setitem__


class View(TileOps):
    """A tile-shaped access into a tensor: the result of indexing."""

    __slots__ = ("base", "acc")

    def __init__(self, base: NkiTensor, acc: Access) -> None:
        self.base = base
        self.acc = acc

    @property
    def shape(self) -> tuple[int, ...]:
        return self.acc.shape

    @property
    def dtype(self) -> dtypes.NkiDtype:
        return self.base.dtype

    @property
    def buffer(self) -> str:
        return self.base.buffer

    @property
    def name(self) -> str:
        return self.base.name

    def access_(self) -> Access:
        return self.acc

    def tensor_(self) -> NkiTensor:
        return self.base

    def __getitem__(self, key: object) -> View:
        sub = parse_subscript(key, self.acc.shape, f"tensor '{self.base.name}'")
        acc = compose(self.acc, sub)
        if self.base.decl.on_chip:  # classic tiles stay 2-D: t[:, j] is (P, 1), t[i, :] (1, F)
            acc = as_2d(acc, self.base)
        return View(self.base, acc)

    def __setitem__(self, key: object, value: object) -> None:
        if isinstance(value, _Assigned):
            return
        fusable = isinstance(value, NkiTensor) and sys.getrefcount(value) <= _FUSE_REFS
        assign(self[key].access_(), value, api="assignment", fusable=fusable)

    def reshape(self, shape: tuple[int, ...]) -> NkiTensor:
        """``tile[...].reshape(shape)``: see :func:`reshape_tile`."""
        shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        return reshape_tile(self, shape)

    def __repr__(self) -> str:
        return f"<view {self.acc} {self.base.decl.dtype}{list(self.shape)}>"


def reshape_tile(x: TileOps, shape: tuple[int, ...]) -> NkiTensor:
    """``tile.reshape(shape)`` on an on-chip tile: the same elements per partition in another
    free-dimension shape (row-major), e.g. ``(P, A, B)`` -> ``(P, A * B)``. The partition
    dimension must stay the same. Reshaping a whole tile gives a view of the same memory
    (writes through it land in the tile, as in NKI); a reshaped slice or a tile with block
    dimensions before its partition dimension is a new tile holding a copy of the values."""
    api = "tile.reshape"
    acc, t = operand(x, api, "tile")
    if not t.decl.on_chip:
        raise NKIMemoryError(
            f"'{api}' of a view of HBM tensor '{t.name}': reshape the tensor itself",
            code="err_unsupported_memory",
            loc=user_loc(),
        )
    if _prod(shape) != _prod(acc.shape) or not shape or shape[0] != acc.shape[0]:
        raise NKIShapeError(
            f"cannot reshape tile of shape {list(acc.shape)} to {list(shape)}: the partition "
            "dimension must stay and the number of elements must match",
            code="err_reshape_size_mismatch",
            loc=user_loc(),
        )
    if isinstance(x, NkiTensor) and t.decl.par_dim == 0:
        st = state(api)
        base = t.decl.alias_of or t.name
        decl = TensorDecl(
            st.fresh(f"{base}_r"), shape, t.decl.dtype, t.decl.buffer, "alias", 0, user_loc(), base
        )
        st.declare(decl)
        return NkiTensor(decl, t.scope)
    out = new_tensor(shape, t.decl.dtype, t.decl.buffer, temp=True, api=api)
    emit("reshape", "reshape", out.access_(), (acc,), api=api)
    return out


class _Assigned:
    """Returned by ``__iadd__``: marks a view already updated in place."""

    __slots__ = ("view",)

    def __init__(self, view: TileOps) -> None:
        self.view = view

    def __getattr__(self, name: str) -> Any:
        return getattr(self.view, name)

    def __getitem__(self, key: object):
        return self.view[key]  # type: ignore[index]

    def __setitem__(self, key: object, value: object) -> None:
        self.view[key] = value  # type: ignore[index]

    # a second ``t += x`` on the same name keeps accumulating in place (psum += nc_matmul(...))
    def __iadd__(self, o):
        return self.view._rmw(o, "add")  # type: ignore[attr-defined]

    def __isub__(self, o):
        return self.view._rmw(o, "subtract")  # type: ignore[attr-defined]

    def __imul__(self, o):
        return self.view._rmw(o, "multiply")  # type: ignore[attr-defined]


def _forward_operator(name: str) -> Any:
    def op(self: _Assigned, *args: Any) -> Any:
        return getattr(self.view, name)(*args)

    op.__name__ = name
    return op


# ``acc += x`` rebinds ``acc`` to an _Assigned; Python looks operators up on the class, so
# ``acc / 128``, ``acc * s``, ``-acc``, ``acc < 0`` ... must be forwarded explicitly
for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__neg__", "__pow__", "__lt__", "__le__", "__gt__",
              "__ge__", "__eq__", "__ne__", "__and__", "__or__", "__xor__", "__invert__",
              "__lshift__", "__rshift__", "__bool__", "__iter__"):  # fmt: skip
    setattr(_Assigned, _name, _forward_operator(_name))
_Assigned.__hash__ = object.__hash__  # type: ignore[assignment]


def _dynamic_index(t: Any, o: object) -> bool:
    """``tile + i_f`` / ``one_element_tile + i`` may be an index with a run-time start (see
    DynOffset); a bigger tile plus a loop iterator is plain arithmetic."""
    if isinstance(o, Index):
        return True
    return isinstance(o, Scalar) and _prod(tuple(t.shape)) == 1


class DynOffset:
    """``tile[0, j] + i_f``: an index whose start is a value read at run time from a
    one-element SBUF tile (a dynamic offset, as used with ``nisa.tensor_copy_dynamic_src``),
    plus an affine part (``nl.arange`` axes, loop iterators, integers). Used as a value
    instead of an index, it is the element-wise sum (``as_value``)."""

    __slots__ = ("tile", "part")

    def __init__(self, tile: Any, part: Any) -> None:
        self.tile = tile
        self.part = part

    def as_value(self) -> Any:
        from .language import ops

        return ops.add(self.tile, self.part)

    def __add__(self, o: object) -> DynOffset:
        if isinstance(o, (Index, Scalar, int)) and not isinstance(o, bool):
            return DynOffset(self.tile, self.part + o)
        return NotImplemented

    __radd__ = __add__


def _prod(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


# --------------------------------------------------------------------------------------------
# Subscripts
# --------------------------------------------------------------------------------------------


def _scalar_aff(x: object, what: str) -> Affine | None:
    if isinstance(x, Scalar):
        return x.aff
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return Affine.constant(x)
    if hasattr(x, "__index__") and not isinstance(x, _Traced) and not isinstance(x, TileOps):
        return Affine.constant(int(x.__index__()))  # numpy integers
    return None


def parse_subscript(key: object, shape: tuple[int, ...], what: str) -> Access:
    """Turn ``t[key]`` into per-dimension index expressions over the result tile shape.

    The returned Access has tensor '' (it indexes the *view*); ``compose`` maps it onto the
    underlying tensor."""
    from .symbolic import MGrid

    if isinstance(key, MGrid):  # t[nl.mgrid[0:128, 0:512]]: the grid's axes, one per dim
        key = tuple(key)
    keys = list(key) if isinstance(key, tuple) else [key]
    if any(k is Ellipsis for k in keys):
        i = keys.index(Ellipsis)
        if Ellipsis in keys[i + 1 :]:
            raise NKIIndexError("an index can only have a single ellipsis", loc=user_loc())
        n_fill = len(shape) - (len(keys) - 1)
        keys = keys[:i] + [slice(None)] * max(n_fill, 0) + keys[i + 1 :]
    if len(keys) > len(shape):
        raise NKIIndexError(
            f"too many indices for {what}: {len(keys)} indices for {len(shape)} dimensions "
            f"(shape {shape})",
            code="err_too_many_indices",
            loc=user_loc(),
        )
    advanced = [k for k in keys if isinstance(k, (Index, TileOps, _Assigned, DynOffset))]
    if advanced:
        return _parse_advanced(keys, shape, what)
    keys += [slice(None)] * (len(shape) - len(keys))
    out_shape: list[int] = []
    parts: list[tuple[Affine, int | None, int]] = []  # (base, result axis or None, stride)
    for d, k in enumerate(keys):
        n = shape[d]
        if isinstance(k, (slice, DynSlice)):
            base, size, step = _slice_bounds(k, n, d, what)
            parts.append((base, len(out_shape), step))
            out_shape.append(size)
            continue
        aff = _scalar_aff(k, what)
        if aff is None:
            raise NKIIndexError(
                f"unsupported index {k!r} for dimension {d} of {what}: use integers, slices, "
                "nl.ds(start, size), program ids, loop iterators or nl.arange expressions",
                code="err_unsupported_index_expression",
                loc=user_loc(),
            )
        if not isinstance(k, Scalar) and aff.is_const and -n <= aff.const < 0:
            # Python-style negative index, only for literal ints: an index *expression* that
            # folds to a negative constant (e.g. `ip - 1` over a 1-row arange) is out of bounds.
            aff = Affine.constant(aff.const + n)
        parts.append((aff, None, 0))
    rshape = tuple(out_shape)
    idx = []
    for base, ax, step in parts:
        coeffs = tuple(step if (j == ax and rshape[j] > 1) else 0 for j in range(len(rshape)))
        idx.append(IndexExpr(base, coeffs, rshape))
    return Access("", rshape, tuple(idx))


def _slice_bounds(k: slice | DynSlice, n: int, d: int, what: str) -> tuple[Affine, int, int]:
    if isinstance(k, DynSlice):
        start = _scalar_aff(k.start, what)
        if start is None:
            raise NKIIndexError(
                f"nl.ds start must be an integer expression, got {k.start!r}", loc=user_loc()
            )
        return start, k.size, k.step
    step = 1 if k.step is None else _scalar_aff(k.step, what)
    if not isinstance(step, int):
        if step is None or not step.is_const:
            raise NKIIndexError("slice steps must be integer constants", loc=user_loc())
        step = step.const
    if step <= 0:
        raise NKIIndexError(f"slice step must be positive, got {step}", loc=user_loc())
    start = Affine.constant(0) if k.start is None else _scalar_aff(k.start, what)
    stop = Affine.constant(n) if k.stop is None else _scalar_aff(k.stop, what)
    if start is None or stop is None:
        raise NKIIndexError(f"unsupported slice bounds {k!r} on {what}", loc=user_loc())
    if start.is_const and stop.is_const:
        if 0 <= start.const < stop.const and stop.const > n:  # no silent clipping (issue 5)
            raise NKIIndexError(
                f"out-of-bound access for {what} on dimension {d}: index range "
                f"[{start.const}, {stop.const - 1}] exceeds the dimension size of {n}",
                code="err_tensor_access_out_of_bound",
                loc=user_loc(),
            )
        s0, s1, _ = slice(start.const, stop.const, step).indices(n)
        return Affine.constant(s0), max(0, len(range(s0, s1, step))), step
    extent = stop + start.scale(-1)
    if not extent.is_const:
        raise NKIIndexError(
            f"slice {_fmt_slice(start, stop)} on dimension {d} of {what} has a size that depends "
            "on a traced value; tile sizes must be compile-time constants",
            code="err_unsupported_index_expression",
            loc=user_loc(),
        )
    size = len(range(0, extent.const, step))
    return start, size, step


def _fmt_slice(a: Affine, b: Affine) -> str:
    return f"[{a}:{b}]"


def _parse_advanced(keys: list[object], shape: tuple[int, ...], what: str) -> Access:
    for k in keys:
        if isinstance(k, (slice, DynSlice)) or k is Ellipsis:
            raise NKIIndexError(
                f"mixing basic indexing (slices) and advanced indexing (nl.arange / nl.mgrid) "
                f"in one subscript of {what} is not supported; use nl.arange for every "
                "sliced dimension",
                code="err_unsupported_mixing_basic_advanced_tensor_indexing",
                loc=user_loc(),
            )
        if isinstance(k, Index) and k.ndim == 1:
            raise NKIIndexError(
                f"a 1-D nl.arange cannot index {what}; give each index its own axis, e.g. "
                "nl.arange(128)[:, None] and nl.arange(512)[None, :]",
                code="err_1d_arange_not_supported",
                loc=user_loc(),
            )
    if len(keys) != len(shape):
        raise NKIIndexError(
            f"advanced indexing of {what} needs one index per dimension: got {len(keys)} "
            f"indices for shape {shape}",
            code="err_unsupported_mixing_basic_advanced_tensor_indexing",
            loc=user_loc(),
        )
    tiles: dict[int, Access] = {}  # indirect indexing: dim -> SBUF tile of index values
    dyn: dict[int, Any] = {}  # dynamic offsets: dim -> affine part (Index / Scalar / int)
    for d, k in enumerate(keys):
        if isinstance(k, DynOffset):
            tiles[d] = _index_tile(k.tile, what)
            dyn[d] = k.part
        elif isinstance(k, (TileOps, _Assigned)):
            tiles[d] = _index_tile(k, what)
    try:
        rshape = _index_shape(keys, tiles, dyn)
    except NKIIndexError:
        # indices from different nl.mgrid calls (``t[i_p, j * 6 + i_f]`` with i_p from a 3-D
        # and i_f from a 2-D mgrid): each index is an iterator over the axes it uses, so
        # broadcast them over those axes only (the unused ones are dropped below)
        sparse = [_sparse(k) if isinstance(k, Index) else k for k in keys]
        if not tiles and any(s is not k for s, k in zip(sparse, keys)):
            rshape, keys = _index_shape(sparse, tiles, dyn), sparse
        else:
            raise
    idx = []
    for d, k in enumerate(keys):
        if isinstance(k, Index):
            idx.append(expand_expr(k.expr, rshape))
            continue
        if d in dyn:
            part = dyn[d]
            if isinstance(part, Index):
                idx.append(expand_expr(part.expr, rshape))
            else:
                base = part.aff if isinstance(part, Scalar) else Affine.constant(int(part))
                idx.append(IndexExpr(base, (0,) * len(rshape), rshape))
            continue
        if d in tiles:
            idx.append(IndexExpr(Affine(), (0,) * len(rshape), rshape))
            continue
        aff = _scalar_aff(k, what)
        if aff is None:
            raise NKIIndexError(
                f"unsupported index {k!r} for dimension {d} of {what}",
                code="err_unsupported_index_expression",
                loc=user_loc(),
            )
        if not isinstance(k, Scalar) and aff.is_const and -shape[d] <= aff.const < 0:
            aff = Affine.constant(aff.const + shape[d])  # literal negative int: Python meaning
        idx.append(IndexExpr(aff, (0,) * len(rshape), rshape))
    if not tiles:
        # more grid axes than tensor dims: drop every unused mgrid axis; otherwise only unused
        # axes of extent > 1 (``t[i_p, 2]``), as extent-1 axes carry no coefficient to tell
        rshape, idx = _drop_unreferenced(
            rshape, idx, [k for k in keys if isinstance(k, Index)], len(rshape) <= len(shape)
        )
    return Access("", rshape, tuple(idx), tuple(sorted(tiles.items())))


def _index_shape(keys: list[object], tiles: dict[int, Access], dyn: dict[int, Any]) -> tuple:
    """The broadcast shape of a subscript's index arrays (the tile shape)."""
    rshape: tuple[int, ...] = ()
    for d, k in enumerate(keys):
        if isinstance(dyn.get(d), Index):
            rshape = broadcast_shapes(rshape, dyn[d].shape)
        elif d in tiles and d not in dyn:
            if _prod(tiles[d].shape) != 1:  # a one-element tile is a dynamic scalar offset
                rshape = broadcast_shapes(rshape, tiles[d].shape)
        elif isinstance(k, Index):
            rshape = broadcast_shapes(rshape, k.shape)
    return rshape


def _sparse(k: Index) -> Index:
    """``k`` with extent 1 on the axes it does not vary along (an mgrid index is dense)."""
    e = k.expr
    shape = tuple(n if c else 1 for c, n in zip(e.coeffs, e.shape))
    return k if shape == e.shape else Index(IndexExpr(e.base, e.coeffs, shape))


def _drop_unreferenced(
    rshape: tuple[int, ...], idx: list[IndexExpr], keys: list[Index], wide_only: bool = False
) -> tuple[tuple[int, ...], list[IndexExpr]]:
    """``ix, iw, iy = nl.mgrid[0:128, 0:1, 0:512]`` then ``t[iw, iy]``: a tile over the grid
    axes the indices use, [1, 512] (classic NKI; the tutorials' layernorm and rmsnorm rely on
    it), not over every axis of the mgrid. Only axes that no index refers to and along which
    every index is dense (an mgrid axis, not a broadcast) are dropped."""
    n = len(rshape)
    shapes = [(1,) * (n - len(k.shape)) + tuple(k.shape) for k in keys]  # NumPy alignment
    coeffs = [(0,) * (n - len(k.shape)) + tuple(k.expr.coeffs) for k in keys]
    keep = [
        a
        for a in range(n)
        if any(c[a] for c in coeffs)
        or any(ks[a] != rshape[a] for ks in shapes)
        or (wide_only and rshape[a] == 1)
    ]
    if len(keep) == len(rshape) or not keep:
        return rshape, idx
    new_shape = tuple(rshape[a] for a in keep)
    new_idx = [IndexExpr(e.base, tuple(e.coeffs[a] for a in keep), new_shape) for e in idx]
    return new_shape, new_idx


def _index_tile(k: object, what: str) -> Access:
    """An on-chip integer tile used as an index (indirect DMA): its values are the indices."""
    if isinstance(k, _Assigned):
        k = k.view
    assert isinstance(k, TileOps)
    t = k.tensor_()
    if not t.decl.on_chip or not (dtypes.is_int(t.decl.dtype)):
        raise NKIIndexError(
            f"a tile used as an index of {what} must be an integer tile in SBUF/PSUM, got "
            f"{t.decl.dtype} in {t.buffer} ('{t.name}')",
            code="err_unsupported_index_expression",
            loc=user_loc(),
        )
    return k.access_()


def compose(outer: Access, sub: Access) -> Access:
    """Index a view: substitute the sub-access's expressions for the view's tile axes."""
    # View axes of extent 1 carry no coefficient, so an index along them would vanish here; in a
    # whole-tensor view axis a *is* tensor dimension a (stride 1), elsewhere it must be 0.
    identity = len(outer.index) == len(outer.shape) and all(
        e.base.is_const
        and e.base.const == 0
        and all(c == (d == a) for a, c in enumerate(e.coeffs) if c)
        for d, e in enumerate(outer.index)
    )
    lost: dict[int, int] = {}
    for a, n in enumerate(outer.shape):
        se = sub.index[a]
        if n != 1 or (se.base.is_const and se.base.const == 0 and not any(se.coeffs)):
            continue
        if identity:
            lost[a] = 1
            continue
        raise NKIIndexError(
            f"out-of-bound access for tensor '{outer.tensor}': index {se} on a view axis of size 1 "
            f"(view shape {outer.shape}, axis {a}) must be 0",
            code="err_tensor_access_out_of_bound",
            loc=user_loc(),
        )
    out = []
    for d, e in enumerate(outer.index):
        base = e.base
        coeffs = [0] * len(sub.shape)
        for a, c in enumerate(e.coeffs):
            if not c:
                continue
            se = sub.index[a]
            base = base + se.base.scale(c)
            for j, sc in enumerate(se.coeffs):
                coeffs[j] += c * sc
        if d in lost:
            se = sub.index[d]
            base = base + se.base
            coeffs = [x + y for x, y in zip(coeffs, se.coeffs)]
        out.append(IndexExpr(base, tuple(coeffs), sub.shape))
    indirect = outer.indirect + _map_indirect(outer, sub, out)
    return Access(outer.tensor, sub.shape, tuple(out), indirect)


def _map_indirect(
    outer: Access, sub: Access, composed: list[IndexExpr]
) -> tuple[tuple[int, Access], ...]:
    """Move a sub-access's indirect (tile-valued) indices from view axes to tensor dims. Only
    the partition / first dimension of a tensor can be indexed by a tile."""
    out = []
    for a, ind in sub.indirect:
        dims = [d for d, e in enumerate(outer.index) if e.coeffs[a] != 0]
        d = dims[0] if len(dims) == 1 else (a if len(outer.index) == len(outer.shape) else -1)
        if d > 0 and _prod(ind.shape) == 1:  # a dynamic scalar offset may index any dim
            out.append((d, ind))
            continue
        if d > 0 and not any(any(e.coeffs) for e in composed[:d]):
            # ``kv[0, idx_tile[i_p, 0], i_f]``: the leading dims are fixed, so the tile indexes
            # the first dimension of the sub-tensor ``kv[0]``
            out.append((d, ind))
            continue
        if d != 0:
            raise NKIIndexError(
                f"indirect (tile-valued) indices are only supported on the partition / first "
                f"dimension of tensor '{outer.tensor}', not on dimension {d}",
                code="err_indirect_indices_free_dim",
                loc=user_loc(),
            )
        out.append((d, ind))
    return tuple(out)


# --------------------------------------------------------------------------------------------
# Operands and emission (the semantic layer every API call goes through)
# --------------------------------------------------------------------------------------------


def check_scope(t: NkiTensor, st: TraceState) -> None:
    if tuple(st.loops[: len(t.scope)]) != t.scope:
        raise NKIScopeError(
            f"tensor '{t.name}' was created inside a loop body and is used after that loop "
            "ended; allocate it before the loop and update it in place (t[...] = ...)",
            loc=user_loc(),
            related=(("defined", t.decl.loc),) if t.decl.loc else (),
        )


def operand(x: object, api: str, role: str) -> tuple[Access, NkiTensor]:
    """A tile / view argument as an Access (scope-checked)."""
    if isinstance(x, DynOffset):
        x = x.as_value()
    if isinstance(x, _Assigned):
        x = x.view
    if isinstance(x, TileOps):
        t = x.tensor_()
        check_scope(t, state(api))
        return as_2d(x.access_(), t), t
    if isinstance(x, (Index, Scalar)):
        raise NKITypeError(
            f"operand '{role}' of '{api}' is an index expression, not a tile; "
            "materialise index values with nisa.iota",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    raise NKITypeError(
        f"operand '{role}' of '{api}' must be a tile or tensor, got {type(x).__name__}",
        code="err_unsupported_operand",
        loc=user_loc(),
    )


def as_2d(acc: Access, t: NkiTensor | TensorDecl) -> Access:
    """Classic NKI treats a rank-0/1 access as a 2-D tile: ``t[0:128, j]`` (one element per
    partition, e.g. a column of a statistics tile or a slice of a per-channel vector) is a
    ``(P, 1)`` tile, and ``t[i, 0:512]`` (one row: the partition / first dimension fixed) is
    a ``(1, F)`` tile. Which one is decided by the tensor dimension the remaining axis runs
    along (for HBM tensors: a row only along the last dimension). Indirect accesses are left
    alone."""
    if len(acc.shape) >= 2 or acc.indirect:
        return acc
    if not acc.shape:
        shape: tuple[int, ...] = (1, 1)
        idx = tuple(IndexExpr(e.base, (0, 0), shape) for e in acc.index)
        return Access(acc.tensor, shape, idx)
    n = acc.shape[0]
    decl = t.decl if isinstance(t, NkiTensor) else t
    dims = [d for d, e in enumerate(acc.index) if e.coeffs[0]]
    if decl.on_chip:
        along_free = n > 1 and bool(dims) and decl.par_dim not in dims
    else:  # HBM: a run along the last dim is a row (x[i, 0:512]); along another, a column
        # of one element per partition (F[j, 0:128, 1], integer indices dropping their dims)
        along_free = n > 1 and bool(dims) and dims[-1] == len(decl.shape) - 1 and 0 not in dims
    shape = (1, n) if along_free else (n, 1)
    idx = tuple(
        IndexExpr(e.base, (0, e.coeffs[0]) if along_free else (e.coeffs[0], 0), shape)
        for e in acc.index
    )
    return Access(acc.tensor, shape, idx)


def require_buffer(t: NkiTensor, allowed: tuple[str, ...], api: str, role: str) -> None:
    if t.buffer not in allowed:
        space = "hbm" if set(allowed) <= set(HBM_BUFFERS) else "/".join(allowed)
        got = "a tile in" if t.decl.on_chip else "a tensor in"
        raise NKIMemoryError(
            f"expected operand '{role}' of '{api}' to be in address space '{space}', but got "
            f"{got} '{t.buffer}' ('{t.name}')",
            code="err_unsupported_memory",
            loc=user_loc(),
        )


def check_partitions(shape: tuple[int, ...], api: str, role: str) -> None:
    if not shape:
        return
    if shape[0] > PMAX:
        raise NKIShapeError(
            f"number of partitions {shape[0]} of operand '{role}' of '{api}' exceeds the "
            f"architecture limitation of {PMAX} (shape {list(shape)})",
            code="err_num_partition_exceed_arch_limit",
            loc=user_loc(),
        )


def to_mask(mask: object, tile_shape: tuple[int, ...], api: str) -> Mask | None:
    if mask is None or (isinstance(mask, (bool, np.bool_)) and mask):
        return None
    if isinstance(mask, (bool, np.bool_)):  # mask=False: the instruction writes nothing
        return Mask((Cond(IndexExpr(Affine.constant(1), (), ()), "<"),))
    if not isinstance(mask, Pred):
        raise NKIError(
            f"mask= of '{api}' must be an affine predicate built from comparisons of nl.arange "
            f"indices, loop iterators and program ids combined with '&'; got "
            f"{type(mask).__name__}",
            code="err_unsupported_expression_in_mask",
            loc=user_loc(),
        )
    mask = Pred(tuple(_fit_mask_rank(c, tuple(tile_shape)) for c in mask.conds))
    for c in mask.conds:
        try:
            bs = broadcast_shapes(c.expr.shape, tile_shape)
        except NKIIndexError:
            bs = None
        if bs != tuple(tile_shape) and c.expr.shape:
            raise NKIError(
                f"mask of shape {c.expr.shape} does not match the tile shape {tuple(tile_shape)} "
                f"of '{api}'",
                code="err_mask_shape_mismatch",
                loc=user_loc(),
            )
    return Mask(tuple(mask.conds))


def _fit_mask_rank(c: Cond, tile_shape: tuple[int, ...]) -> Cond:
    """A mask built from a higher-rank ``nl.mgrid`` than the tile it masks (the tile dropped
    the mgrid axes its indices do not use): drop axes the condition does not depend on, the
    same ones when the shapes say which."""
    e = c.expr
    extra = len(e.shape) - len(tile_shape)
    if extra <= 0:
        return _align_mask(c, tile_shape) if extra == 0 else c
    free = [a for a in range(len(e.shape)) if not e.coeffs[a]]
    fits = []
    for drop in itertools.combinations(free, extra):
        keep = [a for a in range(len(e.shape)) if a not in drop]
        shape = tuple(e.shape[a] for a in keep)
        if _fits(shape, tile_shape):
            fits.append((shape != tile_shape, keep, shape))
    if not fits:
        return c  # reported as a shape mismatch by the caller
    _, keep, shape = min(fits)
    return Cond(IndexExpr(e.base, tuple(e.coeffs[a] for a in keep), shape), c.op)


def _fits(shape: tuple[int, ...], tile_shape: tuple[int, ...]) -> bool:
    try:
        return broadcast_shapes(shape, tile_shape) == tile_shape
    except NKIIndexError:
        return False


def _align_mask(c: Cond, tile_shape: tuple[int, ...]) -> Cond:
    """A mask from another ``nl.mgrid`` than the tile's indices (``i_f_bn`` of a (512, 6)
    mgrid masking a (128, 512) tile): place each axis the condition uses on the tile axis of
    the same extent, in order. Unchanged when it already broadcasts or no placement fits."""
    e = c.expr
    if _fits(e.shape, tile_shape):
        return c
    used = [a for a, k in enumerate(e.coeffs) if k]
    coeffs, shape, at = [0] * len(tile_shape), [1] * len(tile_shape), 0
    for a in used:
        while at < len(tile_shape) and tile_shape[at] != e.shape[a]:
            at += 1
        if at == len(tile_shape):
            return c
        coeffs[at], shape[at] = e.coeffs[a], e.shape[a]
        at += 1
    return Cond(IndexExpr(e.base, tuple(coeffs), tuple(shape)), c.op)


def new_tensor(
    shape: tuple[int, ...],
    dtype: str,
    buffer: str,
    *,
    name: str | None = None,
    par_dim: int = 0,
    kind: str = "local",
    temp: bool = False,
    api: str = "",
    placement: tuple[int, ...] | None = None,
) -> NkiTensor:
    st = state(api or "tensor creation")
    loc = user_loc()
    if buffer in ("sbuf", "psum"):
        if len(shape) - par_dim < 2:
            raise NKIShapeError(
                f"insufficient rank: on-chip tile of shape {list(shape)} in {buffer} must have a "
                "partition dimension and at least one free dimension, e.g. (128, 1)",
                code="err_insufficient_rank",
                loc=loc,
            )
        p = shape[par_dim]
        if p > PMAX:
            raise NKIShapeError(
                f"number of partitions {p} exceeds the architecture limitation of {PMAX} "
                f"({api or 'allocation'} of shape {list(shape)} in {buffer})",
                code="err_num_partition_exceed_arch_limit",
                loc=loc,
            )
    for s in shape:
        if not isinstance(s, int) or s <= 0:
            raise NKIShapeError(
                f"tensor dimensions must be positive integers, got {shape}", loc=loc
            )
    prefix = {"sbuf": "sb", "psum": "ps"}.get(buffer, "hbm")
    nm = st.fresh(f"{name}_") if name and name in st.tensors else (name or st.fresh(prefix))
    decl = TensorDecl(nm, tuple(shape), dtype, buffer, kind, par_dim, loc, placement=placement)
    st.declare(decl)
    st.append(Alloc(nm, loc))
    return NkiTensor(decl, tuple(st.loops), temp=temp)


def emit(
    kind: str,
    op: str,
    dst: Access | None,
    srcs: tuple[Any, ...],
    *,
    attrs: tuple[tuple[str, Any], ...] = (),
    mask: Mask | None = None,
    accumulate: str | None = None,
    api: str = "",
) -> Instr:
    st = state(api)
    instr = Instr(kind, op, dst, tuple(srcs), attrs, mask, user_loc(), accumulate, api)
    st.append(instr)
    if dst is not None:
        st.written.setdefault(dst.tensor, instr.loc)  # type: ignore[arg-type]
    return instr


def result_tile(shape: tuple[int, ...], dtype: str, buffer: str, api: str) -> NkiTensor:
    return new_tensor(tuple(shape), dtype, buffer, temp=True, api=api)


def const_operand(x: object) -> Const:
    return Const(x.item() if hasattr(x, "item") else x)


def assign(
    dst: Access,
    value: object,
    *,
    accumulate: str | None = None,
    mask: Mask | None = None,
    api: str = "assignment",
    fusable: bool = False,
) -> None:
    """``dst = value`` / ``dst op= value``: write a tile, view or scalar into an access."""
    st = state(api)
    dtensor = st.tensors[dst.tensor]
    dst = as_2d(dst, dtensor)
    if isinstance(value, _Assigned):
        value = value.view
    if isinstance(value, (Index, Scalar)):
        raise NKITypeError(
            "cannot assign an index expression to a tile; materialise it with nisa.iota",
            code="err_cannot_assign_to_index",
            loc=user_loc(),
        )
    if isinstance(value, NkiTensor) and accumulate is None:
        from .language.loop_reduce import results

        lr = results(st).get(value.name)
        if lr is not None:  # dst = nl.loop_reduce(x, op, ...): dst accumulates
            op, xacc, lmask, update = lr
            body = st.bodies[-1]
            if body and body[-1] is update:  # the stand-alone accumulator is not needed
                body.pop()
            check_broadcast_into(xacc.shape, dst.shape, api)
            emit("ew", op, dst, (dst, xacc), mask=mask or lmask, api=api)
            return
    if isinstance(value, TileOps):
        src, t = operand(value, api, "value")
        check_broadcast_into(src.shape, dst.shape, api)
        if fusable and _fuse_into(st, t, dst, accumulate, mask):
            return
        if mask is None and fusable and src.shape == dst.shape:
            mask = _producer_mask(st, t, dst)
        emit("copy", "copy", dst, (src,), mask=mask, accumulate=accumulate, api=api)
        return
    if isinstance(value, (int, float, bool)) or hasattr(value, "dtype"):
        if hasattr(value, "shape") and getattr(value, "shape", ()) != ():
            raise NKITypeError(
                "cannot assign a NumPy array inside a kernel; load data from an HBM tensor",
                code="err_unsupported_operand",
                loc=user_loc(),
            )
        if dtensor.buffer in HBM_BUFFERS:
            raise NKIMemoryError(
                "cannot write a scalar directly to an HBM tensor; fill an SBUF tile and nl.store "
                "it",
                code="err_unsupported_memory",
                loc=user_loc(),
            )
        emit(
            "memset",
            "memset",
            dst,
            (const_operand(value),),
            mask=mask,
            accumulate=accumulate,
            api=api,
        )
        return
    raise NKITypeError(
        f"cannot assign a value of type {type(value).__name__} to a tile",
        code="err_unsupported_operand",
        loc=user_loc(),
    )


def check_broadcast_into(src: tuple[int, ...], dst: tuple[int, ...], api: str) -> None:
    """Source tiles broadcast into destinations; the destination may not be smaller."""
    ok = len(src) <= len(dst) or all(s == 1 for s in src[: len(src) - len(dst)])
    if ok:
        s2 = tuple(src[-len(dst) :]) if len(src) >= len(dst) else (1,) * (len(dst) - len(src)) + src
        ok = all(a == b or a == 1 for a, b in zip(s2, dst))
    if not ok:
        raise NKIShapeError(
            f"destination shape {list(dst)} of '{api}' is smaller than (or incompatible with) "
            f"the source shape {list(src)}",
            code="err_store_dst_shape_smaller_than_other_shape",
            loc=user_loc(),
        )


def _fuse_into(
    st: TraceState, t: NkiTensor, dst: Access, accumulate: str | None, mask: Mask | None
) -> bool:
    """``t[...] = nl.op(...)``: when the op's result tile is referenced nowhere else, let the
    instruction write its target directly (no temporary tile, as the real compiler does)."""
    body = st.bodies[-1]
    if not t.temp or len(body) < 2:
        return False
    last, alloc = body[-1], body[-2]
    if not (isinstance(last, Instr) and isinstance(alloc, Alloc)):
        return False
    if alloc.tensor != t.name or last.dst is None or last.dst.tensor != t.name:
        return False
    if last.accumulate is not None:
        return False
    if last.mask is not None and mask is not None and last.mask != mask:
        return False
    if last.dst.shape != dst.shape or any(_reads(s, t.name) for s in last.srcs):
        return False
    if st.tensors[dst.tensor].dtype != t.decl.dtype:
        return False
    if last.attr("staged") and st.tensors[dst.tensor].buffer != t.decl.buffer:
        # an instruction whose engine the compiler picks (nc_transpose without engine=) assigned
        # to a tile in another buffer: it is staged in its own buffer and copied, not fused
        return False
    # a masked op writes only its selected lanes of the target (the rest keep their values)
    mask = mask if mask is not None else last.mask
    body[-2:] = [
        Instr(last.kind, last.op, dst, last.srcs, last.attrs, mask, last.loc, accumulate, last.api)
    ]
    del st.tensors[t.name]
    st.written.pop(t.name, None)
    st.written.setdefault(dst.tensor, last.loc)  # type: ignore[arg-type]
    return True


def _producer_mask(st: TraceState, t: NkiTensor, dst: Access) -> Mask | None:
    """``t[...] = nl.op(..., mask=m)`` that could not be fused (e.g. another dtype): the copy
    takes the op's mask, so the lanes the op left unwritten do not overwrite the target."""
    body = st.bodies[-1]
    last = body[-1] if body else None
    if not t.temp or not isinstance(last, Instr) or last.mask is None or last.dst is None:
        return None
    if last.dst.tensor != t.name or last.dst.shape != dst.shape:
        return None
    return last.mask


def _reads(src: object, name: str) -> bool:
    if isinstance(src, Access):
        return src.tensor == name or any(_reads(a, name) for _, a in src.indirect)
    return False
