"""Static output coverage: elements of a returned kernel output that no instruction can write.

A fresh output holds the uninitialised-memory sentinel (NaN for floats) until a store writes
it, so an element no store reaches comes back as NaN with no error. Stores are affine, so
the set of elements they can write is known before the kernel runs: every store to the
output (and every output held in an instruction's attributes) is enumerated over
its loop ranges, grid instances, tile axes and mask. The result over-approximates what runs
(every store counts, wherever it sits), so an element outside it is certainly never written
and the warning is never a false alarm. Stores the analysis cannot enumerate cheaply
(indirect, inside a device loop, too many points) make it stay quiet for that output.

The same holds for an on-chip tile stored into an output (``return psum_tile`` or
``nl.store(out, value=t)``): elements of the stored region no instruction ever writes.

Under ``checks="full"`` the interpreter records every element written and
``check_outputs_written`` reports the unwritten ones exactly, as an error, after the run."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from nki import dtypes
from nki.errors import NKIRuntimeError, NKIWarning, SrcLoc, warn_at
from nki.ir import (
    Access,
    Affine,
    IndexExpr,
    KernelIR,
    Loop,
    Mask,
    PidSym,
    RuntimeLoop,
    Sym,
    TensorDecl,
)

from .coverage import fully_written

_MAX_ELEMENTS = 1 << 24  # larger tensors are not analysed
_MAX_POINTS = 1 << 21  # index points enumerated per tensor (general path)
_MAX_COMBOS = 1 << 16  # loop / grid value combinations per access (box path)


class UnwrittenOutputWarning(NKIWarning):
    """Elements of a returned output (or of the tile stored into it) that no instruction
    writes: they come back as NaN / garbage."""


class _GiveUp(Exception):
    """The writes to a tensor cannot be enumerated cheaply: no warning for it."""


@dataclass(frozen=True)
class Unwritten:
    """A tensor region no instruction writes."""

    tensor: str
    shape: tuple[int, ...]
    count: int
    region: str  # "a:b, c:d" bounding box of the unwritten elements
    writer_lines: tuple[int, ...]
    loc: SrcLoc | None
    stored_at: SrcLoc | None = None  # on-chip tile: where it is stored into an output


def _combos(
    ir: KernelIR, loops: tuple[Loop, ...], acc: Access, mask: Mask | None
) -> tuple[list[Sym], np.ndarray]:
    """Every value combination of the program ids and enclosing loop iterators that ``acc`` or
    ``mask`` uses (the others do not move the footprint; an empty range of one still means the
    write never runs)."""
    used = {s for e in acc.index for s in e.base.symbols()}
    if mask is not None:
        used |= {s for c in mask.conds for s in c.expr.base.symbols()}
    syms: list[Sym] = []
    ranges: list[range] = []
    every = [(PidSym(a), range(n)) for a, n in enumerate(ir.grid.shape)]
    for lp in loops:
        if isinstance(lp, RuntimeLoop):
            raise _GiveUp  # trip count known only on the device
        every.append((lp.sym, range(lp.start, lp.stop, lp.step)))
    for sym, r in every:
        if sym in used:
            syms.append(sym)
            ranges.append(r)
        elif len(r) == 0:
            ranges.append(r)  # no combination at all
            syms.append(sym)
    if math.prod(len(r) for r in ranges) > _MAX_COMBOS:
        raise _GiveUp
    combos = list(itertools.product(*ranges))
    return syms, np.array(combos, dtype=np.int64).reshape(len(combos), len(syms))


def _at(aff: Affine, syms: list[Sym], vals: np.ndarray) -> np.ndarray:
    out = np.full(len(vals), aff.const, dtype=np.int64)
    for s, c in aff.terms:
        if s not in syms:
            raise _GiveUp  # an iterator used outside its loop: reported by the bounds check
        out += c * vals[:, syms.index(s)]
    return out


def _axes(e: IndexExpr) -> list[tuple[int, int]]:
    """(tile axis, coefficient) pairs an index expression varies over."""
    return [(k, c) for k, (c, n) in enumerate(zip(e.coeffs, e.shape)) if c and n > 1]


def _tile_shape(acc: Access) -> tuple[int, ...]:
    """The tile axes an access is evaluated over (its index expressions broadcast to them)."""
    shapes = {len(e.shape) for e in acc.index}
    if len(shapes) > 1:
        raise _GiveUp
    return tuple(np.broadcast_shapes(*(e.shape for e in acc.index))) if acc.index else ()


def _fits(e: IndexExpr, shape: tuple[int, ...]) -> bool:
    """``e`` is evaluated over the tile ``shape`` (its own shape broadcasts to it)."""
    return len(e.shape) == len(shape) and all(n in (m, 1) for n, m in zip(e.shape, shape))


def _lt_forms(op: str, a: int, b: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """``a*i + b <op> 0`` as a conjunction of ``a'*i + b' < 0`` (integers)."""
    table = {
        "<": [(a, b)],
        "<=": [(a, b - 1)],
        ">": [(-a, -b)],
        ">=": [(-a, -b - 1)],
        "==": [(a, b - 1), (-a, -b - 1)],
    }
    if op not in table:
        raise _GiveUp
    return table[op]


def _mark_boxes(out: np.ndarray, acc: Access, mask: Mask | None, syms, vals) -> bool:
    """Mark the elements ``acc`` writes when, for each value combination, they form a box
    (each tensor dimension follows at most one tile axis, each mask condition bounds at most
    one axis). Returns False when the access does not have that form."""
    sizes = _tile_shape(acc)
    conds = mask.conds if mask is not None else ()
    if not all(_fits(e, sizes) for e in [*acc.index, *(c.expr for c in conds)]):
        return False
    used = [_axes(e) for e in acc.index]
    if any(len(u) > 1 for u in used):
        return False
    dim_axis = {u[0][0]: d for d, u in enumerate(used) if u}
    if len(dim_axis) != sum(1 for u in used if u):
        return False  # one tile axis drives two dimensions (a diagonal)
    n = len(vals)
    lo = {k: np.zeros(n, np.int64) for k in dim_axis}
    hi = {k: np.full(n, sizes[k] - 1, np.int64) for k in dim_axis}
    live = np.ones(n, dtype=bool)
    for cond in conds:
        terms = _axes(cond.expr)
        if len(terms) > 1 or (terms and terms[0][0] not in dim_axis):
            return False
        b0 = _at(cond.expr.base, syms, vals)
        a0 = terms[0][1] if terms else 0
        for a, b in _lt_forms(cond.op, a0, b0):
            if terms:
                k = terms[0][0]
                if a > 0:  # a*i < -b  <=>  i <= floor((-b - 1) / a)
                    hi[k] = np.minimum(hi[k], (-b - 1) // a)
                else:  # (-a)*i > b  <=>  i >= floor(b / -a) + 1
                    lo[k] = np.maximum(lo[k], b // -a + 1)
            else:
                live &= b < 0
    bases = [_at(e.base, syms, vals) for e in acc.index]
    for j in np.flatnonzero(live):
        idx = []
        for d in range(len(acc.index)):
            size = out.shape[d]
            if not used[d]:
                v = int(bases[d][j])
                idx.append(slice(v, v + 1) if 0 <= v < size else slice(0, 0))
                continue
            k, c = used[d][0]
            if lo[k][j] > hi[k][j]:
                idx = None
                break
            first, last = bases[d][j] + c * lo[k][j], bases[d][j] + c * hi[k][j]
            start, stop, step = min(first, last), max(first, last), abs(c)
            if start < 0:
                start += (-start + step - 1) // step * step  # first element >= 0
            stop = min(stop, size - 1)
            if start > stop:  # entirely outside the tensor (a masked access past the edge)
                idx = None
                break
            idx.append(slice(int(start), int(stop) + 1, step))
        if idx is not None:
            out[tuple(idx)] = True
    return True


def _mark_points(out: np.ndarray, acc: Access, mask: Mask | None, syms, vals) -> int:
    """Mark the elements ``acc`` writes by enumerating every point; returns the point count."""
    shape = _tile_shape(acc)
    npts = len(vals) * math.prod(shape)
    if npts > _MAX_POINTS:
        raise _GiveUp
    grids = (
        np.indices(shape, dtype=np.int64).reshape(len(shape), -1)
        if shape
        else np.zeros((0, 1), np.int64)
    )

    def value(e: IndexExpr) -> np.ndarray:
        if not _fits(e, shape):
            raise _GiveUp
        coeffs = [c if n > 1 else 0 for c, n in zip(e.coeffs, e.shape)]
        tile = np.asarray(coeffs, dtype=np.int64).reshape(-1) @ grids
        return _at(e.base, syms, vals)[:, None] + tile[None, :]

    ok = np.ones((len(vals), grids.shape[1]), dtype=bool)
    for cond in mask.conds if mask is not None else ():
        v = value(cond.expr)
        ops = {"<": v < 0, "<=": v <= 0, ">": v > 0, ">=": v >= 0, "==": v == 0, "!=": v != 0}
        ok &= ops[cond.op]
    idx = [value(e) for e in acc.index]
    for d, v in enumerate(idx):
        ok &= (v >= 0) & (v < out.shape[d])
    out[tuple(v[ok] for v in idx)] = True
    return npts


_Write = tuple  # (instruction, enclosing loops, written access, mask)


def _writes(ir: KernelIR) -> dict[str, list[_Write]]:
    """Per base tensor, every access an instruction writes into it (its destination, under its
    mask, and its secondary outputs such as ``reduce_res``)."""
    out: dict[str, list[_Write]] = {}
    for instr, loops in ir.instructions():
        for a in instr.writes():
            w = (instr, loops, a, instr.mask if a is instr.dst else None)
            out.setdefault(ir.storage_of(a.tensor), []).append(w)
    return out


def written_elements(
    ir: KernelIR, base: str, writes: list[_Write]
) -> tuple[np.ndarray, tuple[int, ...]]:
    """A boolean array over ``base`` marking every element ``writes`` (all the writes into it)
    may write, and the lines of those instructions. Raises _GiveUp when it cannot be
    enumerated cheaply."""
    decl = ir.tensor(base)
    if math.prod(decl.shape) > _MAX_ELEMENTS:
        raise _GiveUp
    flat = np.zeros(math.prod(decl.shape), dtype=bool)
    lines: set[int] = set()
    budget = _MAX_POINTS
    for instr, loops, acc, mask in writes:
        if acc.indirect:
            raise _GiveUp
        view = flat.reshape(ir.tensor(acc.tensor).shape)
        syms, vals = _combos(ir, loops, acc, mask)
        if not _mark_boxes(view, acc, mask, syms, vals):
            budget -= _mark_points(view, acc, mask, syms, vals)
            if budget < 0:
                raise _GiveUp
        if instr.loc is not None and len(vals):
            lines.add(instr.loc.line)
    return flat.reshape(decl.shape), tuple(sorted(lines))


def _span(missing: np.ndarray) -> str:
    """The bounding box of the True elements, ``lo:hi`` per axis."""
    spans = []
    for ax in range(missing.ndim):
        hit = np.flatnonzero(missing.any(axis=tuple(a for a in range(missing.ndim) if a != ax)))
        spans.append(f"{hit[0]}:{hit[-1] + 1}")
    return ", ".join(spans)


def _report(ir: KernelIR, base: str, missing: np.ndarray, lines, stored_at=None) -> Unwritten:
    decl = ir.tensor(base)
    count = int(np.count_nonzero(missing))
    return Unwritten(base, decl.shape, count, _span(missing), lines, decl.loc, stored_at)


def unwritten_outputs(ir: KernelIR) -> list[Unwritten]:
    """Returned outputs (and on-chip tiles stored into them) with elements no instruction
    writes."""
    if not ir.returns_outputs:
        return []  # outputs passed in by the caller keep the caller's values
    writes = _writes(ir)
    found: list[Unwritten] = []
    for out in dict.fromkeys(ir.storage_of(o) for o in ir.outputs):
        if out in ir.params:
            continue
        if fully_written(ir, out):  # the cheap exact proof of the common case
            found += _unwritten_sources(ir, writes, out)
            continue
        try:
            written, lines = written_elements(ir, out, writes.get(out, []))
        except _GiveUp:
            continue
        if not written.all():
            found.append(_report(ir, out, ~written, lines))
            continue
        found += _unwritten_sources(ir, writes, out)
    return found


def _unwritten_sources(ir: KernelIR, writes: dict[str, list[_Write]], out: str) -> list[Unwritten]:
    """On-chip tiles copied into ``out`` whose copied region holds elements nothing writes
    (one report per tile)."""
    found: dict[str, Unwritten] = {}
    done: dict[str, tuple[np.ndarray, tuple[int, ...]] | None] = {}
    for instr, loops, _acc, _ in writes.get(out, []):
        if instr.kind != "dma" or len(instr.srcs) != 1 or not isinstance(instr.srcs[0], Access):
            continue
        src = instr.srcs[0]
        base = ir.storage_of(src.tensor)
        if base in found or not ir.tensor(base).on_chip or src.indirect:
            continue
        try:
            if base not in done:
                done[base] = None
                done[base] = written_elements(ir, base, writes.get(base, []))
            if done[base] is None:
                continue
            written, lines = done[base]
            syms, vals = _combos(ir, loops, src, instr.mask)
            view = np.zeros(ir.tensor(src.tensor).shape, dtype=bool)
            if not _mark_boxes(view, src, instr.mask, syms, vals):
                _mark_points(view, src, instr.mask, syms, vals)
            read = _in_base_elements(view, ir.tensor(src.tensor), ir.tensor(base))
        except _GiveUp:
            continue
        missing = read & ~written
        if missing.any():
            found[base] = _report(ir, base, missing, lines, instr.loc)
    return list(found.values())


def _in_base_elements(seen: np.ndarray, view: TensorDecl, base: TensorDecl) -> np.ndarray:
    """``seen`` (elements of a reshape or ``.view(dtype)`` alias of ``base``) as elements of
    ``base``: a dtype view splits or merges the last dimension's elements by their bytes."""
    if seen.size == math.prod(base.shape) and view.dtype == base.dtype:
        return seen.reshape(base.shape)
    vb, bb = dtypes.itemsize(view.dtype), dtypes.itemsize(base.dtype)
    if view.shape[:-1] != base.shape[:-1] or view.shape[-1] * vb != base.shape[-1] * bb:
        raise _GiveUp
    by_byte = np.repeat(seen, vb, axis=-1)
    return by_byte.reshape(*base.shape, bb).any(axis=-1)


