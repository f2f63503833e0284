"""Tensor handles and their operators: ``NkiTensor`` (a tensor in HBM, SBUF or PSUM), ``View``
(an indexed access into one), in-place updates and dynamic offsets.

Python operators on handles (``a + b``, ``t[...] = v``, ``acc += x``) become ``nki.language``
calls; the language registers those calls in ``TILE_OPERATORS`` (it sits above the tracer)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .. import dtypes
from ..errors import (
    NKIAttributeError,
    NKIControlFlowError,
    NKIMemoryError,
    NKIShapeError,
    user_loc,
)
from ..ir import HBM_BUFFERS, Access, Affine, IndexExpr, Instr, LoopSym, TensorDecl
from ..symbolic import DynSlice, Index, Scalar
from .emission import assign, emit, new_tensor
from .operands import as_2d, operand
from .state import state
from .subscripts import compose, parse_subscript, prod

# name -> nki.language function behind a tile operator or method (add, subtract, ..., copy,
# broadcast_to, expand_dims); filled by nki.language when it is imported
TILE_OPERATORS: dict[str, Callable[..., Any]] = {}


def _op(name: str) -> Callable[..., Any]:
    return TILE_OPERATORS[name]


class TileOps:
    """Python operators on tiles map to nki.language ops."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        # only reached for attributes tiles do not have: name the API, not a Python internal
        if name.startswith("_") or name in ("shape", "dtype"):
            raise AttributeError(name)
        raise NKIAttributeError(
            f"NKI tiles and tensors have no attribute '{name}' ({type(self).__name__} "
            f"{list(getattr(self, 'shape', ()))}); see the README's list of tile methods",
            loc=user_loc(),
        )

    def __add__(self, o):
        if _dynamic_index(self, o):  # idx_tile[0, j] + i_f: a dynamic index
            return DynOffset(self, o)
        return _op("add")(self, o)

    def __radd__(self, o):
        if _dynamic_index(self, o):
            return DynOffset(self, o)
        return _op("add")(o, self)

    def __sub__(self, o):
        return _op("subtract")(self, o)

    def __rsub__(self, o):
        return _op("subtract")(o, self)

    def __mul__(self, o):
        return _op("multiply")(self, o)

    def __rmul__(self, o):
        return _op("multiply")(o, self)

    def __truediv__(self, o):
        return _op("divide")(self, o)

    def __rtruediv__(self, o):
        return _op("divide")(o, self)

    def __neg__(self):
        return _op("negative")(self)

    def __pow__(self, o):
        return _op("power")(self, o)

    def __lt__(self, o):
        return _op("less")(self, o)

    def __le__(self, o):
        return _op("less_equal")(self, o)

    def __gt__(self, o):
        return _op("greater")(self, o)

    def __ge__(self, o):
        return _op("greater_equal")(self, o)

    # `t == None` / `t != None` (optional tensor arguments) is a Python comparison
    def __eq__(self, o):  # type: ignore[override]
        return False if o is None else _op("equal")(self, o)

    def __ne__(self, o):  # type: ignore[override]
        return True if o is None else _op("not_equal")(self, o)

    def __and__(self, o):
        return _op("bitwise_and")(self, o)

    def __or__(self, o):
        return _op("bitwise_or")(self, o)

    def __xor__(self, o):
        return _op("bitwise_xor")(self, o)

    def __invert__(self):
        return _op("invert")(self)

    def __lshift__(self, o):
        return _op("left_shift")(self, o)

    def __rshift__(self, o):
        return _op("right_shift")(self, o)

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        raise NKIControlFlowError(
            "the truth value of a tile is ambiguous and cannot drive Python control flow; "
            "use nl.where / masks, and '&', '|', '~' for element-wise logic",
            code="err_ambiguous_tensor_truth_value",
            loc=user_loc(),
        )

    def __int__(self) -> int:
        raise NKIControlFlowError(
            "int() of a tile: its values exist only when the kernel runs, not while it is "
            "traced; keep it a tile (use it as an operand, an indirect index t[idx, ...] or a "
            "mask) or pass the number to the kernel as a Python scalar",
            code="err_dynamic_control_flow_not_supported",
            loc=user_loc(),
        )

    def __float__(self) -> float:
        raise NKIControlFlowError(
            "float() of a tile: its values exist only when the kernel runs, not while it is "
            "traced; keep it a tile (use it as an operand) or pass the number to the kernel as "
            "a Python scalar",
            code="err_dynamic_control_flow_not_supported",
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
        return _op("broadcast_to")(self, shape)

    def astype(self, dtype: object):
        """``t.astype(dtype)``: a copy of the tile converted to ``dtype``."""
        return _op("copy")(self, dtype=dtype)

    def expand_dims(self, axis: object):
        """``t.expand_dims(axis)``: ``nl.expand_dims(t, axis)`` (trailing axes only)."""
        return _op("expand_dims")(self, axis)

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

    def __bool__(self) -> bool:
        # an argument or an allocation (nl.ndarray in any buffer) is truthy, as any Python
        # object and as in NKI's tracer: `if bias:` tests that it was given; a value computed
        # by an operator (`t > 0`) stays ambiguous, its truth exists only on the device
        if self.decl.buffer in HBM_BUFFERS or not self.temp:
            return True
        return TileOps.__bool__(self)

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
        n_old = prod(self.shape)
        if prod(shape) != n_old:
            raise NKIShapeError(
                f"cannot reshape tensor '{self.name}' of shape {self.shape} ({n_old} elements) "
                f"to {shape} ({prod(shape)} elements)",
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
        if self.base.decl.on_chip and self.base.decl.par_dim == 0:
            key = _keep_partition(key, self.acc.shape)
        sub = parse_subscript(key, self.acc.shape, f"tensor '{self.base.name}'")
        acc = compose(self.acc, sub)
        if self.base.decl.on_chip:  # classic tiles stay 2-D: t[:, j] is (P, 1), t[i, :] (1, F)
            acc = as_2d(acc, self.base)
        elif not acc.shape and self.acc.shape:  # HBM: indexed dims drop, the result is >= 1-D
            one = tuple(IndexExpr(e.base, (0,), (1,)) for e in acc.index)
            acc = Access(acc.tensor, (1,), one, acc.indirect)
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


def _keep_partition(key: object, shape: tuple[int, ...]) -> object:
    """On chip an integer on dim 0 keeps a size-1 partition dim (``t[0]`` of a ``(P, A, B)``
    tile is ``(1, A, B)``): the integer becomes a one-element slice."""
    keys = list(key) if isinstance(key, tuple) else [key]
    if not keys or not shape:
        return key
    k = keys[0]
    if isinstance(k, Scalar):
        keys[0] = DynSlice(k, 1)
    elif isinstance(k, int) and not isinstance(k, bool):
        i = k + shape[0] if -shape[0] <= k < 0 else k
        if not 0 <= i < shape[0]:
            return key  # reported as out of bounds by the subscript parser
        keys[0] = slice(i, i + 1)
    else:
        return key
    return tuple(keys)


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
    if prod(shape) != prod(acc.shape) or not shape or shape[0] != acc.shape[0]:
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
    return isinstance(o, Scalar) and prod(tuple(t.shape)) == 1


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
        return _op("add")(self.tile, self.part)

    def __add__(self, o: object) -> DynOffset:
        if isinstance(o, (Index, Scalar, int)) and not isinstance(o, bool):
            return DynOffset(self.tile, self.part + o)
        return NotImplemented

    __radd__ = __add__
