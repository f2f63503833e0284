"""What a kernel prints while it is traced, held until the trace is kept.

A trace may restart (a loop unrolled because Python needs its iterator's int, the generation
found later, one trace per core): the Python code before the restart runs again. Its output
(``print`` in the kernel body) is held per attempt and written once, by the attempt that
ends the trace (or fails), so a restart does not print it twice. Other threads' output passes
straight through."""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class _Router(io.TextIOBase):
    """``sys.stdout`` while traces run: the writes of a thread holding its output go to its
    buffer, every other write to the stream that was ``sys.stdout``."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.held: dict[int, list[str]] = {}

    def write(self, s: str) -> int:
        buf = self.held.get(threading.get_ident())
        if buf is None:
            return self.real.write(s)
        buf.append(s)
        return len(s)

    def flush(self) -> None:
        self.real.flush()

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno...
        return getattr(self.real, name)


_LOCK = threading.Lock()
_USERS = [0]


@contextmanager
def held_output() -> Iterator[list[str]]:
    """Hold what this thread writes to ``sys.stdout`` inside the block in the list it yields
    (the caller decides whether to write it with :func:`release`)."""
    with _LOCK:
        router = sys.stdout if isinstance(sys.stdout, _Router) else _Router(sys.stdout)
        sys.stdout = router
        _USERS[0] += 1
    tid = threading.get_ident()
    outer = router.held.get(tid)
    buf: list[str] = []
    router.held[tid] = buf
    try:
        yield buf
    finally:
        if outer is None:
            router.held.pop(tid, None)
        else:
            router.held[tid] = outer
        with _LOCK:
            _USERS[0] -= 1
            if _USERS[0] == 0 and sys.stdout is router:
                sys.stdout = router.real


def release(buf: list[str]) -> None:
    """Write held output (to an enclosing holder, or to the stream)."""
    if buf:
        sys.stdout.write("".join(buf))
        buf.clear()
