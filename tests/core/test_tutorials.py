"""Every tutorial script runs, checks itself against its reference and prints PASS."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import ROOT

SCRIPTS = sorted(
    p
    for p in (ROOT / "tutorials").rglob("*.py")
    if "__main__" in p.read_text() and not p.name.startswith("_")
)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT / "tutorials")))
def test_tutorial_runs_and_passes(script):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "PASS" in proc.stdout and "FAIL" not in proc.stdout, proc.stdout[-3000:]
