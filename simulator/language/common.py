"""Operand helpers shared by the nki.language executors."""

from __future__ import annotations

import numpy as np

from nki import dtypes
from nki.ir import Access, Const, Instr
from nki.optable import OPS

from ..memory import Ctx


def is_int_access(acc: object, ctx: Ctx) -> bool:
    """``acc`` is a tile of an integer or bool tensor."""
    if not isinstance(acc, Access):
        return False
    d = ctx.decl(acc.tensor).dtype
    return dtypes.is_int(d) or dtypes.is_bool(d)


def exact_int(instr: Instr, ctx: Ctx) -> bool:
    """Integer-only arithmetic runs exactly (GpSimd's native integer path)."""
    op = OPS[instr.op]
    if not op.exact_int:
        return False
    for s in instr.srcs:
        if isinstance(s, Access):
            if not is_int_access(s, ctx):
                return False
        elif isinstance(s, Const):
            if isinstance(s.value, float) or (
                isinstance(s.value, np.generic) and s.value.dtype.kind == "f"
            ):
                return False
    return True


def operand_sel(src: object, sel: np.ndarray | None) -> np.ndarray | None:
    """Masks apply to operands of the destination's shape (broadcast operands read whole)."""
    if sel is None or not isinstance(src, Access):
        return None
    if src.shape == sel.shape:
        return sel
    return None
