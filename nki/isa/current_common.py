"""Shared pieces of the instructions that exist only in the current API (``current_*.py``):
binding a call to its spec signature, starting it (the kernel's generation, the target's
availability), ``op=`` arguments including the tokens of ``nki/language/tokens.py``
(``nl.bypass``, ``nl.prelu``, ``nl.abs_max``, ``nl.abs_min``), accumulator commands, immediates
and the instruction handle each call returns."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .. import isa_spec as spec
from ..errors import NKIError, NKIShapeError, NKITypeError, user_loc
from ..ir import Const
from ..language.tokens import OpToken
from ..tracer import note_generation
from .common import alu_op, dt, free_size, scalar_or_vector, tile
from .current import Instruction, _last_instr
from .enums import enum_value
from .enums import reduce_cmd as _reduce_cmd
from .rules import check_available, check_dtype_in


def op_name(op: Any, api: str, role: str, allowed: tuple[str, ...]) -> str:
    """The name of an ``op=`` argument (an nl / NumPy op or a token), which must be one of
    ``allowed``; ``None`` is read as ``nl.bypass`` where bypass is allowed."""
    if isinstance(op, OpToken):
        op = op.nki_token
    if op is None and "bypass" in allowed:
        return "bypass"
    name = getattr(op, "__nki_op__", None)
    if name is None and isinstance(op, str):
        name = op
    if name is None:
        name = alu_op(op, api, role).name
    if name not in allowed:
        raise NKIError(
            f"'{role}'={name} of '{api}' is not supported; supported: "
            f"{', '.join('nl.' + a for a in allowed)}",
            code="err_unsupported_op",
            loc=user_loc(),
        )
    return name


def current_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator of an instruction of the current API only: the call must fit the spec row's
    destination-first signature; an unknown keyword (named with the closest valid one) or a
    wrong argument count is a located error instead of a Python TypeError."""
    name = fn.__name__

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        spec.bind(name, args, kwargs, spec.CURRENT)
        return fn(*args, **kwargs)

    return call


def begin(name: str) -> str:
    """Start a call of the current-only ``nisa.<name>``: it decides (or must agree with) the
    kernel's API generation, and the target must have the instruction."""
    api = f"nisa.{name}"
    note_generation(spec.CURRENT, f"{api}(...) (an instruction of the current API only)")
    check_available(name, api)
    return api


def handle(name: str) -> Instruction:
    """The instruction handle a destination-first call returns."""
    return Instruction(name, _last_instr())


def command(x: Any, api: str) -> str:
    """A ``reduce_cmd`` argument's name."""
    return enum_value(x, _reduce_cmd, api, "reduce_cmd").name


def imm(x: Any, parts: int, api: str, role: str, fp32: bool = False) -> Any:
    """An fp32 immediate: a Python / NumPy scalar or a (P, 1) tile (float32 with ``fp32``)."""
    if x is None:
        raise NKITypeError(
            f"'{role}' of '{api}' must be a scalar or a ({parts}, 1) tile, got None",
            code="err_missing_operand",
            loc=user_loc(),
        )
    if isinstance(x, bool):
        return Const(float(x))
    return scalar_or_vector(x, parts, api, role, fp32_only=fp32)[0]


def res_vector(x: Any, parts: int, api: str, role: str = "reduce_res"):
    """A (P, 1) result tile of an accumulator read-out."""
    acc, t = tile(x, api, role)
    if acc.shape[0] != parts or free_size(acc.shape) != 1:
        raise NKIShapeError(
            f"'{role}' of '{api}' must have shape ({parts}, 1); got {list(acc.shape)}",
            code="err_reduce_res_shape",
            loc=user_loc(),
        )
    return acc, t


def rank_at_most(shape: tuple[int, ...], rank: int, api: str, role: str) -> None:
    if len(shape) > rank:
        raise NKIShapeError(
            f"operand '{role}' of '{api}' has rank {len(shape)} {list(shape)}; at most {rank} "
            f"(the partition dimension and {rank - 1} free dimensions)",
            code="err_exceed_max_supported_dimension",
            loc=user_loc(),
        )


def dtype_in(t: Any, allowed: tuple[str, ...], api: str, role: str) -> None:
    check_dtype_in(dt(t), allowed, api, role)


__all__ = [
    "OpToken",
    "begin",
    "command",
    "current_only",
    "dtype_in",
    "handle",
    "imm",
    "op_name",
    "rank_at_most",
    "res_vector",
]
