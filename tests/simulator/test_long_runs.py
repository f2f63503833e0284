"""Long launches: a launch estimated above the progress threshold says so with its estimate and
shows its progress; Ctrl-C stops it cleanly on every backend that loops in Python; the
checks="full" unwritten-output check stays within about the output's size of extra memory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tracemalloc

import numpy as np
import pytest

import nki
import nki.language as nl
from nki.errors import NKIRuntimeError
from simulator import progress


@nki.jit
def add_many_times(a, n):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    t[...] = nl.load(a)
    for _ in nl.sequential_range(n):
        t[...] = nl.add(t, 1.0)
    nl.store(out, value=t)
    return out


def test_estimate_counts_every_execution():
    a = np.zeros((4, 8), np.float32)
    add_many_times(a, 7)
    execs, elements = progress.work(add_many_times.last_ir)
    assert (execs, elements) == (1 + 7 + 1, 32 * 9)


@pytest.mark.parametrize("backend", ["numpy", "batched"])
def test_a_long_launch_shows_its_estimate_and_progress(backend, monkeypatch, capsys):
    monkeypatch.setenv(progress.ENV, "0.01")
    monkeypatch.setattr(progress, "LOG_EVERY", 0.0)  # a line at every check
    monkeypatch.setattr(progress, "DELAY", 0.0)  # shown from the start
    a = np.zeros((4, 8), np.float32)
    got = add_many_times.configure(backend=backend)(a, 3000)
    np.testing.assert_array_equal(got, a + 3000)
    err = capsys.readouterr().err
    assert "kernel 'add_many_times' is estimated to take ~0.2 s (3,002 instruction" in err
    assert "% done after" in err and "left" in err
    assert err.rstrip().splitlines()[-1].startswith("nki-sim: 'add_many_times' finished: 100.0%")


def test_a_short_launch_shows_nothing(capsys):
    add_many_times(np.zeros((4, 8), np.float32), 3)
    assert capsys.readouterr().err == ""


_SCRIPT = """
import sys
import numpy as np
import nki, nki.language as nl

@nki.jit(backend=sys.argv[1])
def spin(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    t[...] = nl.load(a)
    for _ in nl.sequential_range(10_000_000):
        t[...] = nl.add(t, 1.0)
    nl.store(out, value=t)
    return out

spin(np.zeros((4, 8), np.float32))
print("done", flush=True)
"""


@pytest.mark.parametrize("backend", ["numpy", "batched"])
def test_ctrl_c_stops_a_long_launch_cleanly(backend, tmp_path):
    script = tmp_path / "spin.py"
    script.write_text(_SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), backend], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, progress.ENV: "1"},
    )  # fmt: skip
    try:
        first = proc.stderr.readline()  # the estimate, once the launch has run for a second
        assert "kernel 'spin' is estimated to take" in first, first
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        t0 = time.perf_counter()
        out, err = proc.communicate(timeout=30)
        elapsed = time.perf_counter() - t0
    finally:
        proc.kill()
    assert proc.returncode != 0 and "done" not in out
    assert "nki-sim: 'spin' stopped (KeyboardInterrupt) at" in err, err[-2000:]
    assert err.rstrip().endswith("KeyboardInterrupt"), err[-2000:]
    assert elapsed < 10.0, elapsed


@nki.jit(checks="full")
def first_tile_only(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:128, :], value=nl.load(a[0:128, :]))
    return out


def test_full_checks_report_a_mostly_unwritten_output_in_bounded_memory():
    a = np.ones((8192, 512), np.float32)  # 16 MiB; 4M elements never written
    tracemalloc.start()
    try:
        with pytest.raises(NKIRuntimeError) as e:
            first_tile_only(a)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert e.value.code == "err_unwritten_output"
    assert "4128768 element(s) no instruction wrote (within [128:8192, 0:512]" in str(e.value)
    assert peak < 2.0 * a.nbytes, peak / a.nbytes  # the output itself and < 1x more
