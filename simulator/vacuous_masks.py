"""Masks that select every element.

Kernels written for any shape mask their ragged last tiles (``mask=(i * 128 + ip < n)``); for
shapes that are whole tiles the condition holds at every instance, iteration and tile element.
Such a mask selects what the unmasked instruction does, so the traced kernel drops it: the
checks, the cost model and the backends then see the plain instruction (the batched backend
reads an unmasked load in place and writes a result straight into HBM, which a masked one
prevents). A mask is dropped only when every condition holds over the static ranges of the
symbols it uses and every access of the instruction stays inside its tensor there, as an
unmasked instruction must (``checks/bounds.py``); a mask over a device loop's iterator, or of an
instruction with an out-of-bounds or data-dependent access, stays."""

from __future__ import annotations

import dataclasses

from nki.ir import Instr, KernelIR, Loop, Mask, Node

from .checks.bounds import out_of_bounds
from .checks.coverage import HOLDS_THROUGHOUT


def without_vacuous_masks(ir: KernelIR) -> KernelIR:
    """``ir`` with the masks that select every element dropped (``ir`` itself when none)."""
    body = _rebuild(ir, ir.body, ())
    return ir if body is ir.body else dataclasses.replace(ir, body=body, _by_name={})


def _rebuild(ir: KernelIR, nodes: tuple[Node, ...], loops: tuple[Loop, ...]) -> tuple[Node, ...]:
    out, changed = [], False
    for n in nodes:
        m = n
        if isinstance(n, Loop):
            inner = _rebuild(ir, n.body, (*loops, n))
            if inner is not n.body:
                m = dataclasses.replace(n, body=inner)
        elif isinstance(n, Instr) and type(n.mask) is Mask and _vacuous(ir, n, loops):
            m = dataclasses.replace(n, mask=None)
        changed |= m is not n
        out.append(m)
    return tuple(out) if changed else nodes


def _vacuous(ir: KernelIR, instr: Instr, loops: tuple[Loop, ...]) -> bool:
    """Every condition of ``instr``'s mask holds everywhere and its accesses stay in bounds."""
    assert instr.mask is not None
    scope = ir.symbol_ranges(loops)
    ranges = {s: r.bounds for s, r in scope.items() if not r.runtime}
    for c in instr.mask.conds:
        if not set(c.expr.base.symbols()) <= ranges.keys():
            return False
        if not HOLDS_THROUGHOUT[c.op](*c.expr.bounds(ranges)):
            return False
    for u in instr.uses():
        acc = u.access
        if acc.indirect or not all(set(e.base.symbols()) <= ranges.keys() for e in acc.index):
            return False
        if out_of_bounds(ir, acc, ranges) is not None:
            return False
    return True
