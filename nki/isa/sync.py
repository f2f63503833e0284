"""Synchronisation between the two cores of an LNC=2 launch and device scalars (current API).

* ``core_barrier(data, cores)``: both cores wait for each other; HBM accesses before it on one
  core happen before those after it on the other (the race analysis orders them).
* ``sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id)``: each core sends its SBUF tile
  ``src`` to a core and receives another core's ``src`` into its ``dst`` (src first); between
  the two cores it is a meeting that orders HBM accesses like ``core_barrier``.
* ``scalar_load(src)`` / ``scalar_store(dst, value)``: an :class:`NkiScalar`, a signed 32- or
  64-bit integer known on the device only, with wraparound ``+ - *`` and unary ``-``.

These calls make the cores of a ``kernel[2]`` launch interact, so such a launch is traced once
per core (``nki/cores.py``)."""

from __future__ import annotations

import enum
import math
from typing import Any

from .. import isa_spec as _spec
from ..dtypes import itemsize
from ..errors import NKIError, NKITypeError, arguments_checked, user_loc
from ..ir import HBM_BUFFERS, Const
from ..tracer import (
    NkiTensor,
    TileOps,
    emit,
    new_tensor,
    note_generation,
    operand,
    request_per_core,
    require_buffer,
    state,
)
from .enums import engine, engine_name, enum_value
from .rules import check_available

__all__ = [
    "NkiScalar",
    "core_barrier",
    "dma_engine",
    "scalar_load",
    "scalar_store",
    "sendrecv",
]


class dma_engine(enum.IntEnum):  # noqa: N801 - the API's name
    """The DMA engines ``sendrecv`` may use: the DMA queues, or the GpSimd-driven DMA."""

    dma = 0
    gpsimd_dma = 1


_DMA_ENGINE = dma_engine  # the enum (sendrecv's parameter of the same name shadows it)

# gpsimd_dma moves at most this many bytes per partition, by element width (v3+)
GPSIMD_DMA_BYTES = {4: 1024, 2: 512, 1: 256}
SCALAR_DTYPES = ("int32",)  # int64 too in NKI 0.7; nki-sim has no 64-bit dtype


def _core(api: str) -> int:
    """This trace's core; restarts the trace per core first (``kernel[2]`` of an undecided or
    current-API kernel). Outside an LNC=2 launch: a located error."""
    note_generation("current", api)
    request_per_core(api)
    st = state(api)
    if st.core is None:
        n = st.grid_shape[0] if st.grid_shape else 1
        raise NKIError(
            f"'{api}' synchronises the two cores of an LNC=2 launch, but this launch runs on "
            f"{n} core(s); launch the kernel as kernel[2](...) (or NEURON_LOGICAL_NC_CONFIG=2) "
            "on trn2 / trn3",
            code="err_unsupported_instruction_for_target",
            loc=user_loc(),
        )
    return st.core


