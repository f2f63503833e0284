"""Vector-engine element-wise instructions (some also on the Scalar / GpSimd engines):
tensor_tensor, tensor_scalar, scalar_tensor_tensor, reciprocal and, of the current API only
(NeuronCore-v4), exponential. Reductions and scans are in ``reductions.py``."""

from __future__ import annotations

from typing import Any

from ..errors import NKIError, user_loc
from ..ir import Const
from ..optable import Op
from ..tracer import NkiTensor
from ..tracer.api_checks import broken
from .common import (
    Call,
    Instruction,
    binary_op,
    check_bitvec_dtypes,
    command,
    dt,
    dtype_in,
    first_op,
    free_size,
    imm,
    is_tile,
    not_both_psum,
    rank_at_most,
    res_vector,
    same_elements,
    same_partitions,
    scalar_or_vector,
    tile,
)
from .enums import engine_name
from .enums import reduce_cmd as _reduce_cmd
from .forms import dst_view, generic_current, instruction
from .rules import check_engine_op, check_gpsimd_memory, check_scalar_pair

_EQUAL_FREE = "tensor_tensor.equal_free"
_INT32 = frozenset({"int32", "uint32"})  # (tiles GpSimd's native integer arithmetic takes)


def _default_engine(ops: list[Op]) -> str:
    """The first engine (in the op table's order) that runs every op: ``nl.power`` runs on
    GpSimd, the other binary ops on the Vector engine."""
    common = [e for e in ops[0].engines if all(e in o.engines for o in ops)]
    return common[0] if common else "vector"


def _tensor_tensor_into(name: str, dst: Any, a: dict[str, Any]) -> tuple[Any, None, dict]:
    """The destination-first ``tensor_tensor``: with no engine given, a PSUM destination keeps
    the Vector engine (the int32 / uint32 default, GpSimd, cannot write PSUM: the page's "falls
    back to Vector Engine when any operand resides in PSUM")."""
    dst, _, extra = generic_current(name, dst, a)
    dts = {str(getattr(a.get(k), "dtype", "")) for k in ("data1", "data2")} | {a.get("dtype")}
    if (
        engine_name(a.get("engine")) == "unknown"
        and dst_view(dst).tensor_().buffer == "psum"
        and dts <= _INT32
    ):
        a["engine"] = "vector"
    return dst, None, extra


@instruction(current=_tensor_tensor_into)
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

    Both tiles need the same partition count and elements per partition and cannot both be in
    PSUM. A classic kernel may pass a (P, 1) column, broadcast along the free axis (AWS's
    classic double-row matmul sample scales its rows so); the current API refuses it and
    points to ``nisa.tensor_scalar``. Arithmetic ops compute in fp32; bit-vector ops need
    integer dtypes and run on the Vector engine on raw bits. With every tile int32 / uint32 (and
    neither input in PSUM) the default engine is GpSimd, whose integer arithmetic is exact.
    Default dtype: the wider input.

    Example: ``z = nisa.tensor_tensor(x, y, op=nl.add)``.
    """
    c = Call("tensor_tensor", dtype)
    api = c.api
    a1, t1 = c.tile(data1, "data1")
    a2, t2 = c.tile(data2, "data2")
    column = free_size(a2.shape) == 1 or free_size(a1.shape) == 1
    if column and free_size(a1.shape) != free_size(a2.shape):
        same_partitions(a1.shape, a2.shape, api, "data1", "data2")
        broken(
            _EQUAL_FREE,
            f"'{api}' got data1 {list(a1.shape)} ({free_size(a1.shape)} elements per "
            f"partition) and data2 {list(a2.shape)} ({free_size(a2.shape)})",
        )
    if column:
        same_partitions(a1.shape, a2.shape, api, "data1", "data2")
    else:
        same_elements(a1.shape, a2.shape, api, "data1", "data2")
    fn = binary_op(op, api, "op")
    odt = c.result_dtype()
    default = _default_engine([fn])
    if (
        {dt(t1), dt(t2), odt} <= _INT32
        and fn.exact_int
        and "gpsimd" in fn.engines
        and "psum" not in (t1.buffer, t2.buffer)
    ):
        # (all 32-bit integers: GpSimd's native integer arithmetic by default, exact for every
        # value, where the Vector engine's fp32 path rounds above 2^24)
        default = "gpsimd"
    eng = c.choose_engine(engine, default)
    check_engine_op(fn, eng, api, "op")
    not_both_psum(t1, t2, api, "data1", "data2")
    check_gpsimd_memory(eng, {"data1": t1, "data2": t2}, api)
    check_bitvec_dtypes(fn, [dt(t1), dt(t2), odt], api, "op")
    shape = a2.shape if free_size(a1.shape) < free_size(a2.shape) else a1.shape
    return c.new(shape, (a1, a2), dtype=odt, mask=mask, engine=eng, op=fn.name)


@instruction
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
    add), (multiply, None) and (add, None) are supported; on the GpSimd engine only rsqrt
    (``op0=nl.rsqrt``, no ``op1``). Default dtype: the data's.

    Example: ``y = nisa.tensor_scalar(x, np.subtract, mean, op1=np.multiply, operand1=rstd)``.
    """
    c = Call("tensor_scalar", dtype)
    api = c.api
    acc, t = c.tile(data, "data")
    parts = acc.shape[0]
    f0, operand0 = first_op(op0, operand0, api)
    o0, _ = scalar_or_vector(operand0, parts, api, "operand0")
    f1 = None
    o1: Any = Const(0)
    ops = [f0]
    if op1 is not None:
        f1 = binary_op(op1, api, "op1")
        if operand1 is None:
            raise NKIError(
                f"'op1' of '{api}' is given but 'operand1' is None",
                code="err_missing_operand",
                loc=user_loc(),
            )
        o1, _ = scalar_or_vector(operand1, parts, api, "operand1")
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
        if eng == "gpsimd" and (f0.name != "rsqrt" or f1 is not None):
            ran = f0.name + (f" and op1={f1.name}" if f1 is not None else "")
            broken("tensor_scalar.gpsimd_rsqrt", f"'{api}' on the GpSimd engine got op0={ran}")
        for role, f in zip(("op0", "op1"), ops):
            check_engine_op(f, eng, api, role)
    tensors = {"data": t}
    for role, x, f in (("operand0", operand0, f0), ("operand1", operand1, f1)):
        if is_tile(x):
            tensors[role] = tile(x, api, role)[1]
            if f is not None and not f.bitvec and dt(tensors[role]) != "float32":
                broken(
                    "tensor_scalar.operand_fp32",
                    f"'{api}' got a {dt(tensors[role])} '{role}' tile for op {f.name}",
                )
    check_gpsimd_memory(eng, tensors, api)
    odt = c.result_dtype()
    for role, f in zip(("op0", "op1"), ops):
        check_bitvec_dtypes(
            f, [dt(t), odt, *[dt(v) for k, v in tensors.items() if k != "data"]], api, role
        )
    return c.new(
        acc.shape, (acc, o0, o1), dtype=odt, mask=mask, engine=eng, op0=f0.name,
        op1=f1.name if f1 else None, reverse0=bool(reverse0), reverse1=bool(reverse1),
    )  # fmt: skip


