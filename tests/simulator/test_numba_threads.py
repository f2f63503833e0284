"""The Numba backend's disk cache and compiler are safe for threads: generated modules written
by many threads at once never collide on a temporary file, every compile holds the parse lock,
and threads launching kernels on a cold cache all run compiled with NumPy's results
(``numba_threads.py``, in a fresh process and cache directory, a few times; the issue's
100-run loop is the same script)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

from simulator.compiled import budget as numba_budget
from simulator.compiled import kernels as lib

from helpers import run_threads

SCRIPT = Path(__file__).with_name("numba_threads.py")


def test_generated_modules_written_by_many_threads_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("NKI_SIM_CACHE_DIR", str(tmp_path))
    stems = [f"thread_race_{i}" for i in range(60)]
    errors: list[str] = []
    barrier = threading.Barrier(8)

    def run(_: int) -> None:
        barrier.wait(timeout=30)
        for s in stems:
            try:
                assert lib.load(s, f"VALUE = {s!r}\n").VALUE == s
            except Exception as e:  # noqa: BLE001 - collected and asserted below
                errors.append(repr(e))

    try:
        run_threads(run, 8, switch=1e-6)
    finally:
        for s in stems:
            lib.purge(s)
    assert not errors, errors[:3]
    assert not list((tmp_path / "numba").glob(".*tmp"))  # no temporary file left behind


def test_threads_on_a_cold_cache_run_compiled(tmp_path):
    for run in range(2):
        cache = tmp_path / f"cache{run}"
        env = {**os.environ, "NKI_SIM_CACHE_DIR": str(cache), numba_budget.ENV: "inf"}
        r = subprocess.run(
            [sys.executable, str(SCRIPT), "6"], env=env, capture_output=True, text=True
        )
        assert r.returncode == 0 and r.stdout.strip() == "ok", (r.stdout, r.stderr[-2000:])


def test_numba_compiles_hold_the_parse_lock(tmp_path, monkeypatch):
    """Numba's compiler converts ASTs, which CPython does not allow in two threads at once
    (``SystemError: AST constructor recursion depth mismatch``): every compile the backend
    starts holds the lock that tracing's parses take."""
    from numba.core.dispatcher import Dispatcher
    from numba_threads import exp_rows

    from nki.parsing import PARSE_LOCK

    held: list[bool] = []
    real = Dispatcher.compile

    def compile_(self, sig):  # noqa: ANN001, ANN202 - numba's signature
        held.append(PARSE_LOCK._is_owned())
        return real(self, sig)

    monkeypatch.setattr(Dispatcher, "compile", compile_)
    monkeypatch.setenv("NKI_SIM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(numba_budget.ENV, "inf")
    a = np.random.default_rng(3).standard_normal((96, 24)).astype(np.float32)
    k = exp_rows.configure(backend="numba")
    np.testing.assert_allclose(k(a), np.exp(a), rtol=1e-6)
    assert k.last_run.backend == "numba"
    assert held and all(held), held
