"""Executors of the GpSimd instructions: ``iota``, ``memset``, ``affine_select``,
``tensor_partition_reduce``, ``local_gather`` and ``sequence_bounds``."""

from __future__ import annotations

import numpy as np

from nki.errors import NKIIndexError
from nki.ir import Instr
from nki.optable import OPS

from .. import numerics
from ..executors import executes
from ..memory import Ctx, eval_index, eval_mask
from . import formulas as M
from .common import dst_of, src_const, src_index, src_tile, store


@executes("isa", "iota")
def _iota(instr: Instr, ctx: Ctx) -> None:
    dst = instr.dst
    assert dst is not None
    v = np.broadcast_to(eval_index(src_index(instr, 0), ctx.env), dst.shape)
    v = (np.asarray(v, dtype=np.int64) + 2**31) % 2**32 - 2**31  # int32 arithmetic
    store(instr, ctx, v)


@executes("isa", "memset")
def _memset(instr: Instr, ctx: Ctx) -> None:
    c = src_const(instr, 0)
    store(instr, ctx, np.broadcast_to(np.asarray(c.value), dst_of(instr).shape))


@executes("isa", "affine_select")
def _affine_select(instr: Instr, ctx: Ctx) -> None:
    src, fval = src_tile(instr, 0), src_const(instr, 1)
    dst = instr.dst
    assert dst is not None
    cond = eval_mask(instr.attr("pred"), dst.shape, ctx.env)
    raw = ctx.read(src).reshape(dst.shape)
    x = numerics.to_compute(raw)
    store(instr, ctx, np.where(cond, x, np.float32(fval.value)))


@executes("isa", "tensor_partition_reduce")
def _tensor_partition_reduce(instr: Instr, ctx: Ctx) -> None:
    src = src_tile(instr, 0)
    op = OPS[instr.attr("op")]
    raw = ctx.read(src)
    x = M.bits(raw) if op.bitvec else numerics.to_compute(raw)
    store(instr, ctx, M.reduce(op.name, x, (0,)), op.bitvec)


@executes("isa", "local_gather")
def _local_gather(instr: Instr, ctx: Ctx) -> None:
    src, index = src_tile(instr, 0), src_tile(instr, 1)
    p = src.shape[0]
    data = ctx.read(src).reshape(p, -1)
    idx = ctx.read(index).reshape(p, -1).astype(np.int64)
    n, nvalid = instr.attr("n_elem"), instr.attr("n_valid")
    out = np.empty((p, nvalid, n), dtype=data.dtype)
    for g in range(0, p, 16):
        ind = idx[g : g + 16].flatten(order="F")[:nvalid]  # partition-first order
        if ind.size and (ind.max() + n > data.shape[1]):
            raise NKIIndexError(
                f"nisa.local_gather: index {int(ind.max())} + {n} elements reaches past the "
                f"{data.shape[1]} elements per partition of the source (partitions {g}.."
                f"{g + 15}); out-of-range gathers are undefined on hardware",
                code="err_tensor_access_out_of_bound",
            )
        cols = ind[:, None] + np.arange(n)[None, :]
        out[g : g + 16] = data[g : g + 16][:, cols]
    store(instr, ctx, out)


@executes("isa", "sequence_bounds")
def _sequence_bounds(instr: Instr, ctx: Ctx) -> None:
    src = src_tile(instr, 0)
    ids = numerics.to_compute(ctx.read(src), exact_int=True).reshape(-1)
    store(instr, ctx, M.sequence_bounds(ids)[None])
