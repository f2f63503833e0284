"""Helpers for the checks tests: run a kernel and assert on the NKIError it raises."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import nki
from nki.errors import NKIError


def line_of(fn, marker: str = "# ERR") -> int:
    """The absolute source line of ``fn`` that carries ``marker``."""
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, text in enumerate(lines) if marker in text]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times"
    return hits[0]


def expect(
    fn, *args, cls=NKIError, code: str, values=(), marker="# ERR", grid=None, **opts
) -> NKIError:
    """Run ``fn`` (a plain function, jitted here with ``opts``) and check the error it raises:
    class, classic code, message fragments and the reported kernel line."""
    k = nki.jit(fn, **opts)
    launch = k[grid] if grid is not None else k
    with pytest.raises(cls) as ei:
        launch(*args)
    e = ei.value
    assert e.code == code, str(e)
    for v in values:
        assert str(v) in str(e), f"{v!r} not in: {e}"
    assert e.loc is not None and e.loc.line == line_of(fn, marker), str(e)
    assert e.loc.file == inspect.getsourcefile(fn)
    return e


def rand(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)
