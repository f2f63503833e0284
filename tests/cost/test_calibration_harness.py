"""The calibration harness (benchmarks/calibrate.py): its figures table, its behaviour without
a fetched aws-neuron-sdk copy, and (when a copy is there) a few of AWS's kernels against their
published figures and rankings. The whole table runs with ``python benchmarks/calibrate.py``."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[2] / "benchmarks" / "calibrate.py"


@pytest.fixture(scope="module")
def calibrate():
    spec = importlib.util.spec_from_file_location("calibrate_harness", HARNESS)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_every_figure_names_its_source_role_and_shape(calibrate):
    names = [f.name for f in calibrate.FIGURES]
    assert len(names) == len(set(names))
    for f in calibrate.FIGURES:
        assert re.search(r"\.rst@[0-9a-f]{8}", f.source), f.source
        assert f.role in ("fit", "validation") and f.published > 0 and f.shape
        assert (f.file is None) == bool(f.speedup_of)
    # only the matmul tutorial's classic kernels were used to choose a parameter
    fits = {f.name for f in calibrate.FIGURES if f.role == "fit"}
    assert fits == {f.name for f in calibrate.FIGURES if f.name.endswith("(classic)")} & {
        n for n in names if n.startswith("matmul ")
    }


def test_without_a_fetched_sdk_copy_the_harness_says_so_and_skips(calibrate, monkeypatch, capsys):
    monkeypatch.setenv("NKI_CALIBRATION_SDK", "/nonexistent/aws-neuron-sdk")
    assert calibrate.main(["--api", "classic"]) == 0
    out = capsys.readouterr().out
    assert "calibration skipped: no aws-neuron-sdk git repository at /nonexistent" in out
    assert "NKI_CALIBRATION_SDK" in out


def test_own_kernels_reproduce_the_performance_guide_speedups(calibrate):
    for f in calibrate.FIGURES:
        if f.file is None:
            r = calibrate.run(f, None)
            assert not r.error and r.within and r.estimate > 1, (f.name, r.estimate)


SAMPLE = (
    "mamba v1 ch4096 L512 (classic)",
    "mamba v2 ch4096 L512 (classic)",
    "mamba v2 ch4096 L2048 (classic)",
    "mamba v3 ch4096 L2048 (classic)",
    "layernorm v1 (classic)",
    "layernorm v2 (classic)",
)


def test_aws_kernels_within_tolerance_and_in_published_order(calibrate, tmp_path, monkeypatch):
    repo = calibrate.sdk_repository()
    if repo is None:
        pytest.skip("no fetched aws-neuron-sdk copy (set NKI_CALIBRATION_SDK)")
    monkeypatch.setenv("NKI_SIM_CACHE_DIR", str(tmp_path))  # extracted copies go here
    results = [calibrate.run(f, repo) for f in calibrate.FIGURES if f.name in SAMPLE]
    assert len(results) == len(SAMPLE)
    for r in results:
        assert not r.error and r.within, (r.figure.name, r.estimate, r.error)
    ranks = calibrate.rankings(results)
    assert [g for g, *_ in ranks] == ["mamba L512 (classic)", "mamba L2048 (classic)"] + [
        "layernorm (classic)"
    ]
    assert all(ok for *_, ok in ranks), ranks
