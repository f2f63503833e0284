"""One differential harness for every backend of the registry (``simulator/backends.py``).

``run_backends(kernel, grid, *args)`` launches the kernel once on each backend (in the
registry's order of preference) and asserts that every launch gives the reference
interpreter's results bit for bit (the returned arrays, and the arguments the kernel writes
when ``make_args`` makes fresh ones per launch), or, when one launch raises, that every launch
raises the same error (class, code, line, instance and message); the reference's error is then
raised. ``ran`` names backends that must really run the kernel (not hand it to the next one);
a backend asked for alone that hands a kernel on does so silently here.

Test files import it as ``backends`` (tests/ is on ``sys.path``, see conftest.py)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nki.errors import NKIError
from simulator import backends as registry
from simulator.compiled.backend import BackendFallbackWarning
from simulator.instances import RunInfo

BACKENDS = tuple(b.name for b in registry.BACKENDS)
REFERENCE = registry.REFERENCE


def bits(a: np.ndarray) -> np.ndarray:
    """The array's elements as unsigned integers of their width (their bit patterns)."""
    a = np.ascontiguousarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    """The same dtype, shape and bits (signs of zero included), NaN where the other is NaN:
    which NaN an operation on two NaNs (or a max over a row holding several) gives, its sign
    and payload, is outside the backends' promise (IEEE leaves it open; see docs/backends.md)."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    g, w = bits(got), bits(want)
    if np.array_equal(g, w):
        return True
    if got.dtype.kind in "iub":
        return False
    both = np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
    return bool(np.array_equal(np.where(both, 0, g), np.where(both, 0, w)))


def same(got: np.ndarray, want: np.ndarray) -> bool:
    """The same dtype and values, NaN positions included."""
    g = np.asarray(got).astype(np.float64)
    w = np.asarray(want).astype(np.float64)
    return got.dtype == want.dtype and np.array_equal(g, w, equal_nan=True)


@dataclass
class Runs:
    """What each backend's launch gave: its result, the arguments after it, the configured
    kernel (``last_run``, ``last_ir``)."""

    results: dict[str, Any] = field(default_factory=dict)
    arguments: dict[str, tuple] = field(default_factory=dict)
    kernels: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, backend: str) -> Any:
        return self.results[backend]

    def info(self, backend: str) -> RunInfo:
        return self.kernels[backend].last_run

    def kernel(self, backend: str) -> Any:
        return self.kernels[backend]

    def against(self, backend: str) -> tuple[Any, Any, RunInfo]:
        """(``backend``'s result, the reference's result, ``backend``'s run info)."""
        return self.results[backend], self.results[REFERENCE], self.info(backend)

    def args_against(self, backend: str) -> tuple[tuple, tuple, RunInfo]:
        """(``backend``'s arguments after its launch, the reference's, ``backend``'s run info)."""
        return self.arguments[backend], self.arguments[REFERENCE], self.info(backend)


def _arrays(value: Any) -> list[np.ndarray]:
    if value is None:
        return []
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in _arrays(v)]
    return [value] if isinstance(value, np.ndarray) else []


def _error(e: NKIError) -> tuple:
    line = e.loc.line if e.loc is not None else None
    instance = None if e.instance is None else tuple(e.instance)
    return type(e), e.code, line, instance, str(e)


def run_backends(
    kernel: Any,
    grid: Any,
    *args: Any,
    make_args: Callable[[], Sequence[Any]] | None = None,
    backends: Sequence[str] = BACKENDS,
    ran: Sequence[str] = (),
    compare: Callable[[np.ndarray, np.ndarray], bool] = same_bits,
    **opts: Any,
) -> Runs:
    """Launch ``kernel`` (``kernel[grid]`` unless ``grid`` is None) on each of ``backends`` with
    ``SimConfig`` settings ``opts``, on ``args`` (or on fresh ``make_args()`` per launch), and
    check every launch against the reference's with ``compare`` (bit for bit by default)."""
    assert REFERENCE in backends
    runs = Runs()
    errors: dict[str, NKIError] = {}
    for b in backends:
        k = kernel.configure(backend=b, **opts)
        launch = k if grid is None else k[grid]
        these = tuple(make_args()) if make_args is not None else args
        runs.kernels[b] = k
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", BackendFallbackWarning)
                runs.results[b] = launch(*these)
        except NKIError as e:
            errors[b] = e
        runs.arguments[b] = these
    if errors:
        assert set(errors) == set(backends), f"only {sorted(errors)} raised: {errors}"
        want = _error(errors[REFERENCE])
        for b, e in errors.items():
            assert _error(e) == want, f"{b} raised {_error(e)}, {REFERENCE} {want}"
        raise errors[REFERENCE]
    for b in ran:
        info = runs.info(b)
        assert info.backend == b, f"{b} did not run the kernel: {info.reason}"
    want_out, want_args = _arrays(runs.results[REFERENCE]), _arrays(runs.arguments[REFERENCE])
    for b in backends:
        got_out, got_args = _arrays(runs.results[b]), _arrays(runs.arguments[b])
        assert len(got_out) == len(want_out), f"{b}: {len(got_out)} outputs, {len(want_out)}"
        for i, (g, w) in enumerate(zip(got_out, want_out)):
            assert compare(g, w), f"output {i} of {b} differs from {REFERENCE}'s"
        if make_args is not None:
            for i, (g, w) in enumerate(zip(got_args, want_args)):
                assert compare(g, w), f"argument {i} after {b}'s launch differs from {REFERENCE}'s"
    return runs
