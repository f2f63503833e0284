"""The share of a tile an instruction's mask keeps, for costs that scale with the elements an
instruction really touches (a masked DMA moves, and pays descriptors for, its masked-in
elements only)."""

from __future__ import annotations

import itertools

import numpy as np

from nki.ir import Instr, Loop, Mask

SAMPLES_PER_LOOP = 8  # iterator values a mask is evaluated at, evenly spread over the loop
_OPS = {
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
    "==": np.equal,
    "!=": np.not_equal,
}


def _kept(mask: Mask, env: dict) -> float:
    keep: np.ndarray | bool = True
    for c in mask.conds:
        e = c.expr
        value = np.asarray(e.base.evaluate(env), dtype=np.int64)
        for d, (coeff, n) in enumerate(zip(e.coeffs, e.shape)):
            if coeff:
                shape = [n if j == d else 1 for j in range(len(e.shape))]
                value = value + coeff * np.arange(n, dtype=np.int64).reshape(shape)
        keep = keep & _OPS[c.op](value, 0)
    return float(np.mean(keep))


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
