"""Every tutorial script runs, checks itself against its reference and prints PASS; the
layernorm and causal-attention tutorial kernels match NumPy on every target."""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
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


def _load(rel: str):
    spec = importlib.util.spec_from_file_location(rel.replace("/", "_")[:-3], ROOT / rel)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


LN = _load("tutorials/layernorm/layernorm.py")


def _layernorm_np(x, g, b, eps=1e-5):
    x = x.astype(np.float64)
    return (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + eps) * g + b


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (ml_dtypes.bfloat16, 6e-2)])
@pytest.mark.parametrize("d", [300, 1100])
def test_layernorm_matches_numpy(dtype, tol, d):
    rng = np.random.default_rng(d)
    x = (rng.standard_normal((128, d)) * 2 - 1).astype(dtype)
    g = rng.uniform(0.5, 1.5, (1, d)).astype(dtype)
    b = rng.uniform(-1, 1, (1, d)).astype(dtype)
    got = LN.layernorm_kernel(x, g, b).astype(np.float32)
    want = _layernorm_np(x, g.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want, atol=tol * np.abs(want).max(), rtol=0)


ATT = _load("tutorials/attention/causal_attention.py")


def _attention_np(q, k, v):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = q.T @ k / math.sqrt(q.shape[0])
    s[np.triu_indices(s.shape[0], 1, s.shape[1])] = -np.inf
    p = np.exp(s - s.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)) @ v


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (ml_dtypes.bfloat16, 3e-2)])
@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_causal_attention_matches_numpy(dtype, tol, target):
    import nki

    rng = np.random.default_rng(7)
    q = rng.standard_normal((32, 128)).astype(dtype)
    k = rng.standard_normal((32, 128)).astype(dtype)
    v = rng.standard_normal((128, 32)).astype(dtype)
    kern = nki.jit(ATT.causal_attention_kernel.fn, platform_target=target)
    got = kern(q, k, v).astype(np.float32)
    np.testing.assert_allclose(got, _attention_np(q, k, v), atol=tol, rtol=0)
    # the first row only attends to key 0: output row 0 is v[0] exactly (up to rounding)
    np.testing.assert_allclose(got[0], v[0].astype(np.float32), atol=tol)
