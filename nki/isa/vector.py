"""Vector-engine instructions (some also run on the Scalar / GpSimd engines): element-wise
tensor-tensor and tensor-scalar ops, reductions, scans, copies, selection, statistics, top-8
search, partition shuffles, reciprocal and dropout."""

from __future__ import annotations

from typing import Any

from .. import dtypes
from ..errors import NKIError, NKIShapeError, NKITypeError, user_loc
from ..ir import Const
from ..optable import REDUCERS, Op
from ..tracer import NkiTensor, const_operand
from .common import (
    alu_op,
    check_bitvec_dtypes,
    dt,
    emit_isa,
    free_size,
    is_tile,
    not_both_psum,
    out_dtype,
    out_tile,
    same_elements,
    same_partitions,
    scalar_or_vector,
    target,
    tile,
    widest,
)
from .enums import engine_name, enum_value
from .enums import reduce_cmd as _reduce_cmd
from .rules import check_dtype_in, check_engine_op, check_gpsimd_memory, check_scalar_pair

_TILE_REDUCERS = (*REDUCERS, "subtract")


def _binary(op: Any, api: str, role: str) -> Op:
    fn = alu_op(op, api, role)
    if fn.arity != 2:
        raise NKIError(
            f"'{role}'={fn.name} of '{api}' must be a binary ALU operator",
            code="err_unsupported_op",
            loc=user_loc(),
        )
    return fn


def _reducer(op: Any, api: str, role: str, allowed: tuple[str, ...] = _TILE_REDUCERS) -> Op:
    fn = alu_op(op, api, role)
    if fn.name not in allowed:
        raise NKIError(
            f"'{role}'={fn.name} of '{api}' is not a supported reduction operator; supported: "
            f"{', '.join(allowed)}",
            code="err_unsupported_reduce_op",
            loc=user_loc(),
        )
    return fn


def _default_engine(ops: list[Op]) -> str:
    if all("vector" in o.engines for o in ops):
        return "vector"
    common = [e for e in ops[0].engines if all(e in o.engines for o in ops)]
    return common[0] if common else "vector"


def _res_vector(x: Any, parts: int, api: str, role: str):
    acc, _t = tile(x, api, role)
    if acc.shape[0] != parts or free_size(acc.shape) != 1:
        raise NKIShapeError(
            f"'{role}' of '{api}' must have shape ({parts}, 1); got {list(acc.shape)}",
            code="err_reduce_res_shape",
            loc=user_loc(),
        )
    return acc, _t


# --------------------------------------------------------------------------------------------
# element-wise
# --------------------------------------------------------------------------------------------


def tensor_tensor(
    data1: Any,
    data2: Any,
    op: Any,
    *,
    dtype: Any = None,
    mask: Any = None,
    engine: Any = None,
    **_kw: Any,
) -> NkiTensor:
    """``op(data1, data2)`` element-wise (Vector engine by default; GpSimd with engine=).

    Both tiles need the same partition count and elements per partition and cannot both be in
    PSUM. Arithmetic ops compute in fp32; bit-vector ops need integer dtypes and run on the
    Vector engine on raw bits. Default dtype: the wider input.

    Example: ``z = nisa.tensor_tensor(x, y, op=nl.add)``.
    """
    api = "nisa.tensor_tensor"
    a1, t1 = tile(data1, api, "data1")
    a2, t2 = tile(data2, api, "data2")
    same_elements(a1.shape, a2.shape, api, "data1", "data2")
    fn = _binary(op, api, "op")
    eng = engine_name(engine)
    eng = _default_engine([fn]) if eng == "unknown" else eng
    check_engine_op(fn, eng, api, "op")
    not_both_psum(t1, t2, api, "data1", "data2")
    check_gpsimd_memory(eng, {"data1": t1, "data2": t2}, api)
    odt = out_dtype(dtype, widest([dt(t1), dt(t2)]))
    check_bitvec_dtypes(fn, [dt(t1), dt(t2), odt], api, "op")
    out = out_tile(a1.shape, odt, api)
    emit_isa("tensor_tensor", out.access_(), (a1, a2), {"engine": eng, "op": fn.name}, mask=mask)
    return out


