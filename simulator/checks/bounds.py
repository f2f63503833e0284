"""Static out-of-bounds analysis: every unmasked access's index range over the tile axes, loop
ranges and grid extents must stay inside the tensor (the real compiler rejects it otherwise)."""

from __future__ import annotations

from nki.errors import NKIError, NKIIndexError
from nki.ir import Access, KernelIR, Loop, Sym


def _ranges(ir: KernelIR, loops: tuple[Loop, ...]) -> dict[Sym, tuple[int, int]]:
    """Inclusive (min, max) of every symbol in scope inside ``loops``."""
    return {s: r.bounds for s, r in ir.symbol_ranges(loops).items()}


def out_of_bounds(
    ir: KernelIR, acc: Access, ranges: dict[Sym, tuple[int, int]]
) -> tuple[int, int, int, int] | None:
    """The first dimension the access's index range leaves its tensor on, as (dimension, least
    index, greatest index, size); None when it stays inside (data-dependent dimensions are
    checked when they run)."""
    shape = ir.tensor(acc.tensor).shape
    for dim, (e, n) in enumerate(zip(acc.index, shape)):
        if dim in dict(acc.indirect):
            continue
        lo, hi = e.bounds(ranges)
        if lo < 0 or hi >= n:
            return dim, lo, hi, n
    return None


def check_access(ir: KernelIR, acc: Access, ranges: dict[Sym, tuple[int, int]], instr) -> None:
    out = out_of_bounds(ir, acc, ranges)
    if out is None:
        return
    dim, lo, hi, n = out
    raise NKIIndexError(
        f"out-of-bound access for tensor {ir.label(acc.tensor)} on dimension {dim}: "
        f"index range [{lo}, {hi}] exceeds the dimension size of {n} "
        f"(in '{instr.api or instr.op}'; use a mask to make a partial access legal)",
        code="err_tensor_access_out_of_bound",
        loc=instr.loc,
    )


def _check_in_scope(ir: KernelIR, acc: Access, ranges: dict[Sym, tuple[int, int]], instr) -> None:
    """An iterator used outside its loop (``list(nl.affine_range(n))``, ``next(iter(...))``)
    has no value where the instruction runs."""
    for e in acc.index:
        for s in e.base.symbols():
            if s not in ranges:
                raise NKIError(
                    f"'{instr.api or instr.op}' uses the iterator of a loop it is not inside "
                    f"(index {e} of {ir.label(acc.tensor)}): a loop iterator exists only inside "
                    "the `for` statement over nl.affine_range / sequential_range; iterate the "
                    "range directly instead of list(...), next(iter(...)) or keeping the iterator",
                    code="err_local_variable_used_out_of_scope",
                    loc=instr.loc,
                )


def check_bounds(ir: KernelIR) -> None:
    for instr, loops in ir.instructions():
        ranges = _ranges(ir, loops)
        # the destination, then the sources (attribute operands and index tiles are checked
        # when they run)
        operands = [u.access for u in instr.uses() if u.role == "dst"]
        operands += [u.access for u in instr.uses() if u.role == "src"]
        for a in operands:
            _check_in_scope(ir, a, ranges, instr)
        if instr.mask is not None:
            continue  # masked accesses may reach past the edge; checked at run time
        for a in operands:
            check_access(ir, a, ranges, instr)
