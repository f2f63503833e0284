"""Vector / Scalar engine instructions of the current API only: ``exponential``,
``tensor_scalar_cumulative`` (Vector engine) and ``activate2`` (Scalar engine).

Accumulator registers (128 per engine, one per partition lane, fp32) persist across
instructions: ``activation`` and ``activate2`` share the Scalar engine's; ``exponential``,
``tensor_scalar_cumulative``, ``tensor_scalar_reduce``, ``range_select`` and ``select_reduce``
the Vector engine's. ``reduce_cmd`` says what an instruction does with them (idle: leave them;
reset: set them to the reduction's identity; reset_reduce: reset then fold this instruction's
values in; reduce: fold in on top; load_reduce: load an initial value, then fold in)."""

from __future__ import annotations

from typing import Any

from ..errors import NKIError, user_loc
from ..ir import Access, Const
from .common import (
    dt,
    emit_isa,
    same_elements,
    tile,
)
from .current import Instruction
from .current_common import (
    begin,
    command,
    current_only,
    dtype_in,
    handle,
    imm,
    op_name,
    rank_at_most,
    res_vector,
)
from .enums import reduce_cmd as _reduce_cmd
from .scalar import activation_fn

_EXP_DTYPES = (
    "float8_e4m3", "float8_e5m2", "float16", "bfloat16", "float32", "tfloat32",
    "int8", "int16", "int32", "uint8", "uint16",
)  # fmt: skip
_CUMULATIVE_DTYPES = (
    "bfloat16", "float16", "float32", "float8_e4m3", "float8_e4m3fn", "float8_e5m2",
    "uint8", "uint16", "int8", "int16",
)  # fmt: skip
_CUMULATIVE_OPS = ("add", "subtract", "multiply", "maximum", "minimum")
_ACTIVATE2_PAIRS = (
    ("multiply", "add"),
    ("multiply", "subtract"),
    ("multiply", "bypass"),
    ("add", "bypass"),
    ("subtract", "bypass"),
    ("bypass", "bypass"),
)
_ACTIVATE2_REDUCE = ("add", "maximum", "minimum", "abs_max", "abs_min")
_ARITH = (
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "fmod", "mod",
)  # fmt: skip


@current_only
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
    api = begin("exponential")
    dacc, dtile = tile(dst, api, "dst")
    sacc, stile = tile(src, api, "src")
    same_elements(dacc.shape, sacc.shape, api, "dst", "src")
    for role, acc, t in (("dst", dacc, dtile), ("src", sacc, stile)):
        rank_at_most(acc.shape, 4, api, role)
        dtype_in(t, _EXP_DTYPES, api, role)
    parts = dacc.shape[0]
    mv = imm(max_value, parts, api, "max_value", fp32=True)
    cmd = command(reduce_cmd, api)
    if cmd != "load_reduce" and not (isinstance(reduce_init, (int, float)) and reduce_init == 0):
        raise NKIError(
            f"'reduce_init' of '{api}' is only used by reduce_cmd=load_reduce and must be left "
            f"at 0.0 with reduce_cmd={cmd}; got {reduce_init!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    init = imm(reduce_init, parts, api, "reduce_init", fp32=True)
    attrs: dict[str, Any] = {"engine": "vector", "reduce_cmd": cmd}
    outputs = ()
    if reduce_res is not None:
        racc, _ = res_vector(reduce_res, parts, api)
        attrs["reduce_res"] = racc
        outputs = (racc,)
    emit_isa("exponential", dacc, (sacc, mv, init), attrs, outputs=outputs, api=api)
    return handle("exponential")


@current_only
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
    api = begin("tensor_scalar_cumulative")
    dacc, dtile = tile(dst, api, "dst")
    sacc, stile = tile(src, api, "src")
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
    attrs = {"engine": "vector", "op0": f0, "op1": f1, "reduce_cmd": cmd}
    emit_isa("tensor_scalar_cumulative", dacc, (sacc, o0, o1), attrs, api=api)
    return handle("tensor_scalar_cumulative")


def _activation_function(op: Any, api: str) -> str:
    if getattr(op, "nki_token", None) == "prelu":
        return "prelu"
    return activation_fn(op, api).name


@current_only
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
    api = begin("activate2")
    dacc, dtile = tile(dst, api, "dst")
    sacc, stile = tile(data, api, "data")
    same_elements(dacc.shape, sacc.shape, api, "dst", "data")
    fn = _activation_function(op, api)
    pair = (
        op_name(op0, api, "op0", ("multiply", "add", "subtract", "bypass")),
        op_name(op1, api, "op1", ("add", "subtract", "bypass")),
    )
    if pair not in _ACTIVATE2_PAIRS:
        allowed = ", ".join(f"({a}, {b})" for a, b in _ACTIVATE2_PAIRS)
        raise NKIError(
            f"(op0, op1) = ({pair[0]}, {pair[1]}) of '{api}' is not supported; supported pairs: "
            f"{allowed}",
            code="err_unsupported_op",
            loc=user_loc(),
        )
    for flag, step, role in ((reverse0, pair[0], "op0"), (reverse1, pair[1], "op1")):
        if flag and step == "bypass":
            raise NKIError(
                f"reverse{role[-1]}=True of '{api}' swaps the operands of {role}, which is "
                f"nl.bypass here; set {role} or drop the flag",
                code="err_invalid_argument",
                loc=user_loc(),
            )
    parts = dacc.shape[0]
    o0 = imm(imm0, parts, api, "imm0") if pair[0] != "bypass" else Const(0.0)
    o1 = imm(imm1, parts, api, "imm1") if pair[1] != "bypass" else Const(0.0)
    if isinstance(o0, Access) and isinstance(o1, Access):
        d0, d1 = (dt(tile(v, api, r)[1]) for v, r in ((imm0, "imm0"), (imm1, "imm1")))
        if d0 != d1:
            raise NKIError(
                f"the tile immediates of '{api}' must share a dtype; imm0 is {d0} and imm1 {d1}",
                code="err_invalid_operand_dtype",
                loc=user_loc(),
            )
    rp = imm(relu_param, parts, api, "relu_param")
    cmd = command(reduce_cmd, api)
    if cmd == "load_reduce":
        raise NKIError(
            f"reduce_cmd=load_reduce of '{api}' loads an initial value into the accumulators, "
            "but activate2 has no operand for it; use reset_reduce or reduce",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    attrs: dict[str, Any] = {
        "engine": "scalar",
        "op": fn,
        "op0": pair[0],
        "op1": pair[1],
        "reverse0": bool(reverse0),
        "reverse1": bool(reverse1),
        "reduce_cmd": cmd,
    }
    outputs = ()
    if reduce_op is not None or reduce_res is not None or cmd != "idle":
        attrs["reduce_op"] = op_name(
            reduce_op if reduce_op is not None else "add", api, "reduce_op", _ACTIVATE2_REDUCE
        )
    if reduce_res is not None:
        racc, _ = res_vector(reduce_res, parts, api)
        attrs["reduce_res"] = racc
        outputs = (racc,)
    del stile, dtile
    emit_isa("activate2", dacc, (sacc, o0, o1, rp), attrs, outputs=outputs, api=api)
    return handle("activate2")


__all__ = ["activate2", "exponential", "tensor_scalar_cumulative"]
