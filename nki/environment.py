"""Environment variables read per launch, cheaply: a launch sees the values ``os.environ``
holds when it starts, so a variable changed between launches holds for the next one."""

from __future__ import annotations

import os
from collections.abc import Callable

# os.environ's own store, keyed by encoded names on POSIX: a launch reads its variables there
# (each ``os.environ.get`` encodes the name and decodes the value, a few microseconds per
# launch); the values are what ``os.environ`` holds at this moment
_ENV_DATA = getattr(os.environ, "_data", None)


def env_reader(names: tuple[str, ...]) -> Callable[[], tuple[str | bytes | None, ...]]:
    """A function returning the raw values of environment variables ``names`` now (None when
    unset; ``os.fsdecode`` gives the text), read straight from ``os.environ``'s store."""
    if os.name == "posix" and isinstance(_ENV_DATA, dict):
        raw, get = tuple(os.environ.encodekey(k) for k in names), _ENV_DATA.get
        return lambda: tuple(map(get, raw))
    return lambda: tuple([os.environ.get(k) for k in names])
