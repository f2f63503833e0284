"""Static write coverage: which HBM tensors the kernel's plain writes cover entirely, over the
grid and their enclosing loops.

A tensor that is entirely overwritten and never read needs no uninitialised-memory fill (no one
can see the sentinel), and under ``checks="full"`` cannot be reported as an unwritten output.
The analysis is exact for the common case (each tensor dimension indexed by its own loop
symbols, program ids and tile axes) and answers "not covered" otherwise."""

from __future__ import annotations

import math

import numpy as np

from nki.ir import Access, Cond, Instr, KernelIR, Loop, Mask, Node, Sym

_MAX_VALUES = 1 << 22  # give up on a dimension whose index takes more values than this
_MAX_MAP = 1 << 24  # elements of the largest tensor whose coverage by several writes is mapped

# ``expr op 0`` holds for every value in [lo, hi]
HOLDS_THROUGHOUT = {
    "<": lambda lo, hi: hi < 0,
    "<=": lambda lo, hi: hi <= 0,
    ">": lambda lo, hi: lo > 0,
    ">=": lambda lo, hi: lo >= 0,
    "==": lambda lo, hi: lo == hi == 0,
    "!=": lambda lo, hi: lo > 0 or hi < 0,
}

_LAST: tuple[object, tuple, tuple] = (None, (), ())  # the last IR walked, its nodes, its instrs


def nodes_of(ir: KernelIR) -> tuple[tuple[Node, tuple[Loop, ...]], ...]:
    """``ir.walk()`` as a tuple, kept for the last IR asked about (planning passes walk the
    same kernel many times)."""
    return _walked(ir)[1]


def instructions_of(ir: KernelIR) -> tuple[tuple[Instr, tuple[Loop, ...]], ...]:
    """``instructions_of(ir)`` as a tuple (see ``nodes_of``)."""
    return _walked(ir)[2]


def _walked(ir: KernelIR) -> tuple[object, tuple, tuple]:
    global _LAST
    got = _LAST
    if got[0] is not ir:
        nodes = tuple(ir.walk())
        got = (ir, nodes, tuple(p for p in nodes if isinstance(p[0], Instr)))
        _LAST = got
    return got


# id(ir) -> (ir, names); the IR is kept alive so ids are not reused
_UNFILLED: dict[int, tuple[KernelIR, frozenset[str]]] = {}


def unfilled_outputs(ir: KernelIR) -> frozenset[str]:
    """Shared-HBM outputs / locals of ``ir`` that need no uninitialised-memory fill: no
    instruction reads them, no view aliases them, and plain writes cover every element."""
    got = _UNFILLED.get(id(ir))
    if got is None or got[0] is not ir:
        got = (ir, _unfilled(ir))
        if len(_UNFILLED) > 512:
            _UNFILLED.clear()
        _UNFILLED[id(ir)] = got
    return got[1]


def _unfilled(ir: KernelIR) -> frozenset[str]:
    cands = {
        d.name
        for d in ir.tensors
        if d.buffer == "shared_hbm" and d.kind in ("output", "local") and d.alias_of is None
    }
    cands -= {d.alias_of for d in ir.tensors if d.alias_of is not None}
    for instr, _ in instructions_of(ir):
        cands -= {a.tensor for a in instr.reads()}
    return frozenset(n for n in cands if fully_written(ir, n))


def fully_written(ir: KernelIR, name: str) -> bool:
    """The plain writes (DMAs, unmasked or with a mask that always holds) to tensor ``name``
    cover every element of it over the grid and the loops around them: one of them alone, or
    together (their footprints marked on a map of the tensor, for tensors up to 16M
    elements)."""
    shape = ir.tensor(name).shape
    prints: list[list[np.ndarray]] = []
    for instr, loops in instructions_of(ir):
        dst = instr.dst
        if dst is None or dst.tensor != name or not _plain_write(instr):
            continue
        ranges = _ranges(ir, loops)
        if ranges is None or not _mask_keeps_in_bounds(instr.mask, ranges, dst, shape):
            continue
        sets = _footprint(dst, shape, ranges)
        if sets is not None:
            prints.append(sets)
    prints = _merged(prints)
    if any(all(len(v) == n for v, n in zip(sets, shape)) for sets in prints):
        return True  # (the sets hold distinct in-bounds indices)
    total = math.prod(shape)
    if not prints or total > _MAX_MAP or sum(math.prod(map(len, p)) for p in prints) < total:
        return False  # (too few elements written to cover it)
    hit = np.zeros(shape, dtype=bool)
    for sets in prints:
        hit[np.ix_(*sets)] = True
    return bool(hit.all())


