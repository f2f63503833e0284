"""Vector-engine search within each partition: max8, nc_find_index8 and nc_match_replace8."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes
from ..errors import NKIShapeError, NKITypeError, user_loc
from ..ir import Cond, IndexExpr, Mask
from ..symbolic import Pred
from ..tracer import NkiTensor, const_operand, to_mask
from ..tracer.bool_masks import SEARCHES, Disj, or_refused
from .common import Call, dt, free_size, is_tile, same_partitions, tile
from .forms import instruction
from .rules import check_dtype_in


def _elements_between(acc_shape: tuple[int, ...], lo: int, hi: int, api: str, role: str) -> None:
    f = free_size(acc_shape)
    if not lo <= f <= hi:
        raise NKIShapeError(
            f"'{role}'{list(acc_shape)} of '{api}' has {f} elements per partition; it must "
            f"have between {lo} and {hi}",
            code="err_size_of_dimension_exceed_arch_limit",
            loc=user_loc(),
        )


def _source_mask(c: Call, mask: Any, src_shape: tuple[int, ...]) -> tuple[Any, dict[str, Any]]:
    """A ``mask=`` of a search over its source's iteration space (AWS's ``max8`` example masks
    ``src=t[ix, iy]`` with ``(ix < n // 2) and (iy < m // 2)``; ``nc_find_index8``'s mask
    "applies to the data"): the source elements it leaves out are not searched, the partitions
    it leaves out are not written. Returns the (P, 8) result's mask (the conditions on the
    partition axis alone) and the source mask as an attribute. A mask of the result's own
    shape (or None) keeps its usual meaning."""
    if tuple(src_shape[1:]) == (8,) or not isinstance(mask, (Pred, Disj)):
        return mask, {}
    conds = mask.conds if isinstance(mask, Pred) else [k for term in mask.terms for k in term]
    if all(len(k.expr.shape) < 2 or k.expr.shape[-1] in (1, 8) for k in conds):
        return mask, {}  # over the (P, 8) result
    if isinstance(mask, Disj):
        raise or_refused(c.api, SEARCHES, user_loc())
    m = to_mask(mask, tuple(src_shape), c.api)
    assert isinstance(m, Mask)
    rows = tuple(
        Cond(IndexExpr(cond.expr.base, (cond.expr.coeffs[0], 0), (cond.expr.shape[0], 1)), cond.op)
        for cond in m.conds
        if not any(cond.expr.coeffs[1:])
    )
    return (Pred(rows) if rows else None), {"src_mask": m}


@instruction
def max8(*, src: Any, mask: Any = None, dtype: Any = None) -> NkiTensor:
    """The 8 largest values of each partition (8..16384 elements), in descending order, as a
    (P, 8) tile (compared in fp32). A ``mask`` over the source's elements searches only those
    (partitions it leaves out are not written).

    Example: ``top = nisa.max8(src=scores)``.
    """
    c = Call("max8", dtype)
    acc, _ = c.tile(src, "src")
    if len(acc.shape) > 3:  # (the max8 page: a source "up to 3-dimensional")
        raise NKIShapeError(
            f"'src' of '{c.api}' has {len(acc.shape)} dimensions {list(acc.shape)}; at most 3",
            code="err_invalid_shape",
            loc=user_loc(),
        )
    _elements_between(acc.shape, 8, 16384, c.api, "src")
    mask, extra = _source_mask(c, mask, acc.shape)
    return c.new((acc.shape[0], 8), (acc,), mask=mask, **extra)


@instruction
def nc_find_index8(*, data: Any, vals: Any, mask: Any = None, dtype: Any = None) -> NkiTensor:
    """Index (within the flattened free axis) of the first occurrence of each of the 8 ``vals``
    of each partition in ``data`` (8..16384 elements); duplicates in ``vals`` take successive
    matches in ascending order; a value not found gives the all-ones sentinel. Result (P, 8),
    uint32 (or uint16).

    Example: ``idx = nisa.nc_find_index8(data=scores, vals=nisa.max8(src=scores))``.
    """
    c = Call("nc_find_index8", dtype)
    acc, vacc = _data_and_vals(c, data, vals)
    odt = c.result_dtype()
    check_dtype_in(odt, ("uint32", "uint16"), c.api, "dtype")
    mask, extra = _source_mask(c, mask, acc.shape)
    return c.new((acc.shape[0], 8), (acc, vacc), dtype=odt, mask=mask, **extra)


@instruction
def nc_match_replace8(
    *,
    data: Any,
    vals: Any,
    imm: Any,
    dst_idx: Any = None,
    mask: Any = None,
    dtype: Any = None,
) -> NkiTensor:
    """``data`` with the first occurrence of each of the 8 ``vals`` per partition replaced by
    the scalar ``imm`` (vals processed from the last to the first, so duplicates take distinct
    matches); ``dst_idx`` (P, 8), if given, receives the matched indices.

    Example: ``rest = nisa.nc_match_replace8(data=x, vals=top8, imm=-1e30)``.
    """
    c = Call("nc_match_replace8", dtype)
    api = c.api
    acc, vacc = _data_and_vals(c, data, vals)
    if is_tile(imm) or isinstance(imm, bool) or not isinstance(imm, (int, float, np.number)):
        raise NKITypeError(
            f"'imm' of '{api}' must be a compile-time float scalar, got {imm!r}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    res = {}
    if dst_idx is not None:
        iacc, it = tile(dst_idx, api, "dst_idx")
        same_partitions(acc.shape, iacc.shape, api, "data", "dst_idx")
        _elements_between(iacc.shape, 8, 8, api, "dst_idx")
        if not dtypes.is_int(dt(it)):
            raise NKITypeError(
                f"'dst_idx' of '{api}' must have an integer dtype, got {dt(it)}",
                code="err_unsupported_dtype",
                loc=user_loc(),
            )
        res["dst_idx"] = iacc
    return c.new(acc.shape, (acc, vacc, const_operand(imm)), mask=mask, **res)


def _data_and_vals(c: Call, data: Any, vals: Any) -> tuple[Any, Any]:
    """``data`` (8 to 16384 elements per partition) and its 8 ``vals`` per partition."""
    acc, _ = c.tile(data, "data")
    vacc, _ = c.tile(vals, "vals")
    same_partitions(acc.shape, vacc.shape, c.api, "data", "vals")
    _elements_between(acc.shape, 8, 16384, c.api, "data")
    _elements_between(vacc.shape, 8, 8, c.api, "vals")
    return acc, vacc
