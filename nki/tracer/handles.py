"""Tensor handles: ``NkiTensor`` (a tensor in HBM, SBUF or PSUM), ``View`` (an indexed access
into one), the marker of an in-place update, dynamic offsets and masked matmul operands.

Python operators on handles (``a + b``, ``t < 0``) become ``nki.language`` calls; the language
registers those calls in ``TILE_OPERATORS`` (it sits above the tracer). Indexing, assignment
and in-place updates (``t[key]``, ``t[key] = v``, ``t += v``, ``reshape``) need the subscript,
operand and emission modules, which check and create handles and so sit above this module:
:mod:`nki.tracer.tensors` attaches those methods when the tracer is imported."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .. import dtypes
from ..errors import (
    NKIAttributeError,
    NKIControlFlowError,
    NKIError,
    NKIMemoryError,
    NKIShapeError,
    NKITypeError,
    user_loc,
)
from ..ir import HBM_BUFFERS, Access, Affine, Cond, IndexExpr, LoopSym, TensorDecl, tensor_label
from ..symbolic import Index, Pred, Scalar
from . import python_state
from .state import private_arguments, state

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
            f"{list(getattr(self, 'shape', ()))}); see the view methods in "
            "docs/guides/writing-kernels.md",
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

    def __rpow__(self, o):
        return _op("power")(o, self)

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

    def __rand__(self, o):
        return _op("bitwise_and")(o, self)

    def __ror__(self, o):
        return _op("bitwise_or")(o, self)

    def __rxor__(self, o):
        return _op("bitwise_xor")(o, self)

    def __rlshift__(self, o):
        return _op("left_shift")(o, self)

    def __rrshift__(self, o):
        return _op("right_shift")(o, self)

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


class TensorWhat:
    """``tensor 'out'`` (see ``nki.ir.tensor_label``), formatted when a message is built: reading
    the kernel's source for the user's variable name costs nothing on the error-free path."""

    __slots__ = ("decl",)

    def __init__(self, decl: TensorDecl) -> None:
        self.decl = decl

    def __str__(self) -> str:
        return f"tensor {tensor_label(self.decl)}"


class NkiTensor(TileOps):
    """A tensor in HBM, SBUF or PSUM (kernel parameter, allocation or op result)."""

    __slots__ = ("decl", "scope", "temp", "whole", "__weakref__")

    def __init__(self, decl: TensorDecl, scope: tuple[LoopSym, ...], temp: bool = False) -> None:
        self.decl = decl
        self.scope = scope
        self.temp = temp  # produced by an op (candidate for writing straight into its target)
        self.whole: Access | None = None  # ``access_``'s, made on its first call

    @property
    def shape(self) -> tuple[int, ...]:
        return self.decl.shape

    @property
    def dtype(self) -> dtypes.NkiDtype:
        return dtypes.NkiDtype(self.decl.dtype)

    @property
    def buffer(self) -> str:
        """The tensor's memory. A kernel's array argument is shared HBM, except that a
        current-API launch of one instance reports it as private HBM (``nl.hbm``), as NKI 0.7
        wraps arguments (shared only under LNC=2)."""
        d = self.decl
        if d.kind == "param" and d.buffer == "shared_hbm" and private_arguments():
            return "private_hbm"
        return d.buffer

    @property
    def name(self) -> str:
        return self.decl.name

    @property
    def label(self) -> str:
        """How messages name the tensor: the user's variable (``'out'``), else the internal
        name with the line that created it (``nki.ir.tensor_label``)."""
        return tensor_label(self.decl)

    @property
    def what(self) -> TensorWhat:
        """``tensor 'out'`` for the messages of an indexing, named only if an error needs it."""
        return TensorWhat(self.decl)

    def access_(self) -> Access:
        """The access of the whole tensor (one immutable object per tensor)."""
        if self.whole is not None:
            return self.whole
        shape = self.decl.shape
        idx = []
        for d in range(len(shape)):
            coeffs = tuple(1 if j == d and shape[d] > 1 else 0 for j in range(len(shape)))
            idx.append(IndexExpr(Affine(), coeffs, shape))
        self.whole = Access(self.decl.name, shape, tuple(idx))
        return self.whole

    def tensor_(self) -> NkiTensor:
        return self

    def __bool__(self) -> bool:
        # an argument or an allocation (nl.ndarray in any buffer) is truthy, as any Python
        # object and as in NKI's tracer: `if bias:` tests that it was given; a value computed
        # by an operator (`t > 0`) stays ambiguous, its truth exists only on the device
        if is_register(self):  # (a register's value exists on the device only)
            truth = _op("while_register")(self)  # `while reg:` (NKI 0.4-0.6): a device loop
            if truth is not None:
                return truth
            raise NKIControlFlowError(
                "a register (a one-element SBUF int tile) cannot drive Python control flow: its "
                "value exists only when the kernel runs; loop on it with nl.fori_loop / "
                "nl.while_loop / nl.dynamic_range (or 'while reg:' with the register alone as "
                "the test), or use it as a scalar_offset",
                code="err_dynamic_control_flow_not_supported",
                loc=user_loc(),
            )
        if self.decl.buffer in HBM_BUFFERS or not self.temp:
            return True
        return TileOps.__bool__(self)

    def view(self, dtype: object) -> NkiTensor:
        """``t.view(dtype)``: the same HBM bytes reinterpreted as ``dtype`` (no conversion). With
        a different element size the last dimension is rescaled (its bytes must divide evenly)."""
        st = state("tensor.view")
        new_dt = dtypes.name_of(dtype)
        if self.decl.buffer not in HBM_BUFFERS:
            raise NKIMemoryError(
                f"view(dtype) is supported for HBM tensors; {self.label} is in {self.decl.buffer}",
                code="err_unsupported_memory",
                loc=user_loc(),
            )
        old_size, new_size = dtypes.itemsize(self.decl.dtype), dtypes.itemsize(new_dt)
        shape = tuple(self.shape)
        if old_size != new_size:
            last = shape[-1] * old_size
            if last % new_size:
                raise NKIShapeError(
                    f"cannot view tensor {self.label} {self.decl.dtype}{list(shape)} as "
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

    def __repr__(self) -> str:
        return f"<view {self.acc} {self.base.decl.dtype}{list(self.shape)}>"


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


python_state.SAME_AS[_Assigned] = lambda a: a.view  # `t += x` keeps t the same tile


# Python operators NKI gives tiles no meaning for: a located error naming the call to use
_NOT_TILE_OPERATORS = {
    "__mod__": ("%", "nl.mod (Python's remainder) or nl.fmod"),
    "__rmod__": ("%", "nl.mod (Python's remainder) or nl.fmod"),
    "__floordiv__": ("//", "nl.floor(nl.divide(x, y))"),
    "__rfloordiv__": ("//", "nl.floor(nl.divide(x, y))"),
    "__matmul__": ("@", "nl.matmul or nisa.nc_matmul"),
    "__rmatmul__": ("@", "nl.matmul or nisa.nc_matmul"),
    "__divmod__": ("divmod()", "nl.mod and nl.divide"),
    "__rdivmod__": ("divmod()", "nl.mod and nl.divide"),
    "__abs__": ("abs()", "nl.abs"),
    "__round__": ("round()", "nl.floor, nl.ceil or a cast to an int dtype (rounds to even)"),
}


def _not_a_tile_operator(symbol: str, instead: str) -> Callable[..., Any]:
    def refuse(self: Any, *_: Any) -> Any:
        raise NKITypeError(
            f"the Python operator {symbol} is not defined on NKI tiles ({type(self).__name__} "
            f"{list(getattr(self, 'shape', ()))}); use {instead}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )

    return refuse


for _name, (_symbol, _instead) in _NOT_TILE_OPERATORS.items():
    setattr(TileOps, _name, _not_a_tile_operator(_symbol, _instead))


def _numpy_on_a_tile(self: Any, fn: Any, *_: Any, **__: Any) -> Any:
    """NumPy's ufuncs and functions (``np.exp(t)``, ``np.sum(t, axis=1)``) on a tile: a tile
    holds no values while the kernel is traced, so the call is a located error naming the
    ``nl`` function to use."""
    name = getattr(fn, "__name__", str(fn))
    raise NKITypeError(
        f"np.{name} on an NKI tile ({type(self).__name__} {list(getattr(self, 'shape', ()))}): "
        f"NumPy runs on the host and a tile has no values while the kernel is traced; use "
        f"nl.{name} (or the nki.isa instruction) inside the kernel",
        code="err_unsupported_operand",
        loc=user_loc(),
    )


def _tile_len(self: Any) -> int:
    raise NKITypeError(
        f"len() of an NKI tile ({type(self).__name__} {list(getattr(self, 'shape', ()))}): "
        "use t.shape[0] for its partitions",
        code="err_unsupported_operand",
        loc=user_loc(),
    )


TileOps.__array_ufunc__ = lambda self, ufunc, method, *a, **k: _numpy_on_a_tile(self, ufunc)
TileOps.__array_function__ = lambda self, func, types, args, kwargs: _numpy_on_a_tile(self, func)
TileOps.__len__ = _tile_len


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
    return isinstance(o, Scalar) and math.prod(tuple(t.shape)) == 1


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


def is_register(x: Any) -> bool:
    """A virtual register: a one-element SBUF tile (a device loop's iterator is one)."""
    return isinstance(x, TileOps) and x.tensor_().buffer == "sbuf" and x.size == 1


class MaskedOperand:
    """``tile[pred]``: a Tensor-engine operand with the conditions its elements must meet."""

    __slots__ = ("tile", "conds")

    def __init__(self, tile: object, conds: tuple[Cond, ...]) -> None:
        self.tile = tile
        self.conds = conds

    def __getitem__(self, key: object) -> MaskedOperand:
        if not isinstance(key, Pred):
            raise NKIError(
                "a masked operand (tile[pred]) can only be masked further (tile[p][q]); "
                f"index the tile before masking it, got {key!r}",
                code="err_unsupported_index_expression",
                loc=user_loc(),
            )
        return MaskedOperand(self.tile, self.conds + key.conds)

    def __repr__(self) -> str:
        return f"<masked operand {self.tile!r}[{Pred(self.conds)!r}]>"