def tensor_scalar(
    data: Any,
    op0: Any,
    operand0: Any,
    reverse0: bool = False,
    op1: Any = None,
    operand1: Any = None,
    reverse1: bool = False,
    *,
    dtype: Any = None,
    mask: Any = None,
    engine: Any = None,
    **_kw: Any,
) -> NkiTensor:
    """``(data op0 operand0) op1 operand1`` with scalar or (P, 1) operands broadcast along the
    free axes; ``reverse0`` / ``reverse1`` swap each op's operands.

    Both ops must be of one class (bit-vector or arithmetic); bit-vector ops run only on the
    Vector engine with integer dtypes. On the Scalar engine (NeuronCore-v3+) only (multiply,
    add), (multiply, None) and (add, None) are supported. Default dtype: the data's.

    Example: ``y = nisa.tensor_scalar(x, np.subtract, mean, op1=np.multiply, operand1=rstd)``.
    """
    api = "nisa.tensor_scalar"
    acc, t = tile(data, api, "data")
    parts = acc.shape[0]
    f0 = _binary(op0, api, "op0")
    o0, d0 = scalar_or_vector(operand0, parts, api, "operand0")
    f1 = None
    o1: Any = Const(0)
    ops = [f0]
    if op1 is not None:
        f1 = _binary(op1, api, "op1")
        if operand1 is None:
            raise NKIError(
                f"'op1' of '{api}' is given but 'operand1' is None",
                code="err_missing_operand",
                loc=user_loc(),
            )
        o1, _d1 = scalar_or_vector(operand1, parts, api, "operand1")
        ops.append(f1)
        if f0.bitvec != f1.bitvec:
            raise NKIError(
                f"op0={f0.name} and op1={f1.name} of '{api}' must both be bit-vector or both "
                "arithmetic operators",
                code="err_tensor_scalar_op_class_mismatch",
                loc=user_loc(),
            )
    elif operand1 is not None:
        raise NKIError(
            f"'operand1' of '{api}' is given but 'op1' is None",
            code="err_missing_operand",
            loc=user_loc(),
        )
    eng = engine_name(engine)
    if eng == "unknown":
        eng = "vector"
    if eng == "scalar":
        if f0.bitvec:
            check_engine_op(f0, eng, api, "op0")
        check_scalar_pair(f0, f1, api)
    else:
        for role, f in zip(("op0", "op1"), ops):
            check_engine_op(f, eng, api, role)
    tensors = {"data": t}
    for role, x in (("operand0", operand0), ("operand1", operand1)):
        if is_tile(x):
            tensors[role] = tile(x, api, role)[1]
    check_gpsimd_memory(eng, tensors, api)
    odt = out_dtype(dtype, dt(t))
    for role, f in zip(("op0", "op1"), ops):
        check_bitvec_dtypes(
            f, [dt(t), odt, *[dt(v) for k, v in tensors.items() if k != "data"]], api, role
        )
    out = out_tile(acc.shape, odt, api)
    attrs = {
        "engine": eng,
        "op0": f0.name,
        "op1": f1.name if f1 else None,
        "reverse0": bool(reverse0),
        "reverse1": bool(reverse1),
    }
    del d0
    emit_isa("tensor_scalar", out.access_(), (acc, o0, o1), attrs, mask=mask)
    return out


