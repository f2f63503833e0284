"""Indexing, assignment and in-place updates on tensor handles: ``t[key]`` (a ``View``),
``t[key] = v``, ``acc += x`` (``psum += nl.matmul(...)``) and ``reshape``.

They turn subscripts into accesses and emit instructions, so they sit above the subscript,
operand and emission modules, which in turn check and create the handle classes of
:mod:`nki.tracer.handles`; :func:`install` attaches them to those classes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ..errors import NKIMemoryError, NKIShapeError, user_loc
from ..ir import HBM_BUFFERS, Access, IndexExpr, Instr, TensorDecl
from ..symbolic import DynSlice, Index, Pred, Scalar
from .emission import assign, emit, new_tensor
from .handles import DynOffset, MaskedOperand, NkiTensor, TileOps, View, _Assigned
from .operand_masks import mask_operand
from .operands import as_2d, operand
from .state import state
from .subscripts import compose, parse_subscript, prod

_FUSE_REFS = 3  # sys.getrefcount of an op result nobody else holds, seen from __setitem__


# --- in-place updates: t[...] += v, psum += nl.matmul(...) -----------------------------------
def _rmw(self: TileOps, value: object, op: str) -> _Assigned:
    # ``psum += nl.matmul(...)``: an op result nobody else holds is computed straight into
    # the target with accumulation (no temporary tile, as the compiler does)
    # (compute instructions only: a DMA result is still copied in by an engine)
    fusable = isinstance(value, NkiTensor) and sys.getrefcount(value) <= _FUSE_REFS + 1
    if fusable:
        body = state().bodies[-1]
        fusable = bool(body) and isinstance(body[-1], Instr) and body[-1].kind != "dma"
    assign(self.access_(), value, accumulate=op, api=f"{op} (in-place)", fusable=fusable)
    return _Assigned(self)


def _iadd(self: TileOps, o: object) -> _Assigned:
    return self._rmw(o, "add")  # type: ignore[attr-defined]


def _isub(self: TileOps, o: object) -> _Assigned:
    return self._rmw(o, "subtract")  # type: ignore[attr-defined]


def _imul(self: TileOps, o: object) -> _Assigned:
    return self._rmw(o, "multiply")  # type: ignore[attr-defined]


# a second ``t += x`` on the same name keeps accumulating in place (psum += nc_matmul(...))
def _again_iadd(self: _Assigned, o: object) -> _Assigned:
    return self.view._rmw(o, "add")  # type: ignore[attr-defined]


def _again_isub(self: _Assigned, o: object) -> _Assigned:
    return self.view._rmw(o, "subtract")  # type: ignore[attr-defined]


def _again_imul(self: _Assigned, o: object) -> _Assigned:
    return self.view._rmw(o, "multiply")  # type: ignore[attr-defined]


# --- whole tensors ----------------------------------------------------------------------------
def _tensor_getitem(self: NkiTensor, key: object) -> View | MaskedOperand:
    return View(self, self.access_())[key]


def _tensor_setitem(self: NkiTensor, key: object, value: object) -> None:
    if isinstance(value, _Assigned):
        return  # the in-place update already happened (t[...] += v)
    fusable = isinstance(value, NkiTensor) and sys.getrefcount(value) <= _FUSE_REFS
    assign(self[key].access_(), value, api="assignment", fusable=fusable)


def _tensor_reshape(self: NkiTensor, shape: tuple[int, ...]) -> NkiTensor:
    """A view of the same HBM storage with another shape (same number of elements). For an
    on-chip tile see :func:`reshape_tile` (the partition dimension stays)."""
    st = state("tensor.reshape")
    shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    if self.decl.on_chip:
        return reshape_tile(self, shape)
    n_old = prod(self.shape)
    if prod(shape) != n_old:
        raise NKIShapeError(
            f"cannot reshape tensor {self.label} of shape {self.shape} ({n_old} elements) "
            f"to {shape} ({prod(shape)} elements)",
            code="err_reshape_size_mismatch",
            loc=user_loc(),
        )
    if self.decl.buffer not in HBM_BUFFERS:
        raise NKIMemoryError(
            f"reshape is supported for HBM tensors; {self.label} is in {self.decl.buffer}",
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


# --- views ------------------------------------------------------------------------------------
def _view_getitem(self: View, key: object) -> View | MaskedOperand:
    if isinstance(key, Pred):  # a matmul operand with its own mask (classic)
        return mask_operand(self, key)
    if self.base.decl.on_chip and self.base.decl.par_dim == 0:
        key = _keep_partition(key, self.acc.shape)
    sub = parse_subscript(key, self.acc.shape, self.base.what)
    acc = compose(self.acc, sub)
    if self.base.decl.on_chip:  # classic tiles stay 2-D: t[:, j] is (P, 1), t[i, :] (1, F)
        acc = as_2d(acc, self.base)
    elif not acc.shape and self.acc.shape:  # HBM: indexed dims drop, the result is >= 1-D
        one = tuple(IndexExpr(e.base, (0,), (1,)) for e in acc.index)
        acc = Access(acc.tensor, (1,), one, acc.indirect)
    return View(self.base, acc)


def _view_setitem(self: View, key: object, value: object) -> None:
    if isinstance(value, _Assigned):
        return
    fusable = isinstance(value, NkiTensor) and sys.getrefcount(value) <= _FUSE_REFS
    assign(self[key].access_(), value, api="assignment", fusable=fusable)


def _view_reshape(self: View, shape: tuple[int, ...]) -> NkiTensor:
    """``tile[...].reshape(shape)``: see :func:`reshape_tile`."""
    shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    return reshape_tile(self, shape)


def _keep_partition(key: object, shape: tuple[int, ...]) -> object:
    """On chip an integer on dim 0 keeps a size-1 partition dim (``t[0]`` of a ``(P, A, B)``
    tile is ``(1, A, B)``): the integer becomes a one-element slice. Beside ``nl.arange`` /
    ``nl.mgrid`` indices it stays an integer: one more advanced index, as in NumPy
    (``a[0, src_mgrid.x]`` in AWS's ``nc_stream_shuffle`` example)."""
    keys = list(key) if isinstance(key, tuple) else [key]
    if not keys or not shape:
        return key
    if any(isinstance(k, (Index, TileOps, _Assigned, DynOffset)) for k in keys[1:]):
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
            f"'{api}' of a view of HBM tensor {t.label}: reshape the tensor itself",
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


# handle class -> the methods attached to it (Python looks operators up on the class)
METHODS: dict[type, dict[str, Callable[..., Any]]] = {
    TileOps: {"_rmw": _rmw, "__iadd__": _iadd, "__isub__": _isub, "__imul__": _imul},
    _Assigned: {"__iadd__": _again_iadd, "__isub__": _again_isub, "__imul__": _again_imul},
    NkiTensor: {
        "__getitem__": _tensor_getitem,
        "__setitem__": _tensor_setitem,
        "reshape": _tensor_reshape,
    },
    View: {"__getitem__": _view_getitem, "__setitem__": _view_setitem, "reshape": _view_reshape},
}


def install() -> None:
    """Attach indexing, assignment, in-place updates and ``reshape`` to the handle classes
    (before ``views.install``, which replaces ``View.reshape``)."""
    for cls, methods in METHODS.items():
        for name, fn in methods.items():
            setattr(cls, name, fn)
