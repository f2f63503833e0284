"""How the C heap keeps the memory of the simulator's arrays between instructions and launches.

glibc's ``malloc`` gives memory back to the system whenever the free memory at the top of its
heap exceeds a trim threshold, and serves an allocation above an mmap threshold with fresh
pages; both thresholds start small (128 KiB) and grow as it goes. A batched launch allocates
and frees tiles and NumPy temporaries of kilobytes to tens of megabytes, many live at once, over
and over: the heap is trimmed and grown back again and again, and the system zeroes and maps
every page of it anew each time. On the 2-core development VM the flash-attention benchmark
took 48,000 page faults and 0.14 s of system time per launch that way, half its time.

So at its first launch the simulator sets, once per process, the two thresholds to the largest
values glibc's own adjustment would reach (32 MiB for mmap, 64 MiB for the trim), from the
start: freed memory up to that much stays in the heap for the next instruction and launch (the
flash-attention launch: 3 page faults, about 0.1 s). The price is memory the process keeps: up to
64 MiB free at the top of the heap, and blocks up to 32 MiB come from the heap, whose free space
between live blocks is reused by later allocations but not given back.
``$NKI_SIM_HEAP=system`` leaves the allocator as it is. Other C libraries (macOS, musl) are
left alone."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading

ENV = "NKI_SIM_HEAP"
MMAP = 32 << 20  # (glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: it refuses more)
TRIM = 2 * MMAP  # (what its dynamic adjustment sets with that mmap threshold)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # (glibc's malloc.h)

_done = False
_lock = threading.Lock()
state = "untouched"  # "kept" (the thresholds set), "system" (left by request), "untouched"


def keep_freed_memory() -> None:
    """Set glibc's thresholds as the module says, once per process (at a launch's first
    run); nothing under ``$NKI_SIM_HEAP=system`` or without glibc."""
    global _done, state
    if _done:
        return
    with _lock:
        if _done:
            return
        _done = True
        if os.environ.get(ENV, "").strip().lower() == "system":
            state = "system"
            return
        libc = _glibc()
        if libc is not None and libc.mallopt(_M_MMAP_THRESHOLD, MMAP) == 1:
            if libc.mallopt(_M_TRIM_THRESHOLD, TRIM) == 1:
                state = "kept"


def _glibc() -> ctypes.CDLL | None:
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except (AttributeError, OSError, ValueError):  # (no confstr, no such name, no libc)
        return None
    libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return libc
