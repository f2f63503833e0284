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
