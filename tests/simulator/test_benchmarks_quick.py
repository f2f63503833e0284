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
    assert len(rows) == 9 and names[-1].startswith("property test, 5 examples")
    for r in rows[:-1]:
        assert r["auto_matches_numpy"], r["workload"]
        assert r["auto_s"] > 0 and r["numpy_s"] > 0
    assert data["quick"] and "cores" in data["machine"]
    sys.modules.pop("causal_attention", None)
