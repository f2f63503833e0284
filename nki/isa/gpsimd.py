"""GpSimd-engine instructions: iota, memset, affine_select, tensor_partition_reduce and
local_gather."""

from __future__ import annotations

from typing import Any

from ..errors import NKIError, NKIShapeError, NKITypeError, user_loc
from ..ir import Affine, Cond, IndexExpr, Mask
from ..isa_spec import checked
from ..symbolic import Index, Pred, Scalar, expand_expr
from ..tracer import NkiTensor, const_operand
from .common import (
    alu_op,
    check_bitvec_dtypes,
    dt,
    dtype_name,
    emit_isa,
    free_size,
    out_dtype,
    out_tile,
    static_int,
    tile,
)
from .enums import engine_name
from .rules import check_dtype_in


@checked
def iota(expr: Any, dtype: Any, *, mask: Any = None) -> NkiTensor:
    """Materialise an affine ``nl.arange`` expression as values in a new SBUF tile (int32 math,
    cast to ``dtype``), e.g. ``nisa.iota(i_p * 512 + i_f, nl.int32)``. Loop iterators and program
    ids may appear in the expression. The expression must be at least 2-D (partition, free);
    a scalar expression (``nisa.iota(nl.program_id(1), nl.int32)``, as vLLM's paged attention
    writes) gives a [1, 1] tile.
    """
    api = "nisa.iota"
    if isinstance(expr, (Scalar, int)) and not isinstance(expr, bool):
        aff = expr.aff if isinstance(expr, Scalar) else Affine.constant(int(expr))
        expr = Index(IndexExpr(aff, (0, 0), (1, 1)))
    if not isinstance(expr, Index):
        raise NKITypeError(
            f"'expr' of '{api}' must be an affine expression of nl.arange / nl.mgrid indices, "
            f"got {type(expr).__name__}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    if dtype is None:
        raise NKITypeError(f"'{api}' needs a dtype", code="err_unsupported_dtype", loc=user_loc())
    shape = expr.shape
    if len(shape) < 2:
        raise NKIShapeError(
            f"'expr' of '{api}' has shape {list(shape)}; the result tile needs a partition and a "
            "free axis (e.g. nl.arange(128)[:, None] and nl.arange(64)[None, :])",
            code="err_insufficient_rank",
            loc=user_loc(),
        )
    out = out_tile(shape, dtype_name(dtype), api)
    emit_isa(
        "iota", out.access_(), (expand_expr(expr.expr, shape),), {"engine": "gpsimd"}, mask=mask
    )
    return out


@checked
def memset(
    shape: Any, value: Any, dtype: Any, *, mask: Any = None, engine: Any = None
) -> NkiTensor:
    """A new SBUF tile of ``shape`` (partition axis first) filled with the compile-time constant
    ``value`` cast to ``dtype`` (Vector engine by default, or GpSimd).

    Example: ``z = nisa.memset((128, 512), 0.0, nl.float32)``.
    """
    api = "nisa.memset"
    dims = shape if isinstance(shape, (tuple, list)) else (shape,)
    shp = tuple(static_int(s, api, "shape") for s in dims)
    eng = engine_name(engine)
    eng = "vector" if eng == "unknown" else eng
    if eng not in ("vector", "gpsimd"):
        raise NKIError(
            f"'{api}' runs on the Vector or GpSimd engine, not {eng}",
            code="err_unsupported_engine_for_op",
            loc=user_loc(),
        )
    if not isinstance(value, (int, float, bool)) and not (
        hasattr(value, "dtype") and getattr(value, "shape", 0) == ()
    ):
        raise NKITypeError(
            f"'value' of '{api}' must be a compile-time scalar, got {type(value).__name__}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    out = out_tile(shp, dtype_name(dtype), api)
    emit_isa("memset", out.access_(), (const_operand(value),), {"engine": eng}, mask=mask)
    return out


@checked
def affine_select(
    pred: Any,
    on_true_tile: Any,
    on_false_value: Any,
    *,
    mask: Any = None,
    dtype: Any = None,
) -> NkiTensor:
    """``pred ? on_true_tile : on_false_value`` element-wise on GpSimd, where ``pred`` is an
    affine predicate over ``nl.arange`` indices computed on the fly (e.g. the causal mask
    ``i_q >= i_k``, or an affine expression meaning ``expr > 0``) and ``on_false_value`` a
    float32 scalar. ``on_true_tile`` may be an SBUF or a PSUM tile (classic kernels, e.g. the
    AWS attention tutorials, select straight from a matmul's PSUM result; the compiler stages it
    for the GpSimd engine); the result is an SBUF tile and may not be written into PSUM.

    Example: ``masked = nisa.affine_select(i_q[:, None] >= i_k[None, :], scores, -9984.0)``.
    """
    api = "nisa.affine_select"
    acc, t = tile(on_true_tile, api, "on_true_tile")
    shape = acc.shape
    if isinstance(pred, Pred):
        conds = pred.conds
    elif isinstance(pred, Index):
        conds = (Cond(pred.expr, ">"),)
    else:
        raise NKIError(
            f"'pred' of '{api}' must be an affine predicate over nl.arange indices (e.g. "
            f"i_p >= i_f), got {type(pred).__name__}",
            code="err_unsupported_expression_in_mask",
            loc=user_loc(),
        )
    full = []
    for c in conds:
        try:
            e = expand_expr(c.expr, shape)
            ok = all(n == 1 or n == s for n, s in zip(c.expr.shape[::-1], shape[::-1]))
        except NKIError:
            ok = False
        if not ok or len(c.expr.shape) > len(shape):
            raise NKIShapeError(
                f"'pred' of shape {list(c.expr.shape)} of '{api}' does not match the tile shape "
                f"{list(shape)} of 'on_true_tile'",
                code="err_mask_shape_mismatch",
                loc=user_loc(),
            )
        full.append(Cond(e, c.op))
    if isinstance(on_false_value, bool) or not isinstance(on_false_value, (int, float)):
        if not (hasattr(on_false_value, "dtype") and getattr(on_false_value, "shape", 0) == ()):
            raise NKITypeError(
                f"'on_false_value' of '{api}' must be a float32 scalar, got "
                f"{type(on_false_value).__name__}",
                code="err_unsupported_operand",
                loc=user_loc(),
            )
    odt = out_dtype(dtype, dt(t))
    if odt in ("int32", "uint32") or dt(t) in ("int32", "uint32"):
        raise NKITypeError(
            f"'{api}' supports float and 8/16-bit integer tiles, not {dt(t)} -> {odt}",
            code="err_unsupported_dtype",
            loc=user_loc(),
        )
    out = out_tile(shape, odt, api)
    attrs = {"engine": "gpsimd", "pred": Mask(tuple(full))}
    emit_isa(
        "affine_select",
        out.access_(),
        (acc, const_operand(float(on_false_value))),
        attrs,
        mask=mask,
    )
    return out


_PART_REDUCERS = ("add", "maximum", "minimum", "bitwise_or", "bitwise_and")


@checked
def tensor_partition_reduce(
    op: Any, data: Any, *, mask: Any = None, dtype: Any = None
) -> NkiTensor:
    """Reduce across partitions on GpSimd (add, max, min, bitwise_or, bitwise_and): the result
    has one partition, shape (1, *free).

    Example: ``col_sum = nisa.tensor_partition_reduce(np.add, x)``.
    """
    api = "nisa.tensor_partition_reduce"
    acc, t = tile(data, api, "data", ("sbuf",))
    fn = alu_op(op, api, "op")
    if fn.name not in _PART_REDUCERS:
        raise NKIError(
            f"'op'={fn.name} of '{api}' is not supported; supported: {', '.join(_PART_REDUCERS)}",
            code="err_unsupported_reduce_op",
            loc=user_loc(),
        )
    odt = out_dtype(dtype, dt(t))
    check_bitvec_dtypes(fn, [dt(t), odt], api, "op")
    out = out_tile((1, *acc.shape[1:]), odt, api)
    emit_isa(
        "tensor_partition_reduce",
        out.access_(),
        (acc,),
        {"engine": "gpsimd", "op": fn.name},
        mask=mask,
    )
    return out


@checked
def local_gather(
    src_buffer: Any,
    index: Any,
    num_elem_per_idx: int = 1,
    num_valid_indices: int | None = None,
    *,
    mask: Any = None,
) -> NkiTensor:
    """Gather within each group of 16 partitions (one GpSimd core each). Per group, the uint16
    ``index`` values of its 16 partitions are flattened partition-first; the first
    ``num_valid_indices`` are element offsets into each partition's flattened free axis, from
    which ``num_elem_per_idx`` (1, 2, 4, 8, 16 or 32) contiguous elements are read. Result,
    same dtype: (P, F, 16, num_elem_per_idx) when every index of a (P, F) index tile is valid
    (gathered element ``[:, f, q, :]`` comes from index ``[group + q, f]``), otherwise
    (P, num_valid_indices, num_elem_per_idx) in the flattened order. Out-of-range offsets are
    undefined on hardware and an error here.

    Example: ``g = nisa.local_gather(src, idx, num_elem_per_idx=4, num_valid_indices=64)``.
    """
    api = "nisa.local_gather"
    sacc, st = tile(src_buffer, api, "src_buffer", ("sbuf",))
    iacc, it = tile(index, api, "index", ("sbuf",))
    p = sacc.shape[0]
    if p != iacc.shape[0] or p % 16:
        raise NKIShapeError(
            f"'src_buffer'{list(sacc.shape)} and 'index'{list(iacc.shape)} of '{api}' need the "
            "same partition count, a multiple of 16",
            code="err_num_partition_mismatch",
            loc=user_loc(),
        )
    check_dtype_in(dt(it), ("uint16",), api, "index")
    if num_elem_per_idx not in (1, 2, 4, 8, 16, 32):
        raise NKIError(
            f"'num_elem_per_idx'={num_elem_per_idx} of '{api}' must be 1, 2, 4, 8, 16 or 32",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    per_core = 16 * free_size(iacc.shape)
    nvalid = per_core if num_valid_indices is None else int(num_valid_indices)
    if not 0 < nvalid <= min(per_core, 4096):
        raise NKIError(
            f"'num_valid_indices'={nvalid} of '{api}' must be in [1, {min(per_core, 4096)}] "
            f"(indices per 16-partition group: {per_core}; at most 4096)",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    n = int(num_elem_per_idx)
    if nvalid == per_core and len(iacc.shape) == 2:
        # every index of a (P, F) index tile: the result keeps that layout, index column f and
        # partition q of the group at [:, f, q, :] (the SDK's own example stores it so)
        shape: tuple[int, ...] = (p, iacc.shape[1], 16, n)
    else:
        shape = (p, nvalid, n)
    out = out_tile(shape, dt(st), api)
    attrs = {"engine": "gpsimd", "n_elem": int(num_elem_per_idx), "n_valid": nvalid}
    emit_isa("local_gather", out.access_(), (sacc, iacc), attrs, mask=mask)
    return out


@checked
def sequence_bounds(*, segment_ids: Any, dtype: Any = None) -> NkiTensor:
    """Segment boundaries on GpSimd: for a ``(1, n)`` tile of non-negative segment ids, a
    ``(1, 2, n)`` tile holding for every element the start index (``[:, 0, :]``) and the end
    index, exclusive (``[:, 1, :]``) of the run of equal ids it belongs to. Id 0 is padding: its
    elements get start ``n`` and end ``-1``. The partition dimension must be 1; input and output
    dtypes float32 or int32 (output defaults to the input dtype).

    Example: ids ``[[0, 1, 1, 2]]`` -> ``[[[4, 1, 1, 3], [-1, 3, 3, 4]]]``.
    """
    api = "nisa.sequence_bounds"
    acc, t = tile(segment_ids, api, "segment_ids")
    if acc.shape[0] != 1:
        raise NKIShapeError(
            f"'segment_ids'{list(acc.shape)} of '{api}' must have a partition dimension of 1",
            code="err_num_partition_mismatch",
            loc=user_loc(),
        )
    check_dtype_in(dt(t), ("float32", "int32"), api, "segment_ids", "err_unsupported_dtype")
    odt = out_dtype(dtype, dt(t))
    check_dtype_in(odt, ("float32", "int32"), api, "dtype", "err_unsupported_dtype")
    out = out_tile((1, 2, free_size(acc.shape)), odt, api)
    emit_isa("sequence_bounds", out.access_(), (acc,), {"engine": "gpsimd"})
    return out
