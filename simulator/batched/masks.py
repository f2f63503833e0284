"""Masked instructions of the batched backend (``context.py``): an instruction's selection over
the batch (its mask evaluated at every batch position and tile element), whether the selection
is a box, and each access's box over it. None of it depends on data: it is kept per
instruction or access, tile shape and batch state (the values / axes of the symbols involved),
in tables shared by the threads that launch kernels (each entry complete when stored, bounded;
the objects whose ids key an entry are kept in it, so an id is not reused while it lives). A
kept selection is read-only."""

from __future__ import annotations

from typing import Any

import numpy as np

from nki.ir import Access, IndexExpr, Instr

from ..checks.coverage import HOLDS_THROUGHOUT
from .keys import KEYS_MAX, MASK_STATES, access_facts, mask_state

_CMP = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
        "==": np.equal, "!=": np.not_equal}  # fmt: skip


def selection_for(sel: np.ndarray, nb: int, shape: tuple[int, ...]) -> np.ndarray:
    """The selection of an instruction (batch + its tile shape) as seen by an operand of
    ``shape`` that broadcasts over some tile axes (a ``(P, 1)`` source of a wider store): a lane
    of the operand is read when any lane it broadcasts to is selected."""
    tile = sel.shape[nb:]
    if tuple(tile) == tuple(shape):
        return sel
    axes = tuple(nb + t for t, (n, m) in enumerate(zip(shape, tile)) if n == 1 and m != 1)
    return sel.any(axis=axes, keepdims=True) if axes else sel


def selection_box(sel: np.ndarray) -> tuple[slice, ...] | None:
    """``sel`` as one slice per axis when its selected lanes are exactly a box (each axis's
    selected positions one contiguous run, every combination of them selected)."""
    box = []
    for ax in range(sel.ndim):
        others = tuple(a for a in range(sel.ndim) if a != ax)
        on = np.flatnonzero(sel.any(axis=others) if others else sel)
        if len(on) == 0 or on[-1] - on[0] + 1 != len(on):
            return None
        box.append(slice(int(on[0]), int(on[-1]) + 1))
    count = 1
    for b in box:
        count *= b.stop - b.start
    return tuple(box) if np.count_nonzero(sel) == count else None


# the most boxes a selection is cut into (``selection_boxes``): more, and index arrays serve
_MAX_BOXES = 16


def selection_boxes(sel: np.ndarray, limit: int = _MAX_BOXES) -> list[tuple[slice, ...]] | None:
    """``sel`` as at most ``limit`` disjoint boxes (a ragged last tile of a batched loop: the
    full tiles and the partial one), cut along the first axis whose slices differ into runs of
    equal slices; None when it takes more. (Called once ``box`` found no single box: the cut
    itself finds one, so the exact-box test is not repeated here.)"""
    for ax in range(sel.ndim):
        n = sel.shape[ax]
        runs, start = [], 0
        prev = np.take(sel, 0, axis=ax)
        for i in range(1, n):
            cur = np.take(sel, i, axis=ax)
            if not np.array_equal(cur, prev):
                runs.append((start, i, prev))
                start, prev = i, cur
                if len(runs) > limit:
                    return None
        if not runs:  # the same along this axis: cut along a later one
            continue
        runs.append((start, n, prev))
        out: list[tuple[slice, ...]] = []
        for a, b, rep in runs:
            sub = selection_boxes(rep, limit - len(out))
            if sub is None:
                return None
            out += [(*box[:ax], slice(a, b), *box[ax:]) for box in sub]
            if len(out) > limit:
                return None
        return out
    # the same along every axis: all of it selected, or none
    return [tuple(slice(0, n) for n in sel.shape)] if sel.size and sel.flat[0] else []


def boxes(ctx: Any, acc: Access, sel: np.ndarray) -> list[tuple[slice, ...]] | None:
    """``selection_boxes`` of ``sel`` when ``acc`` is in bounds over each (None otherwise)."""
    hit = _SEL_PIECES.get(id(sel))
    if hit is None or hit[0] is not sel:
        hit = (sel, selection_boxes(sel))
        if sel.nbytes <= _PIECES_KEPT_BYTES:  # (kept small: a selection may be the batch's)
            if len(_SEL_PIECES) >= 64:
                _SEL_PIECES.clear()
            _SEL_PIECES[id(sel)] = hit
    if hit[1] is None:
        return None
    for box in hit[1]:
        if _access_box(ctx, acc, box) is None:
            return None
    return hit[1]