def _rank(x: Any, api: str, role: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x not in (0, 1):
        raise NKIError(
            f"'{api}' {role}={x!r}: a rank of the LNC=2 cores is the int 0 or 1",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    return x


@arguments_checked("nisa.core_barrier")
def core_barrier(data: Any, cores: Any, engine: Any = engine.gpsimd, name: Any = None) -> None:
    """Both cores of an LNC=2 launch wait here until each has reached it.

    Constraints: NeuronCore-v3+ (trn2 / trn3); a ``kernel[2]`` launch; ``cores`` is ``(0, 1)``
    (the only supported set); ``data`` is the shared-HBM tensor the cores synchronise on (its
    contents are not changed). Barriers pair up in program order: the k-th of one core meets the
    k-th of the other, and a core that ends or reaches a different synchronisation first is a
    run-time error."""
    api = "nisa.core_barrier"
    check_available("core_barrier", api)
    _core(api)  # first: the arguments may use the program id
    acc, t = operand(data, api, "data")
    if t.buffer != "shared_hbm":
        raise NKIError(
            f"'{api}' data must be a tensor in shared HBM (a kernel parameter or "
            f"nl.ndarray(..., buffer=nl.shared_hbm)), got '{t.name}' in {t.buffer}",
            code="err_unsupported_memory",
            loc=user_loc(),
        )
    if not isinstance(cores, (tuple, list)) or tuple(cores) != (0, 1):
        raise NKIError(
            f"'{api}' cores={cores!r}: only cores=(0, 1) is supported",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    eng = engine_name(engine)
    emit("lnc", "core_barrier", None, (acc,), attrs=(("cores", (0, 1)), ("engine", eng)), api=api)


@arguments_checked("nisa.sendrecv")
def sendrecv(
    src: Any,
    dst: Any,
    send_to_rank: Any,
    recv_from_rank: Any,
    pipe_id: Any,
    dma_engine: Any = dma_engine.dma,
    name: Any = None,
) -> None:
    """Send the SBUF tile ``src`` to core ``send_to_rank`` and receive core
    ``recv_from_rank``'s ``src`` into ``dst`` (the two cores swap tiles when each names the
    other). Both cores meet at the call.

    Constraints: NeuronCore-v3+; a ``kernel[2]`` launch; ``src`` and ``dst`` in SBUF with the
    same shape and dtype; ranks 0 or 1; ``pipe_id`` an int (calls meeting each other must
    use the same one); ``dma_engine.gpsimd_dma`` moves at most 1024 / 512 / 256 bytes per
    partition for 32 / 16 / 8-bit elements. At run time the partner must send to this core and
    its tile must have ``dst``'s shape and dtype."""
    api = "nisa.sendrecv"
    check_available("sendrecv", api)
    _core(api)  # first: the ranks are usually computed from the program id
    sa, ts = operand(src, api, "src")
    da, td = operand(dst, api, "dst")
    require_buffer(ts, ("sbuf",), api, "src")
    require_buffer(td, ("sbuf",), api, "dst")
    if tuple(sa.shape) != tuple(da.shape) or ts.decl.dtype != td.decl.dtype:
        raise NKIError(
            f"'{api}' src {list(sa.shape)} {ts.decl.dtype} and dst {list(da.shape)} "
            f"{td.decl.dtype} must have the same shape and dtype",
            code="err_dtype_mismatch"
            if ts.decl.dtype != td.decl.dtype
            else "err_free_size_mismatch",
            loc=user_loc(),
        )
    to, frm = _rank(send_to_rank, api, "send_to_rank"), _rank(recv_from_rank, api, "recv_from_rank")
    if isinstance(pipe_id, bool) or not isinstance(pipe_id, int):
        raise NKIError(
            f"'{api}' pipe_id={pipe_id!r} must be an int",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    eng = enum_value(dma_engine, _DMA_ENGINE, api, "dma_engine")
    if eng.name == "gpsimd_dma":
        width = itemsize(ts.decl.dtype)
        per_partition = width * (_prod(sa.shape) // max(sa.shape[0], 1))
        cap = GPSIMD_DMA_BYTES.get(width)
        if cap is not None and per_partition > cap:
            raise NKIError(
                f"'{api}' with dma_engine.gpsimd_dma moves at most {cap} bytes per partition "
                f"for {8 * width}-bit elements; the tile has {per_partition}",
                code="err_size_of_dimension_exceed_arch_limit",
                loc=user_loc(),
            )
    attrs = (("send_to", to), ("recv_from", frm), ("pipe_id", pipe_id), ("dma_engine", eng.name))
    emit("lnc", "sendrecv", da, (sa,), attrs=attrs, api=api)


def _prod(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


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
    n = _prod(tuple(acc.shape))
    if n != 1 or t.decl.dtype not in SCALAR_DTYPES or t.buffer not in ("sbuf", *HBM_BUFFERS):
        raise NKITypeError(
            f"'{api}' {role} must be a one-element ([1] or [1, 1]) int32 tensor in "
            f"SBUF or HBM, got {list(acc.shape)} {t.decl.dtype} in {t.buffer}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    return acc, t


@arguments_checked("nisa.scalar_load")
def scalar_load(src: Any) -> NkiScalar:
    """Read a one-element int32 / int64 tensor (SBUF or HBM) as an :class:`NkiScalar` of that
    width."""
    api = "nisa.scalar_load"
    note_generation("current", api)
    acc, t = _one_element(src, api, "src")
    out = _new_scalar(t.decl.dtype, api)
    emit("nkiscalar", "copy", out.access_(), (acc,), api=api)
    return out


@arguments_checked("nisa.scalar_store")
def scalar_store(dst: Any, value: Any) -> None:
    """Write an :class:`NkiScalar` into a one-element tensor of the same width (a Python int
    is rejected: write constants with ``nisa.memset`` / ``nisa.iota``)."""
    api = "nisa.scalar_store"
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


_spec.NAMESPACE["dma_engine"] = dma_engine  # resolves the spec's default dma_engine.dma
