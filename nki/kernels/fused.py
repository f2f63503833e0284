"""One kernel for a chain of element-wise ops (and row means / sums over the last dim): each input
tile is loaded once, the chain's steps run on SBUF tiles in order, and the values used outside
the chain are stored. The torch backend fuses chains of its graphs into it
(:mod:`frontends.torch_fusion`).

Every step computes as the separate kernel of :mod:`nki.kernels.elementwise` /
:mod:`nki.kernels.reduce` does (the same tile functions, fp32 math, one rounding to the step's
dtype), so a fused chain gives bit for bit what the chain of separate launches gives.

A program is a tuple of steps ``(op, args, dtype)``: ``op`` is ``"unary:<op>"`` (a row of
``UNARY``), ``"binary:<op>"`` (``BINARY``), ``"grad:<op>"`` (``GRAD``), ``"cast"``, ``"mean"``
or ``"sum"`` (over the last dim, keeping it as 1) or ``"cat"`` (the operands side by side along
the last dim); ``args`` are ``("in", i)`` (input ``i``),
``("v", j)`` (the value of step ``j``) or ``("s", x)`` (the Python scalar ``x``); ``dtype`` is
the step's result dtype name (``"float32"``, ``"bfloat16"``, ``"float16"``)."""

from __future__ import annotations

from typing import Any

import nki
import nki.language as nl

from ._tiles import fit, load_row_vector
from .elementwise import BINARY, F32, GRAD, UNARY, load_rows, rounded, row_tiles, store_rows

# a step's op kind -> tile function of (argument tiles or scalars, result dtype)
STEP: dict[str, Any] = {
    "unary": lambda name, a, dt: rounded(UNARY[name][0](a[0]), dt),
    "binary": lambda name, a, dt: rounded(BINARY[name][0](a[0], a[1], F32), dt),
    "grad": lambda name, a, dt: rounded(GRAD[name][0](a[0], a[1]), dt),
    "cast": lambda name, a, dt: nl.copy(a[0], dtype=dt),
    "mean": lambda name, a, dt: nl.multiply(
        nl.sum(a[0], axis=1, keepdims=True, dtype=F32), 1.0 / a[0].shape[1], dtype=dt
    ),
    "sum": lambda name, a, dt: nl.sum(a[0], axis=1, keepdims=True, dtype=dt),
    "cat": lambda name, a, dt: _side_by_side(a, dt),
}


def _side_by_side(tiles: list, dtype: Any) -> Any:
    """The tiles next to each other along the free axis (torch.cat of the last dim): copies,
    no rounding (the parts have the result's dtype)."""
    p = tiles[0].shape[0]
    out = nl.ndarray((p, sum(t.shape[1] for t in tiles)), dtype=dtype, buffer=nl.sbuf)
    i_p = nl.arange(p)[:, None]
    off = 0
    for t in tiles:
        out[i_p, off + nl.arange(t.shape[1])[None, :]] = t
        off += t.shape[1]
    return out


def widths(program: tuple, in_widths: tuple[int, ...]) -> list[int]:
    """Per step: the number of columns of its value (1 for a row statistic, or math on such
    values only; the parts' sum for a cat)."""
    w: list[int] = []
    for op, args, _ in program:
        kind = op.split(":")[0]
        refs = [in_widths[r[1]] if r[0] == "in" else w[r[1]] for r in args if r[0] != "s"]
        w.append(1 if kind in ("mean", "sum") else sum(refs) if kind == "cat" else max(refs))
    return w


@nki.jit
def fused_elementwise_kernel(ins, program=(), outs=()):
    """The values ``outs`` (step indices) of ``program`` (see the module) computed on the
    rows of the inputs ``ins``, each loaded once per 128-row tile.

    Shapes: each input (N, W) (one row per row of the result, any W: D, 1 or a part of D that a
    cat step joins) or (1, W) (one row, broadcast to every row); N the largest row count; any
    N, W <= 4096. A step's value has the columns of its widest operand, one for a row mean /
    sum, the parts' sum for a cat. Dtypes: float32, bfloat16, float16 (fp32 math, each step
    rounded to its dtype as its separate kernel rounds)."""
    n = max(x.shape[0] for x in ins)
    w = widths(program, tuple(x.shape[1] for x in ins))
    results = [
        nl.ndarray((n, w[o]), dtype=getattr(nl, program[o][2]), buffer=nl.shared_hbm) for o in outs
    ]
    for t in nl.affine_range(row_tiles(n)):
        tiles = [
            load_rows(x, t, n, x.shape[1])
            if x.shape[0] == n
            else load_row_vector(x, x.shape[1], fit(n))
            for x in ins
        ]
        vals: list[Any] = []
        for op, args, dtype in program:
            kind, _, name = op.partition(":")
            a = [tiles[r[1]] if r[0] == "in" else vals[r[1]] if r[0] == "v" else r[1] for r in args]
            vals.append(STEP[kind](name, a, getattr(nl, dtype)))
        for res, o in zip(results, outs):
            store_rows(res, t, n, w[o], vals[o])
    return tuple(results)