def scalar_tensor_tensor(
    *,
    data: Any,
    op0: Any,
    operand0: Any,
    op1: Any,
    operand1: Any,
    reverse0: bool = False,
    reverse1: bool = False,
    dtype: Any = None,
    mask: Any = None,
    **_kw: Any,
) -> NkiTensor:
    """``(data op0 operand0) op1 operand1`` on the Vector engine, where ``operand0`` is a
    scalar or (P, 1) vector and ``operand1`` a full tile like ``data``. ``data`` and
    ``operand1`` cannot both be in PSUM.

    Example: ``y = nisa.scalar_tensor_tensor(data=x, op0=nl.multiply, operand0=2.0,
    op1=nl.add, operand1=z)``.
    """
    api = "nisa.scalar_tensor_tensor"
    acc, t = tile(data, api, "data")
    f0 = _binary(op0, api, "op0")
    f1 = _binary(op1, api, "op1")
    o0, _ = scalar_or_vector(operand0, acc.shape[0], api, "operand0")
    a1, t1 = tile(operand1, api, "operand1")
    same_elements(acc.shape, a1.shape, api, "data", "operand1")
    not_both_psum(t, t1, api, "data", "operand1")
    for role, f in (("op0", f0), ("op1", f1)):
        check_engine_op(f, "vector", api, role)
    odt = out_dtype(dtype, widest([dt(t), dt(t1)]))
    for role, f in (("op0", f0), ("op1", f1)):
        check_bitvec_dtypes(f, [dt(t), dt(t1), odt], api, role)
    out = out_tile(acc.shape, odt, api)
    attrs = {
        "engine": "vector",
        "op0": f0.name,
        "op1": f1.name,
        "reverse0": bool(reverse0),
        "reverse1": bool(reverse1),
    }
    emit_isa("scalar_tensor_tensor", out.access_(), (acc, o0, a1), attrs, mask=mask)
    return out


def tensor_scalar_reduce(
    *,
    data: Any,
    op0: Any,
    operand0: Any,
    reduce_op: Any,
    reduce_res: Any,
    reverse0: bool = False,
    dtype: Any = None,
    mask: Any = None,
    **_kw: Any,
) -> NkiTensor:
    """``data op0 operand0`` (one arithmetic op) plus a reduction of the result over all free
    axes into ``reduce_res`` (P, 1) with add / subtract / multiply / max / min.

    Example: ``y = nisa.tensor_scalar_reduce(data=x, op0=np.multiply, operand0=2.0,
    reduce_op=np.add, reduce_res=s)``.
    """
    api = "nisa.tensor_scalar_reduce"
    acc, t = tile(data, api, "data")
    f0 = _binary(op0, api, "op0")
    if f0.bitvec:
        raise NKIError(
            f"'op0'={f0.name} of '{api}' must be an arithmetic operator (bit-vector operators "
            "are not supported by this instruction)",
            code="err_unsupported_op",
            loc=user_loc(),
        )
    check_engine_op(f0, "vector", api, "op0")
    o0, _ = scalar_or_vector(operand0, acc.shape[0], api, "operand0")
    rop = _reducer(
        reduce_op, api, "reduce_op", ("add", "subtract", "multiply", "maximum", "minimum")
    )
    racc, _rt = _res_vector(reduce_res, acc.shape[0], api, "reduce_res")
    out = out_tile(acc.shape, out_dtype(dtype, dt(t)), api)
    attrs = {
        "engine": "vector",
        "op0": f0.name,
        "reverse0": bool(reverse0),
        "reduce_op": rop.name,
        "reduce_res": racc,
    }
    emit_isa("tensor_scalar_reduce", out.access_(), (acc, o0), attrs, mask=mask, outputs=(racc,))
    return out


# --------------------------------------------------------------------------------------------
# reductions and scans
# --------------------------------------------------------------------------------------------