def _merged(prints: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    """Footprints (index sets per dimension) with those that differ on one dimension at most
    joined into one (the halves two cores write, the tiles of unrolled iterations): grouped
    by their other dimensions, one dimension at a time, until no group joins two."""
    out = prints
    changed = True
    while changed and len(out) > 1:
        changed = False
        for d in range(len(out[0])):
            groups: dict[tuple, list[list[np.ndarray]]] = {}
            for sets in out:
                key = tuple((a.shape, a.tobytes()) for k, a in enumerate(sets) if k != d)
                groups.setdefault(key, []).append(sets)
            if len(groups) < len(out):
                changed = True
                out = [g[0] if len(g) == 1 else _joined(g, d) for g in groups.values()]
    return out


def _joined(group: list[list[np.ndarray]], d: int) -> list[np.ndarray]:
    """Footprints equal but on dimension ``d``, as one (the union along ``d``)."""
    sets = list(group[0])
    sets[d] = np.unique(np.concatenate([g[d] for g in group]))
    return sets


def _plain_write(instr: Instr) -> bool:
    """A DMA that stores every element of its destination tile (and reads none of it)."""
    if instr.accumulates or (instr.dst is not None and instr.dst.indirect):
        return False
    return instr.kind == "dma" or (instr.kind == "isa" and instr.op == "dma_copy")


def _ranges(ir: KernelIR, loops: tuple[Loop, ...]) -> dict[Sym, range] | None:
    """The values of every symbol in scope (None: a device loop, whose trips are unknown)."""
    scope = ir.symbol_ranges(loops)
    if any(r.runtime for r in scope.values()):
        return None
    return {s: r.values for s, r in scope.items()}


def _mask_keeps_in_bounds(
    mask: Mask | None, ranges: dict[Sym, range], dst: Access, shape: tuple[int, ...]
) -> bool:
    """Every in-bounds element of the write is selected: each condition holds everywhere, or
    only bounds a destination index by the tensor's own extent (the ragged-tile idiom
    ``i * 128 + ip < n`` on a tensor of n rows)."""
    if mask is None:
        return True
    if any(len(r) == 0 for r in ranges.values()):
        return False
    inclusive = {s: (min(r[0], r[-1]), max(r[0], r[-1])) for s, r in ranges.items()}
    return all(
        HOLDS_THROUGHOUT[c.op](*c.expr.bounds(inclusive)) or _only_bounds(c, dst, shape)
        for c in mask.conds
    )


# for ``index + k <op> 0``: the condition keeps every index in [0, n)
_KEEPS_ALL = {
    "<": lambda k, n: -k >= n,
    "<=": lambda k, n: -k >= n - 1,
    ">": lambda k, n: -k < 0,
    ">=": lambda k, n: -k <= 0,
}


def _only_bounds(c: Cond, dst: Access, shape: tuple[int, ...]) -> bool:
    """Condition ``c`` is ``dst.index[d] + k <op> 0`` and holds for every in-bounds index."""
    e = c.expr
    for idx, n in zip(dst.index, shape):
        if e.coeffs == idx.coeffs and e.shape == idx.shape and e.base.terms == idx.base.terms:
            keeps = _KEEPS_ALL.get(c.op)
            if keeps is not None and keeps(e.base.const - idx.base.const, n):
                return True
    return False


def _footprint(
    acc: Access, shape: tuple[int, ...], ranges: dict[Sym, range]
) -> list[np.ndarray] | None:
    """The distinct in-bounds indices the access touches on each dimension, when its footprint
    is their product: each symbol / tile axis indexes one dimension only. None otherwise (or
    when a dimension's index takes too many values to list)."""
    seen: set[object] = set()
    for e in acc.index:
        mine = {s for s, k in e.base.terms if k} | {t for t, k in enumerate(e.coeffs) if k}
        if mine & seen:
            return None
        seen |= mine
    out = []
    for e, size in zip(acc.index, shape):
        vals = np.array([e.base.const], dtype=np.int64)
        counts = [len(ranges[s]) for s, k in e.base.terms if k]
        counts += [n for k, n in zip(e.coeffs, acc.shape) if k]
        if math.prod(counts) > _MAX_VALUES:  # (decided before any array is made)
            return None
        steps = [(k, np.arange(len(ranges[s]), dtype=np.int64) * ranges[s].step + ranges[s].start)
                 for s, k in e.base.terms if k]  # fmt: skip
        steps += [(k, np.arange(n, dtype=np.int64)) for k, n in zip(e.coeffs, acc.shape) if k]
        for k, v in steps:
            vals = (vals[:, None] + k * v[None, :]).reshape(-1)
        out.append(np.unique(vals[(vals >= 0) & (vals < size)]))
    return out
