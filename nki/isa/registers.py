"""Virtual registers and device scalars (current API).

* ``register_alloc / register_move / register_load / register_store``: 32-bit virtual registers
  of an engine sequencer, modelled as one-element ``int32`` SBUF tiles (``nki/language/loops.py``,
  whose runtime loops count with them), so a register is accepted wherever a dynamic offset is
  (``t.ap(..., scalar_offset=reg)``, ``t.select(dim, reg)``).
* ``scalar_load(src)`` / ``scalar_store(dst, value)``: an :class:`NkiScalar`, a signed 32- or
  64-bit integer known on the device only, with wraparound ``+ - *`` and unary ``-``."""

from __future__ import annotations

from typing import Any

from .. import isa_spec as _spec
from ..errors import NKITypeError, user_loc
from ..ir import HBM_BUFFERS, Affine, Const
from ..language.loops import is_register, new_register, require_register, set_register
from ..tracer import NkiTensor, TileOps, assign, emit, new_tensor, note_generation, operand
from .common import prod
from .forms import instruction

__all__ = [
    "NkiScalar",
    "register_alloc",
    "register_load",
    "register_move",
    "register_store",
    "scalar_load",
    "scalar_store",
]

SCALAR_DTYPES = ("int32",)  # int64 too in NKI 0.7; nki-sim has no 64-bit dtype


@instruction
def register_alloc(x: Any = None) -> NkiTensor:
    """A virtual register (a 32-bit integer), optionally set to the int ``x`` (see
    ``register_move`` for what ``x`` may be). Current API only."""
    api = _spec.get("register_alloc").api
    reg = new_register(api)
    if x is not None:
        _move(reg, x, api, "the initial value")
    return reg


@instruction
def register_move(dst: Any, src: Any) -> None:
    """``dst = src``: ``dst`` a register, ``src`` a Python int or another register (anything
    else is ``err_unsupported_operand``)."""
    api = _spec.get("register_move").api
    require_register(dst, api, "dst", written=True)
    _move(dst, src, api, "src")


