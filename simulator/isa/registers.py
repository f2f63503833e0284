"""Executor of ``NkiScalar`` arithmetic (IR kind ``nkiscalar``: ``nisa.scalar_load`` /
``scalar_store`` and ``+ - *`` on device scalars, wrapping at their width). The virtual
registers (``nisa.register_*``) record ``isa.iota``, DMA and copy instructions, run by their
own executors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nki.ir import Const, Instr

from ..executors import executes
from ..memory import Ctx
from ..poison import REPORT, RULES

RULES[("nkiscalar", "*")] = REPORT

_SCALAR_OPS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "copy": lambda a, b: a,
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
}


def _scalar_value(x: Any, ctx: Ctx, dtype: np.dtype) -> np.ndarray:
    if isinstance(x, Const):
        return np.asarray(x.value).astype(np.int64).astype(dtype)  # the int wraps to the width
    return np.asarray(ctx.read(x)).reshape(-1)[:1].astype(dtype)


@executes("nkiscalar")
def _nkiscalar(instr: Instr, ctx: Ctx) -> None:
    assert instr.dst is not None
    dtype = np.dtype(ctx.decl(instr.dst.tensor).dtype)  # int32 / int64
    vals = [_scalar_value(s, ctx, dtype) for s in instr.srcs]
    if instr.op == "ring_rank":  # the rank a ring collective's step works on
        ring, pos = instr.attr("ring"), instr.attr("pos")
        got = np.array([ring[(pos - int(vals[0][0])) % len(ring)]], dtype=dtype)
        ctx.write(instr.dst, got.reshape(instr.dst.shape))
        return
    with np.errstate(over="ignore"):
        got = _SCALAR_OPS[instr.op](vals[0], vals[-1]).astype(dtype)
    ctx.write(instr.dst, got.reshape(instr.dst.shape))
