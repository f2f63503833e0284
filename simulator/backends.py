"""The backends of the simulator: one entry each, in order of preference.

An entry names the backend (the ``SimConfig.backend`` setting that asks for it, and
``RunInfo.backend`` after a launch it ran), the module whose ``execute(ir, shared, config,
schedule, info) -> bool`` runs a kernel (False: it does not run this one, the next backend is
tried) and the ``backend=`` settings that may use it. ``launch`` tries the entries in order,
``config`` accepts their names and ``auto``; the last entry (the reference interpreter) runs
every kernel. Executors and lowerings register under the same names (``executors.py``).

This module imports nothing from the simulator, so the settings can be checked before any
backend is loaded."""

from __future__ import annotations

from dataclasses import dataclass

AUTO = "auto"  # the setting that lets every backend run, in order of preference
EVERY = "*"  # ``used_by`` of a backend every setting may use


@dataclass(frozen=True)
class Backend:
    name: str
    module: str  # the module with ``execute``
    used_by: tuple[str, ...]  # the ``SimConfig.backend`` settings that may run it (or EVERY)

    def allowed(self, setting: str) -> bool:
        return EVERY in self.used_by or setting in self.used_by


BACKENDS = (
    Backend("batched", "simulator.batched", used_by=(AUTO, "batched")),
    Backend("numba", "simulator.compiled", used_by=(AUTO, "numba")),
    Backend("numpy", "simulator.interpreter", used_by=(EVERY,)),
)
REFERENCE = BACKENDS[-1].name  # the reference interpreter: runs every kernel, defines results
# every valid ``SimConfig.backend`` (listed as the error message shows them: the reference first)
SETTINGS = (*(b.name for b in reversed(BACKENDS)), AUTO)


def name_of(module: str) -> str:
    """The name of the backend whose module is ``module`` (a backend package finds its own
    name with its ``__package__``)."""
    return next(b.name for b in BACKENDS if b.module == module)
