"""Tiered compilation for the Numba backend: each launch spends at most a compile budget.

A launch on the Numba backend builds what its driver calls before anything runs: library
kernels already built in this process cost nothing, those in the disk cache are loaded
(milliseconds each), and the cold ones are compiled one at a time, most executed first, while
the next one's estimated compile time (the median of the compiles measured so far in this
process) still fits in the launch's budget: ``COMPILE_BUDGET`` seconds, or
``$NKI_SIM_COMPILE_BUDGET`` (``inf``: no limit). Every launch compiles at least one cold kernel,
so repeated launches always finish. Instructions calling a kernel left for a later launch are
hosted for this one (the interpreter's executor runs them on the same arrays, as for
instructions never compiled natively, so results do not change) and the driver runs as plain
Python; the backend compiles the driver itself (``njit``) only once every library kernel is
built and the driver's estimated compile time fits in what remains of the budget.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

from nki.errors import NKIError, user_loc
from nki.parsing import PARSE_LOCK

from . import kernels as lib
from .kernels import Spec

COMPILE_BUDGET = 3.0  # seconds of compiling per launch
ENV = "NKI_SIM_COMPILE_BUDGET"

_TIMES: list[float] = []  # measured cold library-kernel compiles in this process, seconds


def budget() -> float:
    """The per-launch compile budget in seconds (``$NKI_SIM_COMPILE_BUDGET`` or
    ``COMPILE_BUDGET``): a non-negative number, ``inf`` for no limit."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return COMPILE_BUDGET
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # negative or NaN
        raise NKIError(
            f"{ENV} must be a number of seconds >= 0 (or 'inf'), got {text!r}",
            code="err_invalid_config",
            loc=user_loc(),
        )
    return value


def kernel_estimate(first_guess: float) -> float:
    """Seconds the next cold library-kernel compile is expected to take: the median of those
    measured in this process, leaving out the first (it also pays numba's start-up)."""
    return statistics.median(_TIMES[1:][-15:]) if len(_TIMES) > 1 else first_guess


def speed(first_guess: float) -> float:
    """How much slower than ``first_guess`` library kernels compile in this process (the
    machine's load): scales the other compile-time estimates."""
    return min(3.0, max(1.0, kernel_estimate(first_guess) / first_guess))


# (library kernel, its dispatcher, the numba signature the driver calls it with)
KernelCall = tuple[Spec, Any, tuple]


@dataclass(frozen=True)
class Built:
    """What one launch's build step did: the keys of the library kernels left cold (their
    instructions are hosted for the launch) and how many kernels it compiled."""

    deferred: frozenset[str]
    compiled: int


def build_kernels(
    calls: list[KernelCall], uses: dict[str, int], limit: float, start: float, first_guess: float
) -> Built:
    """Load or compile the library kernels of ``calls`` within ``limit`` seconds counted from
    ``start`` (``time.perf_counter``): built and disk-cached ones always, cold ones in order of
    ``uses`` (executions of the instructions calling them) while they fit, at least one."""
    on_disk = lib.disk_stems()
    cold: list[KernelCall] = []
    for spec, disp, sig in calls:
        if sig in disp.overloads:
            continue
        if f"nki_k_{spec.key}" in on_disk:
            with PARSE_LOCK:  # (numba's compiler converts ASTs: one thread at a time)
                disp.compile(sig)  # a disk-cache load
        else:
            cold.append((spec, disp, sig))
    cold.sort(key=lambda c: -uses.get(c[0].key, 0))
    deferred: set[str] = set()
    compiled = 0
    for spec, disp, sig in cold:
        if spec.key in deferred or sig in disp.overloads:
            continue
        spent = time.perf_counter() - start
        if compiled and spent + kernel_estimate(first_guess) > limit:
            deferred.add(spec.key)
            continue
        t = time.perf_counter()
        with PARSE_LOCK:
            disp.compile(sig)
        _TIMES.append(time.perf_counter() - t)
        compiled += 1
    return Built(frozenset(deferred), compiled)


def hosted_note(limit: float, hosted: int, total: int, kernels_left: int, driver: bool) -> str:
    """``RunInfo.reason`` of a launch that hosted instructions for the compile budget."""
    left = f"{kernels_left} library kernel{'s' if kernels_left != 1 else ''}"
    if driver:
        left += " and the driver"
    return (
        f"numba: compile budget of {limit:g} s spent: {hosted} of {total} instructions hosted "
        f"on the interpreter this launch; {left} left to compile at the next launches ({ENV})"
    )


def driver_note(limit: float, estimate: float) -> str:
    """``RunInfo.reason`` of a launch whose driver ran as plain Python for the budget."""
    return (
        f"numba: the driver ran as plain Python (its ~{estimate:.2g} s compile did not fit in "
        f"what remained of the {limit:g} s compile budget); 0 library kernels and the driver "
        f"left to compile at the next launches ({ENV})"
    )
