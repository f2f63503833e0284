"""The benchmark harness runs end to end on tiny shapes (a smoke test of ``benchmarks/run.py``:
every workload's nki-sim result is compared with NumPy's and written to the JSON file)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_benchmarks_quick_mode_checks_every_workload(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks import run

    out = tmp_path / "quick.json"
    assert run.main(["--quick", "--backends", "auto", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    rows = data["results"]
    names = [r["workload"] for r in rows]
    assert len(rows) == 10 and names[-2].startswith("property test, 5 examples")
    assert names[-1].startswith("sequential_range of 1,000 instr") and rows[-1]["ran"] == "numba"
    for r in rows[:-2]:
        assert r["auto_matches_numpy"], r["workload"]
        assert r["auto_s"] > 0 and r["numpy_s"] > 0
    assert data["quick"] and "cores" in data["machine"]
    sys.modules.pop("causal_attention", None)


def test_a_failing_peer_is_recorded_and_the_run_goes_on(tmp_path, monkeypatch):
    """A peer that fails to build, and one whose kernel raises on a workload (Triton 3.6's
    interpreter on runtime loop bounds), are recorded in the JSON file; nki-sim's and the other
    workloads' figures are still there."""
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks import peers, run

    def broken_kernel():
        def call(*_):
            raise TypeError("only 0-dimensional arrays can be converted to Python scalars")

        return call

    def no_build():
        raise RuntimeError("no backend for this platform")

    monkeypatch.setattr(peers, "triton_peers", lambda: {"grid_add": broken_kernel})
    monkeypatch.setattr(peers, "pallas_peers", no_build)
    out = tmp_path / "peers.json"
    argv = ["--quick", "--peers", "--backends", "auto", "--only", "fp32, grid", "--out", str(out)]
    assert run.main(argv) == 0
    data = json.loads(out.read_text())
    assert data["peer_errors"] == {"pallas": "RuntimeError: no backend for this platform"}
    (row,) = data["results"]
    assert row["triton_error"].startswith("TypeError: only 0-dimensional arrays")
    assert row["auto_matches_numpy"] and "triton_s" not in row


def test_a_model_row_alternates_the_calls_and_counts_their_launch_time(monkeypatch):
    """``model_runs._row`` times the compiled and the eager call in turn (a drifting machine
    slows both alike) and reports the compiled calls' mean time inside kernel launches, which
    lies within their wall time."""
    monkeypatch.syspath_prepend(str(ROOT))
    import torch

    from benchmarks import model_runs

    compiled = torch.compile(lambda a, b: torch.relu(a @ b) + 1.0, backend="nki")
    a, b = torch.randn(64, 128), torch.randn(128, 32)
    order: list[str] = []

    def nki_call():
        order.append("nki")
        return compiled(a, b)

    def eager_call():
        order.append("eager")
        return torch.relu(a @ b) + 1.0

    torch.testing.assert_close(nki_call(), eager_call())
    order.clear()
    row = model_runs._row("forward", nki_call, eager_call, repeat=2)
    assert order == ["nki", "eager"] * model_runs.MODEL_REPEAT
    assert 0 < row["launch_s"] <= row["nki_s"] * 1.5  # (a mean against a median)
    assert row["ratio"] == row["nki_s"] / row["eager_s"] and row["target"] == 20.0


def test_trace_speed_traces_its_kernel_and_reports(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks import trace_speed

    monkeypatch.setattr(sys, "argv", ["trace_speed.py", "--blocks", "3", "--repeat", "1"])
    trace_speed.main()
    out = capsys.readouterr().out
    assert out.startswith("18 instructions traced in "), out  # (6 per block)
    assert "us per instruction" in out and "in garbage collection" in out
