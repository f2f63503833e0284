"""DMA instructions: dma_copy (with casting, accumulate-on-write and out-of-bounds modes) and
dma_transpose."""

from __future__ import annotations

from typing import Any

from ..errors import NKIError, NKIShapeError, NKIUnsupportedError, user_loc
from ..ir import HBM_BUFFERS
from ..isa_spec import checked
from ..tracer import NkiTensor
from .common import alu_op, dt, emit_isa, out_dtype, out_tile, prod, rules, target, tile
from .enums import dge_mode as _dge_mode
from .enums import enum_value
from .enums import oob_mode as _oob_mode

_DMA_BUFFERS = (*HBM_BUFFERS, "sbuf")


@checked
def dma_copy(
    *,
    dst: Any,
    src: Any,
    mask: Any = None,
    dst_rmw_op: Any = None,
    oob_mode: Any = _oob_mode.error,
    dge_mode: Any = _dge_mode.unknown,
) -> None:
    """Copy ``src`` to ``dst`` with a DMA engine (HBM <-> SBUF or SBUF <-> SBUF; not PSUM).
    Both have the same number of elements; differing dtypes are cast through fp32.
    ``dst_rmw_op=np.add`` (or nl.add) accumulates into ``dst`` instead of overwriting (then only
    ``oob_mode=error`` is allowed). With indirect (data-dependent) indices, ``oob_mode.error``
    raises on out-of-bounds rows and ``oob_mode.skip`` skips them. ``dge_mode=hwdge`` needs
    NeuronCore-v3 (trn2) or newer.

    Example: ``nisa.dma_copy(dst=out_hbm[0:128, 0:512], src=tile_sb, dst_rmw_op=np.add)``.
    """
    api = "nisa.dma_copy"
    dacc, dtt = tile(dst, api, "dst", _DMA_BUFFERS, compute=False)
    sacc, stt = tile(src, api, "src", _DMA_BUFFERS, compute=False)
    if prod(dacc.shape) != prod(sacc.shape):
        raise NKIShapeError(
            f"'src'{list(sacc.shape)} ({prod(sacc.shape)} elements) and 'dst'"
            f"{list(dacc.shape)} ({prod(dacc.shape)} elements) of '{api}' must have the same "
            "number of elements",
            code="err_dma_element_count_mismatch",
            loc=user_loc(),
        )
    oob = enum_value(oob_mode, _oob_mode, api, "oob_mode")
    dge = enum_value(dge_mode, _dge_mode, api, "dge_mode")
    if dge == _dge_mode.hwdge and not rules().hwdge:
        raise NKIUnsupportedError(
            f"dge_mode=hwdge of '{api}' needs NeuronCore-v3 (trn2) or newer; target is "
            f"{target().name} (NeuronCore-v{target().gen})",
            code="err_unsupported_dge_mode",
            loc=user_loc(),
        )
    rmw = None
    if dst_rmw_op is not None:
        fn = alu_op(dst_rmw_op, api, "dst_rmw_op")
        if fn.name != "add":
            raise NKIError(
                f"'dst_rmw_op'={fn.name} of '{api}' is not supported; only np.add / nl.add",
                code="err_unsupported_op",
                loc=user_loc(),
            )
        if oob != _oob_mode.error:
            raise NKIError(
                f"'{api}' with dst_rmw_op only allows oob_mode=nisa.oob_mode.error, got {oob.name}",
                code="err_invalid_argument",
                loc=user_loc(),
            )
        rmw = "add"
    attrs = {"engine": "dma", "oob": oob.name, "dge": dge.name, "rmw": rmw}
    del stt, dtt
    emit_isa("dma_copy", dacc, (sacc,), attrs, mask=mask, mask_shape=dacc.shape, api=api)


_TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


@checked
def dma_transpose(src: Any, *, axes: Any = None, mask: Any = None, dtype: Any = None) -> NkiTensor:
    """Transpose ``src`` (HBM or SBUF) with the DMA engine into a new SBUF tile. Supported
    permutations: 2-D (1, 0), 3-D (2, 1, 0), 4-D (3, 1, 2, 0) (the default for the rank).

    Example: ``t = nisa.dma_transpose(a_hbm[0:64, 0:128])`` -> (128, 64).
    """
    api = "nisa.dma_transpose"
    sacc, st = tile(src, api, "src", _DMA_BUFFERS, compute=False)
    rank = len(sacc.shape)
    want = _TRANSPOSE_AXES.get(rank)
    try:
        got = tuple(int(a) for a in axes) if axes is not None else want
    except (TypeError, ValueError):
        got = None
    if want is None or got != want:
        raise NKIError(
            f"'{api}' supports axes {_TRANSPOSE_AXES} by rank; got a rank-{rank} 'src' with "
            f"axes={axes!r}",
            code="err_unsupported_transpose_axes",
            loc=user_loc(),
        )
    shape = tuple(sacc.shape[a] for a in got)
    out = out_tile(shape, out_dtype(dtype, dt(st)), api)
    emit_isa("dma_transpose", out.access_(), (sacc,), {"engine": "dma", "axes": got}, mask=mask)
    return out
