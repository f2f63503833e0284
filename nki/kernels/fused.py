"""One kernel for a chain of element-wise ops (and row means / sums over the last dim): each input
tile is loaded once, the chain's steps run on SBUF tiles in order, and the values used outside
the chain are stored. The torch backend fuses chains of its graphs into it
(:mod:`frontends.torch_fusion`).

Every step computes as the separate kernel of :mod:`nki.kernels.elementwise` /
:mod:`nki.kernels.reduce` does (the same tile functions, fp32 math, one rounding to the step's
dtype), so a fused chain gives bit for bit what the chain of separate launches gives.

A program is a tuple of steps ``(op, args, dtype)``: ``op`` is ``"unary:<op>"`` (a row of
``UNARY``), ``"binary:<op>"`` (``BINARY``), ``"grad:<op>"`` (``GRAD``), ``"cast"``, ``"mean"``
or ``"sum"`` (over the last dim, keeping it as 1), ``"cat"`` (the operands side by side along
the last dim), ``"expand"`` (``(value, ("s", w))``: a value of one column, or of w, broadcast
to w columns), ``"slice"`` (``(value, ("s", start), ("s", stop))``: columns start..stop),
``"pad"`` (``(value, ("s", start), ("s", w))``: w columns, zero but for the value's from
column start) or ``"colsum"`` (the sum over all rows: one (1, W) row, computed as
``sum_rows_kernel`` computes it; only stored, never an operand of another step); ``args`` are
``("in", i)`` (input ``i``), ``("v", j)`` (the value of step ``j``) or ``("s", x)`` (the Python
scalar ``x``); ``dtype`` is the step's result dtype name (``"float32"``, ``"bfloat16"``,
``"float16"``). Copies (cast to the same dtype, expand, slice, pad, cat) never round."""

from __future__ import annotations

from typing import Any

import nki
import nki.language as nl
from nki.errors import NKIShapeError, user_loc

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
    "expand": lambda name, a, dt: nl.broadcast_to(a[0], shape=(a[0].shape[0], int(a[1]))),
    "slice": lambda name, a, dt: _columns(a[0], int(a[1]), int(a[2]), dt),
    "pad": lambda name, a, dt: _padded(a[0], int(a[1]), int(a[2]), dt),
}


def _columns(tile: Any, start: int, stop: int, dtype: Any) -> Any:
    """Columns start..stop of the tile (a view: no instruction)."""
    return tile[nl.arange(tile.shape[0])[:, None], start + nl.arange(stop - start)[None, :]]


def _padded(tile: Any, start: int, width: int, dtype: Any) -> Any:
    """A zero tile of ``width`` columns holding the tile from column ``start`` (the gradient of
    a slice)."""
    p, w = tile.shape
    out = nl.zeros((p, width), dtype=dtype, buffer=nl.sbuf)
    i_p = nl.arange(p)[:, None]
    out[i_p, start + nl.arange(w)[None, :]] = tile
    return out


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
        if any(r[0] == "v" and program[r[1]][0] == "colsum" for r in args):
            raise NKIShapeError(
                f"fused_elementwise_kernel: step {len(w)} ({op}) reads a colsum step's value, "
                "which is only complete after the last row tile (colsum values are only stored)",
                code="err_invalid_shape",
                loc=user_loc(),
            )
        refs = [in_widths[r[1]] if r[0] == "in" else w[r[1]] for r in args if r[0] != "s"]
        if kind in ("mean", "sum"):
            w.append(1)
        elif kind in ("expand", "pad"):
            w.append(int(args[-1][1]))
        elif kind == "slice":
            w.append(int(args[2][1]) - int(args[1][1]))
        else:
            w.append(sum(refs) if kind == "cat" else max(refs))
    return w


@nki.jit
def fused_elementwise_kernel(ins, program=(), outs=(), segments=()):
    """The values ``outs`` (step indices) of ``program`` (see the module) computed on the
    rows of the inputs ``ins``, each loaded once per 128-row tile.

    Shapes: each input (N, W) (one row per row of the result, any W: D, 1 or a part of D that a
    cat step joins) or (1, W) (one row, broadcast to every row); N the largest row count; any
    N, W <= 4096. A step's value has the columns of its widest operand, one for a row mean /
    sum, the parts' sum for a cat. Dtypes: float32, bfloat16, float16 (fp32 math, each step
    rounded to its dtype as its separate kernel rounds).

    ``segments``: several independent programs in one launch instead of ``program`` /
    ``outs``, each ``(inputs, program, outs)`` where ``inputs`` are the indices into ``ins`` of
    the segment's inputs (its ``("in", i)`` refer to them in that order); each segment has its
    own row count N and runs as the one-program kernel does; the results are every segment's
    ``outs`` in order."""
    if segments and (program or outs):
        raise NKIShapeError(
            "fused_elementwise_kernel: give program and outs, or segments, not both",
            code="err_invalid_shape",
            loc=user_loc(),
        )
    results: list[Any] = []
    for idx, prog, out in segments or ((tuple(range(len(ins))), program, outs),):
        results += _segment([ins[i] for i in idx], prog, out)
    return tuple(results)


def _segment(ins: list, program: tuple, outs: tuple) -> list:
    """The stored values ``outs`` of one program on the rows of ``ins`` (new HBM tensors)."""
    n = max(x.shape[0] for x in ins)
    p = fit(n)
    w = widths(program, tuple(x.shape[1] for x in ins))
    results = [
        nl.ndarray(
            (1 if program[o][0] == "colsum" else n, w[o]),
            dtype=getattr(nl, program[o][2]),
            buffer=nl.shared_hbm,
        )
        for o in outs
    ]
    # a colsum step sums its rows into one fp32 PSUM row over all row tiles
    sums = {
        j: nl.zeros((1, w[j]), F32, buffer=nl.psum)
        for j, (op, _, _) in enumerate(program)
        if op == "colsum"
    }
    ones = {
        program[j][2]: nl.ones((p, 1), getattr(nl, program[j][2]), buffer=nl.sbuf) for j in sums
    }
    for t in nl.affine_range(row_tiles(n)):
        tiles = [
            load_rows(x, t, n, x.shape[1]) if x.shape[0] == n else load_row_vector(x, x.shape[1], p)
            for x in ins
        ]
        vals: list[Any] = []
        for j, (op, args, dtype) in enumerate(program):
            kind, _, name = op.partition(":")
            a = [tiles[r[1]] if r[0] == "in" else vals[r[1]] if r[0] == "v" else r[1] for r in args]
            if kind == "colsum":
                sums[j] += nl.matmul(ones[dtype], _rows_below(a[0], t, n), transpose_x=True)
                vals.append(None)
            else:
                vals.append(STEP[kind](name, a, getattr(nl, dtype)))
        for res, o in zip(results, outs):
            if o not in sums:
                store_rows(res, t, n, w[o], vals[o])
    for res, o in zip(results, outs):
        if o in sums:
            i_f = nl.arange(w[o])[None, :]
            nl.store(res[nl.arange(1)[:, None], i_f], nl.copy(sums[o], dtype=res.dtype))
    return results


def _rows_below(tile: Any, t: Any, n: int) -> Any:
    """The tile with the rows past ``n`` (of a ragged last tile) zero."""
    p, w = tile.shape
    if n % p == 0:
        return tile
    i_p = nl.arange(p)[:, None]
    out = nl.zeros((p, w), dtype=tile.dtype, buffer=nl.sbuf)
    out[i_p, nl.arange(w)[None, :]] = nl.copy(tile, mask=t * p + i_p < n)
    return out
