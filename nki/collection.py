"""Python's cyclic garbage collector while kernels are traced. A trace allocates objects that
live on (the IR, its accesses and affine terms), and the collections they trigger rescan them:
29% of a 20,000-instruction trace. ``paused`` switches collection off for a trace.

The switch is the process's, so the pauses of all threads are counted under one lock: the
first pause that starts while collection is on switches it off, and the last one to end
switches it back on; a pause that starts while collection is off (the process's own choice)
touches nothing. Counting matters: with each trace saving and restoring the switch on its own,
a thread could read "off" while another's trace had it off, switch it off after that trace
had switched it on again, and leave it off for good. A trace that never ends (a thread stuck
in a kernel's Python) keeps collection off while it runs; reference counting still frees
everything that is not in a cycle."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused"]

_LOCK = threading.Lock()
_STATE = {"count": 0, "resume": False}  # (pauses running; whether the last one switches it on)


@contextmanager
def paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (see the module): nested and concurrent
    blocks share one pause, which ends with the last of them; collection that was off when
    the first began stays off."""
    entered = False
    try:
        with _LOCK:
            if _STATE["count"] == 0:
                _STATE["resume"] = gc.isenabled()
                if _STATE["resume"]:
                    gc.disable()
            _STATE["count"] += 1
            entered = True
        yield
    finally:
        if entered:
            with _LOCK:
                _STATE["count"] -= 1
                if _STATE["count"] == 0 and _STATE["resume"]:
                    _STATE["resume"] = False
                    gc.enable()