def tensor_reduce(
    op: Any,
    data: Any,
    axis: Any,
    *,
    mask: Any = None,
    dtype: Any = None,
    negate: bool = False,
    keepdims: bool = False,
    **_kw: Any,
) -> NkiTensor:
    """Reduce free axes of ``data`` with ``op`` on the Vector engine (fp32 math for arithmetic
    ops, raw bits for bit-vector ops on integer dtypes). ``axis``: free axes only, contiguous,
    including the last axis (e.g. 1, (1,), (1, 2)), up to 4. ``negate`` multiplies the result by
    -1 (arithmetic ops only). When every free axis is reduced without keepdims, the result keeps
    one free element (shape (P, 1)): an on-chip tile always has a free axis.

    Example: ``m = nisa.tensor_reduce(np.max, x, axis=(1,), keepdims=True)``.
    """
    api = "nisa.tensor_reduce"
    acc, t = tile(data, api, "data")
    fn = _reducer(op, api, "op")
    rank = len(acc.shape)
    axes = _axes(axis, rank, api)
    if negate and fn.bitvec:
        raise NKIError(
            f"negate=True of '{api}' applies to arithmetic operators only, not {fn.name}",
            code="err_unsupported_op",
            loc=user_loc(),
        )
    odt = out_dtype(dtype, dt(t))
    check_bitvec_dtypes(fn, [dt(t), odt], api, "op")
    if keepdims:
        shape = tuple(1 if d in axes else n for d, n in enumerate(acc.shape))
    else:
        shape = tuple(n for d, n in enumerate(acc.shape) if d not in axes)
        if len(shape) < 2:
            shape = (acc.shape[0], 1)
    out = out_tile(shape, odt, api)
    attrs = {"engine": "vector", "op": fn.name, "axes": axes, "negate": bool(negate)}
    emit_isa("tensor_reduce", out.access_(), (acc,), attrs, mask=mask)
    return out


def _axes(axis: Any, rank: int, api: str) -> tuple[int, ...]:
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    try:
        axes = sorted({int(a) + rank if int(a) < 0 else int(a) for a in items})
    except (TypeError, ValueError):
        raise NKIError(
            f"'axis' of '{api}' must be an int or a tuple of ints, got {axis!r}",
            code="err_invalid_axis",
            loc=user_loc(),
        ) from None
    bad = (
        not axes
        or axes[0] <= 0
        or axes[-1] != rank - 1
        or axes != list(range(axes[0], rank))
        or len(axes) > 4
    )
    if bad:
        raise NKIError(
            f"'axis'={axis!r} of '{api}' on a rank-{rank} tile must be contiguous free axes "
            f"ending at the last axis {rank - 1} (up to 4; the partition axis 0 cannot be "
            "reduced here)",
            code="err_invalid_axis",
            loc=user_loc(),
        )
    return tuple(axes)


def tensor_tensor_scan(
    data0: Any,
    data1: Any,
    initial: Any,
    op0: Any,
    op1: Any,
    reverse0: bool = False,
    reverse1: bool = False,
    *,
    dtype: Any = None,
    mask: Any = None,
    **_kw: Any,
) -> NkiTensor:
    """Per-partition scan over the flattened free axis:
    ``r[:, 0] = op1(op0(data0[:, 0], initial), data1[:, 0])``,
    ``r[:, i] = op1(op0(data0[:, i], r[:, i-1]), data1[:, i])`` (fp32 math). ``reverse0``
    swaps op0's operands, ``reverse1`` op1's. ``initial``: a scalar or (P, 1) tile.

    Example: ``r = nisa.tensor_tensor_scan(a, b, 0.0, np.multiply, np.add)`` (linear recurrence).
    """
    api = "nisa.tensor_tensor_scan"
    a0, t0 = tile(data0, api, "data0")
    a1, t1 = tile(data1, api, "data1")
    same_elements(a0.shape, a1.shape, api, "data0", "data1")
    f0 = _binary(op0, api, "op0")
    f1 = _binary(op1, api, "op1")
    for role, f in (("op0", f0), ("op1", f1)):
        if f.bitvec:
            raise NKIError(
                f"'{role}'={f.name} of '{api}' must be an arithmetic operator",
                code="err_unsupported_op",
                loc=user_loc(),
            )
        check_engine_op(f, "vector", api, role)
    init, _ = scalar_or_vector(initial, a0.shape[0], api, "initial")
    out = out_tile(a0.shape, out_dtype(dtype, widest([dt(t0), dt(t1)])), api)
    attrs = {
        "engine": "vector",
        "op0": f0.name,
        "op1": f1.name,
        "reverse0": bool(reverse0),
        "reverse1": bool(reverse1),
    }
    emit_isa("tensor_tensor_scan", out.access_(), (a0, a1, init), attrs, mask=mask)
    return out


