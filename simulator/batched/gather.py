"""Indirect reads over the whole batch: a DMA whose source indexes a dimension by the values of
an index tile (``nl.load(table[idx_tile, cols])``, an embedding's gather) reads, at every
position of the batch, the elements the interpreter's ``memory.Ctx.indices`` picks: the affine
index plus the index tile's values (as int64), bounds-checked before anything is read. Under a
mask only the selected lanes are checked; the others read element 0 and are not written."""

from __future__ import annotations

import numpy as np

from nki.ir import Access, Instr

from ..memory import offset_shape, row_gather
from .context import BCtx


def gathers(instr: Instr) -> bool:
    """True for the indirect reads ``gather`` runs: one source with indirect dimensions whose
    index tiles are direct and broadcast to the access (a (P, 1) tile of one offset per
    partition against any rank), a direct destination, the source of the destination's shape
    under a mask, and an out-of-bounds index an error (``dma_copy``'s ``oob_mode.skip`` skips
    those rows: hosted)."""
    src = instr.srcs[0] if len(instr.srcs) == 1 else None
    if not isinstance(src, Access) or not src.indirect:
        return False
    if instr.mask is not None and (instr.dst is None or instr.dst.shape != src.shape):
        return False
    if instr.attr("oob") == "skip":
        return False
    if instr.dst is None or instr.dst.indirect:
        return False
    for _, ind in src.indirect:
        shape = offset_shape(ind.shape, len(src.shape))
        if ind.indirect or len(shape) != len(src.shape):
            return False
        if any(n not in (1, m) for n, m in zip(shape, src.shape)):
            return False
    return True


def gather(ctx: BCtx, acc: Access, sel: np.ndarray | None = None) -> np.ndarray:
    """The values an indirect access reads at every position of the batch (storage dtype,
    shape batch dims + tile shape; ``sel``: the instruction's selection, ``BCtx.mask``); an
    index of a selected lane out of its dimension raises NKIIndexError."""
    full = (*ctx.dims, *acc.shape)
    arr = ctx.storage(acc.tensor)  # (a view's storage is made here: its depth with it)
    if sel is not None:
        sel = np.broadcast_to(sel, full)
    elif ctx.depth[acc.tensor] == 0:
        rows = _rows(ctx, acc, arr)
        if rows is not None:
            return rows
    got = arr[ctx.indices(acc, sel)]
    return got if got.shape == full else np.broadcast_to(got, full)


def _rows(ctx: BCtx, acc: Access, arr: np.ndarray) -> np.ndarray | None:
    """``gather`` of a row gather (``memory.row_gather``) whose other dimensions are the same
    at every position of the batch, by one index array and slices (several times cheaper than
    an index array per dimension); None otherwise."""
    if not row_gather(acc):
        return None
    cols: list[slice] = []
    for d, e in enumerate(acc.index[1:], 1):
        c, coef = ctx.affine(e.base)
        if any(coef):
            return None
        k = e.coeffs[d] if acc.shape[d] > 1 else 1
        stop = c + k * (acc.shape[d] - 1)
        ctx.check_bounds(acc, d, np.array([c, stop]))
        cols.append(slice(c, stop + 1, k))
    nb = len(ctx.dims)
    first = np.asarray(ctx.index_values(acc.index[0], len(acc.shape)), dtype=np.int64)
    ind = acc.indirect[0][1]
    rows = np.asarray(ctx.view(ind)).astype(np.int64).reshape(*ctx.dims, acc.shape[0])
    rows = rows + first.reshape(first.shape[: nb + 1])
    ctx.check_bounds(acc, 0, rows)
    return arr[(rows, *cols)]
