"""Static checks on the kernel IR (run at trace time over every path, before execution).

The tracer already rejects per-instruction rule breaks while it records them (partition and
free-size limits, partition mismatches, operands in the wrong memory, immutable parameters...).
The analyses here need the whole kernel: static out-of-bounds over loop and grid ranges, SBUF /
PSUM capacity from live allocations, loop-carried HBM writes in ``affine_range``, races
between SPMD instances and (a warning) output elements no instruction writes."""

from __future__ import annotations

from nki.ir import KernelIR

from ..config import SimConfig
from .bounds import check_bounds
from .capacity import check_capacity, check_hbm
from .lnc_races import check_core_races
from .races import check_loop_carried, check_spmd_races
from .unwritten import warn_unwritten_outputs

# (id(ir), target) of kernels already checked; the IR is kept alive so ids are not reused
_CHECKED: dict[tuple[int, str, str], KernelIR] = {}


def static_checks(ir: KernelIR, config: SimConfig) -> None:
    """Run every static analysis on ``ir``; raises the first NKIError found.

    Results are cached per traced IR and target (the IR itself is cached per signature)."""
    key = (id(ir), config.target, config.checks)
    if _CHECKED.get(key) is ir:
        return
    for one in ir.cores or (ir,):  # per-core traces (LNC=2) are checked core by core
        check_bounds(one)
        check_capacity(one, config.target)
        check_loop_carried(one)
    check_hbm(ir, config.target)
    if ir.cores:
        check_core_races(ir)
    else:
        check_spmd_races(ir)
    if config.checks == "static":  # under "full" the run reports unwritten elements exactly
        warn_unwritten_outputs(ir)
    if len(_CHECKED) > 512:
        _CHECKED.clear()
    _CHECKED[key] = ir
