"""Batched executors of the matmuls: ``nl.matmul`` and ``nisa.nc_matmul`` (products, PSUM
accumulation and its groups). Each restates its reference executor
(``simulator/language/matmul.py``, ``simulator/isa/tensor.py``) over operands with leading
batch axes; the products themselves are ``gemm.py``'s, with the reference's bits."""

from __future__ import annotations

import numpy as np

from nki.ir import Access, Instr

from .. import numerics
from ..isa.tensor import require_identity
from . import gemm
from .context import BCtx, contiguous
from .gemm import unbroadcast
from .keys import whole
from .ops import _batched, _declines_matmul, _declines_nc_matmul, _isa


@_batched("matmul", _declines_matmul)
def _matmul(instr: Instr, ctx: BCtx) -> None:
    xa, ya = instr.srcs
    assert isinstance(xa, Access) and isinstance(ya, Access) and instr.dst is not None
    x, y = unbroadcast(ctx.read(xa)), unbroadcast(ctx.read(ya))
    plain = not instr.attr("transpose_x", False)  # (x is (M, K): the reference's C-ordered x.T)
    x = np.swapaxes(x, -1, -2) if plain else x
    into = _added_into(instr, ctx, x, y, plain)
    if into is None or not gemm.accumulate(into, x, y, nn=plain):
        _write_product(instr, ctx, gemm.product(x, y, nn=plain))


def _added_into(
    instr: Instr, ctx: BCtx, x: np.ndarray, y: np.ndarray, nn: bool
) -> np.ndarray | None:
    """The fp32 destination the product ``x.T @ y`` is simply added to (``BCtx.write``'s
    in-place fp32 sum), or None: not accumulating, masked, a tile of more than two axes, or a
    PSUM accumulation group whose elements have not all started. Laid out first with the N
    tiles as columns of one matrix where BLAS adds to it (``gemm.columns``)."""
    dst = instr.dst
    if instr.accumulate != "add" or instr.mask is not None or dst is None or ctx.whole:
        return None
    if len(dst.shape) != 2:
        return None
    if instr.attr("psum_group", False):
        entry = ctx.psum_groups.get(dst.tensor)
        if entry is None or entry[0] is not ctx.storage(dst.tensor) or not entry[2]:
            return None
    view = ctx.view(dst)
    if view.dtype != np.float32:
        return None
    inner = gemm.columns(x, y, nn)
    laid = ctx.as_matrix(dst, inner) if inner else None
    return view if laid is None else laid


@_isa("nc_matmul", _declines_nc_matmul)
def _nc_matmul(instr: Instr, ctx: BCtx) -> None:
    sacc, macc = instr.srcs
    assert isinstance(sacc, Access) and isinstance(macc, Access)
    k = sacc.shape[0]
    s = unbroadcast(as_2d(ctx.read(sacc), len(ctx.dims), k))
    m = unbroadcast(as_2d(ctx.read(macc), len(ctx.dims), k))
    if instr.attr("transpose"):  # (the PE passes the stationary tile through, transposed)
        require_identity(m)
        assert instr.dst is not None
        _write_product(instr, ctx, _as_dst(ctx, np.swapaxes(s, -1, -2), instr.dst))
        return
    into = _added_into(instr, ctx, s, m, False)
    if into is not None and gemm.accumulate(into, s, m, nn=False):
        return
    assert instr.dst is not None
    _write_product(instr, ctx, tile_product(ctx, s, m, instr.dst))


def _write_product(instr: Instr, ctx: BCtx, out: np.ndarray) -> None:
    """``simulator/isa/common.matmul_write`` over the batch: a matmul's product written under
    its mask, added to its destination when it accumulates, or by its PSUM group."""
    dst = instr.dst
    assert dst is not None
    if instr.attr("psum_group", False) and instr.accumulate == "add":
        if ctx.whole:  # the group's first matmul into a fresh tile: nothing started yet
            ctx.write(dst, out)
            ctx.psum_groups[dst.tensor] = [ctx.storage(dst.tensor), None, True, 0]
            return
        _psum_group_write(ctx, dst, out, ctx.mask(instr))
        return
    ctx.write(dst, out, ctx.mask(instr), instr.accumulate)


def _psum_group_write(ctx: BCtx, dst: Access, vals: np.ndarray, sel: np.ndarray | None) -> None:
    """``simulator/isa/common.matmul_write``'s PSUM accumulation group over the batch: an
    element no matmul of the group reached since its tile was allocated (still the fill) takes
    the product, the others add it. Once every element of the allocation has started, later
    matmuls simply add (the entry counts the elements started, at least once each: a
    destination that repeats elements counts them again, so a full count is confirmed over the
    whole allocation before it is trusted)."""
    arr = ctx.storage(dst.tensor)
    entry = ctx.psum_groups.get(dst.tensor)
    if entry is None or entry[0] is not arr:  # a fresh allocation of this tile
        if sel is None and whole(dst) and arr.shape == (*ctx.dims, *dst.shape):
            # (the group's first matmul over the whole tile: where every element is still the
            # fill, every one takes the product and the group has started everywhere)
            if np.isnan(numerics.to_compute(ctx.view(dst))).all():
                ctx.write(dst, vals)
                ctx.psum_groups[dst.tensor] = [arr, None, True, 0]
                return
        entry = [arr, np.zeros(arr.shape, dtype=bool), False, 0]
        ctx.psum_groups[dst.tensor] = entry
    if entry[2]:  # every element started
        ctx.write(dst, vals, sel, "add")
        return
    started = ctx.strided(entry[1], dst)
    want = (
        np.ones(started.shape, dtype=bool) if sel is None else np.broadcast_to(sel, started.shape)
    )
    first = want & ~started & np.isnan(numerics.to_compute(ctx.view(dst)))
    if not first.any():
        ctx.write(dst, vals, sel, "add")
    elif (first == want).all():
        ctx.write(dst, vals, sel, None)
    else:
        ctx.write(dst, vals, first, None)
        ctx.write(dst, vals, want & ~first, "add")
    fresh = want & ~started
    entry[3] += int(np.count_nonzero(fresh))
    started[fresh] = True
    if entry[3] >= entry[1].size:  # (every element started, unless some were counted twice)
        entry[3] = int(np.count_nonzero(entry[1]))
        entry[2] = entry[3] == entry[1].size


def tile_product(ctx: BCtx, s: np.ndarray, m: np.ndarray, dst: Access) -> np.ndarray:
    """``nc_matmul``'s product ``s.T @ m`` over the batch, shaped as the destination tile (a
    tile of more than two axes gets its (P, F) product)."""
    return _as_dst(ctx, gemm.product(s, m, nn=False), dst)


def _as_dst(ctx: BCtx, out: np.ndarray, dst: Access) -> np.ndarray:
    """A batch of (P, F) results shaped as the destination tile (one of more than two axes
    gets its (P, F) result)."""
    if out.shape[-2:] != dst.shape:
        out = np.broadcast_to(out, (*ctx.dims, *out.shape[-2:])).reshape((*ctx.dims, *dst.shape))
    return out


def as_2d(a: np.ndarray, nb: int, k: int) -> np.ndarray:
    """A batched tile as (batch..., K, F): a view for 2-D tiles (keeping stride-0 batch axes),
    else a reshaped copy."""
    return a if a.ndim == nb + 2 else contiguous(a).reshape((*a.shape[:nb], k, -1))
