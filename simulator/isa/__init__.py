"""Executors of the ``nki.isa`` instructions (IR kind ``isa``; ``instr.op`` names the
instruction), one module per family as in ``nki/isa``; ``formulas`` holds their NumPy math.

Trace time already checked every static rule; what remains here are the rules only visible after
an op's result was fused into its destination (``common.check_dst``) and data-dependent checks."""

from . import (  # noqa: F401
    current_gpsimd,
    current_mx,
    current_random,
    current_vector,
    dma,
    gpsimd,
    scalar,
    search,
    selection,
    sync,
    tensor_ops,
    vector,
)
