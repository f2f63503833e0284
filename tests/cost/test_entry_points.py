"""The estimate through the public entry points: nki.estimate, nki.benchmark / nki.profile (and
their grid-launch forms), the trace and PNG exports and ``nki-compat --profile``."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

import nki
import nki.language as nl
import nki.typing as nt
from frontends.compat import main as compat_main
from frontends.compat import uninstall
from simulator.cost.export import trace_events, write_png


def _double_rows(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    x = nl.load(a[i * 128 : (i + 1) * 128, :])
    nl.store(out[i * 128 : (i + 1) * 128, :], value=nl.multiply(x, 2.0))
    return out


@pytest.mark.parametrize("tool", [nki.benchmark, nki.profile, nki.baremetal, nki.jit])
def test_tools_accept_a_grid_launch(tool):
    k = nki.jit(_double_rows)
    a = np.random.default_rng(0).random((256, 64), dtype=np.float32)
    wrapped = tool(k[2])
    np.testing.assert_array_equal(wrapped(a), 2 * a)  # both instances ran
    assert wrapped.last_ir.grid.shape == (2,)


def test_benchmark_latency_percentiles_are_the_estimate():
    k = nki.benchmark(warmup=1, iters=3)(_double_rows)
    a = np.random.default_rng(1).random((128, 512), dtype=np.float32)
    np.testing.assert_array_equal(k(a), 2 * a)
    expected = nki.estimate(_double_rows)(a)
    res = k.benchmark_result
    assert res.estimate.latency_ns == expected.latency_ns
    for p in (1, 50, 99):
        assert res.nc_latency.get_latency_percentile(p) == pytest.approx(expected.latency_us)
    assert res.wall_us.get_latency_percentile(50) > 0


@pytest.mark.filterwarnings("ignore::nki.errors.NKIWarning")  # writes part of its output
def test_benchmark_of_a_grid_launch_scales_the_estimate():
    a = nt.tensor[[512, 512], nl.float32]
    k1 = nki.benchmark(nki.jit(_double_rows))
    k4 = nki.benchmark(nki.jit(_double_rows)[4])
    k1(a)
    k4(a)
    one = k1.benchmark_result.nc_latency.get_latency_percentile(50)
    assert k4.benchmark_result.nc_latency.get_latency_percentile(50) == pytest.approx(4 * one)


def test_profile_writes_the_trace(tmp_path):
    path = str(tmp_path / "k.json")
    k = nki.profile(save_trace_name=path, working_directory=str(tmp_path))(_double_rows)
    k(nt.tensor[[128, 1024], nl.float32])
    trace = json.load(open(path))
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert names == {"vector", "dma.q0", "dma.q1"}
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    line = _double_rows.__code__.co_firstlineno + 4
    assert any(s["name"] == f"nl.multiply @ test_entry_points.py:{line}" for s in slices)
    # slices on one track never overlap: each engine / queue runs in program order
    for tid in {s["tid"] for s in slices}:
        spans = sorted((s["ts"], s["ts"] + s["dur"]) for s in slices if s["tid"] == tid)
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(spans, spans[1:]))


def test_trace_has_one_track_per_engine_and_queue():
    from .matmul_kernels import matmul_optimised

    r = nki.estimate(matmul_optimised, target="trn1")(
        nt.tensor[[1024, 512], nl.bfloat16], nt.tensor[[1024, 2048], nl.bfloat16]
    )
    ev = trace_events(r)["traceEvents"]
    tracks = [e["args"]["name"] for e in ev if e.get("name") == "thread_name"]
    assert tracks == ["tensor", "vector", "dma.q0", "dma.q1", "dma.q2"]
    repeats = [e for e in ev if e["ph"] == "X" and "iterations" in e["args"]]
    assert repeats and all(e["name"].startswith("x") for e in repeats)


def test_png_timeline(tmp_path):
    pytest.importorskip("matplotlib")
    r = nki.estimate(nki.jit(_double_rows)[2])(nt.tensor[[256, 1024], nl.float32])
    path = write_png(r, str(tmp_path / "t.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_compat_cli_profile_prints_summary_and_writes_trace(tmp_path, capsys, monkeypatch):
    script = tmp_path / "script.py"
    script.write_text(
        "import numpy as np\n"
        "import neuronxcc.nki as nki\n"
        "import neuronxcc.nki.language as nl\n"
        "@nki.jit\n"
        "def k(a):\n"
        "    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)\n"
        "    nl.store(out, value=nl.exp(nl.load(a)))\n"
        "    return out\n"
        "print(k(np.zeros((128, 256), np.float32)).sum())\n"
    )
    trace = str(tmp_path / "trace.json")
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    try:
        assert compat_main([f"--profile={trace}", str(script)]) == 0
    finally:
        uninstall()  # the runner leaves the aliases installed for the script's process
    out = capsys.readouterr().out
    assert "32768.0" in out  # the script ran: exp(0) summed
    assert "k on trn2: estimated" in out and "script.py:7" in out
    assert os.path.exists(trace)