def _move(dst: Any, src: Any, api: str, role: str) -> None:
    """``dst = src`` for ``api``: ``src`` (its ``role``) a Python int or a register."""
    if isinstance(src, int) and not isinstance(src, bool):
        set_register(dst, Affine.constant(src), api)
    elif is_register(src):
        assign(dst.access_(), src, api=api)
    else:
        raise NKITypeError(
            f"{api}: {role} must be an int or a register, got {src!r}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )


@instruction
def register_load(dst: Any, src: Any) -> None:
    """``dst = src[0]``: read a one-element SBUF or HBM tensor into the register ``dst``
    (another operand is ``err_unsupported_operand``)."""
    api = _spec.get("register_load").api
    require_register(dst, api, "dst", written=True)
    _require_one_element(src, api, "src")
    if src.tensor_().buffer in HBM_BUFFERS:
        emit("dma", "copy", dst.access_(), (_like(src, dst).access_(),), api=api)
    else:
        assign(dst.access_(), src, api=api)


@instruction
def register_store(dst: Any, src: Any) -> None:
    """``dst[0] = src``: write the register ``src`` into a one-element SBUF or HBM tensor
    (another operand is ``err_unsupported_operand``)."""
    api = _spec.get("register_store").api
    require_register(src, api, "src")
    _require_one_element(dst, api, "dst")
    if dst.tensor_().buffer in HBM_BUFFERS:
        emit("dma", "copy", _like(dst, src).access_(), (src.access_(),), api=api)
    else:
        assign(dst.access_(), src, api=api)


def _like(one: Any, reg: Any) -> Any:
    """The one-element HBM tensor ``one`` in the register's shape (a DMA copies equal shapes;
    ``[1]``, ``[1, 1]`` and ``[1, 1, 1]`` hold the same element)."""
    return one if tuple(one.shape) == tuple(reg.shape) else one.reshape(tuple(reg.shape))


def _require_one_element(x: Any, api: str, role: str) -> None:
    if not isinstance(x, TileOps) or x.size != 1 or x.tensor_().buffer == "psum":
        raise NKITypeError(
            f"{api}: '{role}' must be a one-element SBUF or HBM tensor, got {x!r}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )


class _IsRegister(type):
    def __instancecheck__(cls, x: object) -> bool:
        return is_register(x)


class VirtualRegister(metaclass=_IsRegister):
    """``nisa.VirtualRegister``: the type of what ``nisa.register_alloc`` returns (a register
    tile), for annotations and ``isinstance``."""


class NkiScalar(NkiTensor):
    """A signed 32- or 64-bit integer known on the device only (``nisa.scalar_load``).

    ``+``, ``-``, ``*`` with another NkiScalar of the same width or a Python int, and unary
    ``-``, wrap around at the width (two's complement: ``100000 * 100000`` is ``1410065408``
    at int32). An int32 scalar bounds ``nl.fori_loop`` and is a ``scalar_offset`` of ``.ap``;
    it has no Python value, so ``if`` / ``int()`` / comparisons on it are errors."""

    __slots__ = ()

    def _arith(self, op: str, other: Any, swap: bool = False) -> NkiScalar:
        api = f"NkiScalar {op}"
        dt = self.decl.dtype
        if isinstance(other, NkiScalar):
            if other.decl.dtype != dt:
                raise NKITypeError(
                    f"{api}: an {dt} NkiScalar and an {other.decl.dtype} one; both must have "
                    "the same width",
                    code="err_dtype_mismatch",
                    loc=user_loc(),
                )
            rhs: Any = other.access_()
        elif isinstance(other, int) and not isinstance(other, bool):
            rhs = Const(int(other))
        else:
            raise NKITypeError(
                f"{api}: an NkiScalar combines with another NkiScalar or a Python int, got "
                f"{type(other).__name__} {other!r}",
                code="err_unsupported_operand",
                loc=user_loc(),
            )
        out = _new_scalar(dt, api)
        srcs = (rhs, self.access_()) if swap else (self.access_(), rhs)
        emit("nkiscalar", op, out.access_(), srcs, api=api)
        return out

    def __add__(self, o: Any) -> NkiScalar:  # type: ignore[override]
        return self._arith("add", o)

    def __radd__(self, o: Any) -> NkiScalar:  # type: ignore[override]
        return self._arith("add", o, swap=True)

    def __sub__(self, o: Any) -> NkiScalar:  # type: ignore[override]
        return self._arith("subtract", o)

    def __rsub__(self, o: Any) -> NkiScalar:  # type: ignore[override]
        return self._arith("subtract", o, swap=True)

    def __mul__(self, o: Any) -> NkiScalar:  # type: ignore[override]
        return self._arith("multiply", o)

    def __rmul__(self, o: Any) -> NkiScalar:  # type: ignore[override]
        return self._arith("multiply", o, swap=True)

    def __neg__(self) -> NkiScalar:  # type: ignore[override]
        return self._arith("multiply", -1)

    def _no_value(self, *_: Any) -> Any:
        raise NKITypeError(
            f"an {self.decl.dtype} NkiScalar has a value on the device only: it cannot be "
            "compared, converted or used in Python control flow (use it as a fori_loop bound, "
            "a scalar_offset, or store it with nisa.scalar_store)",
            code="err_dynamic_control_flow_not_supported",
            loc=user_loc(),
        )

    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _no_value  # type: ignore[assignment]
    __bool__ = __int__ = __index__ = __float__ = _no_value  # type: ignore[assignment]
    __truediv__ = __floordiv__ = __mod__ = __pow__ = _no_value  # type: ignore[assignment]
    __hash__ = TileOps.__hash__


def _new_scalar(dtype: str, api: str) -> NkiScalar:
    t = new_tensor((1, 1), dtype, "sbuf", api=api)
    return NkiScalar(t.decl, t.scope)


def _one_element(x: Any, api: str, role: str) -> tuple[Any, NkiTensor]:
    acc, t = operand(x, api, role)
    n = prod(tuple(acc.shape))
    if n != 1 or t.decl.dtype not in SCALAR_DTYPES or t.buffer not in ("sbuf", *HBM_BUFFERS):
        raise NKITypeError(
            f"'{api}' {role} must be a one-element ([1] or [1, 1]) int32 tensor in "
            f"SBUF or HBM, got {list(acc.shape)} {t.decl.dtype} in {t.buffer}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    return acc, t


@instruction
def scalar_load(src: Any) -> NkiScalar:
    """Read a one-element (``[1]`` or ``[1, 1]``) int32 tensor in SBUF or HBM as an
    :class:`NkiScalar` (another shape, dtype or memory is ``err_unsupported_operand``; NKI
    0.7's int64 scalars are not simulated). Current API only."""
    api = _spec.get("scalar_load").api
    note_generation("current", api)
    acc, t = _one_element(src, api, "src")
    out = _new_scalar(t.decl.dtype, api)
    emit("nkiscalar", "copy", out.access_(), (acc,), api=api)
    return out


@instruction
def scalar_store(dst: Any, value: Any) -> None:
    """Write an :class:`NkiScalar` into a one-element tensor of the same width (a Python int
    is rejected: write constants with ``nisa.memset`` / ``nisa.iota``)."""
    api = _spec.get("scalar_store").api
    note_generation("current", api)
    acc, t = _one_element(dst, api, "dst")
    if not isinstance(value, NkiScalar):
        raise NKITypeError(
            f"'{api}' value must be an NkiScalar (from nisa.scalar_load), got "
            f"{type(value).__name__} {value!r}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    if value.decl.dtype != t.decl.dtype:
        raise NKITypeError(
            f"'{api}' stores an {value.decl.dtype} NkiScalar into an {t.decl.dtype} tensor; "
            "the widths must match",
            code="err_dtype_mismatch",
            loc=user_loc(),
        )
    emit("nkiscalar", "copy", acc, (value.access_(),), api=api)
