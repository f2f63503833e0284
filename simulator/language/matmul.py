"""Executors of ``nl.matmul`` (fp32 products and accumulation, PSUM accumulation groups) and
``nl.transpose``."""

from __future__ import annotations

import numpy as np

from nki.ir import Access, Instr

from .. import numerics
from ..executors import executes
from ..isa.common import matmul_write
from ..memory import Ctx


@executes("matmul")
def _matmul(instr: Instr, ctx: Ctx) -> None:
    """x @ y (x.T @ y with transpose_x) with fp32 products and accumulation."""
    xa, ya = instr.srcs
    assert isinstance(xa, Access) and isinstance(ya, Access) and instr.dst is not None
    x = numerics.to_compute(ctx.read(xa))
    y = numerics.to_compute(ctx.read(ya))
    if not instr.attr("transpose_x", False):
        x = x.T  # the compiler inserts a (bit-exact) PE transpose
    out = np.matmul(x.T.astype(np.float32), y.astype(np.float32)).astype(np.float32)
    matmul_write(instr, ctx, out)


@executes("transpose")
def _transpose(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    assert isinstance(src, Access) and instr.dst is not None
    vals = ctx.read(src)
    ctx.write(instr.dst, np.ascontiguousarray(vals.T), ctx.mask(instr), instr.accumulate)
