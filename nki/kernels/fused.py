"""One kernel for a chain of element-wise ops (and row means / sums over the last dim): each input
tile is loaded once, the chain's steps run on SBUF tiles in order, and the values used outside
the chain are stored. The torch backend fuses chains of its graphs into it
(:mod:`frontends.torch_fusion`).

Every step computes as the separate kernel of :mod:`nki.kernels.elementwise` /
:mod:`nki.kernels.reduce` does (the same tile functions, fp32 math, one rounding to the step's
dtype), so a fused chain gives bit for bit what the chain of separate launches gives.

A program is a tuple of steps ``(op, args, dtype)``: ``op`` is ``"unary:<op>"`` (a row of
``UNARY``), ``"binary:<op>"`` (``BINARY``), ``"grad:<op>"`` (``GRAD``), ``"cast"``, ``"mean"``
or ``"sum"`` (over the last dim, keeping it as 1); ``args`` are ``("in", i)`` (input ``i``),
``("v", j)`` (the value of step ``j``) or ``("s", x)`` (the Python scalar ``x``); ``dtype`` is
the step's result dtype name (``"float32"``, ``"bfloat16"``, ``"float16"``)."""

from __future__ import annotations

from typing import Any

import nki
import nki.language as nl

from .elementwise import BINARY, F32, GRAD, UNARY, load_operand, rounded, row_tiles, store_rows

# a step's op kind -> tile function of (argument tiles or scalars, result dtype, row length d)
STEP: dict[str, Any] = {
    "unary": lambda name, a, dt, d: rounded(UNARY[name][0](a[0]), dt),
    "binary": lambda name, a, dt, d: rounded(BINARY[name][0](a[0], a[1], F32), dt),
    "grad": lambda name, a, dt, d: rounded(GRAD[name][0](a[0], a[1]), dt),
    "cast": lambda name, a, dt, d: nl.copy(a[0], dtype=dt),
    "mean": lambda name, a, dt, d: nl.multiply(
        nl.sum(a[0], axis=1, keepdims=True, dtype=F32), 1.0 / d, dtype=dt
    ),
    "sum": lambda name, a, dt, d: nl.sum(a[0], axis=1, keepdims=True, dtype=dt),
}
REDUCING = ("mean", "sum")  # steps whose result is one value per row


def columns(program: tuple, in_cols: tuple[bool, ...]) -> list[bool]:
    """Per step: True when its value has one column (a row statistic or math on them)."""
    col: list[bool] = []
    for op, args, _ in program:
        kind = op.split(":")[0]
        refs = [in_cols[r[1]] if r[0] == "in" else col[r[1]] for r in args if r[0] != "s"]
        col.append(kind in REDUCING or all(refs))
    return col


@nki.jit
def fused_elementwise_kernel(ins, program=(), outs=()):
    """The values ``outs`` (step indices) of ``program`` (see the module) computed on the
    (N, D) rows of the inputs ``ins``, each loaded once per 128-row tile.

    Shapes: each input (N, D), (N, 1), (1, D) or (1, 1) (broadcast to (N, D), N and D the largest
    of the inputs' sizes); any N, D <= 4096. A step's value is (N, D), or (N, 1) for a row mean /
    sum and math on such values only. Dtypes: float32, bfloat16, float16 (fp32 math, each step
    rounded to its dtype as its separate kernel rounds)."""
    n = max(x.shape[0] for x in ins)
    d = max(x.shape[1] for x in ins)
    col = columns(program, tuple(x.shape[1] == 1 and d > 1 for x in ins))
    results = [
        nl.ndarray((n, 1 if col[o] else d), dtype=getattr(nl, program[o][2]), buffer=nl.shared_hbm)
        for o in outs
    ]
    for t in nl.affine_range(row_tiles(n)):
        tiles = [load_operand(x, t, n, d) for x in ins]
        vals: list[Any] = []
        for op, args, dtype in program:
            kind, _, name = op.partition(":")
            a = [tiles[r[1]] if r[0] == "in" else vals[r[1]] if r[0] == "v" else r[1] for r in args]
            vals.append(STEP[kind](name, a, getattr(nl, dtype), d))
        for res, o in zip(results, outs):
            store_rows(res, t, n, 1 if col[o] else d, vals[o])
    return tuple(results)
