"""Vector-engine statistics and search: bn_stats / bn_aggr, max8, nc_find_index8 and
nc_match_replace8."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes
from ..errors import NKIShapeError, NKITypeError, user_loc
from ..isa_spec import checked
from ..tracer import NkiTensor, const_operand
from .common import (
    dt,
    emit_isa,
    free_size,
    is_tile,
    out_dtype,
    out_tile,
    same_partitions,
    target,
    tile,
)
from .rules import check_dtype_in

# --------------------------------------------------------------------------------------------
# statistics and search
# --------------------------------------------------------------------------------------------


@checked
def bn_stats(data: Any, *, mask: Any = None, dtype: Any = None) -> NkiTensor:
    """Per-partition statistics of up to 512 elements (``nl.tile_size.bn_stats_fmax``): six
    values per partition, (count, mean, variance * count) of the even-indexed and then of the
    odd-indexed elements of the flattened free axis, in fp32. Combine with ``bn_aggr``.
    ``mask`` selects *input* elements (e.g. ``j * 512 + i_f < n`` for a ragged last chunk):
    masked-out elements are not read and not counted.

    Example: ``stats = nisa.bn_stats(x)`` -> (P, 6).
    """
    api = "nisa.bn_stats"
    acc, t = tile(data, api, "data")
    f = free_size(acc.shape)
    lim = target().bn_stats_fmax
    if f > lim:
        raise NKIShapeError(
            f"'data'{list(acc.shape)} of '{api}' has {f} elements per partition, exceeding "
            f"the architecture limitation of {lim} (nl.tile_size.bn_stats_fmax); split it and "
            "combine the bn_stats results with one bn_aggr",
            code="err_size_of_dimension_exceed_arch_limit",
            loc=user_loc(),
        )
    out = out_tile((acc.shape[0], 6), out_dtype(dtype, dt(t)), api)
    # the mask selects input elements (e.g. the valid columns of a ragged last chunk)
    emit_isa(
        "bn_stats", out.access_(), (acc,), {"engine": "vector"}, mask=mask, mask_shape=acc.shape
    )
    return out


@checked
def bn_aggr(data: Any, *, mask: Any = None, dtype: Any = None) -> NkiTensor:
    """Aggregate (count, mean, variance * count) triples (one or more ``bn_stats`` outputs) into
    (mean, variance) per partition (population variance), in fp32. The free size must be a
    multiple of 3.

    Example: ``mv = nisa.bn_aggr(stats)`` -> (P, 2).
    """
    api = "nisa.bn_aggr"
    acc, t = tile(data, api, "data")
    f = free_size(acc.shape)
    if f % 3:
        raise NKIShapeError(
            f"'data'{list(acc.shape)} of '{api}' must hold (count, mean, var*count) triples: "
            f"its {f} elements per partition are not a multiple of 3",
            code="err_bn_aggr_free_size",
            loc=user_loc(),
        )
    out = out_tile((acc.shape[0], 2), out_dtype(dtype, dt(t)), api)
    emit_isa("bn_aggr", out.access_(), (acc,), {"engine": "vector"}, mask=mask)
    return out


def _elements_between(acc_shape: tuple[int, ...], lo: int, hi: int, api: str, role: str) -> None:
    f = free_size(acc_shape)
    if not lo <= f <= hi:
        raise NKIShapeError(
            f"'{role}'{list(acc_shape)} of '{api}' has {f} elements per partition; it must "
            f"have between {lo} and {hi}",
            code="err_size_of_dimension_exceed_arch_limit",
            loc=user_loc(),
        )


@checked
def max8(*, src: Any, mask: Any = None, dtype: Any = None) -> NkiTensor:
    """The 8 largest values of each partition (8..16384 elements), in descending order, as a
    (P, 8) tile (compared in fp32).

    Example: ``top = nisa.max8(src=scores)``.
    """
    api = "nisa.max8"
    acc, t = tile(src, api, "src")
    _elements_between(acc.shape, 8, 16384, api, "src")
    out = out_tile((acc.shape[0], 8), out_dtype(dtype, dt(t)), api)
    emit_isa("max8", out.access_(), (acc,), {"engine": "vector"}, mask=mask)
    return out


@checked
def nc_find_index8(*, data: Any, vals: Any, mask: Any = None, dtype: Any = None) -> NkiTensor:
    """Index (within the flattened free axis) of the first occurrence of each of the 8 ``vals``
    of each partition in ``data`` (8..16384 elements); duplicates in ``vals`` take successive
    matches in ascending order; a value not found gives the all-ones sentinel. Result (P, 8),
    uint32 (or uint16).

    Example: ``idx = nisa.nc_find_index8(data=scores, vals=nisa.max8(src=scores))``.
    """
    api = "nisa.nc_find_index8"
    acc, _t = tile(data, api, "data")
    vacc, _vt = tile(vals, api, "vals")
    same_partitions(acc.shape, vacc.shape, api, "data", "vals")
    _elements_between(acc.shape, 8, 16384, api, "data")
    _elements_between(vacc.shape, 8, 8, api, "vals")
    odt = out_dtype(dtype, "uint32")
    check_dtype_in(odt, ("uint32", "uint16"), api, "dtype")
    out = out_tile((acc.shape[0], 8), odt, api)
    emit_isa("nc_find_index8", out.access_(), (acc, vacc), {"engine": "vector"}, mask=mask)
    return out


@checked
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
    api = "nisa.nc_match_replace8"
    acc, t = tile(data, api, "data")
    vacc, _vt = tile(vals, api, "vals")
    same_partitions(acc.shape, vacc.shape, api, "data", "vals")
    _elements_between(acc.shape, 8, 16384, api, "data")
    _elements_between(vacc.shape, 8, 8, api, "vals")
    if is_tile(imm) or isinstance(imm, bool) or not isinstance(imm, (int, float, np.number)):
        raise NKITypeError(
            f"'imm' of '{api}' must be a compile-time float scalar, got {imm!r}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    attrs: dict[str, Any] = {"engine": "vector"}
    outputs = []
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
        attrs["dst_idx"] = iacc
        outputs.append(iacc)
    out = out_tile(acc.shape, out_dtype(dtype, dt(t)), api)
    emit_isa(
        "nc_match_replace8",
        out.access_(),
        (acc, vacc, const_operand(imm)),
        attrs,
        mask=mask,
        outputs=tuple(outputs),
    )
    return out
