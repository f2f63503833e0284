"""NumPy interpreter vs Numba backend: median time per launch after warm-up, with the Numba
compile (or disk-cache load) time of the first call reported separately, and plain NumPy for
scale.

Run: python benchmarks/numba_vs_numpy.py [--repeat 5] [--out benchmarks/results/numba_vs_numpy.json]
Set NKI_SIM_CACHE_DIR to an empty directory to measure a cold compile."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import nki  # noqa: E402
import nki.language as nl  # noqa: E402
from benchmarks.run import tensor_add  # noqa: E402  (the same kernel in both harnesses)


@nki.jit
def small_tiles(a, b):
    """Grid 8; each instance walks its rows in (128, 64) tiles; the last tile is ragged."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    n, m = a.shape
    per = (n + 7) // 8
    ip, jf = nl.arange(128)[:, None], nl.arange(m)[None, :]
    base = nl.program_id(0) * per
    for t in nl.affine_range((per + 127) // 128):
        rows = base + t * 128 + ip
        ok = (t * 128 + ip < per) & (rows < n)
        x = nl.load(a[rows, jf], mask=ok)
        y = nl.load(b[rows, jf], mask=ok)
        z = nl.maximum(nl.multiply(x, y), 0.0)
        s = nl.sum(z, axis=1)
        nl.store(out[rows, jf], value=nl.add(z, s), mask=ok)
    return out


@nki.jit
def small_tiles_exp(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    n, m = a.shape
    per = n // 8
    ip, jf = nl.arange(128)[:, None], nl.arange(m)[None, :]
    for t in nl.affine_range(per // 128):
        rows = nl.program_id(0) * per + t * 128 + ip
        nl.store(out[rows, jf], value=nl.exp(nl.load(a[rows, jf])))
    return out


def _small_ref(a, b):
    z = np.maximum(a * b, np.float32(0))
    return z + z.sum(axis=1, keepdims=True)


_EXEC: list[float] = []  # time spent inside simulator.launch.run (either backend)


def _timed_executor() -> None:
    """Record the executor's share of each launch (without the launch path's input / output
    copies, which are the same for both backends)."""
    from simulator import launch

    inner = launch.run

    def run(*a, **kw):
        t0 = time.perf_counter()
        try:
            return inner(*a, **kw)
        finally:
            _EXEC.append(time.perf_counter() - t0)

    launch.run = run


def _median(fn, repeat: int) -> tuple[float, float]:
    """Median wall time per call, and median executor time per call."""
    times = []
    _EXEC.clear()
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), statistics.median(_EXEC) if _EXEC else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "numba_vs_numpy.json"))
    args = ap.parse_args()
    _timed_executor()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1024, 2048)).astype(np.float32)
    b = rng.standard_normal((1024, 2048)).astype(np.float32)
    n_small = 8 * 64 * 128 - 40  # 8 instances x 64 tiles of (128, 64), last tile ragged
    sa = rng.standard_normal((n_small, 64)).astype(np.float32)
    sb = rng.standard_normal((n_small, 64)).astype(np.float32)
    ea = rng.standard_normal((8 * 64 * 128, 64)).astype(np.float32)
    cases = [
        ("tensor_add grid 8x4 (1024x2048 fp32)", tensor_add[8, 4], (a, b), lambda: a + b),
        ("small tiles grid 8 x 64 tiles, masked", small_tiles[8], (sa, sb), None),
        ("exp small tiles grid 8 x 64 tiles", small_tiles_exp[8], (ea,), lambda: np.exp(ea)),
    ]
    rows = []
    for name, launch, xs, ref in cases:
        k = launch.kernel
        interp = k.configure(backend="numpy")[launch.grid.shape]
        numba = k.configure(backend="numba")[launch.grid.shape]
        expect = interp(*xs)
        t0 = time.perf_counter()
        got = numba(*xs)
        first = time.perf_counter() - t0
        assert numba.last_run.backend == "numba", name
        assert np.array_equal(got, expect), name
        t_int, x_int = _median(lambda f=interp, xs=xs: f(*xs), args.repeat)
        t_nb, x_nb = _median(lambda f=numba, xs=xs: f(*xs), args.repeat)
        ref_fn = ref if ref is not None else (lambda xs=xs: _small_ref(*xs))
        t_np, _ = _median(ref_fn, args.repeat)
        row = {
            "case": name,
            "interpreter_s": t_int,
            "numba_s": t_nb,
            "interpreter_executor_s": x_int,
            "numba_executor_s": x_nb,
            "numba_first_call_s": first,
            "numpy_s": t_np,
        }
        rows.append(row)
        print(
            f"{name:38s} interp {t_int * 1e3:7.1f} ms ({x_int * 1e3:7.1f})  numba "
            f"{t_nb * 1e3:6.1f} ms ({x_nb * 1e3:6.1f})  first call {first:5.2f} s  "
            f"numpy {t_np * 1e3:5.1f} ms"
        )
    print("(in parentheses: time inside the executor, without the launch's input/output copies)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps({"python": platform.python_version(), "results": rows}, indent=2)
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
