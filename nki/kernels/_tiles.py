"""Tile helpers shared by the library kernels (called while a kernel is being traced).

Rows of a 2-D HBM tensor go on the partition axis, 128 at a time; the last tile of a ragged
row count is loaded into a zero-filled tile under a row mask, so padding lanes hold zeros
(never uninitialised data) and can take part in reductions over the partition axis."""

from __future__ import annotations

from typing import Any

import nki.language as nl

P = 128  # partitions per tile
FREE_MAX = 4096  # largest last dimension a row-tiled kernel keeps in one SBUF tile
PSUM_FMAX = 512  # fp32 elements per partition in one PSUM bank


def fit(n: int) -> int:
    """Partitions per row tile for ``n`` rows: 128, or ``n`` when fewer (a tile with no padding
    lanes: nothing to mask or zero-fill)."""
    return min(P, n)


def row_tiles(n: int, p: int = P) -> int:
    """Number of ``p``-row tiles covering ``n`` rows."""
    return (n + p - 1) // p


def load_rows(x: Any, t: Any, n: int, d: int, dtype: Any = None, p: int = P) -> Any:
    """Rows ``t*p ...`` of the (n, d) HBM tensor ``x`` as a (p, d) SBUF tile; rows past ``n``
    are zero (when ``p`` divides ``n`` every row is loaded: no fill, no mask)."""
    i_p = nl.arange(p)[:, None]
    i_f = nl.arange(d)[None, :]
    rows = t * p + i_p
    if n % p == 0 and dtype in (None, x.dtype):
        return nl.load(x[rows, i_f])
    tile = nl.zeros((p, d), dtype=dtype or x.dtype, buffer=nl.sbuf)
    tile[i_p, i_f] = nl.load(x[rows, i_f], mask=rows < n)
    return tile


def store_rows(out: Any, t: Any, n: int, d: int, value: Any, p: int = P) -> None:
    """Store the (p, d) tile ``value`` to rows ``t*p ...`` of ``out`` (rows < n only)."""
    i_p = nl.arange(p)[:, None]
    i_f = nl.arange(d)[None, :]
    rows = t * p + i_p
    nl.store(out[rows, i_f], value, mask=rows < n)


def load_row_vector(v: Any, d: int, p: int = P) -> Any:
    """The (1, d) HBM tensor ``v`` broadcast to all ``p`` partitions (a stride-0 partition
    access)."""
    i_p = nl.arange(p)[:, None]
    i_f = nl.arange(d)[None, :]
    return nl.load(v[i_p * 0, i_f])


def load_operand(y: Any, t: Any, n: int, d: int, p: int = P) -> Any:
    """The second operand of an element-wise op on the (n, d) rows of tile ``t``: ``y`` is
    (n, d), (n, 1) (one value per row, broadcast along the free axis), (1, d) (one row,
    broadcast to every partition) or (1, 1)."""
    yn, yd = y.shape
    if yn == n and yd == d:
        return load_rows(y, t, n, d, p=p)
    if yn == n and yd == 1:
        return load_rows(y, t, n, 1, p=p)
    return load_row_vector(y, yd, p)
