"""Scalar-engine instructions: activation and activation_reduce."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import NKIError, NKIShapeError, NKITypeError, user_loc
from ..ir import Const
from ..isa_spec import checked
from ..language import core as _core
from ..tracer import NkiTensor, _Assigned
from .common import (
    alu_op,
    dt,
    emit_isa,
    is_tile,
    out_dtype,
    out_tile,
    rules,
    scalar_or_vector,
    target,
    tile,
)
from .enums import enum_value
from .enums import reduce_cmd as _reduce_cmd
from .rules import check_activation_reduce_op

_BIAS_DTYPES = ("float32", "float16", "bfloat16")


@checked
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
    is undefined). NeuronCore-v2 only accumulates with add.

    Example: ``e = nisa.activation(nl.exp, x, bias=neg_max, scale=1.0)``.
    """
    api = "nisa.activation"
    return _activation(api, op, data, bias, scale, reduce_op, reduce_res, reduce_cmd, mask, dtype)


@checked
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
    api = "nisa.activation_reduce"
    return _activation(
        api, op, data, bias, scale, reduce_op, reduce_res, _reduce_cmd.reset_reduce, mask, dtype
    )


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


def _activation(
    api: str,
    op: Any,
    data: Any,
    bias: Any,
    scale: Any,
    reduce_op: Any,
    reduce_res: Any,
    cmd: Any,
    mask: Any,
    dtype: Any,
) -> NkiTensor:
    fn = activation_fn(op, api)
    dacc, dtile = tile(data, api, "data")
    parts = dacc.shape[0]
    if is_tile(scale):
        sop, _ = scalar_or_vector(scale, parts, api, "scale")
        if dt(_tile_of(scale)) != "float32":
            raise NKITypeError(
                f"'scale' of '{api}' must be float32 (a scalar or a ({parts}, 1) vector); got "
                f"a {dt(_tile_of(scale))} tile",
                code="err_activation_scale_invalid_type",
                loc=user_loc(),
            )
    elif isinstance(scale, (int, float)) and not isinstance(scale, bool):
        sop = Const(float(scale))
    elif hasattr(scale, "dtype") and getattr(scale, "shape", 0) == ():
        sop = Const(float(scale))
    else:
        raise NKITypeError(
            f"'scale' of '{api}' must be a float32 scalar or a ({parts}, 1) vector, got "
            f"{type(scale).__name__}",
            code="err_activation_scale_scalar_or_vector",
            loc=user_loc(),
        )
    if bias is None:
        bop: Any = Const(0.0)
    elif fn.name in rules().activation_no_bias:
        t = target()
        raise NKIError(
            f"'{api}' with op={fn.name} cannot take a bias on {t.name} (NeuronCore-v{t.gen}); "
            "add the bias with a separate instruction",
            code="err_activation_bias_unsupported",
            loc=user_loc(),
        )
    elif not is_tile(bias) and not rules().activation_scalar_bias:
        t = target()
        raise NKITypeError(
            f"'bias' of '{api}' must be a ({parts}, 1) vector on {t.name} "
            f"(NeuronCore-v{t.gen}); a scalar bias ({bias!r}) needs NeuronCore-v3 (trn2) or newer",
            code="err_activation_bias_invalid_type",
            loc=user_loc(),
        )
    else:
        bop, bdt = scalar_or_vector(bias, parts, api, "bias")
        if is_tile(bias) and bdt not in _BIAS_DTYPES:
            raise NKITypeError(
                f"'bias' of '{api}' must be float32, float16 or bfloat16; got {bdt}",
                code="err_activation_bias_invalid_type",
                loc=user_loc(),
            )
    cmd = enum_value(cmd, _reduce_cmd, api, "reduce_cmd")
    attrs: dict[str, Any] = {"engine": "scalar", "op": fn.name, "reduce_cmd": cmd.name}
    outputs = []
    if reduce_op is not None or reduce_res is not None:
        rop = alu_op(reduce_op if reduce_op is not None else "add", api, "reduce_op")
        check_activation_reduce_op(rop, api)
        attrs["reduce_op"] = rop.name
        if reduce_res is not None:
            racc, _rt = tile(reduce_res, api, "reduce_res")
            if racc.shape[0] != parts or racc.shape[1:] and any(s != 1 for s in racc.shape[1:]):
                raise NKIShapeError(
                    f"'reduce_res' of '{api}' must have shape ({parts}, 1); got {list(racc.shape)}",
                    code="err_reduce_res_shape",
                    loc=user_loc(),
                )
            attrs["reduce_res"] = racc
            outputs.append(racc)
    out = out_tile(dacc.shape, out_dtype(dtype, dt(dtile)), api)
    emit_isa(
        "activation",
        out.access_(),
        (dacc, sop, bop),
        attrs,
        mask=mask,
        outputs=tuple(outputs),
        api=api,
    )
    return out


def _tile_of(x: Any) -> NkiTensor:
    if isinstance(x, _Assigned):
        x = x.view
    return x.tensor_()
