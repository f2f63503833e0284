"""Microscaling (MX) instructions of the current API (NeuronCore-v4): ``quantize_mx`` (Vector
engine) and ``nc_matmul_mx`` (Tensor engine).

Data: ``float8_e5m2_x4`` / ``float8_e4m3fn_x4`` (four fp8 values per 32-bit element) and
``float4_e2m1fn_x4`` (four fp4 values per 16-bit element); value i of element k is logical
element 4k + i. A scale group is 32 values: 8 partitions x one x4 element; its scale is an
``float8_e8m0fnu`` (or uint8) power of two. Scale tiles follow the quadrant layout
``quantize_mx`` writes: the scales of data partitions 32q + 8j .. 32q + 8j + 7 (q: the 32-partition
quadrant, j = 0..3) and x4 column c are at ``scale[32q + j, c]``: four scale partitions at the
same offset of every quadrant (the documentation's description, read literally; its exact
figure is not reproduced in the text nki-sim was checked against)."""

from __future__ import annotations

from typing import Any

from ..errors import NKIError, NKIShapeError, user_loc
from ..ir import Access
from .common import SBUF, Call, Instruction, accumulate_unwritten, dt, dtype_in, free_size
from .forms import instruction
from .rules import check_pe_tiling

DATA_X4 = ("float8_e5m2_x4", "float8_e4m3fn_x4")
MATMUL_DATA_X4 = (*DATA_X4, "float4_e2m1fn_x4")
SCALE_DTYPES = ("float8_e8m0fnu", "uint8")


