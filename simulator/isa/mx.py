"""Executors of the microscaling (MX) instructions: ``quantize_mx`` and ``nc_matmul_mx``
(layouts and formulas: ``nki/isa/mx.py``)."""

from __future__ import annotations

import numpy as np

from nki.dtypes import pack_x4, unpack_x4
from nki.ir import Access, Instr

from .. import numerics
from ..executors import executes
from ..memory import Ctx
from .common import check_tile_position, dst_of, dtype_of, matmul_write, src_tile

EMAX = {"float8_e4m3fn_x4": 8, "float8_e5m2_x4": 15}  # exponent of the largest normal value


def _scale_rows(groups: int) -> np.ndarray:
    """The scale-tile partition of each 8-partition data group: 32q + j for group 4q + j."""
    g = np.arange(groups)
    return 32 * (g // 4) + g % 4


def read_scales(ctx: Ctx, acc: Access, groups: int) -> np.ndarray:
    """(groups, cols) fp32 scale factors of a scale tile (e8m0: 2**(bits - 127); 255 is NaN)."""
    raw = ctx.read(acc)
    rows = raw.reshape(raw.shape[0], -1)[_scale_rows(groups)]
    if dtype_of(ctx, acc) == "uint8":
        bits = rows.astype(np.int64)
        out = np.ldexp(np.float32(1.0), (bits - 127).astype(np.int32)).astype(np.float32)
        return np.where(bits == 255, np.float32(np.nan), out)
    return numerics.to_compute(rows)


@executes("isa", "quantize_mx")
def _quantize_mx(instr: Instr, ctx: Ctx) -> None:
    src, dst = src_tile(instr, 0), dst_of(instr)
    scale: Access = instr.attr("dst_scale")
    p = src.shape[0]
    x = numerics.to_compute(ctx.read(src)).reshape(p, -1)
    packed = dtype_of(ctx, dst)
    g = x.reshape(p // 8, 8, -1, 4)
    amax = np.max(np.abs(g), axis=(1, 3))  # (groups, cols)
    _, ex = np.frexp(amax)  # amax = m * 2**ex, m in [0.5, 1): floor(log2 amax) = ex - 1
    e = np.where(amax > 0, ex - 1 - (EMAX[packed] - 1), -127)
    e = np.clip(e, -127, 127).astype(np.int32)
    q = np.ldexp(g.astype(np.float64), -e[:, None, :, None]).astype(np.float32)
    q = q.reshape(p, -1, 4)
    ctx.write(dst, pack_x4(q, packed).reshape(dst.shape))
    rows = scale.shape[0]
    cols = e.shape[1]
    full = np.zeros((rows, cols), dtype=np.float64)
    sel = np.zeros((rows, cols), dtype=bool)
    where = _scale_rows(e.shape[0])
    if dtype_of(ctx, scale) == "uint8":
        full[where] = e + 127
    else:
        full[where] = np.ldexp(1.0, e)
    sel[where] = True
    ctx.write(scale, full.reshape(scale.shape), sel.reshape(scale.shape))


@executes("isa", "nc_matmul_mx")
def _nc_matmul_mx(instr: Instr, ctx: Ctx) -> None:
    check_tile_position(instr, ctx)
    sacc, macc = src_tile(instr, 0), src_tile(instr, 1)
    sc, mc = src_tile(instr, 2), src_tile(instr, 3)
    k = sacc.shape[0]
    a = unpack_x4(ctx.read(sacc), dtype_of(ctx, sacc)).reshape(k, -1, 4)
    b = unpack_x4(ctx.read(macc), dtype_of(ctx, macc)).reshape(k, -1, 4)
    sa = np.repeat(read_scales(ctx, sc, k // 8), 8, axis=0)  # (K, M)
    sb = np.repeat(read_scales(ctx, mc, k // 8), 8, axis=0)  # (K, N)
    with np.errstate(all="ignore"):
        a = (a * sa[:, :, None]).astype(np.float32)
        b = (b * sb[:, :, None]).astype(np.float32)
        out = np.einsum("kmi,kni->mn", a, b, dtype=np.float32)
    matmul_write(instr, ctx, out)
