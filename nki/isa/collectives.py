"""Synchronisation between the two cores of an LNC=2 launch (current API).

* ``core_barrier(data, cores)``: both cores wait for each other; HBM accesses before it on one
  core happen before those after it on the other (the race analysis orders them).
* ``sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id)``: each core sends its SBUF tile
  ``src`` to a core and receives another core's ``src`` into its ``dst`` (src first); between
  the two cores it is a meeting that orders HBM accesses like ``core_barrier``.

These calls make the cores of a ``kernel[2]`` launch interact, so such a launch is traced once
per core (``nki/cores.py``). The collectives of ``nki.collectives`` (all_reduce, ...) are in
``nki/language/core_collectives.py``."""

from __future__ import annotations

import enum
from typing import Any

from .. import isa_spec as _spec
from ..dtypes import itemsize
from ..errors import NKIError, user_loc
from ..tracer import emit, note_generation, operand, request_per_core, require_buffer, state
from .common import prod
from .enums import engine, engine_name, enum_value
from .forms import instruction
from .rules import check_available

__all__ = ["core_barrier", "dma_engine", "sendrecv"]


class dma_engine(enum.IntEnum):  # noqa: N801 - the API's name
    """The DMA engines ``sendrecv`` may use: the DMA queues, or the GpSimd-driven DMA."""

    dma = 0
    gpsimd_dma = 1


_DMA_ENGINE = dma_engine  # the enum (sendrecv's parameter of the same name shadows it)

# gpsimd_dma moves at most this many bytes per partition, by element width (v3+)
GPSIMD_DMA_BYTES = {4: 1024, 2: 512, 1: 256}


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


@instruction
def core_barrier(data: Any, cores: Any, engine: Any = engine.gpsimd, name: Any = None) -> None:
    """Both cores of an LNC=2 launch wait here until each has reached it.

    Constraints: NeuronCore-v3+ (trn2 / trn3); a ``kernel[2]`` launch; ``cores`` is ``(0, 1)``
    (the only supported set); ``data`` is the tensor the cores synchronise on, in shared HBM
    as documented, or in SBUF as AWS's NKI library also passes it (its contents are not
    changed; the barrier orders every shared-HBM access of the two cores either way). Barriers
    pair up in program order: the k-th of one core meets the k-th of the other, and a core that
    ends or reaches a different synchronisation first is a run-time error."""
    api = _spec.get("core_barrier").api
    check_available("core_barrier", api)
    _core(api)  # first: the arguments may use the program id
    acc, t = operand(data, api, "data")
    if t.buffer not in ("shared_hbm", "sbuf"):
        raise NKIError(
            f"'{api}' data must be a tensor in shared HBM (a kernel parameter or "
            f"nl.ndarray(..., buffer=nl.shared_hbm)) or in SBUF, got {t.label} in {t.buffer}",
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


@instruction
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
    api = _spec.get("sendrecv").api
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
        per_partition = width * (prod(sa.shape) // max(sa.shape[0], 1))
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


_spec.NAMESPACE["dma_engine"] = dma_engine  # resolves the spec's default dma_engine.dma