# --------------------------------------------------------------------------------------------
# copies and selection
# --------------------------------------------------------------------------------------------


def tensor_copy(
    src: Any, *, mask: Any = None, dtype: Any = None, engine: Any = None, **_kw: Any
) -> NkiTensor:
    """Copy an on-chip tile on the Vector (default), Scalar or GpSimd engine. Vector / GpSimd
    copy bit-exactly when the dtypes match and cast through fp32 otherwise; the Scalar engine
    of NeuronCore-v2 always casts through fp32 (lossy for large int32). GpSimd cannot access
    PSUM.

    Example: ``y = nisa.tensor_copy(x_psum, dtype=nl.bfloat16)``.
    """
    api = "nisa.tensor_copy"
    acc, t = tile(src, api, "src")
    eng = engine_name(engine)
    eng = "vector" if eng == "unknown" else eng
    if eng not in ("vector", "scalar", "gpsimd"):
        raise NKIError(
            f"'{api}' runs on the Vector, Scalar or GpSimd engine, not {eng}",
            code="err_unsupported_engine_for_op",
            loc=user_loc(),
        )
    check_gpsimd_memory(eng, {"src": t}, api)
    from .common import rules

    exact = eng != "scalar" or rules().scalar_copy_exact
    out = out_tile(acc.shape, out_dtype(dtype, dt(t)), api)
    emit_isa("tensor_copy", out.access_(), (acc,), {"engine": eng, "exact": exact}, mask=mask)
    return out


_PRED_DTYPES = ("uint8", "uint16", "uint32", "bool_")


def tensor_copy_predicated(
    *,
    src: Any,
    dst: Any,
    predicate: Any,
    reverse_pred: bool = False,
    mask: Any = None,
    dtype: Any = None,
    **_kw: Any,
) -> None:
    """Copy ``src`` (a tile, or a scalar) into ``dst`` where ``predicate`` is non-zero (zero
    with ``reverse_pred``); other ``dst`` elements are left unchanged. ``src``, ``dst`` and
    ``predicate`` share partitions and elements per partition; ``predicate`` is uint8 / uint16 /
    uint32; ``src`` and ``dst`` have the same dtype; ``src`` and ``predicate`` cannot both be in
    PSUM.

    Example: ``nisa.tensor_copy_predicated(src=x, dst=y, predicate=keep)``.
    """
    api = "nisa.tensor_copy_predicated"
    dacc, dt_ = tile(dst, api, "dst")
    pacc, pt = tile(predicate, api, "predicate")
    same_elements(dacc.shape, pacc.shape, api, "dst", "predicate")
    check_dtype_in(dt(pt), _PRED_DTYPES, api, "predicate")
    if is_tile(src):
        sacc, st = tile(src, api, "src")
        same_elements(sacc.shape, dacc.shape, api, "src", "dst")
        not_both_psum(st, pt, api, "src", "predicate")
        if dt(st) != dt(dt_):
            raise NKITypeError(
                f"'src' ({dt(st)}) and 'dst' ({dt(dt_)}) of '{api}' must have the same dtype",
                code="err_dtype_mismatch",
                loc=user_loc(),
            )
        s: Any = sacc
    else:
        s, _ = scalar_or_vector(src, dacc.shape[0], api, "src")
    emit_isa(
        "tensor_copy_predicated",
        dacc,
        (s, pacc),
        {"engine": "vector", "reverse_pred": bool(reverse_pred)},
        mask=mask,
    )


_SEL_PRED_DTYPES = ("int8", "uint8", "int16", "uint16", "bool_")


