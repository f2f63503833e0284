"""Executors of the ``nki.language`` instruction kinds, one module per family as in
``nki/language`` (collectives live in ``simulator/collectives.py``, next to the scheduler's
``combine``). All math is fp32 (exact int64 for integer-only arithmetic); results are rounded to
the destination dtype by ``Ctx.write`` (round-to-nearest-even, saturating integers)."""

from . import core, hbm_ops, matmul, ops, randomness, reductions, shaping  # noqa: F401
