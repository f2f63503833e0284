"""Free-axis reductions: ``nl.sum / max / min / mean / prod / all / var``.

A reduction runs per partition over free axes only (the partition axis 0 cannot be reduced
by these APIs; use ``nisa.tensor_partition_reduce`` or a matmul with a ones vector). Without
``keepdims`` the reduced axes disappear; when only the partition axis is left the result is
a ``(P,)`` tile that broadcasts along the free axis of a ``(P, F)`` tile, so
``nl.subtract(x, nl.max(x, axis=1))`` subtracts each row's maximum."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import dtypes
from ..errors import NKIShapeError, NKITypeError, user_loc
from ..ir import Access, IndexExpr
from ..tracer import (
    NkiTensor,
    _Assigned,
    check_partitions,
    check_start_partition,
    emit,
    operand,
    result_tile,
    to_mask,
)

# reduction name -> (op-table row of the combining op, default result-dtype rule)
REDUCTIONS: dict[str, tuple[str, str]] = {
    "sum": ("add", "same"),
    "max": ("maximum", "same"),
    "min": ("minimum", "same"),
    "prod": ("multiply", "same"),
    "all": ("logical_and", "bool"),
    "mean": ("add", "float"),
    "var": ("add", "float"),
}


class PartitionVector(NkiTensor):
    """A reduction result with only the partition axis left: ``.shape == (P,)``.

    It is stored as a ``(P, 1)`` tile (on-chip tiles are at least 2-D), which is what makes it
    broadcast along the free axis of ``(P, F)`` operands."""

    __slots__ = ()

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.decl.shape[0],)


def normalize_axes(axis: Any, ndim: int, api: str) -> tuple[int, ...]:
    """Validate ``axis`` (int or list/tuple of ints, negative allowed) against a tile rank:
    free axes only (1 .. ndim-1), no duplicates."""
    if axis is None:
        raise NKITypeError(
            f"'{api}' needs an explicit axis= (free axes 1..{ndim - 1}); reducing every axis "
            "would include the partition axis",
            code="err_unsupported_reduction_axis",
            loc=user_loc(),
        )
    raw = list(axis) if isinstance(axis, (list, tuple)) else [axis]
    out: list[int] = []
    for a in raw:
        if not isinstance(a, int) or isinstance(a, bool):
            raise NKITypeError(
                f"axis of '{api}' must be an int or a list of ints, got {a!r}",
                code="err_unsupported_reduction_axis",
                loc=user_loc(),
            )
        a2 = a + ndim if a < 0 else a
        if not 0 <= a2 < ndim:
            raise NKIShapeError(
                f"axis {a} of '{api}' is out of range for a {ndim}-D tile",
                code="err_unsupported_reduction_axis",
                loc=user_loc(),
            )
        if a2 == 0:
            raise NKIShapeError(
                f"'{api}' cannot reduce along the partition axis (axis 0); reductions run per "
                "partition over free axes. Transpose the tile (nl.transpose / nisa.nc_transpose) "
                "or use nisa.tensor_partition_reduce",
                code="err_unsupported_reduction_axis",
                loc=user_loc(),
            )
        if a2 in out:
            raise NKIShapeError(
                f"axis {a} is repeated in axis={axis!r} of '{api}'",
                code="err_unsupported_reduction_axis",
                loc=user_loc(),
            )
        out.append(a2)
    return tuple(sorted(out))


def reduce(
    name: str, x: Any, axis: Any, *, dtype: Any = None, mask: Any = None, keepdims: bool = False
) -> NkiTensor:
    """Emit one reduction instruction (see the module docstring for the rules)."""
    api = f"nl.{name}"
    if isinstance(x, _Assigned):
        x = x.view
    acc, t = operand(x, api, "x")
    check_start_partition(acc, t, api, "x")
    if t.buffer not in ("sbuf", "psum"):
        raise NKITypeError(
            f"operand 'x' of '{api}' must be an on-chip tile (sbuf/psum), got a tensor in "
            f"'{t.buffer}' ({t.label}); nl.load it first",
            code="err_unsupported_memory",
            loc=user_loc(),
        )
    shape = acc.shape
    check_partitions(shape, api, "x")
    if len(shape) < 2:
        raise NKIShapeError(
            f"'{api}' needs a tile with a partition and at least one free axis, got shape "
            f"{list(shape)}",
            code="err_insufficient_rank",
            loc=user_loc(),
        )
    axes = normalize_axes(axis, len(shape), api)
    in_dt = t.decl.dtype
    _row, rule = REDUCTIONS[name]
    if dtype is not None:
        out_dt = dtypes.name_of(dtype)
    elif rule == "bool":
        out_dt = "bool_"
    elif rule == "float" and not dtypes.is_float(in_dt):
        out_dt = "float32"
    else:
        out_dt = in_dt
    if keepdims:
        out_shape = tuple(1 if d in axes else n for d, n in enumerate(shape))
    else:
        out_shape = tuple(n for d, n in enumerate(shape) if d not in axes)
    vector = len(out_shape) == 1
    store_shape = (out_shape[0], 1) if vector else out_shape
    out = result_tile(store_shape, out_dt, "sbuf", api)
    if vector:
        out = PartitionVector(out.decl, out.scope, temp=True)
    emit(
        "reduce",
        name,
        out.access_(),
        (acc,),
        attrs=(("axes", axes), ("keepdims", bool(keepdims))),
        mask=to_mask(mask, shape, api),
        api=api,
    )
    return out


def _make(name: str):
    row, _rule = REDUCTIONS[name]

    def fn(
        x: Any,
        axis: Any = None,
        *,
        dtype: Any = None,
        mask: Any = None,
        keepdims: bool = False,
        **_kw: Any,
    ) -> NkiTensor:
        return reduce(name, x, axis, dtype=dtype, mask=mask, keepdims=keepdims)

    fn.__name__ = fn.__qualname__ = name
    what = {
        "mean": "arithmetic mean (fp32 math; integer inputs give float32)",
        "var": "population variance (fp32 math; integer inputs give float32)",
        "all": "True where every element is non-zero (dtype bool)",
    }.get(name, f"{name} (fp32 math, exact for integers)")
    fn.__doc__ = (
        f"``nl.{name}(x, axis, *, dtype=None, mask=None, keepdims=False)``: {what} over the "
        "free axes ``axis`` (an int or a list). The partition axis 0 cannot be reduced "
        "(NKIShapeError err_unsupported_reduction_axis). Without keepdims, a result with only "
        "the partition axis left has shape (P,) and broadcasts along free axes."
    )
    if name in ("sum", "max", "min", "prod", "all"):
        fn.__nki_op__ = row  # type: ignore[attr-defined]  # op=nl.max means maximum
    return fn


sum = _make("sum")  # noqa: A001 - classic names
max = _make("max")  # noqa: A001
min = _make("min")  # noqa: A001
mean = _make("mean")
prod = _make("prod")
all = _make("all")  # noqa: A001
var = _make("var")


def expand_access(acc: Access, extra: int) -> Access:
    """The same access with ``extra`` trailing tile axes of extent 1 (``expand_dims``)."""
    n = len(acc.shape)
    return insert_unit_axes(acc, range(n, n + extra))


def insert_unit_axes(acc: Access, at: Iterable[int]) -> Access:
    """The same access with tile axes of extent 1 at the positions ``at`` of the new shape
    (none of them the partition axis 0): the elements are the same, so it is a view."""
    new = set(at)
    old = iter(range(len(acc.shape)))
    picks = [None if j in new else next(old) for j in range(len(acc.shape) + len(new))]
    shape = tuple(1 if i is None else acc.shape[i] for i in picks)
    idx = tuple(
        IndexExpr(e.base, tuple(0 if i is None else e.coeffs[i] for i in picks), shape)
        for e in acc.index
    )
    return Access(acc.tensor, shape, idx, acc.indirect)


__all__ = ["all", "max", "mean", "min", "prod", "sum", "var"]
