"""Scalar-engine instructions: activation, activation_reduce and, of the current API only
(NeuronCore-v4), activate2.

The engine's 128 per-partition accumulator registers (fp32) persist across instructions:
activation and activate2 share them. ``reduce_cmd`` says what an instruction does with them
(idle: leave them; reset: set them to the reduction's identity; reset_reduce: reset then fold
this instruction's values in; reduce: fold in on top; load_reduce: load an initial value, then
fold in)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import NKIError, NKITypeError, user_loc
from ..ir import Access, Const
from ..language import core as _core
from ..tracer import NkiTensor
from ..tracer.api_checks import broken
from .common import (
    Call,
    Instruction,
    alu_op,
    command,
    dt,
    imm,
    is_tile,
    op_name,
    res_vector,
    same_elements,
    scalar_or_vector,
    tile,
)
from .enums import reduce_cmd as _reduce_cmd
from .forms import instruction
from .rules import check_activation_reduce_op, rules, target

_BIAS_DTYPES = ("float32", "float16", "bfloat16")


@instruction
def activation(
    op: Any,
    data: Any,
    bias: Any = None,
    scale: Any = 1.0,
    reduce_op: Any = None,
    reduce_res: Any = None,
    reduce_cmd: Any = _reduce_cmd.idle,
    *,
    mask: Any = None,
    dtype: Any = None,
) -> NkiTensor:
    """``op(data * scale + bias)`` on the Scalar engine, in fp32, cast to ``dtype`` (default:
    the data's dtype).

    ``scale`` is a compile-time scalar or a (P, 1) float32 tile; ``bias`` a (P, 1) tile of
    float32 / float16 / bfloat16 (or, from NeuronCore-v3, a scalar). With ``reduce_op`` the
    activated values are also reduced along the free axes into the engine's 128 per-partition
    accumulator registers as ``reduce_cmd`` says (idle: untouched; reset: to the op's
    identity; reduce: fold in; reset_reduce: reset then fold in); ``reduce_res`` (P, 1), if
    given, receives the registers. Registers never reset hold NaN here (their hardware content
    is undefined). NeuronCore-v2 only accumulates with add; in the current API ``reduce_op``
    must be ``nl.add`` on every target (``activation_reduce`` keeps max / min from v3).

    Example: ``e = nisa.activation(nl.exp, x, bias=neg_max, scale=1.0)``.
    """
    c = Call("activation", dtype)
    return _activation(c, op, data, bias, scale, reduce_op, reduce_res, reduce_cmd, mask)


@instruction
def activation_reduce(
    op: Any,
    data: Any,
    *,
    reduce_op: Any,
    reduce_res: Any,
    bias: Any = None,
    scale: Any = 1.0,
    mask: Any = None,
    dtype: Any = None,
) -> NkiTensor:
    """``activation`` plus a reduction of all free axes of the result into ``reduce_res``
    (P, 1) (equivalent to ``activation(..., reduce_cmd=reset_reduce)``).

    Example: ``e = nisa.activation_reduce(nl.exp, x, reduce_op=nl.add, reduce_res=row_sum)``.
    """
    c = Call("activation_reduce", dtype)
    cmd = _reduce_cmd.reset_reduce
    return _activation(c, op, data, bias, scale, reduce_op, reduce_res, cmd, mask)


def activation_fn(op: Any, api: str) -> Any:
    """The op-table row of an activation function: a unary op the Scalar engine runs
    (``nl.copy`` doubles as the identity); anything else is ``err_unsupported_activation``."""
    if getattr(op, "__wrapped__", op) is _core.copy or op is np.copy:
        op = "copy"
    fn = alu_op(op, api, "op")
    if fn.arity != 1 or "scalar" not in fn.engines:
        raise NKIError(
            f"'op'={fn.name} of '{api}' is not a Scalar-engine activation function",
            code="err_unsupported_activation",
            loc=user_loc(),
        )
    return fn


def _scale(scale: Any, parts: int, api: str) -> Any:
    """``scale``: a compile-time scalar or a (P, 1) float32 tile."""
    if is_tile(scale):
        sop, sdt = scalar_or_vector(scale, parts, api, "scale")
        if sdt != "float32":
            raise NKITypeError(
                f"'scale' of '{api}' must be float32 (a scalar or a ({parts}, 1) vector); got "
                f"a {sdt} tile",
                code="err_activation_scale_invalid_type",
                loc=user_loc(),
            )
        return sop
    if isinstance(scale, (int, float)) and not isinstance(scale, bool):
        return Const(float(scale))
    if hasattr(scale, "dtype") and getattr(scale, "shape", 0) == ():
        return Const(float(scale))
    raise NKITypeError(
        f"'scale' of '{api}' must be a float32 scalar or a ({parts}, 1) vector, got "
        f"{type(scale).__name__}",
        code="err_activation_scale_scalar_or_vector",
        loc=user_loc(),
    )


def _bias(bias: Any, fn_name: str, parts: int, api: str) -> Any:
    """``bias``: a (P, 1) float tile, or from NeuronCore-v3 a scalar (0.0 when None)."""
    if bias is None:
        return Const(0.0)
    t = target()
    if fn_name in rules().activation_no_bias:
        raise NKIError(
            f"'{api}' with op={fn_name} cannot take a bias on {t.name} (NeuronCore-v{t.gen}); "
            "add the bias with a separate instruction",
            code="err_activation_bias_unsupported",
            loc=user_loc(),
        )
    if not is_tile(bias) and not rules().activation_scalar_bias:
        raise NKITypeError(
            f"'bias' of '{api}' must be a ({parts}, 1) vector on {t.name} "
            f"(NeuronCore-v{t.gen}); a scalar bias ({bias!r}) needs NeuronCore-v3 (trn2) or newer",
            code="err_activation_bias_invalid_type",
            loc=user_loc(),
        )
    bop, bdt = scalar_or_vector(bias, parts, api, "bias")
    if is_tile(bias) and bdt not in _BIAS_DTYPES:
        raise NKITypeError(
            f"'bias' of '{api}' must be float32, float16 or bfloat16; got {bdt}",
            code="err_activation_bias_invalid_type",
            loc=user_loc(),
        )
    return bop


def _activation(
    c: Call,
    op: Any,
    data: Any,
    bias: Any,
    scale: Any,
    reduce_op: Any,
    reduce_res: Any,
    cmd: Any,
    mask: Any,
) -> NkiTensor:
    fn = activation_fn(op, c.api)
    dacc, _ = c.tile(data, "data")
    parts = dacc.shape[0]
    sop = _scale(scale, parts, c.api)
    bop = _bias(bias, fn.name, parts, c.api)
    params: dict[str, Any] = {"op": fn.name, "reduce_cmd": command(cmd, c.api)}
    if reduce_op is not None or reduce_res is not None:
        rop = alu_op(reduce_op if reduce_op is not None else "add", c.api, "reduce_op")
        check_activation_reduce_op(rop, c.api)
        if rop.name != "add" and c.row.name == "activation":
            broken("activation.reduce_add", f"'{c.api}' got reduce_op={rop.name}")
        params["reduce_op"] = rop.name
        if reduce_res is not None:
            params["reduce_res"] = res_vector(reduce_res, parts, c.api)[0]
    return c.new(dacc.shape, (dacc, sop, bop), mask=mask, **params)


_ACTIVATE2_PAIRS = (
    ("multiply", "add"),
    ("multiply", "subtract"),
    ("multiply", "bypass"),
    ("add", "bypass"),
    ("subtract", "bypass"),
    ("bypass", "bypass"),
)
_ACTIVATE2_REDUCE = ("add", "maximum", "minimum", "abs_max", "abs_min")


@instruction
def activate2(
    dst: Any,
    op: Any,
    data: Any,
    imm0: Any,
    imm1: Any,
    op0: Any,
    op1: Any,
    relu_param: Any = 0.0,
    reverse0: bool = False,
    reverse1: bool = False,
    reduce_op: Any = None,
    reduce_res: Any = None,
    reduce_cmd: Any = _reduce_cmd.idle,
    name: Any = None,
) -> Instruction:
    """``dst = op((data op0 imm0) op1 imm1)`` on the Scalar engine, in fp32 (NeuronCore-v4).

    (op0, op1) is one of (multiply, add), (multiply, subtract), (multiply, bypass),
    (add, bypass), (subtract, bypass), (bypass, bypass) (``nl.bypass``, or None, skips the
    step); ``reverse0`` computes ``imm0 op0 data``, ``reverse1`` ``imm1 op1 t``. ``imm0`` /
    ``imm1`` / ``relu_param``: scalars or (P, 1) tiles. ``op``: a Scalar-engine activation
    function, ``nl.copy`` or ``nl.prelu`` (``x if x >= 0 else relu_param * x``).

    With ``reduce_op`` (add, maximum, minimum, abs_max, abs_min) the activated values of each
    partition are folded into the Scalar engine's accumulator registers (shared with
    ``activation``) as ``reduce_cmd`` says; reset starts from the op's identity (abs_max: 0,
    abs_min: +inf). ``reduce_res`` (P, 1) receives the registers. abs_max / abs_min keep the
    signed value of larger / smaller magnitude (ties keep the later value), the reading of the
    ``nl.abs_max`` documentation.

    Example: ``nisa.activate2(y, nl.exp, x, imm0=scale, imm1=bias, op0=nl.multiply,
    op1=nl.add)``.
    """
    c = Call("activate2")
    dacc, _ = c.tile(dst, "dst")
    sacc, _ = c.tile(data, "data")
    same_elements(dacc.shape, sacc.shape, c.api, "dst", "data")
    fn = "prelu" if getattr(op, "nki_token", None) == "prelu" else activation_fn(op, c.api).name
    pair = (
        op_name(op0, c.api, "op0", ("multiply", "add", "subtract", "bypass")),
        op_name(op1, c.api, "op1", ("add", "subtract", "bypass")),
    )
    if pair not in _ACTIVATE2_PAIRS:
        allowed = ", ".join(f"({a}, {b})" for a, b in _ACTIVATE2_PAIRS)
        raise NKIError(
            f"(op0, op1) = ({pair[0]}, {pair[1]}) of '{c.api}' is not supported; supported "
            f"pairs: {allowed}",
            code="err_unsupported_op",
            loc=user_loc(),
        )
    for flag, step, role in ((reverse0, pair[0], "op0"), (reverse1, pair[1], "op1")):
        if flag and step == "bypass":
            raise NKIError(
                f"reverse{role[-1]}=True of '{c.api}' swaps the operands of {role}, which is "
                f"nl.bypass here; set {role} or drop the flag",
                code="err_invalid_argument",
                loc=user_loc(),
            )
    parts = dacc.shape[0]
    o0 = imm(imm0, parts, c.api, "imm0") if pair[0] != "bypass" else Const(0.0)
    o1 = imm(imm1, parts, c.api, "imm1") if pair[1] != "bypass" else Const(0.0)
    if isinstance(o0, Access) and isinstance(o1, Access):
        d0, d1 = (dt(tile(v, c.api, r)[1]) for v, r in ((imm0, "imm0"), (imm1, "imm1")))
        if d0 != d1:
            raise NKIError(
                f"the tile immediates of '{c.api}' must share a dtype; imm0 is {d0} and imm1 {d1}",
                code="err_invalid_operand_dtype",
                loc=user_loc(),
            )
    rp = imm(relu_param, parts, c.api, "relu_param")
    cmd = command(reduce_cmd, c.api)
    if cmd == "load_reduce":
        raise NKIError(
            f"reduce_cmd=load_reduce of '{c.api}' loads an initial value into the accumulators, "
            "but activate2 has no operand for it; use reset_reduce or reduce",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    params: dict[str, Any] = {}
    if reduce_op is not None or reduce_res is not None or cmd != "idle":
        rop = reduce_op if reduce_op is not None else "add"
        params["reduce_op"] = op_name(rop, c.api, "reduce_op", _ACTIVATE2_REDUCE)
    if reduce_res is not None:
        params["reduce_res"] = res_vector(reduce_res, parts, c.api)[0]
    return c.emit(
        dacc, (sacc, o0, o1, rp), op=fn, op0=pair[0], op1=pair[1], reverse0=bool(reverse0),
        reverse1=bool(reverse1), reduce_cmd=cmd, **params,
    )  # fmt: skip
