"""Executors of element-wise nki.language ops: op-table rows applied with NumPy broadcasting
in fp32 (exact int64 for integer-only arithmetic) and ``nl.where``."""

from __future__ import annotations

import numpy as np

from nki.ir import Access, Const, Instr
from nki.optable import OPS, apply

from .. import numerics
from ..executors import executes
from ..memory import Ctx
from .common import exact_int, is_int_access, operand_sel


@executes("ew")
def _elementwise(instr: Instr, ctx: Ctx) -> None:
    """An op-table row applied element-wise with NumPy broadcasting, in fp32."""
    op = OPS[instr.op]
    sel = ctx.mask(instr)
    exact = exact_int(instr, ctx)
    vals = []
    for s in instr.srcs:
        v = ctx.value(s, operand_sel(s, sel), exact_int=exact)
        vals.append(v)
    # bit-vector rows act on the operands' bit patterns (logical shifts, wrapping)
    bits = (
        (instr.attr("bit_dtype") or numerics.bit_dtype(instr.srcs, ctx.decl)) if op.bitvec else None
    )
    out = apply(op, vals, bits)
    assert instr.dst is not None
    ctx.write(instr.dst, out, sel, instr.accumulate)


@executes("select")
def _select(instr: Instr, ctx: Ctx) -> None:
    """nl.where: condition != 0 picks x, else y."""
    assert instr.dst is not None
    sel = ctx.mask(instr)
    exact = all(
        is_int_access(s, ctx) or (isinstance(s, Const) and isinstance(s.value, (int, np.integer)))
        for s in instr.srcs[1:]
    )
    c, a, b = (
        ctx.value(
            s,
            sel if isinstance(s, Access) and s.shape == instr.dst.shape else None,
            exact_int=exact,
        )  # fmt: skip
        for s in instr.srcs
    )
    out = np.where(np.asarray(c) != 0, a, b)
    ctx.write(instr.dst, out, sel, instr.accumulate)
