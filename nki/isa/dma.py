"""DMA instructions: dma_copy (with casting, accumulate-on-write and out-of-bounds modes),
dma_transpose and, in the current API only, dma_compute (sums of sources, scatter / gather-add)."""

from __future__ import annotations

from typing import Any

from .. import dtypes
from ..errors import NKIError, NKIShapeError, NKIUnsupportedError, user_loc
from ..ir import HBM_BUFFERS, Access
from ..tracer import NkiTensor
from ..tracer.api_checks import broken
from .common import Call, Instruction, alu_op, prod
from .enums import dge_mode as _dge_mode
from .enums import engine_name, enum_value
from .enums import oob_mode as _oob_mode
from .forms import dst_view, generic_current, instruction, require_dst_dtype
from .rules import rules, target

_DMA_BUFFERS = (*HBM_BUFFERS, "sbuf")
MAX_DMA_COMPUTE_SRCS = 16


def _same_count(a: Access, b: Access, api: str, ra: str, rb: str) -> None:
    if prod(a.shape) != prod(b.shape):
        raise NKIShapeError(
            f"'{ra}'{list(a.shape)} ({prod(a.shape)} elements) and '{rb}'{list(b.shape)} "
            f"({prod(b.shape)} elements) of '{api}' must have the same number of elements",
            code="err_dma_element_count_mismatch",
            loc=user_loc(),
        )


def _invalid(msg: str, code: str = "err_invalid_argument") -> NKIError:
    return NKIError(msg, code=code, loc=user_loc())


def _dge(mode: Any, api: str) -> _dge_mode:
    """A ``dge_mode`` argument; hardware DGE needs NeuronCore-v3 (trn2) or newer."""
    dge = enum_value(mode, _dge_mode, api, "dge_mode")
    if dge == _dge_mode.hwdge and not rules().hwdge:
        raise NKIUnsupportedError(
            f"dge_mode=hwdge of '{api}' needs NeuronCore-v3 (trn2) or newer; target is "
            f"{target().name} (NeuronCore-v{target().gen})",
            code="err_unsupported_dge_mode",
            loc=user_loc(),
        )
    return dge


def _dma_copy_current(name: str, dst: Any, a: dict[str, Any]) -> tuple[Any, None, dict[str, Any]]:
    """The destination-first dma_copy's ``engine=``: the sequencer of a hardware-DGE DMA."""
    eng = engine_name(a.get("engine"))
    dge = enum_value(a.get("dge_mode"), _dge_mode, "nisa.dma_copy", "dge_mode")
    if eng != "unknown" and (eng not in ("sync", "scalar") or dge != _dge_mode.hwdge):
        broken("dma_copy.engine", f"'nisa.dma_copy' got engine={eng} with dge_mode={dge.name}")
    return dst, None, {}