def scale_partitions(data_partitions: int) -> int:
    """Partitions a scale tile needs for ``data_partitions`` (a multiple of 32)."""
    return 32 * (data_partitions // 32 - 1) + 4


def _check_scale(acc: Access, t: Any, parts: int, cols: int, api: str, role: str) -> None:
    dtype_in(t, SCALE_DTYPES, api, role)
    need = scale_partitions(parts)
    if acc.shape[0] < need or free_size(acc.shape) != cols:
        raise NKIShapeError(
            f"'{role}'{list(acc.shape)} of '{api}' must hold the scales of {parts} data "
            f"partitions x {cols} x4 columns: at least {need} partitions (4 per 32-partition "
            f"quadrant, at partitions 32q + 0..3) and {cols} elements per partition",
            code="err_free_size_mismatch",
            loc=user_loc(),
        )


def _data_partitions(acc: Access, api: str, role: str, cap: int = 128) -> int:
    p = acc.shape[0]
    if p % 32 or p > cap:
        raise NKIShapeError(
            f"'{role}'{list(acc.shape)} of '{api}' needs a partition count that is a multiple "
            f"of 32 (a scale group is 8 partitions within a 32-partition quadrant), at most "
            f"{cap}; got {p}",
            code="err_num_partition_mismatch",
            loc=user_loc(),
        )
    return p


@instruction
def quantize_mx(dst: Any, src: Any, dst_scale: Any, name: Any = None) -> Instruction:
    """Quantise a bf16 / fp16 SBUF tile ``src`` (P, F) to MX fp8 on the Vector engine
    (NeuronCore-v4): ``dst`` (P, F / 4) of ``float8_e5m2_x4`` / ``float8_e4m3fn_x4`` and the
    scales ``dst_scale`` (``float8_e8m0fnu`` or uint8, F / 4 columns, quadrant layout).

    Per group of 8 partitions x 4 values: ``scale = 2**(floor(log2(amax)) - (Emax - 1))`` with
    Emax = 8 (e4m3fn) / 15 (e5m2), twice the OCP sample algorithm's scale (as documented, so the
    largest values round without saturating); an all-zero group gets 2**-127. Values are
    divided by the scale and rounded to nearest-even fp8. P: a multiple of 32, at most 128;
    F: a multiple of 4; all tiles in SBUF.

    Example: ``nisa.quantize_mx(q, x, q_scale)``.
    """
    c = Call("quantize_mx")
    api = c.api
    dacc, dtile = c.tile(dst, "dst", SBUF)
    sacc, stile = c.tile(src, "src", SBUF)
    cacc, ctile = c.tile(dst_scale, "dst_scale", SBUF, compute=False)
    dtype_in(stile, ("bfloat16", "float16"), api, "src")
    dtype_in(dtile, DATA_X4, api, "dst")
    parts = _data_partitions(sacc, api, "src")
    f = free_size(sacc.shape)
    if f % 4 or dacc.shape[0] != parts or free_size(dacc.shape) * 4 != f:
        raise NKIShapeError(
            f"'src'{list(sacc.shape)} of '{api}' needs a free size that is a multiple of 4, and "
            f"'dst'{list(dacc.shape)} the same partitions and a quarter of it ({f // 4}: four "
            "fp8 values per x4 element)",
            code="err_free_size_mismatch",
            loc=user_loc(),
        )
    _check_scale(cacc, ctile, parts, f // 4, api, "dst_scale")
    return c.emit(dacc, (sacc,), dst_scale=cacc)


@instruction
def nc_matmul_mx(
    dst: Any,
    stationary: Any,
    moving: Any,
    stationary_scale: Any,
    moving_scale: Any,
    tile_position: Any = None,
    tile_size: Any = None,
    accumulate: Any = None,
    name: Any = None,
) -> Instruction:
    """MX matmul on the Tensor engine (NeuronCore-v4): ``dst[m, n] (= or +=)
    sum over partitions p and packed values i of (a[p, m, i] * sa) * (b[p, n, i] * sb)`` where
    ``a[p, m, i]`` is value i of ``stationary[p, m]``, ``sa`` its group's scale (partition
    group p // 8, column m, from ``stationary_scale``) and likewise for ``moving``; so each x4
    element carries four values of the contraction. Products accumulate in fp32; ``dst`` is
    fp32 or bf16 in PSUM.

    Data: x4 fp8 / fp4 types in SBUF (the two operands may differ); K = partitions, a multiple
    of 32, at most 128; M = stationary's x4 columns, even, at most 128; N = moving's x4 columns,
    at most 4096 (fp32 dst) / 8192 (bf16 dst). ``accumulate``: False overwrites, True adds,
    None (default) makes ``dst`` a PSUM accumulation group (per element, the first write
    overwrites and later ones add). ``tile_position=(row, 0)`` / ``tile_size=(rows, 128)`` place
    the contraction rows in the PE array (row tiling only, as ``nc_matmul``'s rules: sizes of
    the target, aligned positions, K <= rows); they do not change the result.

    Example: ``nisa.nc_matmul_mx(ps, qa, qb, qa_scale, qb_scale)``.
    """
    c = Call("nc_matmul_mx")
    api = c.api
    dacc, dtile = c.tile(dst, "dst", ("psum",))
    sacc, stile = c.tile(stationary, "stationary", SBUF)
    macc, mtile = c.tile(moving, "moving", SBUF)
    sc_acc, sc_tile = c.tile(stationary_scale, "stationary_scale", SBUF, compute=False)
    mc_acc, mc_tile = c.tile(moving_scale, "moving_scale", SBUF, compute=False)
    dtype_in(stile, MATMUL_DATA_X4, api, "stationary")
    dtype_in(mtile, MATMUL_DATA_X4, api, "moving")
    dtype_in(dtile, ("float32", "bfloat16"), api, "dst")
    k = _data_partitions(sacc, api, "stationary")
    if macc.shape[0] != k:
        raise NKIShapeError(
            f"'stationary'{list(sacc.shape)} and 'moving'{list(macc.shape)} of '{api}' must "
            f"have the same partition (contraction) count: {k} vs {macc.shape[0]}",
            code="err_matmul_contraction_mismatch",
            loc=user_loc(),
        )
    m, n = free_size(sacc.shape), free_size(macc.shape)
    n_max = 4096 if dt(dtile) == "float32" else 8192
    if m % 2 or m > 128 or n > n_max:
        raise NKIShapeError(
            f"'{api}': M = {m} (stationary x4 columns) must be even and at most 128, N = {n} "
            f"(moving x4 columns) at most {n_max} for a {dt(dtile)} dst",
            code="err_matmul_tile_size_exceeds_limit",
            loc=user_loc(),
        )
    if tuple(dacc.shape) != (m, n) and (dacc.shape[0], free_size(dacc.shape)) != (m, n):
        raise NKIShapeError(
            f"'dst'{list(dacc.shape)} of '{api}' must have shape [{m}, {n}] (stationary x4 "
            "columns, moving x4 columns)",
            code="err_matmul_shape",
            loc=user_loc(),
        )
    _check_scale(sc_acc, sc_tile, k, m, api, "stationary_scale")
    _check_scale(mc_acc, mc_tile, k, n, api, "moving_scale")
    tiling = _row_tiling(tile_position, tile_size, k, m, api)
    if accumulate not in (None, True, False):
        raise NKIError(
            f"accumulate= of '{api}' must be True, False or None; got {accumulate!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    if accumulate is True:
        accumulate_unwritten(dtile, api)
    params: dict[str, Any] = {"psum_group": accumulate is None}
    if tiling is not None:
        params.update(tile_position=tiling, tile_size=(int(tile_size[0]), 128))
    return c.emit(
        dacc, (sacc, macc, sc_acc, mc_acc), accumulate=None if accumulate is False else "add",
        **params,
    )  # fmt: skip


def _row_tiling(position: Any, size: Any, k: int, m: int, api: str) -> Any:
    if position is None and size is None:
        return None
    if position is None or size is None or len(tuple(size)) != 2 or len(tuple(position)) != 2:
        raise NKIError(
            f"tile_position and tile_size of '{api}' must be given together as (row, column) "
            f"pairs; got tile_position={position!r}, tile_size={size!r}",
            code="err_invalid_tile_position",
            loc=user_loc(),
        )
    if size[1] != 128 or not (isinstance(position[1], int) and position[1] == 0):
        raise NKIError(
            f"'{api}' supports row tiling only: tile_size column must be 128 and tile_position "
            f"column 0; got tile_size={tuple(size)!r}, tile_position={tuple(position)!r}",
            code="err_invalid_tile_position",
            loc=user_loc(),
        )
    return check_pe_tiling(position, size, k, m, "none", api)
