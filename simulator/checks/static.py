"""Running the checks table (``table.py``) before a kernel runs.

The tracer already rejects per-instruction rule breaks while it records them (partition and
free-size limits, partition mismatches, operands in the wrong memory, immutable parameters...).
The static checks need the whole kernel: static out-of-bounds over loop and grid ranges, SBUF /
PSUM / HBM capacity from live allocations, loop-carried writes in ``affine_range``, races
between SPMD instances or LNC cores and (a warning) output elements no instruction writes."""

from __future__ import annotations

import functools

from nki.ir import KernelIR

from ..config import SimConfig
from .table import START, STATIC, TRACE, Check, due

# (id(ir), target, level) of kernels already checked; the IR is kept alive so ids are not reused
_CHECKED: dict[tuple[int, str, str], KernelIR] = {}


def static_checks(ir: KernelIR, config: SimConfig) -> None:
    """Run the static rows of the checks table due at ``config.checks`` on ``ir``; raises the
    first NKIError found: the per-trace rows on each trace in turn, then the launch rows.

    Results are cached per traced IR, target and level (the IR itself is cached per
    signature)."""
    key = (id(ir), config.target, config.checks)
    if _CHECKED.get(key) is ir:
        return
    rows = _due(STATIC, config.checks)
    for one in ir.cores or (ir,):
        for check in rows:
            if check.per == TRACE:
                check(one, config)
    _run([c for c in rows if c.per != TRACE], ir, config)
    if len(_CHECKED) > 512:
        _CHECKED.clear()
    _CHECKED[key] = ir


# (id(ir), config.key) -> (ir, the start rows each run still calls): a row whose pass holds for
# every run of the IR under the setting (its check returns True) is left out after its pass
_START: dict[tuple[int, tuple], tuple[KernelIR, tuple[Check, ...]]] = {}


def start_checks(ir: KernelIR, config: SimConfig) -> None:
    """Run the rows due at the start of every run (before anything is allocated)."""
    hit = _START.get((id(ir), config.key))
    if hit is not None and hit[0] is ir:
        if hit[1]:
            _run(hit[1], ir, config)
        return
    again = []
    for check in _due(START, config.checks):
        if not all([check(one, config) is True for one in check.subjects(ir)]):
            again.append(check)
    if len(_START) > 512:
        _START.clear()
    _START[(id(ir), config.key)] = (ir, tuple(again))


@functools.lru_cache(maxsize=16)
def _due(when: str, level: str) -> tuple[Check, ...]:
    return due(when, level)  # (the table does not change while the process runs)


def _run(rows: list[Check] | tuple[Check, ...], ir: KernelIR, config: SimConfig) -> None:
    for check in rows:
        for one in check.subjects(ir):
            check(one, config)
