"""Operands and masks: a tile or view argument as a scope-checked ``Access``, the classic 2-D
view of rank-0/1 accesses, buffer and partition-count rules, and ``mask=`` predicates fitted to
the tile they mask."""

from __future__ import annotations

import itertools

import numpy as np

from ..errors import (
    NKIError,
    NKIIndexError,
    NKIMemoryError,
    NKIScopeError,
    NKIShapeError,
    NKITypeError,
    user_loc,
)
from ..ir import HBM_BUFFERS, Access, Affine, Cond, IndexExpr, Mask, TensorDecl, tensor_label
from ..symbolic import Index, Pred, Scalar, broadcast_shapes
from .bool_masks import Disj, MaskCover, check_pending, disjoint_cover
from .handles import DynOffset, MaskedOperand, NkiTensor, TileOps, _Assigned
from .state import TraceState, decided_by, generation, note_generation, state, unroll_request


def check_scope(t: NkiTensor, st: TraceState) -> None:
    if tuple(st.loops[: len(t.scope)]) != t.scope:
        # (current API: a trace-time loop whose tile is used after it is unrolled, and the
        # tile is the last iteration's, as Python gives; a classic kernel's is out of scope)
        closed = tuple(s for s in t.scope if s not in st.loops)
        req = unroll_request(st, closed, "a tile created in the loop is used after it")
        if req is not None:
            raise req
        raise NKIScopeError(
            f"tensor {t.label} was created inside a loop body and is used after that loop "
            "ended; allocate it before the loop and update it in place (t[...] = ...)",
            loc=user_loc(),
            related=(("defined", t.decl.loc),) if t.decl.loc else (),
        )


