"""The per-iteration loop of ``benchmarks/run.py``: a running sum over rows on the Numba
backend (a loop that cannot batch), timed from an empty kernel cache in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import nki
import nki.language as nl

ROOT = Path(__file__).resolve().parents[1]


@nki.jit(backend="numba")
def row_scan(x):
    """A per-iteration loop that cannot batch: the running sum of ``x``'s rows, one load and
    one dependent add per row."""
    out = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((1, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    for i in nl.sequential_range(x.shape[0]):
        acc[...] = nl.add(acc, nl.load(x[i : i + 1, :]))
    nl.store(out, value=acc)
    return out


def loop_steps(steps: int) -> dict:
    """``row_scan`` over ``steps // 2`` rows (``steps`` instructions) on the Numba backend, in
    this process: the first call, the calls until the compile budget has built everything
    (the first hosts what it left for later), and a warm call; the sum is checked against
    NumPy's sequential one."""
    x = np.random.default_rng(0).standard_normal((steps // 2, 8)).astype(np.float32)
    calls = []
    for _ in range(10):
        t0 = time.perf_counter()
        got = row_scan(x)
        calls.append(time.perf_counter() - t0)
        if "left to compile" not in (row_scan.last_run.reason or ""):
            break
    ran = row_scan.last_run.backend
    t0 = time.perf_counter()
    row_scan(x)
    warm = time.perf_counter() - t0
    want = np.add.accumulate(x, axis=0)[-1:]
    assert np.allclose(got, want, rtol=1e-5, atol=1e-5), "wrong result"
    return {"first_s": calls[0], "compiling_s": calls, "warm_s": warm, "ran": ran}


def long_loop_run(steps: int) -> dict:
    """``loop_steps`` in a fresh process with an empty kernel cache (a cold first call)."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NKI_SIM_CACHE_DIR": cache}
        code = f"import json, benchmarks.long_loop as r; print(json.dumps(r.loop_steps({steps})))"
        r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                           text=True, check=True)  # fmt: skip
    return json.loads(r.stdout.strip().splitlines()[-1])
