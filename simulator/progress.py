"""Progress of long launches.

Before a launch runs, its duration is estimated from the instructions it will execute (every
instruction once per grid instance and iteration of its loops; a device loop counts one trip)
with the interpreter's cost model (``compiled/backend.py``: a fixed cost per execution plus a
cost per tile element). A launch estimated above ``THRESHOLD`` seconds
(``$NKI_SIM_PROGRESS_SECONDS``; ``inf`` turns progress off) and still running after
``DELAY`` seconds says so, with the estimate, and then shows its progress: a bar redrawn in
place on a terminal, a line every ``LOG_EVERY`` seconds otherwise (stderr both), and a last
line when it ends or is stopped. (The estimate is the interpreter's: the batched and Numba
backends often finish long before it, and then say nothing.)

The backends count what they execute (``tick``: the interpreter one per instruction and
instance, the batched backend the positions of each batched instruction); compiled (Numba)
loops do not report from inside, so their bar moves only between hosted instructions.
Ctrl-C (``KeyboardInterrupt``) ends the display with a line saying where the launch stopped,
then propagates: the launch's storage is dropped and the BLAS pools are restored by the
context managers around it."""

from __future__ import annotations

import functools
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from nki.environment import env_reader
from nki.ir import Access, KernelIR

ENV = "NKI_SIM_PROGRESS_SECONDS"
THRESHOLD = 3.0  # seconds of estimated run time above which a launch shows progress
LOG_EVERY = 10.0  # seconds between progress lines when stderr is not a terminal
REDRAW = 0.25  # seconds between redraws of the bar
DELAY = 1.0  # seconds a long launch runs before its estimate and progress are shown
PER_EXEC = 50e-6  # the interpreter's cost per instruction execution and per tile element
PER_ELEMENT = 0.5e-9


def threshold() -> float:
    """``$NKI_SIM_PROGRESS_SECONDS`` (read per launch: a changed value holds for the next one),
    else ``THRESHOLD``."""
    got = _parsed(_env()[0])
    return THRESHOLD if got is None else got


_env = env_reader((ENV,))


@functools.lru_cache(maxsize=16)
def _parsed(raw: str | bytes | None) -> float | None:
    text = os.fsdecode(raw).strip() if raw is not None else ""
    try:
        return float(text) if text else None
    except ValueError:
        return None


_WORK: dict[int, tuple[KernelIR, int, int]] = {}  # id(ir) -> (ir, executions, elements)


def work(ir: KernelIR) -> tuple[int, int]:
    """(instruction executions, tile elements they touch) of one launch of ``ir``."""
    hit = _WORK.get(id(ir))
    if hit is not None and hit[0] is ir:
        return hit[1], hit[2]
    grid = math.prod(ir.grid.shape) if ir.grid.shape else 1
    execs = elements = 0
    for instr, loops in ir.instructions():
        runs = grid * math.prod(1 if lp.is_runtime else lp.trip_count for lp in loops)
        execs += runs
        if isinstance(instr.dst, Access):
            elements += runs * math.prod(instr.dst.shape)
    if len(_WORK) > 512:
        _WORK.clear()
    _WORK[id(ir)] = (ir, execs, elements)
    return execs, elements


def estimate_seconds(ir: KernelIR) -> float:
    """The interpreter's estimate of one launch of ``ir`` (an upper bound for the batched and
    compiled backends, which run most kernels much faster)."""
    execs, elements = work(ir)
    return execs * PER_EXEC + elements * PER_ELEMENT


class Progress:
    """The display of one long launch (``total`` executions expected)."""

    def __init__(self, name: str, total: int, estimate: float, stream: TextIO) -> None:
        self.name, self.total, self.estimate, self.stream = name, max(1, total), estimate, stream
        self.done = 0
        self.start = time.monotonic()
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.shown = self.start
        self.every = REDRAW if self.tty else LOG_EVERY
        self.next_check = max(1, self.total // 1000)  # executions between clock reads
        self.announced = False
        self.lock = threading.Lock()
        # said only once the launch has run for DELAY seconds (a backend faster than the
        # estimate shows nothing); a timer, since compiled loops do not tick
        self.timer = threading.Timer(DELAY, self._announce)
        self.timer.daemon = True
        self.timer.start()

    def _announce(self) -> None:
        self.announced = True
        self._write(
            f"nki-sim: kernel '{self.name}' is estimated to take ~{_seconds(self.estimate)} "
            f"({self.total:,} instruction executions)\n"
        )

    def tick(self, n: int) -> None:
        self.done += n
        if self.done >= self.next_check and self.announced:
            self.next_check = self.done + max(1, self.total // 1000)
            now = time.monotonic()
            if now - self.shown >= self.every:
                self.shown = now
                self._show(now)

    def _show(self, now: float) -> None:
        frac = min(1.0, self.done / self.total)
        elapsed = now - self.start
        left = elapsed / frac - elapsed if frac > 0 else self.estimate
        if self.tty:
            bar = "#" * int(frac * 30)
            self._write(
                f"\rnki-sim: '{self.name}' [{bar:<30}] {frac:6.1%} {_seconds(elapsed)} "
                f"elapsed, ~{_seconds(left)} left "
            )
        else:
            self._write(
                f"nki-sim: '{self.name}' {frac:.1%} done after {_seconds(elapsed)}, "
                f"~{_seconds(left)} left\n"
            )

    def close(self, stopped: bool) -> None:
        self.timer.cancel()
        if not self.announced:
            return
        elapsed = time.monotonic() - self.start
        what = "stopped (KeyboardInterrupt) at" if stopped else "finished:"
        frac = min(1.0, self.done / self.total) if stopped else 1.0
        self._write(
            f"{chr(13) if self.tty else ''}nki-sim: '{self.name}' {what} {frac:.1%} after "
            f"{_seconds(elapsed)} (estimated ~{_seconds(self.estimate)})\n"
        )

    def _write(self, text: str) -> None:
        with self.lock:
            try:
                self.stream.write(text)
                self.stream.flush()
            except (OSError, ValueError):  # a closed stream must not fail the launch
                pass


def _seconds(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 120:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"


_LOCAL = threading.local()  # (read through its __dict__: an absent attribute raises inside)


def counter() -> Callable[[int], None] | None:
    """``tick`` of the launch running in this thread, or None when it shows no progress (a
    backend asks once per run, not per instruction)."""
    p = _LOCAL.__dict__.get("progress")
    return None if p is None else p.tick


def tick(n: int = 1) -> None:
    """Count ``n`` instruction executions of the running launch (nothing when it shows no
    progress)."""
    p = _LOCAL.__dict__.get("progress")
    if p is not None:
        p.tick(n)


@contextmanager
def shown(ir: KernelIR) -> Iterator[None]:
    """Show the progress of a launch of ``ir`` while the block runs, when its estimate is
    above the threshold (a launch inside another one's display keeps the outer display)."""
    limit = threshold()
    if _LOCAL.__dict__.get("progress") is not None or not math.isfinite(limit):
        yield
        return
    est = estimate_seconds(ir)
    if est < limit:
        yield
        return
    p = Progress(ir.name, work(ir)[0], est, sys.stderr)
    _LOCAL.progress = p
    stopped = True
    try:
        yield
        stopped = False
    finally:
        _LOCAL.progress = None
        p.close(stopped)
