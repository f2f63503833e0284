"""``nl.all_reduce``: reduce a tile across the SPMD instances of a launch grid."""

from __future__ import annotations

from typing import Any

from .. import dtypes
from ..errors import NKIError, user_loc
from ..optable import lookup_reducer
from ..tracer import NkiTensor, emit, operand, require_buffer, result_tile, state, to_mask

__all__ = ["all_reduce"]


def all_reduce(
    x: Any,
    op: Any,
    program_axes: int | tuple[int, ...] | list[int],
    *,
    dtype: Any = None,
    mask: Any = None,
    parallel_reduce: bool = True,
    asynchronous: bool = False,
    **_kw: Any,
) -> NkiTensor:
    """Reduce the on-chip tile ``x`` with ``op`` (add, multiply, maximum, minimum, ...) over the
    SPMD instances that differ only along ``program_axes`` (one grid axis or a tuple); every
    one of them receives the reduced tile (a new SBUF tile of ``dtype``, default ``x``'s).

    It is a collective: each instance stops at the call until all the instances of its group
    have reached it. The reduction runs in fp32 in the order of the instances' grid
    coordinates, whatever order they ran in. ``parallel_reduce`` and ``asynchronous`` are
    performance hints and do not change the result here.

    Constraints: ``x`` is in SBUF or PSUM; ``op`` has an identity (a reduction operator);
    ``program_axes`` are distinct axes of the launch grid."""
    api = "nl.all_reduce"
    st = state(api)
    row = lookup_reducer(op, api)
    acc_x, tx = operand(x, api, "x")
    require_buffer(tx, ("sbuf", "psum"), api, "x")
    axes = _program_axes(program_axes, tuple(st.grid_shape), api)
    out_dt = dtypes.name_of(dtype) if dtype is not None else tx.decl.dtype
    out = result_tile(tuple(acc_x.shape), out_dt, "sbuf", api)
    m = to_mask(mask, tuple(acc_x.shape), api)
    emit("all_reduce", row.name, out.access_(), (acc_x,), attrs=(("axes", axes),), mask=m, api=api)
    return out


def _program_axes(axes: Any, grid: tuple[int, ...], api: str) -> tuple[int, ...]:
    items = tuple(axes) if isinstance(axes, (tuple, list)) else (axes,)
    nd = max(len(grid), 1)  # a kernel without a grid is one instance along axis 0
    for a in items:
        if isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < nd:
            raise NKIError(
                f"'{api}' program_axes={axes!r}: each axis must be an int in [0, {nd}) for the "
                f"launch grid {list(grid)}",
                code="err_invalid_program_axis",
                loc=user_loc(),
            )
    if len(set(items)) != len(items):
        raise NKIError(
            f"'{api}' program_axes={axes!r} names an axis twice",
            code="err_invalid_program_axis",
            loc=user_loc(),
        )
    return tuple(sorted(items))
