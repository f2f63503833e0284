"""Vector-engine element-wise instructions (some also on the Scalar / GpSimd engines):
tensor-tensor and tensor-scalar ops, reductions and scans, plus the op / axis helpers the other
Vector-engine modules share."""

from __future__ import annotations

from typing import Any

from ..errors import NKIError, NKIShapeError, user_loc
from ..ir import Const
from ..isa_spec import checked
from ..isa_spec import get as get_spec
from ..optable import REDUCERS, Op
from ..tracer import NkiTensor
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
    tile,
    widest,
)
from .enums import engine_name
from .rules import check_engine_op, check_gpsimd_memory, check_scalar_pair

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


def _first_op(op: Any, operand: Any, api: str) -> tuple[Op, Any]:
    """``op0`` of tensor_scalar / tensor_scalar_reduce and its operand: a binary ALU op, or a
    unary one (``nl.abs``, ``nl.rsqrt``, ...) applied to the data alone, whose ``operand0``
    must then be None or 0 (the operand slot is unused)."""
    fn = alu_op(op, api, "op0")
    if fn.arity != 1:
        return _binary(op, api, "op0"), operand
    if operand is not None and not (isinstance(operand, (int, float)) and operand == 0):
        raise NKIError(
            f"'op0'={fn.name} of '{api}' is a unary operator: 'operand0' must be None or 0, "
            f"got {operand!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    return fn, 0.0


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


@checked
def tensor_tensor(
    data1: Any,
    data2: Any,
    op: Any,
    *,
    dtype: Any = None,
    mask: Any = None,
    engine: Any = None,
) -> NkiTensor:
    """``op(data1, data2)`` element-wise (Vector engine by default; GpSimd with engine=).

    Both tiles need the same partition count and elements per partition (or one of them is a
    (P, 1) column, broadcast along the free axis, as AWS's double-row matmul sample scales its
    rows) and cannot both be in PSUM. Arithmetic ops compute in fp32; bit-vector ops need
    integer dtypes and run on the Vector engine on raw bits. Default dtype: the wider input.

    Example: ``z = nisa.tensor_tensor(x, y, op=nl.add)``.
    """
    api = "nisa.tensor_tensor"
    a1, t1 = tile(data1, api, "data1")
    a2, t2 = tile(data2, api, "data2")
    column = free_size(a2.shape) == 1 or free_size(a1.shape) == 1
    if column:
        same_partitions(a1.shape, a2.shape, api, "data1", "data2")
    else:
        same_elements(a1.shape, a2.shape, api, "data1", "data2")
    fn = _binary(op, api, "op")
    eng = engine_name(engine)
    eng = _default_engine([fn]) if eng == "unknown" else eng
    if eng not in get_spec("tensor_tensor").engines:
        raise NKIError(
            f"'{api}' runs on the Vector or GpSimd engine, not {eng}",
            code="err_unsupported_engine_for_op",
            loc=user_loc(),
        )
    check_engine_op(fn, eng, api, "op")
    not_both_psum(t1, t2, api, "data1", "data2")
    check_gpsimd_memory(eng, {"data1": t1, "data2": t2}, api)
    odt = out_dtype(dtype, widest([dt(t1), dt(t2)]))
    check_bitvec_dtypes(fn, [dt(t1), dt(t2), odt], api, "op")
    shape = a2.shape if free_size(a1.shape) < free_size(a2.shape) else a1.shape
    out = out_tile(shape, odt, api)
    emit_isa("tensor_tensor", out.access_(), (a1, a2), {"engine": eng, "op": fn.name}, mask=mask)
    return out


@checked
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
    f0, operand0 = _first_op(op0, operand0, api)
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


@checked
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


@checked
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
) -> NkiTensor:
    """``data op0 operand0`` (one arithmetic op) plus a reduction of the result over all free
    axes into ``reduce_res`` (P, 1) with add / subtract / multiply / max / min, through the
    Vector engine's accumulator registers (``reduce_res=None``: the registers only).

    Example: ``y = nisa.tensor_scalar_reduce(data=x, op0=np.multiply, operand0=2.0,
    reduce_op=np.add, reduce_res=s)``.
    """
    api = "nisa.tensor_scalar_reduce"
    acc, t = tile(data, api, "data")
    f0, operand0 = _first_op(op0, operand0, api)
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
    out = out_tile(acc.shape, out_dtype(dtype, dt(t)), api)
    attrs = {
        "engine": "vector",
        "op0": f0.name,
        "reverse0": bool(reverse0),
        "reduce_op": rop.name,
    }
    outputs = ()
    if reduce_res is not None:
        racc, _rt = _res_vector(reduce_res, acc.shape[0], api, "reduce_res")
        attrs["reduce_res"] = racc
        outputs = (racc,)
    emit_isa("tensor_scalar_reduce", out.access_(), (acc, o0), attrs, mask=mask, outputs=outputs)
    return out


# --------------------------------------------------------------------------------------------
# reductions and scans
# --------------------------------------------------------------------------------------------


@checked
def tensor_reduce(
    op: Any,
    data: Any,
    axis: Any,
    *,
    mask: Any = None,
    dtype: Any = None,
    negate: bool = False,
    keepdims: bool = False,
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


@checked
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
) -> NkiTensor:
    """Per-partition scan over the flattened free axis:
    ``r[:, 0] = op1(op0(data0[:, 0], initial), data1[:, 0])``,
    ``r[:, i] = op1(op0(data0[:, i], r[:, i-1]), data1[:, i])`` (fp32 math). ``reverse0``
    swaps op0's operands, ``reverse1`` op1's. ``initial``: a scalar or (P, 1) tile.
    ``data0`` and ``data1`` cannot both be in PSUM.

    Example: ``r = nisa.tensor_tensor_scan(a, b, 0.0, np.multiply, np.add)`` (linear recurrence).
    """
    api = "nisa.tensor_tensor_scan"
    a0, t0 = tile(data0, api, "data0")
    a1, t1 = tile(data1, api, "data1")
    same_elements(a0.shape, a1.shape, api, "data0", "data1")
    not_both_psum(t0, t1, api, "data0", "data1")
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
