"""Vector-engine reductions, scans and statistics along the free axes: tensor_reduce,
tensor_scalar_reduce, tensor_tensor_scan, bn_stats / bn_aggr and, of the current API only,
tensor_scalar_cumulative.

The Vector engine's 128 per-partition accumulator registers (fp32) persist across
instructions: tensor_scalar_reduce, tensor_scalar_cumulative, exponential, select_reduce and
range_select share them. ``reduce_cmd`` says what an instruction does with them (idle: leave
them; reset: set them to the reduction's identity; reset_reduce: reset then fold this
instruction's values in; reduce: fold in on top; load_reduce: load an initial value, then fold
in)."""

from __future__ import annotations

from typing import Any

from ..errors import NKIError, NKIShapeError, user_loc
from ..ir import Const
from ..tracer import NkiTensor, operand
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
    not_both_psum,
    op_name,
    reducer,
    res_vector,
    same_elements,
    scalar_or_vector,
)
from .enums import reduce_cmd as _reduce_cmd
from .forms import EXTRA_SRC, dst_dtype, instruction
from .rules import check_engine_op, target


@instruction
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

    A classic ``mask`` is over the data (the instruction's iteration space): masked-out
    elements take no part, and a partition with none selected keeps its result row.

    Example: ``m = nisa.tensor_reduce(np.max, x, axis=(1,), keepdims=True)``.
    """
    c = Call("tensor_reduce", dtype)
    acc, t = c.tile(data, "data")
    fn = reducer(op, c.api, "op")
    rank = len(acc.shape)
    axes = _axes(axis, rank, c.api)
    if negate and fn.bitvec:
        raise NKIError(
            f"negate=True of '{c.api}' applies to arithmetic operators only, not {fn.name}",
            code="err_unsupported_op",
            loc=user_loc(),
        )
    odt = c.result_dtype()
    check_bitvec_dtypes(fn, [dt(t), odt], c.api, "op")
    if keepdims:
        shape = tuple(1 if d in axes else n for d, n in enumerate(acc.shape))
    else:
        shape = tuple(n for d, n in enumerate(acc.shape) if d not in axes)
        if len(shape) < 2:
            shape = (acc.shape[0], 1)
    return c.new(
        shape, (acc,), dtype=odt, mask=mask, mask_shape=acc.shape, op=fn.name, axis=axes,
        negate=bool(negate),
    )  # fmt: skip


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


def _tensor_scalar_reduce_into(
    name: str, dst: Any, a: dict[str, Any]
) -> tuple[Any, None, dict[str, Any]]:
    """The current form's accumulator controls ride on the instruction: ``reduce_cmd`` and
    ``reduce_res_negate`` as attributes, load_reduce's ``reduce_init`` (an fp32 scalar or a
    (P, 1) float32 tile) as a third source."""
    api = f"nisa.{name}"
    cmd = command(a.pop("reduce_cmd"), api, ("reset_reduce", "reduce", "load_reduce"))
    init, negate = a.pop("reduce_init"), a.pop("reduce_res_negate")
    if (cmd == "load_reduce") != (init is not None):
        raise NKIError(
            f"reduce_init={init!r} of {api} with reduce_cmd={cmd}: reduce_cmd.load_reduce loads "
            "the accumulators from reduce_init (a scalar or a (P, 1) float32 tile), so it needs "
            "one, and the other commands take none",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    a["dtype"] = dst_dtype(dst)
    extra: dict[str, Any] = {"reduce_cmd": cmd, "reduce_res_negate": bool(negate)}
    if init is not None:
        parts = operand(a["data"], api, "data")[0].shape[0]
        if isinstance(init, bool):
            init = float(init)
        extra[EXTRA_SRC] = scalar_or_vector(init, parts, api, "reduce_init", fp32_only=True)[0]
    return dst, None, extra


@instruction(current=_tensor_scalar_reduce_into)
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
    c = Call("tensor_scalar_reduce", dtype)
    acc, _ = c.tile(data, "data")
    f0, operand0 = first_op(op0, operand0, c.api)
    if f0.bitvec:
        raise NKIError(
            f"'op0'={f0.name} of '{c.api}' must be an arithmetic operator (bit-vector operators "
            "are not supported by this instruction)",
            code="err_unsupported_op",
            loc=user_loc(),
        )
    check_engine_op(f0, "vector", c.api, "op0")
    if reverse0:
        broken("tensor_scalar_reduce.reverse0", f"'{c.api}' got reverse0={reverse0!r}")
    o0, _ = scalar_or_vector(operand0, acc.shape[0], c.api, "operand0")
    rop = reducer(
        reduce_op, c.api, "reduce_op", ("add", "subtract", "multiply", "maximum", "minimum")
    )
    out = c.result(acc.shape)
    res = {}
    if reduce_res is not None:
        res["reduce_res"] = res_vector(reduce_res, acc.shape[0], c.api)[0]
    params = dict(op0=f0.name, reverse0=bool(reverse0), reduce_op=rop.name, **res)
    c.emit(out.access_(), (acc, o0), mask=mask, **params)
    return out


@instruction
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
    c = Call("tensor_tensor_scan", dtype)
    a0, t0 = c.tile(data0, "data0")
    a1, t1 = c.tile(data1, "data1")
    same_elements(a0.shape, a1.shape, c.api, "data0", "data1")
    not_both_psum(t0, t1, c.api, "data0", "data1")
    f0 = binary_op(op0, c.api, "op0")
    f1 = binary_op(op1, c.api, "op1")
    for role, f in (("op0", f0), ("op1", f1)):
        if f.bitvec:
            raise NKIError(
                f"'{role}'={f.name} of '{c.api}' must be an arithmetic operator",
                code="err_unsupported_op",
                loc=user_loc(),
            )
        check_engine_op(f, "vector", c.api, role)
    init, _ = scalar_or_vector(initial, a0.shape[0], c.api, "initial")
    return c.new(
        a0.shape, (a0, a1, init), mask=mask, op0=f0.name, op1=f1.name, reverse0=bool(reverse0),
        reverse1=bool(reverse1),
    )  # fmt: skip


_CUMULATIVE_DTYPES = (
    "bfloat16", "float16", "float32", "float8_e4m3", "float8_e4m3fn", "float8_e5m2",
    "uint8", "uint16", "int8", "int16",
)  # fmt: skip
_CUMULATIVE_OPS = ("add", "subtract", "multiply", "maximum", "minimum")
_ARITH = (
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "fmod", "mod",
)  # fmt: skip


@instruction
def tensor_scalar_cumulative(
    dst: Any,
    src: Any,
    op0: Any,
    op1: Any,
    imm0: Any,
    imm1: Any = None,
    reduce_cmd: Any = _reduce_cmd.reset_reduce,
    name: Any = None,
) -> Instruction:
    """Per partition, over the flattened free elements ``x_i`` of ``src``:
    ``reg = op1(op0(x_i, imm0), reg); dst_i = reg`` on the Vector engine, in fp32.

    ``reg`` is the partition's Vector-engine accumulator register: reset_reduce (default) and
    reset start it at op1's identity (0 for add / subtract, 1 for multiply, -inf for maximum,
    +inf for minimum), load_reduce at ``imm1`` (required then; a scalar or (P, 1) tile),
    reduce continues from its value; idle computes from the identity and leaves the register
    unchanged (a reading: the documentation's pseudo-code does not cover idle). ``op0``: an
    arithmetic ALU op; ``op1``: add, subtract, multiply, maximum or minimum. subtract follows
    the documented pseudo-code literally: ``reg = op0(x_i, imm0) - reg``. int32 / uint32 data is
    not supported (an ISA limit), in ``src`` or ``dst``.

    Example: ``nisa.tensor_scalar_cumulative(cs, x, nl.multiply, nl.add, imm0=1.0)`` (cumsum).
    """
    c = Call("tensor_scalar_cumulative")
    api = c.api
    dacc, dtile = c.tile(dst, "dst")
    sacc, stile = c.tile(src, "src")
    same_elements(dacc.shape, sacc.shape, api, "dst", "src")
    for role, t in (("dst", dtile), ("src", stile)):
        dtype_in(t, _CUMULATIVE_DTYPES, api, role)
    f0 = op_name(op0, api, "op0", _ARITH)
    f1 = op_name(op1, api, "op1", _CUMULATIVE_OPS)
    parts = dacc.shape[0]
    o0 = imm(imm0, parts, api, "imm0", fp32=True)
    cmd = command(reduce_cmd, api)
    if cmd == "load_reduce" and imm1 is None:
        raise NKIError(
            f"'{api}' with reduce_cmd=load_reduce starts the accumulators at 'imm1', which is "
            "None; pass imm1",
            code="err_missing_operand",
            loc=user_loc(),
        )
    o1 = imm(imm1, parts, api, "imm1", fp32=True) if imm1 is not None else Const(0.0)
    return c.emit(dacc, (sacc, o0, o1), op0=f0, op1=f1, reduce_cmd=cmd)


# ---- statistics ------------------------------------------------------------------------------
@instruction
def bn_stats(data: Any, *, mask: Any = None, dtype: Any = None) -> NkiTensor:
    """Per-partition statistics of up to 512 elements (``nl.tile_size.bn_stats_fmax``): six
    values per partition, (count, mean, variance * count) of the even-indexed and then of the
    odd-indexed elements of the flattened free axis, in fp32. Combine with ``bn_aggr``.
    ``mask`` selects *input* elements (e.g. ``j * 512 + i_f < n`` for a ragged last chunk):
    masked-out elements are not read and not counted.

    Example: ``stats = nisa.bn_stats(x)`` -> (P, 6).
    """
    c = Call("bn_stats", dtype)
    acc, _ = c.tile(data, "data")
    f = free_size(acc.shape)
    lim = target().bn_stats_fmax
    if f > lim:
        raise NKIShapeError(
            f"'data'{list(acc.shape)} of '{c.api}' has {f} elements per partition, exceeding "
            f"the architecture limitation of {lim} (nl.tile_size.bn_stats_fmax); split it and "
            "combine the bn_stats results with one bn_aggr",
            code="err_size_of_dimension_exceed_arch_limit",
            loc=user_loc(),
        )
    # the mask selects input elements (e.g. the valid columns of a ragged last chunk)
    return c.new((acc.shape[0], 6), (acc,), mask=mask, mask_shape=acc.shape)


@instruction
def bn_aggr(data: Any, *, mask: Any = None, dtype: Any = None) -> NkiTensor:
    """Aggregate (count, mean, variance * count) triples (one or more ``bn_stats`` outputs) into
    (mean, variance) per partition (population variance), in fp32. The free size must be a
    multiple of 3.

    Example: ``mv = nisa.bn_aggr(stats)`` -> (P, 2).
    """
    c = Call("bn_aggr", dtype)
    acc, _ = c.tile(data, "data")
    f = free_size(acc.shape)
    if f % 3:
        raise NKIShapeError(
            f"'data'{list(acc.shape)} of '{c.api}' must hold (count, mean, var*count) triples: "
            f"its {f} elements per partition are not a multiple of 3",
            code="err_bn_aggr_free_size",
            loc=user_loc(),
        )
    return c.new((acc.shape[0], 2), (acc,), mask=mask)
