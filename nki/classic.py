"""Classic ``neuronxcc.nki`` entry points that exist only for tooling: ``nki.trace``,
``nki.benchmark`` and ``nki.profile``.

On hardware these compile a kernel and measure or profile it on a NeuronCore. Here they run the
kernel in the simulator, so a script written for them runs unmodified and its results can be
checked; compile and profiling options (``save_neff_name``, ``save_trace_name``,
``working_directory``, ``profile_nth``, ``additional_compile_opt``, ...) are accepted and
ignored. Latencies reported by ``benchmark_result`` are the cost model's estimate
(``simulator.cost``, docs/guides/performance.md); the simulator's wall-clock time per run is
kept in ``benchmark_result.wall_us``. ``nki.profile(save_trace_name=...)`` writes the estimate's
Perfetto / Chrome trace JSON there.

Both accept shape placeholders as arguments, as the classic tools do:
``kernel(nt.tensor[[250, 512], nl.float32])`` runs the kernel on a seeded random array of that
shape and dtype.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from simulator.cost import estimate_ir
from simulator.cost.export import write_trace

from . import dtypes
from .grids import parse_grid
from .jit import Kernel, Launch
from .tracer import classic_mode, onchip_return, set_classic_mode, trace_with_unrolling
from .typing import _TensorType

__all__ = [
    "trace",
    "benchmark",
    "profile",
    "BenchmarkResult",
    "materialize_placeholder",
    "onchip_return",
    "classic_mode",
    "set_classic_mode",
    "trace_with_unrolling",
]


def trace(func: Any = None, **kwargs: Any) -> Any:
    """Classic ``nki.trace``: mark a function as an NKI kernel (same as ``nki.jit``); run it with
    ``nki.simulate_kernel(kernel, *arrays)`` or by calling it with NumPy arrays."""
    if func is None:
        return lambda f: Kernel(f, mode="trace", **kwargs)
    return Kernel(func, mode="trace", **kwargs)


def materialize_placeholder(arg: Any, rng: np.random.Generator) -> Any:
    """An array for a classic shape placeholder ``nt.tensor[[P, F], dtype]`` (uniform in [0, 1)
    for floats, small non-negative integers otherwise); any other argument is returned as is."""
    if not isinstance(arg, _TensorType) or not arg.shape:
        return arg
    spec = arg.shape
    if len(spec) == 2 and isinstance(spec[0], (list, tuple)):
        shape, dt = tuple(int(d) for d in spec[0]), spec[1]
    else:
        shape, dt = tuple(int(d) for d in spec), "float32"
    name = dtypes.name_of(dt)
    if dtypes.is_float(name):
        return rng.random(shape, dtype=np.float32).astype(dtypes.storage(name))
    return rng.integers(0, 8, size=shape).astype(dtypes.storage(name))


class _Latency:
    """Latency samples in microseconds."""

    def __init__(self, samples_us: list[float]) -> None:
        self.samples_us = samples_us

    def get_latency_percentile(self, percentile: float) -> float:
        """The ``percentile``-th percentile of the samples, in microseconds."""
        return float(np.percentile(self.samples_us, percentile))


class BenchmarkResult:
    """``kernel.benchmark_result``: ``nc_latency.get_latency_percentile(p)`` is the cost
    model's estimated NeuronCore latency in microseconds (deterministic: every percentile is
    the estimate); ``estimate`` is the full report and ``wall_us`` the simulator's wall-clock
    time per run."""

    def __init__(self, wall_us: list[float], estimate: Any) -> None:
        self.wall_us = _Latency(wall_us)
        self.estimate = estimate
        self.nc_latency = _Latency([estimate.latency_us])


class _ToolKernel(Kernel):
    """A kernel wrapped by ``nki.benchmark`` / ``nki.profile``: calls run in the simulator,
    shape placeholders become seeded random arrays, and each call's wall time is recorded."""

    def __init__(self, fn: Any, mode: str, runs: int, **options: Any) -> None:
        super().__init__(fn, mode=mode, **options)
        self.runs = max(1, int(runs))
        self.benchmark_result: BenchmarkResult | None = None
        self.trace_path: str | None = None

    def __getitem__(self, grid: object) -> Launch:
        return _ToolLaunch(self, parse_grid(grid))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _ToolLaunch(self, self.default_grid)(*args, **kwargs)


class _ToolLaunch(Launch):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        rng = np.random.default_rng(0)
        args = tuple(materialize_placeholder(a, rng) for a in args)
        kwargs = {k: materialize_placeholder(v, rng) for k, v in kwargs.items()}
        kernel: _ToolKernel = self.kernel  # type: ignore[assignment]
        samples, out = [], None
        for _ in range(kernel.runs):
            t0 = time.perf_counter()
            out = super().__call__(*args, **kwargs)
            samples.append((time.perf_counter() - t0) * 1e6)
        report = estimate_ir(kernel.last_ir)  # type: ignore[arg-type]
        kernel.benchmark_result = BenchmarkResult(samples, report)
        if kernel.trace_path:
            write_trace(report, kernel.trace_path)
        return out


_IGNORED = (
    "warmup",
    "iters",
    "save_neff_name",
    "save_trace_name",
    "additional_compile_opt",
    "working_directory",
    "profile_nth",
    "overwrite",
    "device_count",
    "num_execs",
)


def _tool(mode: str, kernel: Any, options: dict[str, Any]) -> Any:
    runs = 1
    kept = {k: v for k, v in options.items() if k not in _IGNORED}
    trace_path = options.get("save_trace_name") if mode == "profile" else None

    def make(f: Any) -> _ToolKernel:
        k = _ToolKernel(f, mode, runs, **kept)
        k.trace_path = trace_path
        return k

    return make if kernel is None else make(kernel)


def benchmark(kernel: Any = None, **options: Any) -> Any:
    """Classic ``nki.benchmark(warmup=, iters=, save_neff_name=, ...)``: here the kernel runs
    once per call in the simulator (results are returned as usual) and
    ``kernel.benchmark_result.nc_latency.get_latency_percentile(p)`` reports the cost model's
    estimated latency in microseconds (``benchmark_result.estimate`` is the full report).
    Hardware-only options are accepted and ignored."""
    return _tool("benchmark", kernel, options)


def profile(kernel: Any = None, **options: Any) -> Any:
    """Classic ``nki.profile(working_directory=, save_neff_name=, profile_nth=, ...)``: here the
    kernel runs in the simulator and returns its outputs; ``kernel.benchmark_result.estimate``
    is the cost model's report, and ``save_trace_name=`` receives its Perfetto / Chrome trace
    JSON. Other options are accepted and ignored."""
    return _tool("profile", kernel, options)
