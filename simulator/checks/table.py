"""The checks of a launch, one row each: its name, its function, what one call checks, when it
runs, at which ``SimConfig.checks`` levels, and the error codes it raises.

``static.static_checks`` runs the static rows before a kernel runs (once per traced kernel,
target and level): first every per-trace row on each trace in turn (the kernel's, or each
core's of an LNC=2 launch), then the launch rows, each in the table's order, so the first
error reported is the first row's that fails. ``static.start_checks`` runs the rows due at the
start of every run (before anything is allocated). The run-time rows name the hook the
interpreter's run calls (``interpreter.py``, ``memory.py``).

Adding a check: its module here, its row, its error code in ``nki/error_codes.py``, its tests
(``tests/checks/test_check_table.py`` ties a module's codes to its rows)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nki.ir import KernelIR

from ..config import CHECK_LEVELS, SimConfig
from .bounds import check_bounds
from .capacity import check_capacity, check_hbm, check_host_memory
from .lnc_races import check_core_races
from .lnc_writes import DynamicAccesses, SameWrites
from .races import check_loop_carried, check_spmd_races
from .unwritten import check_outputs_written, warn_unwritten_outputs

# what one call checks
TRACE = "trace"  # one trace: the kernel's, or one core's of an LNC=2 launch (each in turn)
LAUNCH = "launch"  # the launch as a whole
LNC = "lnc launch"  # a launch traced per core (LNC=2), all cores together
SPMD = "spmd launch"  # a launch of one trace for every instance of its grid

# when it runs
STATIC = "static"  # over the IR, before the run
START = "start"  # at the start of every run, before anything is allocated
RUN = "run"  # while the kernel runs (``run`` is the hook the run calls)

ALWAYS = CHECK_LEVELS  # (an oversized launch would exhaust the host: checked even with "none")
CHECKED = ("static", "full")


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[..., Any]
    per: str
    when: str
    levels: tuple[str, ...]
    codes: tuple[str, ...]  # the error codes it raises (none: it warns)
    settings: tuple[str, ...] = ()  # the SimConfig fields passed after the IR

    def subjects(self, ir: KernelIR) -> tuple[KernelIR, ...]:
        """The IRs one launch of ``ir`` calls this check on."""
        if self.per == TRACE:
            return ir.cores or (ir,)
        if self.per == LNC:
            return (ir,) if ir.cores else ()
        if self.per == SPMD:
            return () if ir.cores else (ir,)
        return (ir,)

    def __call__(self, ir: KernelIR, config: SimConfig) -> Any:
        """The row's check on ``ir`` (a start row returns True when its pass holds for every
        later run of ``ir`` under ``config``: ``static.start_checks`` then skips it)."""
        return self.run(ir, *(getattr(config, s) for s in self.settings))


CHECKS = (
    # name, function, per, when, levels, error codes, SimConfig fields it takes
    Check("bounds", check_bounds, TRACE, STATIC, CHECKED,
          ("err_tensor_access_out_of_bound", "err_local_variable_used_out_of_scope")),
    Check("capacity", check_capacity, TRACE, STATIC, CHECKED,
          ("err_psum_tile_exceeds_bank", "err_sbuf_capacity_exceeded",
           "err_psum_capacity_exceeded", "err_address_overlap"), ("target",)),
    Check("loop-carried writes", check_loop_carried, TRACE, STATIC, CHECKED,
          ("err_unexpected_output_dependencies",)),
    Check("HBM capacity", check_hbm, LAUNCH, STATIC, ALWAYS, ("err_hbm_capacity_exceeded",),
          ("target",)),
    Check("LNC core races", check_core_races, LNC, STATIC, CHECKED, ("err_core_race",)),
    Check("SPMD races", check_spmd_races, SPMD, STATIC, CHECKED, ("err_spmd_write_race",)),
    # (a warning; under "full" the run reports unwritten elements exactly, as an error)
    Check("unwritten outputs", warn_unwritten_outputs, LAUNCH, STATIC, ("static",), ()),
    Check("host memory", check_host_memory, LAUNCH, START, ALWAYS,
          ("err_host_memory_exhausted",), ("precise_fp",)),
    Check("unwritten output elements", check_outputs_written, LAUNCH, RUN, ("full",),
          ("err_unwritten_output",)),
    # (the tensors LNC core races leaves to the run: both cores may write one element)
    Check("LNC equal writes", SameWrites, LNC, RUN, ALWAYS, ("err_core_race",)),
    # (the tensors LNC core races leaves to the run: reached through a dynamic offset; a warning)
    Check("LNC dynamic accesses", DynamicAccesses, LNC, RUN, ALWAYS, ()),
)  # fmt: skip


@functools.cache
def due(when: str, level: str) -> tuple[Check, ...]:
    """The rows that run ``when`` at check level ``level``, in the table's order."""
    return tuple(c for c in CHECKS if c.when == when and level in c.levels)
