"""The C heap keeps freed memory (simulator/heap.py): after a process's first launch, tiles and
temporaries freed by one instruction or launch are reused by the next, not given back to the
system and faulted in again; ``NKI_SIM_HEAP=system`` leaves glibc's allocator as it is."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# one launch (checked against NumPy), then 12 live 2 MiB arrays freed together, five times: the
# page faults of the last three rounds
SCRIPT = """
import resource
import numpy as np
import nki
import nki.language as nl
from simulator import heap

@nki.jit
def double(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(a)))
    return out

x = np.arange(512, dtype=np.float32).reshape(128, 4)
assert np.array_equal(double(x), x + x)

def churn():
    live = [np.ones(1 << 18) for _ in range(12)]
    return sum(float(a[-1]) for a in live)

for _ in range(2):
    churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    churn()
print(heap.state, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _run(heap: str | None) -> tuple[str, int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("NKI_SIM_HEAP", None)
    if heap is not None:
        env["NKI_SIM_HEAP"] = heap
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    state, faults = out.stdout.split()
    return state, int(faults)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")
def test_freed_memory_stays_in_the_heap_after_the_first_launch():
    state, faults = _run(None)
    assert state == "kept"
    # 36 arrays of 512 pages: glibc's own thresholds fault most of them in again
    assert faults < 500, faults
    state, faults = _run("system")
    assert state == "system"
    assert faults > 5000, faults
