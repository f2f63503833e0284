"""The share of a tile an instruction's mask keeps, for costs that scale with the elements an
instruction really touches (a masked DMA moves, and pays descriptors for, its masked-in
elements only)."""

from __future__ import annotations

import itertools

import numpy as np

from nki.ir import Instr, Loop, Mask

from ..memory import eval_mask

SAMPLES_PER_LOOP = 8  # iterator values a mask is evaluated at, evenly spread over the loop


def _kept(mask: Mask, env: dict) -> float:
    shape = np.broadcast_shapes(*(c.expr.shape for c in mask.conds))  # the tile's axes
    return float(np.mean(eval_mask(mask, shape, env)))


def mask_fraction(instr: Instr, loops: tuple[Loop, ...]) -> float:
    """The mean share of the instruction's tile its mask keeps over the iterations of the
    enclosing loops it depends on (sampled; program ids at 0); 1.0 without a mask."""
    if instr.mask is None or not instr.mask.conds:
        return 1.0
    syms = {s for c in instr.mask.conds for s in c.expr.base.symbols()}
    by_sym = {lp.sym: lp for lp in loops}
    axes = []
    for s in syms:
        lp = by_sym.get(s)
        trips = lp.static_trips if lp is not None else None
        if not trips:
            axes.append([(s, 0)])
            continue
        step = max(1, len(trips) // SAMPLES_PER_LOOP)
        axes.append([(s, v) for v in trips[::step]])
    shares = [_kept(instr.mask, dict(combo)) for combo in itertools.product(*axes)]
    return sum(shares) / len(shares)