def warn_unwritten_outputs(ir: KernelIR) -> None:
    """Warn (:class:`UnwrittenOutputWarning`, at the line that created the tensor) about every
    region of a returned output that no instruction writes."""
    for u in unwritten_outputs(ir):
        many = len(u.writer_lines) > 1
        by = (
            f"line{'s' if many else ''} {', '.join(map(str, u.writer_lines))} "
            f"write{'' if many else 's'} the rest"
            if u.writer_lines
            else "no instruction writes any of it"
        )
        what = f"output {ir.label(u.tensor)} {list(u.shape)}"
        if u.stored_at is not None:
            mem = ir.tensor(u.tensor).buffer.upper()
            how = (
                f"stored into an output at line {u.stored_at.line}"
                if u.stored_at.func == ir.name
                else "returned by the kernel"  # the copy a `return tile` makes
            )
            what = f"{mem} tile {ir.label(u.tensor)} {list(u.shape)}, {how},"
        msg = (
            f"{what} has {u.count} element(s) no instruction writes (within [{u.region}]; "
            f"they will hold NaN/garbage): {by}. Check the masks and loop bounds of the writes "
            'to it; checks="full" reports it as an error'
        )
        warn_at(msg, UnwrittenOutputWarning, u.loc)


def check_outputs_written(
    ir: KernelIR, shadow: dict[str, np.ndarray], writers: dict[str, set[int]]
) -> None:
    """Report a kernel output with elements no instruction wrote (they would be returned as
    the uninitialised-memory sentinel, NaN for floats): the output, the unwritten region and
    the lines that wrote the rest."""
    for name in ir.outputs:
        decl = ir.tensor(name)
        base = decl.alias_of or name
        written = shadow.get(base)
        if written is None or written.all():
            continue
        # (the bounding box axis by axis: no index array of the missing elements, which
        # would take several times the output's size)
        missing = ~written
        count = int(np.count_nonzero(missing))
        region = _span(missing)
        lines = sorted(writers.get(base, ()))
        by = (
            f"line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))} wrote the rest"
            if lines
            else "no instruction wrote any of it"
        )
        raise NKIRuntimeError(
            f"output {ir.label(base)} {list(written.shape)} has {count} element(s) no "
            f"instruction wrote (within [{region}]; they hold NaN/garbage): {by}. Check the "
            "masks and loop bounds of the stores to it",
            code="err_unwritten_output",
            loc=ir.tensor(base).loc,
        )
