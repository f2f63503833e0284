"""Static checks on the kernel IR (run at trace time over every path, before execution)."""

from __future__ import annotations

from nki.ir import KernelIR

from .config import SimConfig


def static_checks(ir: KernelIR, config: SimConfig) -> None:
    """Run every static analysis on ``ir``; raises the first NKIError found."""
    from .bounds import check_bounds

    check_bounds(ir)
