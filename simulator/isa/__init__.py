"""Executors of the ``nki.isa`` instructions (IR kind ``isa``; ``instr.op`` names the
instruction), one module per instruction family with the same names as ``nki/isa`` (the spec
row's ``family``); ``formulas`` holds their NumPy math, ``accumulators`` the engines'
accumulator registers and ``common`` what every executor shares.

Trace time already checked every static rule; what remains here are the rules only visible after
an op's result was fused into its destination (``common.check_dst``) and data-dependent checks."""

from . import (  # noqa: F401
    collectives,
    dma,
    gpsimd,
    mx,
    random,
    reductions,
    registers,
    scalar,
    search,
    selection,
    tensor,
    vector,
)