def select_reduce(
    *,
    dst: Any,
    predicate: Any,
    on_true: Any,
    on_false: Any,
    reduce_res: Any = None,
    reduce_cmd: Any = _reduce_cmd.idle,
    reduce_op: Any = None,
    reverse_pred: bool = False,
    mask: Any = None,
    dtype: Any = None,
    **_kw: Any,
) -> None:
    """``dst = where(predicate, on_true, on_false)`` (predicate inverted by ``reverse_pred``)
    on the Vector engine. The per-partition max of the result is folded into the Vector
    engine's accumulator registers as ``reduce_cmd`` says (idle: untouched; reset; reduce;
    reset_reduce), and ``reduce_res`` (P, 1), if given, receives the registers.

    ``predicate``: int8 / uint8 / int16 / uint16; ``on_true``: any dtype but tfloat32 / int32 /
    uint32; ``on_false``: a float32 scalar or a (P, 1) vector; ``on_true`` and ``predicate``
    cannot both be in PSUM; ``reduce_op`` must be max.

    Example: ``nisa.select_reduce(dst=y, predicate=p, on_true=x, on_false=-1e9,
    reduce_res=m)``.
    """
    api = "nisa.select_reduce"
    dacc, _dt = tile(dst, api, "dst")
    pacc, pt = tile(predicate, api, "predicate")
    tacc, tt = tile(on_true, api, "on_true")
    same_elements(tacc.shape, dacc.shape, api, "on_true", "dst")
    same_elements(tacc.shape, pacc.shape, api, "on_true", "predicate")
    check_dtype_in(dt(pt), _SEL_PRED_DTYPES, api, "predicate")
    if dt(tt) in ("tfloat32", "int32", "uint32"):
        raise NKITypeError(
            f"'on_true' of '{api}' cannot be {dt(tt)} (tfloat32 / int32 / uint32 unsupported)",
            code="err_unsupported_dtype",
            loc=user_loc(),
        )
    not_both_psum(tt, pt, api, "on_true", "predicate")
    fop, _ = scalar_or_vector(on_false, tacc.shape[0], api, "on_false")
    rop = _reducer(
        reduce_op if reduce_op is not None else "maximum", api, "reduce_op", ("maximum",)
    )
    cmd = enum_value(reduce_cmd, _reduce_cmd, api, "reduce_cmd")
    attrs: dict[str, Any] = {
        "engine": "vector",
        "reverse_pred": bool(reverse_pred),
        "reduce_op": rop.name,
        "reduce_cmd": cmd.name,
    }
    outputs = []
    if reduce_res is not None:
        racc, rt = _res_vector(reduce_res, tacc.shape[0], api, "reduce_res")
        if not dtypes.is_float(dt(rt)):
            raise NKITypeError(
                f"'reduce_res' of '{api}' must have a float dtype, got {dt(rt)}",
                code="err_unsupported_dtype",
                loc=user_loc(),
            )
        attrs["reduce_res"] = racc
        outputs.append(racc)
    emit_isa("select_reduce", dacc, (pacc, tacc, fop), attrs, mask=mask, outputs=tuple(outputs))


# --------------------------------------------------------------------------------------------
# statistics and search
# --------------------------------------------------------------------------------------------


