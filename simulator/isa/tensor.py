"""Executors of the Tensor engine instructions: ``nisa.nc_matmul`` and ``nisa.nc_transpose``."""

from __future__ import annotations

import numpy as np

from nki.errors import NKIRuntimeError
from nki.ir import Instr

from .. import numerics
from ..executors import executes
from ..memory import Ctx
from .common import check_tile_position, matmul_write, src_tile, store


@executes("isa", "nc_matmul")
def _nc_matmul(instr: Instr, ctx: Ctx) -> None:
    check_tile_position(instr, ctx)
    sacc, macc = src_tile(instr, 0), src_tile(instr, 1)
    s_raw, m_raw = ctx.read(sacc), ctx.read(macc)
    if instr.attr("transpose"):
        k = s_raw.shape[0]
        require_identity(m_raw.reshape(k, -1))
        matmul_write(instr, ctx, s_raw.reshape(k, -1).T)
        return
    s = numerics.to_compute(s_raw)
    m = numerics.to_compute(m_raw)
    if instr.attr("perf_mode", "none") != "none":  # [K, 2, F]: contract over K and the pair
        out = np.einsum("kim,kin->mn", s, m, dtype=np.float32)
    else:
        k = s.shape[0]
        out = np.matmul(s.reshape(k, -1).T, m.reshape(k, -1), dtype=np.float32)
    matmul_write(instr, ctx, out)


def require_identity(moving: np.ndarray) -> None:
    """``nc_matmul(is_transpose=True)``'s moving tile(s), (..., K, F), must each be the K x K
    identity (the PE then passes the stationary tile through, transposed)."""
    k = moving.shape[-2]
    if moving.shape[-1] != k or not (numerics.to_compute(moving) == np.eye(k)).all():
        raise NKIRuntimeError(
            "nisa.nc_matmul(is_transpose=True) needs 'moving' to be an identity matrix; its "
            "values are not the identity",
            code="err_matmul_transpose_needs_identity",
        )


@executes("isa", "nc_transpose")
def _nc_transpose(instr: Instr, ctx: Ctx) -> None:
    src = src_tile(instr, 0)
    raw = ctx.read(src)
    p = raw.shape[0]
    x = raw.reshape(p, -1)
    if instr.attr("exact"):
        store(instr, ctx, x.T)
        return
    # NeuronCore-v2 PE transpose = matmul with an identity: NaN / Inf spread along the column
    out = np.matmul(numerics.to_compute(x).T, np.eye(p, dtype=np.float32), dtype=np.float32)
    store(instr, ctx, out)
