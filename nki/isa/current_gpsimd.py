"""GpSimd and DMA instructions of the current API only: ``nc_n_gather``,
``nonzero_with_count``, ``topk`` (GpSimd engine) and ``dma_compute`` (DMA engine)."""

from __future__ import annotations

import math
from typing import Any

from ..errors import NKIError, NKIShapeError, NKITypeError, NKIUnsupportedError, user_loc
from ..ir import HBM_BUFFERS
from .common import (
    alu_op,
    dt,
    emit_isa,
    free_size,
    prod,
    same_partitions,
    static_int,
    tile,
)
from .current import Instruction
from .current_common import begin, current_only, dtype_in, handle
from .enums import enum_value
from .enums import oob_mode as _oob_mode

_SBUF = ("sbuf",)
_DMA_BUFFERS = (*HBM_BUFFERS, "sbuf")
MAX_DMA_COMPUTE_SRCS = 16


def _invalid(msg: str, code: str = "err_invalid_argument") -> NKIError:
    return NKIError(msg, code=code, loc=user_loc())


def _same_free(a: tuple[int, ...], b: tuple[int, ...], api: str, ra: str, rb: str, extra=0):
    if free_size(a) != free_size(b) + extra:
        more = f" + {extra}" if extra else ""
        raise NKIShapeError(
            f"'{api}' needs {free_size(b)}{more} elements per partition in '{ra}' "
            f"{list(a)} ('{rb}' {list(b)} has {free_size(b)}); got {free_size(a)}",
            code="err_free_size_mismatch",
            loc=user_loc(),
        )


@current_only
def nc_n_gather(dst: Any, data: Any, indices: Any, name: Any = None) -> Instruction:
    """``dst[p, j] = data[p].flatten()[indices[p, j]]`` on the GpSimd engine, per partition.

    All three tiles are in SBUF with the same partition count; ``indices`` is uint32 with as
    many elements per partition as ``dst``, each below ``data``'s elements per partition
    (checked when the kernel runs); ``dst`` has ``data``'s dtype (values are copied bit-exact).

    Example: ``nisa.nc_n_gather(g, table, idx)``.
    """
    api = begin("nc_n_gather")
    dacc, dtile = tile(dst, api, "dst", _SBUF)
    sacc, stile = tile(data, api, "data", _SBUF)
    iacc, itile = tile(indices, api, "indices", _SBUF)
    same_partitions(dacc.shape, sacc.shape, api, "dst", "data")
    same_partitions(dacc.shape, iacc.shape, api, "dst", "indices")
    dtype_in(itile, ("uint32",), api, "indices")
    if dt(dtile) != dt(stile):
        raise NKITypeError(
            f"'dst' ({dt(dtile)}) and 'data' ({dt(stile)}) of '{api}' must have the same dtype "
            "(the gather copies values without a cast)",
            code="err_dtype_mismatch",
            loc=user_loc(),
        )
    _same_free(dacc.shape, iacc.shape, api, "dst", "indices")
    emit_isa("nc_n_gather", dacc, (sacc, iacc), {"engine": "gpsimd"}, api=api)
    return handle("nc_n_gather")


@current_only
def nonzero_with_count(
    dst: Any, src: Any, index_offset: Any = 0, padding_val: Any = -1, name: Any = None
) -> Instruction:
    """Positions of the nonzero elements of a row, then padding, then their count, on the
    GpSimd engine (NeuronCore-v3+).

    Only partitions 0, 16, ..., 112 of the tiles are processed (each of the 8 GpSimd cores
    reads and writes the first of its 16 partitions); the other partitions of ``dst`` are left
    unchanged. Per processed row of T elements (free dims flattened) with N nonzeros: ``dst``
    gets the N positions + ``index_offset``, T - N times ``padding_val``, then N (so ``dst``
    has T + 1 elements per partition). ``src``: float32 or int32; ``dst``: int32; both SBUF.

    Example: ``nisa.nonzero_with_count(pos, mask_row, index_offset=t * 512)``.
    """
    api = begin("nonzero_with_count")
    dacc, dtile = tile(dst, api, "dst", _SBUF)
    sacc, stile = tile(src, api, "src", _SBUF)
    same_partitions(dacc.shape, sacc.shape, api, "dst", "src")
    dtype_in(stile, ("float32", "int32"), api, "src")
    dtype_in(dtile, ("int32",), api, "dst")
    _same_free(dacc.shape, sacc.shape, api, "dst", "src", extra=1)
    attrs = {
        "engine": "gpsimd",
        "index_offset": static_int(index_offset, api, "index_offset"),
        "padding_val": static_int(padding_val, api, "padding_val"),
    }
    emit_isa("nonzero_with_count", dacc, (sacc,), attrs, api=api)
    return handle("nonzero_with_count")


