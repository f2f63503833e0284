"""Copies and selection, on the Vector engine (tensor_copy also on the Scalar / GpSimd
engines): tensor_copy and its classic dynamic-offset forms, tensor_copy_predicated,
select_reduce, range_select and the partition shuffle nc_stream_shuffle."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes
from .. import isa_spec as spec
from ..errors import NKIError, NKITypeError, user_loc
from ..ir import Const
from ..tracer import NkiTensor, assign, operand
from ..tracer.api_checks import broken
from .common import (
    Call,
    alu_op,
    command,
    dt,
    dtype_name,
    is_tile,
    not_both_psum,
    reducer,
    res_vector,
    same_dtype,
    same_elements,
    same_free,
    scalar_or_vector,
    static_int,
)
from .enums import reduce_cmd as _reduce_cmd
from .forms import instruction
from .rules import check_available, check_dtype_in, check_gpsimd_memory, rules


@instruction
def tensor_copy(src: Any, *, mask: Any = None, dtype: Any = None, engine: Any = None) -> NkiTensor:
    """Copy an on-chip tile on the Vector (default), Scalar or GpSimd engine. Vector / GpSimd
    copy bit-exactly when the dtypes match and cast through fp32 otherwise; the Scalar engine
    of NeuronCore-v2 always casts through fp32 (lossy for large int32). GpSimd cannot access
    PSUM.

    Example: ``y = nisa.tensor_copy(x_psum, dtype=nl.bfloat16)``.
    """
    return _copy(src, mask, dtype, engine)


def _copy(src: Any, mask: Any, dtype: Any, engine: Any) -> NkiTensor:
    c = Call("tensor_copy", dtype)
    acc, t = c.tile(src, "src")
    eng = c.choose_engine(engine)
    check_gpsimd_memory(eng, {"src": t}, c.api)
    exact = eng != "scalar" or rules().scalar_copy_exact
    return c.new(acc.shape, (acc,), mask=mask, engine=eng, exact=exact)


@instruction
def tensor_copy_dynamic_src(
    src: Any, *, mask: Any = None, dtype: Any = None, engine: Any = None
) -> NkiTensor:
    """``nisa.tensor_copy`` whose source address is decided at run time: ``src`` is indexed
    with a value read from a one-element SBUF tile (``t[i_p, idx_tile[0, j] + i_f]``). The
    offset is bounds-checked when the copy runs.

    Example: ``out[i_p, j] = nisa.tensor_copy_dynamic_src(x[i_p, idx[0, j] + i_f])``.
    """
    return _copy(src, mask, dtype, engine)


@instruction
def tensor_copy_dynamic_dst(
    *, dst: Any, src: Any, mask: Any = None, dtype: Any = None, engine: Any = None
) -> None:
    """``nisa.tensor_copy`` into a destination whose address is decided at run time: ``dst``
    is indexed with a value read from a one-element SBUF tile (``t[i_p, idx[0, j] + i_f]``)."""
    res = _copy(src, mask, dtype, engine)
    api = spec.get("tensor_copy_dynamic_dst").api
    dacc, _ = operand(dst, api, "dst")
    assign(dacc, res, api=api)


_PRED_DTYPES = ("uint8", "uint16", "uint32", "bool_")


@instruction
def tensor_copy_predicated(
    *,
    src: Any,
    dst: Any,
    predicate: Any,
    reverse_pred: bool = False,
    mask: Any = None,
    dtype: Any = None,
) -> None:
    """Copy ``src`` (a tile, or a scalar) into ``dst`` where ``predicate`` is non-zero (zero
    with ``reverse_pred``); other ``dst`` elements are left unchanged. ``src``, ``dst`` and
    ``predicate`` share partitions and elements per partition; ``predicate`` is uint8 / uint16 /
    uint32; ``src`` and ``dst`` have the same dtype; ``src`` and ``predicate`` cannot both be in
    PSUM.

    Example: ``nisa.tensor_copy_predicated(src=x, dst=y, predicate=keep)``.
    """
    c = Call("tensor_copy_predicated", dtype)
    api = c.api
    dacc, dt_ = c.tile(dst, "dst")
    pacc, pt = c.tile(predicate, "predicate")
    same_elements(dacc.shape, pacc.shape, api, "dst", "predicate")
    check_dtype_in(dt(pt), _PRED_DTYPES, api, "predicate")
    if is_tile(src):
        sacc, st = c.tile(src, "src")
        same_elements(sacc.shape, dacc.shape, api, "src", "dst")
        not_both_psum(st, pt, api, "src", "predicate")
        same_dtype(st, dt_, api, "src", "dst")
        s: Any = sacc
    else:
        s, _ = scalar_or_vector(src, dacc.shape[0], api, "src")
    c.emit(dacc, (s, pacc), mask=mask, reverse_pred=bool(reverse_pred))


_SEL_PRED_DTYPES = ("int8", "uint8", "int16", "uint16", "bool_")


@instruction
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
    c = Call("select_reduce", dtype)
    api = c.api
    dacc, _ = c.tile(dst, "dst")
    pacc, pt = c.tile(predicate, "predicate")
    tacc, tt = c.tile(on_true, "on_true")
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
    rop = _max_reducer(reduce_op, api)
    cmd = command(reduce_cmd, api)
    res = {}
    if reduce_res is not None:
        racc, rt = res_vector(reduce_res, tacc.shape[0], api)
        if not dtypes.is_float(dt(rt)):
            raise NKITypeError(
                f"'reduce_res' of '{api}' must have a float dtype, got {dt(rt)}",
                code="err_unsupported_dtype",
                loc=user_loc(),
            )
        res["reduce_res"] = racc
    c.emit(
        dacc, (pacc, tacc, fop), mask=mask, reverse_pred=bool(reverse_pred), reduce_op=rop.name,
        reduce_cmd=cmd, **res,
    )  # fmt: skip


def _max_reducer(reduce_op: Any, api: str) -> Any:
    """The accumulators of select_reduce / range_select fold with max (None: max)."""
    return reducer(
        reduce_op if reduce_op is not None else "maximum", api, "reduce_op", ("maximum",)
    )


_CMP_OPS = ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")
# range_select's documented comparisons (no not_equal)
_RANGE_CMP_OPS = ("equal", "less", "less_equal", "greater", "greater_equal")


@instruction
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
    c = Call("range_select", dtype)
    api = c.api
    check_available("range_select", api)
    acc, t = c.tile(on_true_tile, "on_true_tile")
    if not dtypes.is_float(dt(t)):
        raise NKITypeError(
            f"'on_true_tile' of '{api}' must have a floating-point dtype, got {dt(t)}",
            code="err_unsupported_dtype",
            loc=user_loc(),
        )
    parts = acc.shape[0]
    ops = []
    for role, op in (("comp_op0", comp_op0), ("comp_op1", comp_op1)):
        fn = alu_op(op, api, role)
        if fn.name not in _RANGE_CMP_OPS:
            raise NKIError(
                f"'{role}'={fn.name} of '{api}' must be one of {', '.join(_RANGE_CMP_OPS)}",
                code="err_unsupported_op",
                loc=user_loc(),
            )
        ops.append(fn.name)
    b0, _ = scalar_or_vector(bound0, parts, api, "bound0", fp32_only=True)
    b1, _ = scalar_or_vector(bound1, parts, api, "bound1", fp32_only=True)
    rop = _max_reducer(reduce_op, api)
    cmd = command(reduce_cmd, api)
    fill = float(dtypes.dtype("float32").min) if on_false_value is None else on_false_value
    if isinstance(fill, np.generic) and fill.dtype.kind in "fiu":
        fill = fill.item()  # NumPy scalars such as nl.fp32.min
    if is_tile(fill) or isinstance(fill, bool) or not isinstance(fill, (int, float)):
        raise NKITypeError(
            f"'on_false_value' of '{api}' must be a float scalar, got {type(fill).__name__}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    fp32_min = float(np.finfo(np.float32).min)
    with np.errstate(over="ignore"):
        as_fp32 = float(np.float32(fill))  # the register holds the value rounded to fp32
    if as_fp32 != fp32_min:
        raise NKIError(
            f"'on_false_value'={fill} of '{api}' must be the float32 minimum ({fp32_min}, "
            "nl.fp32.min): the hardware fills rejected elements with that bit pattern",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    start = static_int(range_start, api, "range_start")
    res = {} if reduce_res is None else {"reduce_res": res_vector(reduce_res, parts, api)[0]}
    return c.new(
        acc.shape, (acc, b0, b1, Const(float(fill))), mask=mask, comp_op0=ops[0],
        comp_op1=ops[1], range_start=start, reduce_op=rop.name, reduce_cmd=cmd, **res,
    )  # fmt: skip


def _shuffle_starts(api: str, operands: tuple, parts: int) -> None:
    """nc_stream_shuffle's start partitions, by its number of active partitions."""
    active = -(-parts // 32) * 32
    allowed = (0,) if active > 64 else (0, 64) if active == 64 else (0, 32, 64, 96)
    for acc, t, role in operands:
        e = acc.index[t.decl.par_dim] if acc.index else None
        if e is not None and e.base.is_const and e.base.const not in allowed:
            broken(
                "nc_stream_shuffle.start",
                f"'{api}' with {active} active partitions got '{role}' starting at partition "
                f"{e.base.const}",
            )


@instruction
def nc_stream_shuffle(
    src: Any, dst: Any, shuffle_mask: Any, *, dtype: Any = None, mask: Any = None
) -> None:
    """Cross-partition move within each 32-partition quadrant: destination partition ``i`` of a
    quadrant copies source partition ``shuffle_mask[i]`` of the same quadrant; 255 leaves it
    unchanged. ``shuffle_mask`` has 32 entries; ``src`` and ``dst`` have the same dtype and
    elements per partition; every partition the mask reads must exist in ``src`` (a
    one-partition source broadcast to 32 partitions: ``shuffle_mask=[0] * 32``). In-place (src
    is dst) is allowed.

    Example: ``nisa.nc_stream_shuffle(src=x, dst=y, shuffle_mask=list(range(31, -1, -1)))``.
    """
    c = Call("nc_stream_shuffle")
    api = c.api
    sacc, st = c.tile(src, "src", compute=False)
    dacc, dtt = c.tile(dst, "dst", compute=False)
    same_free(sacc.shape, dacc.shape, api, "src", "dst")
    if dtype is not None:
        dtype_name(dtype)  # accepted and ignored, but it must name a dtype
    same_dtype(st, dtt, api, "src", "dst")
    try:
        m = tuple(int(v) for v in shuffle_mask)
    except (TypeError, ValueError):
        m = ()
    parts, dparts = sacc.shape[0], dacc.shape[0]
    _shuffle_starts(api, ((sacc, st, "src"), (dacc, dtt, "dst")), max(parts, dparts))
    if len(m) != 32 or any(not (0 <= v < 32 or v == 255) for v in m):
        raise NKIError(
            f"'shuffle_mask' of '{api}' must be 32 integers in [0, 32) or 255; got "
            f"{shuffle_mask!r}",
            code="err_invalid_shuffle_mask",
            loc=user_loc(),
        )
    reads = [
        (q + i, q + v)
        for q in range(0, dparts, 32)
        for i, v in enumerate(m)
        if q + i < dparts and v != 255 and q + v >= parts
    ]
    if reads:
        dp, sp = reads[0]
        raise NKIError(
            f"'shuffle_mask' of '{api}' makes destination partition {dp} read source partition "
            f"{sp}, beyond the {parts} partitions of 'src' {list(sacc.shape)}",
            code="err_invalid_shuffle_mask",
            loc=user_loc(),
        )
    c.emit(dacc, (sacc,), mask=mask, shuffle_mask=m)
