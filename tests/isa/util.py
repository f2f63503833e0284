"""Helpers for the nki.isa tests: run a kernel on a target, check an NKIError precisely."""

from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest

import nki

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(1234)


def run(fn, *args, target: str = "trn2", jit_opts: dict | None = None, **kw):
    """Run ``fn`` as an @nki.jit kernel on ``target`` with NumPy inputs (``jit_opts``: simulator
    options such as ``precise_fp`` / ``checks`` for this kernel)."""
    return nki.jit(fn, platform_target=target, **(jit_opts or {}))(*args, **kw)


def line_of(fn, marker: str = "# ERR") -> int:
    """Absolute line number of the first source line of ``fn`` containing ``marker``."""
    lines, start = inspect.getsourcelines(fn)
    for i, text in enumerate(lines):
        if marker in text:
            return start + i
    raise AssertionError(f"marker {marker!r} not in {fn.__name__}")


def expect_error(fn, *args, cls, code, fragments=(), target="trn2", marker="# ERR", **kw):
    """The kernel fails with ``cls`` / ``code``, a message containing every fragment, located
    at the kernel line carrying ``marker``."""
    with pytest.raises(cls) as ei:
        run(fn, *args, target=target, **kw)
    e = ei.value
    assert e.code == code, (e.code, e.message)
    for f in fragments:
        assert f in e.message, (f, e.message)
    assert e.loc is not None and e.loc.line == line_of(fn, marker), (e.loc, e.message)
    return e


def rand(shape, dtype=np.float32, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32).astype(dtype)


def f32(x):
    return np.asarray(x).astype(np.float32)


def close(got, want, dtype=np.float32, rtol=None, atol=None):
    """Compare against an fp32 reference rounded to the output dtype."""
    want = np.asarray(want, dtype=np.float32)
    if dtype == BF16:
        rtol = 1e-2 if rtol is None else rtol
        atol = 1e-2 if atol is None else atol
    else:
        rtol = 1e-5 if rtol is None else rtol
        atol = 1e-5 if atol is None else atol
    np.testing.assert_allclose(f32(got), want, rtol=rtol, atol=atol)