def bn_stats(data: Any, *, mask: Any = None, dtype: Any = None, **_kw: Any) -> NkiTensor:
    """Per-partition statistics of up to 512 elements (``nl.tile_size.bn_stats_fmax``): six
    values per partition, (count, mean, variance * count) of the even-indexed and then of the
    odd-indexed elements of the flattened free axis, in fp32. Combine with ``bn_aggr``.

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
    emit_isa("bn_stats", out.access_(), (acc,), {"engine": "vector"}, mask=mask)
    return out


def bn_aggr(data: Any, *, mask: Any = None, dtype: Any = None, **_kw: Any) -> NkiTensor:
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


def max8(*, src: Any, mask: Any = None, dtype: Any = None, **_kw: Any) -> NkiTensor:
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


def nc_find_index8(
    *, data: Any, vals: Any, mask: Any = None, dtype: Any = None, **_kw: Any
) -> NkiTensor:
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


def nc_match_replace8(
    *,
    data: Any,
    vals: Any,
    imm: Any,
    dst_idx: Any = None,
    mask: Any = None,
    dtype: Any = None,
    **_kw: Any,
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
    if is_tile(imm):
        raise NKITypeError(
            f"'imm' of '{api}' must be a compile-time scalar",
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


# --------------------------------------------------------------------------------------------
# partition shuffle, reciprocal, dropout
# --------------------------------------------------------------------------------------------


def nc_stream_shuffle(
    src: Any, dst: Any, shuffle_mask: Any, *, dtype: Any = None, mask: Any = None, **_kw: Any
) -> None:
    """Cross-partition move within each 32-partition quadrant: destination partition ``i`` of a
    quadrant copies source partition ``shuffle_mask[i]`` of the same quadrant; 255 leaves it
    unchanged. ``shuffle_mask`` has 32 entries; ``src`` and ``dst`` have the same dtype,
    partition count and elements per partition. In-place (src is dst) is allowed.

    Example: ``nisa.nc_stream_shuffle(src=x, dst=y, shuffle_mask=list(range(31, -1, -1)))``.
    """
    api = "nisa.nc_stream_shuffle"
    sacc, st = tile(src, api, "src", compute=False)
    dacc, dtt = tile(dst, api, "dst", compute=False)
    same_elements(sacc.shape, dacc.shape, api, "src", "dst")
    if dt(st) != dt(dtt):
        raise NKITypeError(
            f"'src' ({dt(st)}) and 'dst' ({dt(dtt)}) of '{api}' must have the same dtype",
            code="err_dtype_mismatch",
            loc=user_loc(),
        )
    try:
        m = tuple(int(v) for v in shuffle_mask)
    except (TypeError, ValueError):
        m = ()
    parts = sacc.shape[0]
    if len(m) != 32 or any(not (0 <= v < 32 or v == 255) for v in m):
        raise NKIError(
            f"'shuffle_mask' of '{api}' must be 32 integers in [0, 32) or 255; got "
            f"{shuffle_mask!r}",
            code="err_invalid_shuffle_mask",
            loc=user_loc(),
        )
    if parts % 32 and any(v != 255 and v >= parts for v in m[:parts]):
        raise NKIError(
            f"'shuffle_mask' of '{api}' reads partitions beyond the {parts} partitions of "
            f"'src'{list(sacc.shape)}",
            code="err_invalid_shuffle_mask",
            loc=user_loc(),
        )
    del dtype
    emit_isa("nc_stream_shuffle", dacc, (sacc,), {"engine": "vector", "shuffle": m}, mask=mask)


def reciprocal(data: Any, *, dtype: Any = None, mask: Any = None, **_kw: Any) -> NkiTensor:
    """``1 / data`` element-wise in fp32 (Vector engine).

    Example: ``r = nisa.reciprocal(x)``.
    """
    api = "nisa.reciprocal"
    acc, t = tile(data, api, "data")
    out = out_tile(acc.shape, out_dtype(dtype, dt(t)), api)
    emit_isa("reciprocal", out.access_(), (acc,), {"engine": "vector"}, mask=mask)
    return out


def dropout(data: Any, prob: Any, *, mask: Any = None, dtype: Any = None, **_kw: Any) -> NkiTensor:
    """Zero each element with probability ``prob`` (a scalar or a (P, 1) tile per partition);
    kept elements are unchanged (no rescaling). Integer data needs a float32 ``prob`` and keeps
    its dtype. The random stream is per instance, seeded from SimConfig.shuffle_seed (or 0).

    Example: ``y = nisa.dropout(x, prob=0.1)``.
    """
    api = "nisa.dropout"
    acc, t = tile(data, api, "data")
    pop, pdt = scalar_or_vector(prob, acc.shape[0], api, "prob")
    odt = out_dtype(dtype, dt(t))
    if dtypes.is_int(dt(t)):
        if is_tile(prob) and pdt != "float32":
            raise NKITypeError(
                f"'prob' of '{api}' must be float32 for integer data ({dt(t)}); got {pdt}",
                code="err_invalid_operand_dtype",
                loc=user_loc(),
            )
        if odt != dt(t):
            raise NKITypeError(
                f"output dtype {odt} of '{api}' must equal the integer data dtype {dt(t)}",
                code="err_dtype_mismatch",
                loc=user_loc(),
            )
    elif is_tile(prob) and not dtypes.is_float(pdt):
        raise NKITypeError(
            f"'prob' of '{api}' must be a float tile, got {pdt}",
            code="err_invalid_operand_dtype",
            loc=user_loc(),
        )
    out = out_tile(acc.shape, odt, api)
    emit_isa("dropout", out.access_(), (acc, pop), {"engine": "vector"}, mask=mask)
    return out


_CMP_OPS = ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")


def range_select(
    *,
    on_true_tile: Any,
    comp_op0: Any,
    comp_op1: Any,
    bound0: Any,
    bound1: Any,
    reduce_cmd: Any = _reduce_cmd.idle,
    reduce_res: Any = None,
    reduce_op: Any = None,
    range_start: Any = 0,
    on_false_value: Any = None,
    mask: Any = None,
    dtype: Any = None,
    **_kw: Any,
) -> NkiTensor:
    """Keep the elements whose free index ``j + range_start`` satisfies both
    ``comp_op0(j + range_start, bound0)`` and ``comp_op1(j + range_start, bound1)`` (bounds:
    (P, 1) tiles or scalars), ``on_false_value`` (default: the most negative float32) elsewhere;
    the per-partition max is folded into the Vector accumulators (``reduce_cmd``) and read into
    ``reduce_res``. NeuronCore-v3 (trn2) and newer only.

    Example: ``y = nisa.range_select(on_true_tile=s, comp_op0=nl.greater_equal,
    comp_op1=nl.less, bound0=lo, bound1=hi, reduce_res=m,
    reduce_cmd=nisa.reduce_cmd.reset_reduce)``.
    """
    api = "nisa.range_select"
    from .rules import check_available

    check_available("range_select", api)
    acc, t = tile(on_true_tile, api, "on_true_tile")
    parts = acc.shape[0]
    ops = []
    for role, op in (("comp_op0", comp_op0), ("comp_op1", comp_op1)):
        fn = alu_op(op, api, role)
        if fn.name not in _CMP_OPS:
            raise NKIError(
                f"'{role}'={fn.name} of '{api}' must be a comparison ({', '.join(_CMP_OPS)})",
                code="err_unsupported_op",
                loc=user_loc(),
            )
        ops.append(fn.name)
    b0, _ = scalar_or_vector(bound0, parts, api, "bound0")
    b1, _ = scalar_or_vector(bound1, parts, api, "bound1")
    rop = _reducer(
        reduce_op if reduce_op is not None else "maximum", api, "reduce_op", ("maximum",)
    )
    cmd = enum_value(reduce_cmd, _reduce_cmd, api, "reduce_cmd")
    fill = float(dtypes.dtype("float32").min) if on_false_value is None else on_false_value
    if is_tile(fill) or isinstance(fill, bool) or not isinstance(fill, (int, float)):
        raise NKITypeError(
            f"'on_false_value' of '{api}' must be a float scalar, got {type(fill).__name__}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    attrs: dict[str, Any] = {
        "engine": "vector",
        "comp_op0": ops[0],
        "comp_op1": ops[1],
        "range_start": int(range_start),
        "reduce_op": rop.name,
        "reduce_cmd": cmd.name,
    }
    outputs = []
    if reduce_res is not None:
        racc, _rt = _res_vector(reduce_res, parts, api, "reduce_res")
        attrs["reduce_res"] = racc
        outputs.append(racc)
    out = out_tile(acc.shape, out_dtype(dtype, dt(t)), api)
    emit_isa(
        "range_select",
        out.access_(),
        (acc, b0, b1, Const(float(fill))),
        attrs,
        mask=mask,
        outputs=tuple(outputs),
    )
    return out