@instruction(current=_dma_copy_current)
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
    NeuronCore-v3 (trn2) or newer and, in the current API, equal dtypes (no cast).

    Example: ``nisa.dma_copy(dst=out_hbm[0:128, 0:512], src=tile_sb, dst_rmw_op=np.add)``.
    """
    c = Call("dma_copy")
    dacc, dt = c.tile(dst, "dst", _DMA_BUFFERS, compute=False)
    sacc, st = c.tile(src, "src", _DMA_BUFFERS, compute=False)
    _same_count(sacc, dacc, c.api, "src", "dst")
    oob = enum_value(oob_mode, _oob_mode, c.api, "oob_mode")
    dge = _dge(dge_mode, c.api)
    if dge == _dge_mode.hwdge and dt.decl.dtype != st.decl.dtype:
        broken(
            "dma_copy.hwdge_dtype",
            f"'{c.api}' with dge_mode=hwdge got src {st.decl.dtype} and dst {dt.decl.dtype}",
        )
    rmw = None
    if dst_rmw_op is not None:
        fn = alu_op(dst_rmw_op, c.api, "dst_rmw_op")
        if fn.name != "add":
            raise _invalid(
                f"'dst_rmw_op'={fn.name} of '{c.api}' is not supported; only np.add / nl.add",
                "err_unsupported_op",
            )
        if oob != _oob_mode.error:
            raise _invalid(
                f"'{c.api}' with dst_rmw_op only allows oob_mode=nisa.oob_mode.error, got "
                f"{oob.name}"
            )
        rmw = "add"
    c.emit(
        dacc, (sacc,), mask=mask, mask_shape=dacc.shape, oob_mode=oob.name, dge_mode=dge.name,
        dst_rmw_op=rmw,
    )  # fmt: skip


_TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def _dma_transpose_current(name: str, dst: Any, a: dict[str, Any]) -> Any:
    """The destination-first dma_transpose's ``dge_mode``: which engine generates the
    descriptors, the same transpose either way (the hardware-DGE limits on the src's dtype and
    shape are checked; swdge is for indirect transposes)."""
    a["dge_mode"] = _dge(a.get("dge_mode", _dge_mode.unknown), "nisa.dma_transpose")
    where = dst_view(dst).tensor_()
    if where.buffer != "sbuf":  # (the page: "dst ... must be a tile in SBUF")
        raise _invalid(f"'nisa.dma_transpose' writes an SBUF tile; dst {where.label} is in "
                       f"{where.buffer}", "err_unsupported_memory")  # fmt: skip
    require_dst_dtype(name, dst, a.get("src"), "src")
    return generic_current(name, dst, a)


@instruction(current=_dma_transpose_current)
def dma_transpose(
    src: Any,
    *,
    axes: Any = None,
    mask: Any = None,
    dtype: Any = None,
    dge_mode: Any = _dge_mode.unknown,
) -> NkiTensor:
    """Transpose ``src`` (HBM or SBUF) with the DMA engine into a new SBUF tile. Supported
    permutations: 2-D (1, 0), 3-D (2, 1, 0), 4-D (3, 1, 2, 0) (the default for the rank).
    ``dge_mode`` (the descriptor generator; ``hwdge`` needs trn2 or newer) gives the same
    transpose; the current pages' rules on it (the hardware DGE's source shapes, the modes of a
    direct transpose) are checked in the destination-first form, which they document.

    Example: ``t = nisa.dma_transpose(a_hbm[0:64, 0:128])`` -> (128, 64).
    """
    c = Call("dma_transpose", dtype)
    dge = _dge(dge_mode, c.api)
    sacc, stile = c.tile(src, "src", _DMA_BUFFERS, compute=False)
    if dtypes.itemsize(stile.decl.dtype) == 1:
        broken("dma_transpose.one_byte", f"'{c.api}' got a {stile.decl.dtype} src")
    if dge == _dge_mode.hwdge and dtypes.itemsize(stile.decl.dtype) != 2:
        broken("dma_transpose.dtype", f"'{c.api}' got a {stile.decl.dtype} src with dge_mode=hwdge")
    shp = tuple(sacc.shape)
    rows = (
        shp[0] in (1, 2, 4, 8, 16) and shp[0] * shp[-2] % 16 == 0 if len(shp) > 2 else shp[0] == 16
    )
    if dge == _dge_mode.hwdge and not (rows and shp[-1] <= 128):
        broken("dma_transpose.hwdge_shape", f"'{c.api}' got a src of shape {list(shp)}")
    # (the page allows unknown and hwdge; AWS's NKI library passes none to a direct transpose too)
    if dge == _dge_mode.swdge and not sacc.indirect:
        broken("dma_transpose.direct_dge", f"'{c.api}' got dge_mode={dge.name} for a direct src")
    rank = len(sacc.shape)
    want = _TRANSPOSE_AXES.get(rank)
    try:
        got = tuple(int(a) for a in axes) if axes is not None else want
    except (TypeError, ValueError):
        got = None
    if want is None or got != want:
        raise _invalid(
            f"'{c.api}' supports axes {_TRANSPOSE_AXES} by rank; got a rank-{rank} 'src' with "
            f"axes={axes!r}",
            "err_unsupported_transpose_axes",
        )
    return c.new(tuple(sacc.shape[a] for a in got), (sacc,), mask=mask, axes=got)


@instruction
def dma_compute(
    dst: Any,
    srcs: Any,
    reduce_op: Any,
    scales: Any = None,
    unique_indices: Any = True,
    oob_mode: Any = _oob_mode.error,
    name: Any = None,
) -> Instruction:
    """``dst = srcs[0] * scales[0] + srcs[1] * scales[1] + ...`` with the DMA engine's compute
    logic, in fp32, cast to ``dst``'s dtype.

    Only ``reduce_op=nl.add`` and scales of 1.0 (or None) exist; 1 to 16 sources, each HBM or
    SBUF (not PSUM) with ``dst``'s element count. Read-modify-write through a ``vector_offset``
    view (exactly two sources): scatter-add ``dst = hbm.ap(vector_offset=idx)`` with
    ``srcs = [dst, sbuf_tile]`` adds into the indexed HBM rows; gather-add ``dst = sbuf_tile``
    with ``srcs = [sbuf_tile, hbm.ap(vector_offset=idx)]`` adds the indexed rows into the tile.
    ``unique_indices=True`` promises distinct destination rows (a repeated row is reported when
    the kernel runs, its result being undefined on hardware); with False every update lands.
    ``oob_mode=skip`` leaves out-of-bounds indexed rows untouched.

    Example: ``nisa.dma_compute(out_hbm, [a_sb, b_sb], nl.add)``.
    """
    c = Call("dma_compute")
    dacc, _ = c.tile(dst, "dst", _DMA_BUFFERS, compute=False)
    if not isinstance(srcs, (list, tuple)) or not 1 <= len(srcs) <= MAX_DMA_COMPUTE_SRCS:
        raise _invalid(
            f"'srcs' of '{c.api}' must be a list of 1 to {MAX_DMA_COMPUTE_SRCS} tiles, got "
            f"{type(srcs).__name__}{f' of {len(srcs)}' if isinstance(srcs, (list, tuple)) else ''}"
        )
    accs = []
    for i, s in enumerate(srcs):
        sacc, _ = c.tile(s, f"srcs[{i}]", _DMA_BUFFERS, compute=False)
        _same_count(sacc, dacc, c.api, f"srcs[{i}]", "dst")
        accs.append(sacc)
    op = alu_op(reduce_op, c.api, "reduce_op")
    if op.name != "add":
        raise _invalid(
            f"'reduce_op'={op.name} of '{c.api}' is not supported; only nl.add",
            "err_unsupported_op",
        )
    if scales is not None:
        ok = isinstance(scales, (list, tuple)) and len(scales) == len(accs)
        if not ok or any(float(v) != 1.0 for v in scales):
            raise NKIUnsupportedError(
                f"'scales'={scales!r} of '{c.api}': only a scale of 1.0 per source (or None) is "
                f"supported ({len(accs)} sources)",
                code="err_unsupported_attribute",
                loc=user_loc(),
            )
    indirect = [a for a in (dacc, *accs) if a.indirect]
    if indirect and len(accs) != 2:
        raise _invalid(
            f"'{c.api}' with a vector_offset (indirect) view computes read-modify-write with "
            f"exactly 2 sources (the destination and the data); got {len(accs)}"
        )
    if dacc.indirect and dacc not in accs:
        raise _invalid(
            f"scatter-add of '{c.api}': 'dst' is an indirect view, so one source must be that "
            "same view (srcs=[dst, data])"
        )
    oob = enum_value(oob_mode, _oob_mode, c.api, "oob_mode")
    return c.emit(dacc, tuple(accs), oob_mode=oob.name, unique_indices=bool(unique_indices))