@current_only
def topk(val_dst: Any, idx_dst: Any, src: Any, n: Any, name: Any = None) -> Instruction:
    """The K largest of ``n`` bf16 values per 16-partition group, on the GpSimd engine.

    Each group of 16 partitions holds one problem in a snake layout: element e of the group is
    at partition e % 16, free position e // 16 (``src`` needs ceil(n / 16) free positions;
    positions past n are ignored). K is the free size of ``val_dst`` (bf16) and ``idx_dst``
    (uint32, indices 0..n-1 into the group's snake). Result j of a group is written in the same
    snake layout (partition j % 16, free position j // 16), values in ascending order (ties:
    lower index first; the largest K values with the lower index win a tie at the cut). The
    hardware writes each of the ceil(K / 16) result positions across all 16 partitions, so the
    lanes of the last position past K receive unspecified values (NaN / 0xFFFFFFFF here,
    uninitialised under ``checks="full"``); later positions are left unchanged. This follows the
    documentation's statement of the snake layout for input and results (NKI 2.33); an older
    page says each partition is independent, which contradicts the snake input.
    Limits: 8 <= n < 65536, 1 <= K < 32768, K <= n, partitions a multiple of 16, all SBUF.

    Example: ``nisa.topk(vals, idxs, scores, n=1024)``.
    """
    api = begin("topk")
    vacc, vtile = tile(val_dst, api, "val_dst", _SBUF)
    iacc, itile = tile(idx_dst, api, "idx_dst", _SBUF)
    sacc, stile = tile(src, api, "src", _SBUF)
    dtype_in(stile, ("bfloat16",), api, "src")
    dtype_in(vtile, ("bfloat16",), api, "val_dst")
    dtype_in(itile, ("uint32",), api, "idx_dst")
    parts = sacc.shape[0]
    if vacc.shape[0] != parts or iacc.shape[0] != parts or parts % 16:
        raise NKIShapeError(
            f"'val_dst'{list(vacc.shape)}, 'idx_dst'{list(iacc.shape)} and 'src'"
            f"{list(sacc.shape)} of '{api}' need the same partition count, a multiple of 16",
            code="err_num_partition_mismatch",
            loc=user_loc(),
        )
    _same_free(iacc.shape, vacc.shape, api, "idx_dst", "val_dst")
    count = static_int(n, api, "n")
    k = free_size(vacc.shape)
    if not 8 <= count < 65536:
        raise _invalid(f"'n'={count} of '{api}' must satisfy 8 <= n < 65536")
    if not 1 <= k < 32768 or k > count:
        raise _invalid(
            f"K = {k} (the free size of 'val_dst') of '{api}' must satisfy 1 <= K < 32768 and "
            f"K <= n = {count}"
        )
    if free_size(sacc.shape) < math.ceil(count / 16):
        raise NKIShapeError(
            f"'src'{list(sacc.shape)} of '{api}' holds {free_size(sacc.shape)} positions per "
            f"partition; n = {count} in a 16-partition snake needs ceil(n / 16) = "
            f"{math.ceil(count / 16)}",
            code="err_size_of_dimension_exceed_arch_limit",
            loc=user_loc(),
        )
    attrs = {"engine": "gpsimd", "n": count, "idx_dst": iacc}
    emit_isa("topk", vacc, (sacc,), attrs, outputs=(iacc,), api=api)
    return handle("topk")


@current_only
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
    api = begin("dma_compute")
    dacc, _ = tile(dst, api, "dst", _DMA_BUFFERS, compute=False)
    if not isinstance(srcs, (list, tuple)) or not 1 <= len(srcs) <= MAX_DMA_COMPUTE_SRCS:
        raise _invalid(
            f"'srcs' of '{api}' must be a list of 1 to {MAX_DMA_COMPUTE_SRCS} tiles, got "
            f"{type(srcs).__name__}{f' of {len(srcs)}' if isinstance(srcs, (list, tuple)) else ''}"
        )
    accs = []
    for i, s in enumerate(srcs):
        sacc, _ = tile(s, api, f"srcs[{i}]", _DMA_BUFFERS, compute=False)
        if prod(sacc.shape) != prod(dacc.shape):
            raise NKIShapeError(
                f"'srcs[{i}]'{list(sacc.shape)} ({prod(sacc.shape)} elements) and 'dst'"
                f"{list(dacc.shape)} ({prod(dacc.shape)} elements) of '{api}' must have the "
                "same number of elements",
                code="err_dma_element_count_mismatch",
                loc=user_loc(),
            )
        accs.append(sacc)
    op = alu_op(reduce_op, api, "reduce_op")
    if op.name != "add":
        raise _invalid(
            f"'reduce_op'={op.name} of '{api}' is not supported; only nl.add", "err_unsupported_op"
        )
    if scales is not None:
        ok = isinstance(scales, (list, tuple)) and len(scales) == len(accs)
        if not ok or any(float(v) != 1.0 for v in scales):
            raise NKIUnsupportedError(
                f"'scales'={scales!r} of '{api}': only a scale of 1.0 per source (or None) is "
                f"supported ({len(accs)} sources)",
                code="err_unsupported_attribute",
                loc=user_loc(),
            )
    indirect = [a for a in (dacc, *accs) if a.indirect]
    if indirect and len(accs) != 2:
        raise _invalid(
            f"'{api}' with a vector_offset (indirect) view computes read-modify-write with "
            f"exactly 2 sources (the destination and the data); got {len(accs)}"
        )
    if dacc.indirect and dacc not in accs:
        raise _invalid(
            f"scatter-add of '{api}': 'dst' is an indirect view, so one source must be that same "
            "view (srcs=[dst, data])"
        )
    oob = enum_value(oob_mode, _oob_mode, api, "oob_mode")
    attrs = {"engine": "dma", "oob": oob.name, "unique": bool(unique_indices)}
    emit_isa("dma_compute", dacc, tuple(accs), attrs, api=api)
    return handle("dma_compute")


__all__ = ["dma_compute", "nc_n_gather", "nonzero_with_count", "topk"]