@instruction
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
    c = Call("scalar_tensor_tensor", dtype)
    api = c.api
    acc, t = c.tile(data, "data")
    f0 = binary_op(op0, api, "op0")
    f1 = binary_op(op1, api, "op1")
    o0, _ = scalar_or_vector(operand0, acc.shape[0], api, "operand0")
    a1, t1 = c.tile(operand1, "operand1")
    same_elements(acc.shape, a1.shape, api, "data", "operand1")
    not_both_psum(t, t1, api, "data", "operand1")
    for role, f in (("op0", f0), ("op1", f1)):
        check_engine_op(f, "vector", api, role)
        if f.bitvec:
            broken("scalar_tensor_tensor.arith", f"'{api}' got {role}={f.name}")
    odt = c.result_dtype()
    for role, f in (("op0", f0), ("op1", f1)):
        check_bitvec_dtypes(f, [dt(t), dt(t1), odt], api, role)
    return c.new(
        acc.shape, (acc, o0, a1), dtype=odt, mask=mask, op0=f0.name, op1=f1.name,
        reverse0=bool(reverse0), reverse1=bool(reverse1),
    )  # fmt: skip


@instruction
def reciprocal(data: Any, *, dtype: Any = None, mask: Any = None, engine: Any = None) -> NkiTensor:
    """``1 / data`` element-wise in fp32 on the Vector engine (default; more precise) or the
    Scalar engine (``engine=nisa.scalar_engine``); no other engine runs it.

    Example: ``r = nisa.reciprocal(x)``.
    """
    c = Call("reciprocal", dtype)
    acc, _ = c.tile(data, "data")
    eng = c.choose_engine(engine)
    return c.new(acc.shape, (acc,), mask=mask, engine=eng)


_EXP_DTYPES = (
    "float8_e4m3", "float8_e5m2", "float16", "bfloat16", "float32", "tfloat32",
    "int8", "int16", "int32", "uint8", "uint16",
)  # fmt: skip


@instruction
def exponential(
    dst: Any,
    src: Any,
    max_value: Any = 0.0,
    reduce_res: Any = None,
    reduce_cmd: Any = _reduce_cmd.idle,
    reduce_init: Any = 0.0,
    name: Any = None,
) -> Instruction:
    """``dst = exp(src - max_value)`` on the Vector engine, in fp32 (NeuronCore-v4).

    ``max_value``: an fp32 scalar or a (P, 1) tile. The exponentials' per-partition sum goes to
    the Vector engine's accumulator registers as ``reduce_cmd`` says (load_reduce starts from
    ``reduce_init``, a scalar or (P, 1) tile; it must stay 0.0 for any other command);
    ``reduce_res`` (P, 1), if given, receives the registers afterwards. ``src`` and ``dst``:
    SBUF or PSUM, the same partitions and elements per partition, rank at most 4.

    Example: ``nisa.exponential(e, x, max_value=neg_max, reduce_res=s,
    reduce_cmd=nisa.reduce_cmd.reset_reduce)``.
    """
    c = Call("exponential")
    api = c.api
    dacc, dtile = c.tile(dst, "dst")
    sacc, stile = c.tile(src, "src")
    same_elements(dacc.shape, sacc.shape, api, "dst", "src")
    for role, acc, t in (("dst", dacc, dtile), ("src", sacc, stile)):
        rank_at_most(acc.shape, 4, api, role)
        dtype_in(t, _EXP_DTYPES, api, role)
    parts = dacc.shape[0]
    mv = imm(max_value, parts, api, "max_value", fp32=True)
    cmd = command(reduce_cmd, api, ("idle", "reset_reduce", "reduce", "load_reduce"))
    if cmd != "load_reduce" and not (isinstance(reduce_init, (int, float)) and reduce_init == 0):
        raise NKIError(
            f"'reduce_init' of '{api}' is only used by reduce_cmd=load_reduce and must be left "
            f"at 0.0 with reduce_cmd={cmd}; got {reduce_init!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    init = imm(reduce_init, parts, api, "reduce_init", fp32=True)
    res = {} if reduce_res is None else {"reduce_res": res_vector(reduce_res, parts, api)[0]}
    return c.emit(dacc, (sacc, mv, init), reduce_cmd=cmd, **res)
