"""Selection, shape and fused ops of nki.language: ``where``, ``broadcast_to``,
``expand_dims``, ``static_cast``, ``gather_flattened``, ``softmax`` and ``rms_norm``."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes
from ..errors import NKIShapeError, NKITypeError, user_loc
from ..symbolic import Pred
from ..tracer import (
    NkiTensor,
    TileOps,
    View,
    _Assigned,
    check_partitions,
    check_start_partition,
    const_operand,
    emit,
    generation,
    operand,
    require_buffer,
    result_tile,
    to_mask,
    tracing,
)
from .ops import tile_operands
from .reductions import expand_access, insert_unit_axes, normalize_axes


def _unwrap(x: Any) -> Any:
    return x.view if isinstance(x, _Assigned) else x


def where(condition: Any, x: Any, y: Any, *, dtype: Any = None, mask: Any = None, **_kw: Any):
    """``x`` where ``condition`` is non-zero, else ``y`` (tiles or scalars, NumPy broadcasting).
    The result dtype is the promotion of x and y unless ``dtype`` is given. ``condition`` may
    also be an affine predicate over ``nl.arange`` indices (``i_p < n``, classic kernels: what
    ``nisa.affine_select`` cannot express), over the shape of ``x`` and ``y``: ``y`` is written
    everywhere, then ``x`` where the predicate holds."""
    api = "nl.where"
    if isinstance(condition, Pred):
        srcs, dts, shape = tile_operands((0, x, y), api)
        both = condition if mask is None else condition & mask
        masks = (to_mask(mask, shape, api), to_mask(both, shape, api))
    else:
        srcs, dts, shape = tile_operands((condition, x, y), api)
        masks = (to_mask(mask, shape, api),)
    out_dt = dtypes.name_of(dtype) if dtype is not None else dtypes.promote(dts[1], dts[2])
    out = result_tile(shape, out_dt, "sbuf", api)
    emit("select", "where", out.access_(), tuple(srcs), mask=masks[0], api=api)
    if len(masks) > 1:  # (the predicate's elements: the same select, taking x)
        srcs[0] = const_operand(1)
        emit("select", "where", out.access_(), tuple(srcs), mask=masks[1], api=api)
    return out


def broadcast_to(src: Any, shape: Any = None, *, dtype: Any = None, **_kw: Any) -> NkiTensor:
    """A new SBUF tile of ``shape`` holding ``src`` broadcast NumPy-style; src may have one
    element, one partition (broadcast across partitions) or one element per partition."""
    api = "nl.broadcast_to"
    if shape is None:
        raise NKITypeError(f"'{api}' needs shape=", code="err_unsupported_operand", loc=user_loc())
    shape = tuple(int(s) for s in shape)
    acc, t = operand(_unwrap(src), api, "src")
    require_buffer(t, ("sbuf", "psum"), api, "src")
    s = acc.shape
    padded = (1,) * (len(shape) - len(s)) + tuple(s)
    if len(s) > len(shape) or any(a != b and a != 1 for a, b in zip(padded, shape)):
        raise NKIShapeError(
            f"cannot broadcast a tile of shape {list(s)} to {list(shape)} in '{api}'",
            code="err_broadcast_shape_mismatch",
            loc=user_loc(),
        )
    check_partitions(shape, api, "shape")
    out_dt = dtypes.name_of(dtype) if dtype is not None else t.decl.dtype
    out = result_tile(shape, out_dt, "sbuf", api)
    emit("copy", "broadcast_to", out.access_(), (acc,), api=api)
    return out


def expand_dims(data: Any, axis: Any) -> View:
    """A view of ``data`` with new axes of extent 1 at the positions ``axis`` (an int or a
    list) of the result, as ``np.expand_dims``. Classic NKI only adds trailing axes (``axis``
    ``ndim``, or ``[ndim, ndim+1, ...]``); the current API adds them at any free position,
    never before the partition axis (that would move the partitions into the free axes)."""
    api = "nl.expand_dims"
    data = _unwrap(data)
    acc, t = operand(data, api, "data")
    axes = list(axis) if isinstance(axis, (list, tuple)) else [axis]
    nd = len(getattr(data, "shape", acc.shape))  # a (P,) partition vector counts as 1-D
    total = nd + len(axes)
    if not all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in axes):
        raise NKITypeError(
            f"'{api}' takes an int axis or a list of int axes, got {axis!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    got = sorted(int(a) + total if a < 0 else int(a) for a in axes)
    trailing = list(range(nd, total))
    if got == trailing:
        return View(t, expand_access(acc, total - len(acc.shape)))
    free = all(1 <= a < total for a in got) and len(set(got)) == len(got)
    current = generation(sensitive=True) == "current"
    if current and free and nd == len(acc.shape):
        return View(t, insert_unit_axes(acc, got))
    rule = (
        f"the new axes must be free axes (1 to {total - 1}), each once"
        if current
        else f"classic NKI only adds trailing axes: for a {nd}-D tile axis must be {trailing}"
    )
    raise NKIShapeError(
        f"'{api}' cannot add axes at {axis!r}: {rule}",
        code="err_expand_dims_non_trailing_axis",
        loc=user_loc(),
    )


def static_cast(x: Any, dtype: Any, *, mask: Any = None, **_kw: Any) -> NkiTensor:
    """A copy of ``x`` converted to ``dtype`` (value conversion: floats round to nearest even,
    float -> int rounds to nearest even and saturates). Outside a kernel, on a NumPy array
    (as classic test scripts use it to prepare inputs), it returns the converted array."""
    api = "nl.static_cast"
    scalar = isinstance(x, (int, float, np.number)) and not isinstance(x, bool)
    if scalar or (not tracing() and isinstance(x, np.ndarray)):
        # a NumPy array outside a kernel, or a scalar anywhere: converted now, by the same
        # rules (a scalar becomes a typed NumPy scalar usable as an operand)
        name = dtypes.name_of(dtype)
        got = dtypes.cast(np.asarray(x, dtype=np.float64), name, True).astype(dtypes.storage(name))
        return got[()] if scalar else got
    acc, t = operand(_unwrap(x), api, "x")
    require_buffer(t, ("sbuf", "psum"), api, "x")
    check_start_partition(acc, t, api, "x")
    out = result_tile(acc.shape, dtypes.name_of(dtype), "sbuf", api)
    emit("copy", "static_cast", out.access_(), (acc,), mask=to_mask(mask, acc.shape, api),
         api=api)  # fmt: skip
    return out


def gather_flattened(
    data: Any, indices: Any, axis: Any = 0, *, mask: Any = None, dtype: Any = None, **_kw: Any
):
    """Per partition, gather elements of ``data`` (free axes flattened) at ``indices``
    (a ``(P, N)`` integer tile, uint32 in classic NKI): ``out[p, j] = data[p].ravel()[idx[p, j]]``.
    Out-of-range indices give garbage (NaN / a sentinel here), as on hardware. ``axis``
    (NKI 0.7's parameter) must be its default, 0: that is the gather described above."""
    api = "nl.gather_flattened"
    if not isinstance(axis, int) or isinstance(axis, bool) or axis != 0:
        raise NKITypeError(
            f"'{api}' gathers within each partition from its flattened free axes (axis=0); "
            f"nki-sim does not simulate axis={axis!r}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    dacc, dt = operand(_unwrap(data), api, "data")
    iacc, it = operand(_unwrap(indices), api, "indices")
    require_buffer(dt, ("sbuf", "psum"), api, "data")
    require_buffer(it, ("sbuf", "psum"), api, "indices")
    if not dtypes.is_int(it.decl.dtype):
        raise NKITypeError(
            f"indices of '{api}' must be an integer tile (uint32), got {it.decl.dtype}",
            code="err_unsupported_dtype",
            loc=user_loc(),
        )
    if dacc.shape[0] != iacc.shape[0]:
        raise NKIShapeError(
            f"'{api}': data has {dacc.shape[0]} partitions but indices has {iacc.shape[0]}",
            code="err_partition_mismatch",
            loc=user_loc(),
        )
    out_dt = dtypes.name_of(dtype) if dtype is not None else dt.decl.dtype
    out = result_tile(iacc.shape, out_dt, "sbuf", api)
    emit("gather", "gather_flattened", out.access_(), (dacc, iacc),
         mask=to_mask(mask, iacc.shape, api), api=api)  # fmt: skip
    return out


def _fp_tile(x: Any, api: str) -> tuple[Any, NkiTensor]:
    acc, t = operand(_unwrap(x), api, "x")
    require_buffer(t, ("sbuf", "psum"), api, "x")
    check_partitions(acc.shape, api, "x")
    check_start_partition(acc, t, api, "x")
    return acc, t


def softmax(x: Any, axis: Any, *, dtype: Any = None, compute_dtype: Any = None,
            mask: Any = None, **_kw: Any) -> NkiTensor:  # fmt: skip
    """``exp(x - max(x)) / sum(exp(x - max(x)))`` along free ``axis`` in fp32; the partition
    axis cannot be the softmax axis."""
    api = "nl.softmax"
    acc, t = _fp_tile(x, api)
    axes = normalize_axes(axis, len(acc.shape), api)
    out_dt = dtypes.name_of(dtype) if dtype is not None else t.decl.dtype
    out = result_tile(acc.shape, out_dt, "sbuf", api)
    emit("softmax", "softmax", out.access_(), (acc,), attrs=(("axes", axes),),
         mask=to_mask(mask, acc.shape, api), api=api)  # fmt: skip
    return out


def rms_norm(x: Any, w: Any, axis: Any, n: Any, epsilon: float = 1e-6, *, dtype: Any = None,
             compute_dtype: Any = None, mask: Any = None, **_kw: Any) -> NkiTensor:  # fmt: skip
    """``x / sqrt(sum(x**2, axis) / n + epsilon) * w`` in fp32 (``w`` broadcasts against x)."""
    api = "nl.rms_norm"
    acc, t = _fp_tile(x, api)
    axes = normalize_axes(axis, len(acc.shape), api)
    if not isinstance(w, TileOps) and not isinstance(w, _Assigned):
        raise NKITypeError(f"w of '{api}' must be a tile", code="err_unsupported_operand",
                           loc=user_loc())  # fmt: skip
    wacc, wt = operand(_unwrap(w), api, "w")
    require_buffer(wt, ("sbuf", "psum"), api, "w")
    out_dt = dtypes.name_of(dtype) if dtype is not None else t.decl.dtype
    out = result_tile(acc.shape, out_dt, "sbuf", api)
    emit("rms_norm", "rms_norm", out.access_(), (acc, wacc),
         attrs=(("axes", axes), ("n", float(n)), ("epsilon", float(epsilon))),
         mask=to_mask(mask, acc.shape, api), api=api)  # fmt: skip
    return out


__all__ = [
    "broadcast_to",
    "expand_dims",
    "gather_flattened",
    "rms_norm",
    "softmax",
    "static_cast",
    "where",
]