def operand(x: object, api: str, role: str) -> tuple[Access, NkiTensor]:
    """A tile / view argument as an Access (scope-checked)."""
    if isinstance(x, DynOffset):
        x = x.as_value()
    if isinstance(x, _Assigned):
        x = x.view
    if isinstance(x, TileOps):
        t = x.tensor_()
        check_scope(t, state(api))
        return as_2d(x.access_(), t), t
    if isinstance(x, MaskedOperand):
        raise NKITypeError(
            f"operand '{role}' of '{api}' is a masked operand (tile[pred]); only the matmul "
            "calls (nl.matmul, nisa.nc_matmul) take operand masks: pass mask= over the result "
            "instead",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    if isinstance(x, (Index, Scalar)):
        raise NKITypeError(
            f"operand '{role}' of '{api}' is an index expression, not a tile; "
            "materialise index values with nisa.iota",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    raise NKITypeError(
        f"operand '{role}' of '{api}' must be a tile or tensor, got {type(x).__name__}",
        code="err_unsupported_operand",
        loc=user_loc(),
    )


def as_2d(acc: Access, t: NkiTensor | TensorDecl) -> Access:
    """Classic NKI treats a rank-0/1 access as a 2-D tile: ``t[0:128, j]`` (one element per
    partition, e.g. a column of a statistics tile or a slice of a per-channel vector) is a
    ``(P, 1)`` tile, and ``t[i, 0:512]`` (one row: the partition / first dimension fixed) is
    a ``(1, F)`` tile. Which one is decided by the tensor dimension the remaining axis runs
    along (for HBM tensors: a row only along the last dimension). Indirect accesses are left
    alone."""
    if len(acc.shape) >= 2 or acc.indirect:
        return acc
    if not acc.shape:
        shape: tuple[int, ...] = (1, 1)
        idx = tuple(IndexExpr(e.base, (0, 0), shape) for e in acc.index)
        return Access(acc.tensor, shape, idx)
    n = acc.shape[0]
    decl = t.decl if isinstance(t, NkiTensor) else t
    dims = [d for d, e in enumerate(acc.index) if e.coeffs[0]]
    if decl.on_chip:
        along_free = n > 1 and bool(dims) and decl.par_dim not in dims
    else:  # HBM: a run along the last dim is a row (x[i, 0:512]); along another, a column
        # of one element per partition (F[j, 0:128, 1], integer indices dropping their dims)
        along_free = n > 1 and bool(dims) and dims[-1] == len(decl.shape) - 1 and 0 not in dims
    shape = (1, n) if along_free else (n, 1)
    idx = tuple(
        IndexExpr(e.base, (0, e.coeffs[0]) if along_free else (e.coeffs[0], 0), shape)
        for e in acc.index
    )
    return Access(acc.tensor, shape, idx)


def require_buffer(t: NkiTensor, allowed: tuple[str, ...], api: str, role: str) -> None:
    if t.buffer not in allowed:
        space = "hbm" if set(allowed) <= set(HBM_BUFFERS) else "/".join(allowed)
        got = "a tile in" if t.decl.on_chip else "a tensor in"
        raise NKIMemoryError(
            f"expected operand '{role}' of '{api}' to be in address space '{space}', but got "
            f"{got} '{t.buffer}' ({t.label})",
            code="err_unsupported_memory",
            loc=user_loc(),
        )


def check_partitions(shape: tuple[int, ...], api: str, role: str) -> None:
    if not shape:
        return
    pmax = state(api).target.pmax
    if shape[0] > pmax:
        raise NKIShapeError(
            f"number of partitions {shape[0]} of operand '{role}' of '{api}' exceeds the "
            f"architecture limitation of {pmax} (shape {list(shape)})",
            code="err_num_partition_exceed_arch_limit",
            loc=user_loc(),
        )


def check_start_partition(acc: Access, t: NkiTensor, api: str, role: str) -> None:
    """Compute engines address partitions in 32-partition quadrants: an access of more than 64
    partitions starts at 0, of 33..64 at 0 or 64, of up to 32 at 0, 32, 64 or 96. One rule for
    ``nl.*`` and ``nisa.*`` calls (they run on the same engines). Only starts known at trace
    time are checked (loop-dependent starts are left to the hardware)."""
    if not t.decl.on_chip or not acc.index:
        return
    e = acc.index[t.decl.par_dim]
    step = e.coeffs[0] if e.coeffs else 1
    if acc.shape and acc.shape[0] > 1 and step not in (0, 1):
        raise NKIShapeError(
            f"operand '{role}' of '{api}' accesses the partitions of {tensor_label(t.decl)} in "
            f"steps of {step}; compute engines read and write a contiguous range of partitions "
            "(step 1): copy the rows to a tile of their own with a DMA first",
            code="err_unsupported_start_partition",
            loc=user_loc(),
        )
    if not e.base.is_const:
        return
    start, n = e.base.const, acc.shape[0]
    allowed = (0,) if n > 64 else (0, 64) if n > 32 else (0, 32, 64, 96)
    if start not in allowed:
        raise NKIShapeError(
            f"operand '{role}' of '{api}' accesses {n} partitions starting at partition {start} "
            f"of {tensor_label(t.decl)}; compute engines need a start partition in "
            f"{list(allowed)} for an access of {n} partitions (copy the rows to a tile that "
            "starts at partition 0 with nl.load / a DMA first)",
            code="err_unsupported_start_partition",
            loc=user_loc(),
        )


def to_mask(mask: object, tile_shape: tuple[int, ...], api: str) -> Mask | MaskCover | None:
    """The IR mask of ``mask=`` over ``tile_shape``; a mask built with ``or`` becomes a
    MaskCover (disjoint conjunctions), emitted as one instruction per piece."""
    check_pending()  # an `and` / `or` whose last operand was not traced
    if mask is None or (isinstance(mask, (bool, np.bool_)) and mask):
        return None
    if generation() == "current":
        raise NKIError(
            f"mask= of '{api}' is classic-API only, and the kernel is current-API"
            f"{decided_by()}: the current NKI API has no masks; bound a partial tile with "
            "min()-sized slices (t[0:rows]) instead",
            code="err_mixed_api_generations",
            loc=user_loc(),
        )
    note_generation("classic", f"mask= of {api} (classic API only)")
    if isinstance(mask, (bool, np.bool_)):  # mask=False: the instruction writes nothing
        return Mask((Cond(IndexExpr(Affine.constant(1), (), ()), "<"),))
    if isinstance(mask, Disj):  # built with `or`: disjoint conjunctions, one instruction each
        pieces = disjoint_cover(mask)
        if any(not p for p in pieces):  # a piece with no condition: every element
            return None
        if not pieces:
            return Mask((Cond(IndexExpr(Affine.constant(1), (), ()), "<"),))
        masks = tuple(Mask(_fit_conds(p, tuple(tile_shape), api)) for p in pieces)
        if len(masks) == 1:
            return masks[0]
        state(api).mask_covers = True
        return MaskCover(masks, tuple(tile_shape))
    if not isinstance(mask, Pred):
        raise NKIError(
            f"mask= of '{api}' must be an affine predicate built from comparisons of nl.arange "
            f"indices, loop iterators and program ids combined with '&', 'and' or 'or'; got "
            f"{type(mask).__name__}",
            code="err_unsupported_expression_in_mask",
            loc=user_loc(),
        )
    return Mask(_fit_conds(mask.conds, tuple(tile_shape), api))


def _fit_conds(conds: tuple[Cond, ...], tile_shape: tuple[int, ...], api: str) -> tuple[Cond, ...]:
    """The conditions of one conjunction fitted to the tile shape (or a shape error)."""
    out = tuple(_fit_mask_rank(c, tile_shape) for c in conds)
    for c in out:
        try:
            bs = broadcast_shapes(c.expr.shape, tile_shape)
        except NKIIndexError:
            bs = None
        if bs != tile_shape and c.expr.shape:
            raise NKIError(
                f"mask of shape {c.expr.shape} does not match the tile shape {tile_shape} "
                f"of '{api}'",
                code="err_mask_shape_mismatch",
                loc=user_loc(),
            )
    return out


def _fit_mask_rank(c: Cond, tile_shape: tuple[int, ...]) -> Cond:
    """A mask built from a higher-rank ``nl.mgrid`` than the tile it masks (the tile dropped
    the mgrid axes its indices do not use): drop axes the condition does not depend on, the
    same ones when the shapes say which."""
    e = c.expr
    extra = len(e.shape) - len(tile_shape)
    if extra <= 0:
        return _align_mask(c, tile_shape) if extra == 0 else c
    free = [a for a in range(len(e.shape)) if not e.coeffs[a]]
    fits = []
    for drop in itertools.combinations(free, extra):
        keep = [a for a in range(len(e.shape)) if a not in drop]
        shape = tuple(e.shape[a] for a in keep)
        if _fits(shape, tile_shape):
            fits.append((shape != tile_shape, keep, shape))
    if not fits:
        return c  # reported as a shape mismatch by the caller
    _, keep, shape = min(fits)
    return Cond(IndexExpr(e.base, tuple(e.coeffs[a] for a in keep), shape), c.op)


def _fits(shape: tuple[int, ...], tile_shape: tuple[int, ...]) -> bool:
    try:
        return broadcast_shapes(shape, tile_shape) == tile_shape
    except NKIIndexError:
        return False


def _align_mask(c: Cond, tile_shape: tuple[int, ...]) -> Cond:
    """A mask from another ``nl.mgrid`` than the tile's indices (``i_f_bn`` of a (512, 6)
    mgrid masking a (128, 512) tile): place each axis the condition uses on the tile axis of
    the same extent, in order. Unchanged when it already broadcasts or no placement fits."""
    e = c.expr
    if _fits(e.shape, tile_shape):
        return c
    used = [a for a, k in enumerate(e.coeffs) if k]
    coeffs, shape, at = [0] * len(tile_shape), [1] * len(tile_shape), 0
    for a in used:
        while at < len(tile_shape) and tile_shape[at] != e.shape[a]:
            at += 1
        if at == len(tile_shape):
            return c
        coeffs[at], shape[at] = e.coeffs[a], e.shape[a]
        at += 1
    return Cond(IndexExpr(e.base, tuple(coeffs), tuple(shape)), c.op)