def _boxes_of(ctx: Any, acc: Access, sel: np.ndarray) -> list[tuple[slice, ...]] | None:
    one = box(ctx, acc, sel)
    return [one] if one is not None else boxes(ctx, acc, sel)


def read_boxes(ctx: Any, acc: Access, sel: np.ndarray) -> np.ndarray | None:
    """``ctx.read(acc, sel)`` as strided views of the selection's boxes (lanes outside them are
    never used: zeros), or None: index arrays serve."""
    pieces = _boxes_of(ctx, acc, sel)
    if not pieces:
        return None
    out = np.zeros((*ctx.dims, *acc.shape), dtype=ctx.view(acc, pieces[0]).dtype)
    for b in pieces:
        out[b] = ctx.view(acc, b)
    return out


def write_boxes(ctx: Any, acc: Access, sel: np.ndarray, whole: np.ndarray) -> bool:
    """``ctx.write`` of ``whole``'s selected lanes through strided views of the selection's
    boxes (True), or nothing (False: index arrays serve)."""
    pieces = _boxes_of(ctx, acc, sel)
    if pieces is None:
        return False
    for b in pieces:
        ctx.view(acc, b)[...] = whole[b]
    return True


# id(selection) -> (the selection, its ``selection_boxes``): bounded, small selections only
_SEL_PIECES: dict[int, tuple[np.ndarray, list[tuple[slice, ...]] | None]] = {}
_PIECES_KEPT_BYTES = 1 << 20


# (id(instr), tile shape, batch axes' sizes, the mask symbols' values / axes) -> (the
# instruction, its selection over the batch: None when every condition holds throughout it,
# else a read-only array). A selection depends on no data. Bounded in entries and in bytes
# (a selection larger than a tenth of the bytes is not kept).
_MASKS: dict[tuple, tuple[Instr, np.ndarray | None]] = {}
_MASKS_BYTES = 16 << 20
_mask_bytes = [0]  # (the bytes of the kept selections; approximate under threads)
# id(selection) -> (the selection, its box or None): for the selections ``_MASKS`` keeps
_SEL_BOXES: dict[int, tuple[np.ndarray, tuple[slice, ...] | None]] = {}


def _keep_mask(key: tuple, instr: Instr, sel: np.ndarray | None) -> None:
    size = 0 if sel is None else sel.nbytes
    if size > _MASKS_BYTES // 10:
        return
    if len(_MASKS) >= KEYS_MAX or _mask_bytes[0] + size > _MASKS_BYTES:
        _MASKS.clear()
        _SEL_BOXES.clear()
        _ACCESS_BOXES.clear()
        _KEPT_BOXES.clear()
        _mask_bytes[0] = 0
    if sel is not None:
        sel.flags.writeable = False  # (shared by later launches: never written)
        _SEL_BOXES[id(sel)] = (sel, _UNKNOWN)  # type: ignore[assignment]
    _mask_bytes[0] += size
    _MASKS[key] = (instr, sel)


_UNKNOWN: Any = object()  # a kept selection whose box is not computed yet
# (id(access), id(kept selection), batch depth of the access's storage, batch axes' sizes, the
# access's symbols' values / axes, its tensor's shape) -> (the access, the selection, ``box``)
_ACCESS_BOXES: dict[tuple, tuple] = {}
_KEPT_BOXES: dict[int, tuple[slice, ...]] = {}  # id(box) -> box: the boxes of kept selections


def kept_box(box: tuple[slice, ...]) -> bool:
    """Whether ``box`` is a kept selection's (a one-off box keys no table)."""
    return _KEPT_BOXES.get(id(box)) is box


def mask(ctx: Any, instr: Instr, shape: tuple[int, ...] | None = None) -> np.ndarray | None:
    """The batch-wide selection of a masked instruction (None: unmasked or all true)."""
    if instr.mask is None:
        return None
    if shape is None:
        assert instr.dst is not None
        shape = instr.dst.shape
    # (the selection depends on no data: kept per instruction, tile shape and batch state)
    entry = MASK_STATES.get(id(instr))
    state_of = (entry if entry is not None and entry[0] is instr else mask_state(instr))[1]
    key = (id(instr), shape, tuple(ctx.dims), None if state_of is None else state_of(ctx.values))
    hit = _MASKS.get(key)
    if hit is not None and hit[0] is instr:
        return hit[1]
    full = (*ctx.dims, *shape)
    out: np.ndarray | None = None
    for cond in instr.mask.conds:
        if _always(ctx, cond.expr, cond.op, shape):
            continue  # true for the whole batch: costs nothing
        r = np.broadcast_to(_CMP[cond.op](ctx.index_values(cond.expr, len(shape)), 0), full)
        out = r.copy() if out is None else out & r
    sel = None if out is None or out.all() else out
    if sel is None and _may_leave(ctx, instr):
        # (selecting every lane of an access that may leave its tensor: the selection stays,
        # so that the executor's masked reads and writes check the selected lanes' bounds)
        sel = np.ones(full, dtype=bool)
    _keep_mask(key, instr, sel)
    return sel


def _may_leave(ctx: Any, instr: Instr) -> bool:
    """Whether an access of ``instr`` (not an indirect one: checked when it runs) may fall
    outside its tensor somewhere in the batch."""
    for u in instr.uses():
        acc = u.access
        if acc.indirect:
            continue
        shape = ctx.decl(acc.tensor).shape
        for e, n in zip(acc.index, shape):
            lo, hi = ctx.extremes(e, e.shape)
            if lo < 0 or hi >= n:
                return True
    return False


def _always(ctx: Any, e: IndexExpr, op: str, shape: tuple[int, ...]) -> bool:
    """``e op 0`` holds at every batch position and tile element (from the affine
    expression's extremes)."""
    return HOLDS_THROUGHOUT[op](*ctx.extremes(e, shape))


def box(ctx: Any, acc: Access, sel: np.ndarray) -> tuple[slice, ...] | None:
    """The selection as one box (a slice per batch and tile axis) when it is one and the
    access is in bounds over it: masked accesses then read and write strided views of
    the box instead of gathering through index arrays. None otherwise (then ``indices``
    also reports an access out of bounds)."""
    kept = _SEL_BOXES.get(id(sel))
    p = ctx.depth.get(acc.tensor)  # (None: a view whose storage is not made yet)
    if kept is None or kept[0] is not sel or p is None:
        hit = ctx.boxes.get(id(sel))
        if hit is None or hit[0] is not sel:
            hit = (sel, selection_box(sel))
            ctx.boxes = {id(sel): hit}  # (the running instruction's selections)
        return _access_box(ctx, acc, hit[1])
    # a kept selection (``mask``): the answer depends on no data, kept per access, batch
    # state and the shape of the access's tensor
    state_of = access_facts(acc)[2]
    state = None if state_of is None else state_of(ctx.values)
    shape = ctx.decl(acc.tensor).shape
    key = (id(acc), id(sel), p, tuple(ctx.dims), state, shape)
    hit = _ACCESS_BOXES.get(key)
    if hit is not None and hit[0] is acc and hit[1] is sel:
        return hit[2]
    box = kept[1]
    if box is _UNKNOWN:
        box = selection_box(sel)
        _SEL_BOXES[id(sel)] = (sel, box)
        if box is not None:
            _KEPT_BOXES[id(box)] = box
    out = _access_box(ctx, acc, box)
    if len(_ACCESS_BOXES) >= KEYS_MAX:
        _ACCESS_BOXES.clear()
    _ACCESS_BOXES[key] = (acc, sel, out)
    return out


def _access_box(ctx: Any, acc: Access, box: tuple[slice, ...] | None) -> tuple[slice, ...] | None:
    """``box`` when ``acc`` is in bounds over it (None otherwise)."""
    if box is None or any(b.stop <= b.start for b in box):
        return None
    nb = len(ctx.dims)
    shape = ctx.decl(acc.tensor).shape
    for d, e in enumerate(acc.index):
        c, coef = ctx.affine(e.base)
        lo = hi = c
        for k, b in [*zip(coef, box), *zip(e.coeffs, box[nb:])]:
            lo += min(k * b.start, k * (b.stop - 1))
            hi += max(k * b.start, k * (b.stop - 1))
        if lo < 0 or hi >= shape[d]:
            return None
    return box
