"""Tiered compilation on the Numba backend: a launch compiles for at most the compile budget,
hosts (runs on the interpreter's executors) the instructions whose library kernels are left for
later launches, says so in ``last_run.reason``, and gives the interpreter's results bit for bit
at every stage until the kernel runs fully compiled.

The budget is set to 0 here: every launch then compiles exactly one cold library kernel (the
progress rule), so the stages are counts, not timings."""

from __future__ import annotations

import re

import numpy as np
import pytest

import nki
import nki.language as nl
from nki.errors import NKIError
from simulator.compiled import backend as numba_backend
from simulator.compiled import budget as numba_budget
from simulator.compiled import kernels as numba_kernels
from simulator.compiled.codegen import PY_DRIVER_MIN

from helpers import line_of


@pytest.fixture(autouse=True)
def _cold_cache(monkeypatch, tmp_path):
    """A fresh disk cache and nothing compiled in this process: every kernel starts cold."""
    monkeypatch.delenv("NKI_SIM_CHECKS", raising=False)
    monkeypatch.delenv("NKI_SIM_SHUFFLE_SEED", raising=False)
    monkeypatch.setenv("NKI_SIM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(numba_budget.ENV, "0")
    monkeypatch.setattr(numba_backend, "_FUNCS", {})
    monkeypatch.setattr(numba_kernels, "_MODULES", {})
    monkeypatch.setattr(numba_budget, "_TIMES", [])


def ragged_scale(a, s):
    """Masked row tiles: a (P, 1) broadcast multiply, exp, where, a free-axis max."""
    n, m = a.shape
    out = nl.ndarray((n, m), dtype=a.dtype, buffer=nl.shared_hbm)
    top = nl.ndarray((n, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    ip, jf, j1 = nl.arange(128)[:, None], nl.arange(m)[None, :], nl.arange(1)[None, :]
    for t in nl.affine_range((n + 127) // 128):
        ok = t * 128 + ip < n
        x = nl.load(a[t * 128 + ip, jf], mask=ok)
        w = nl.load(s[t * 128 + ip, j1], mask=ok)
        e = nl.multiply(nl.exp(x), w)
        z = nl.where(nl.greater(x, 0.0), e, x)
        nl.store(out[t * 128 + ip, jf], value=z, mask=ok)
        nl.store(top[t * 128 + ip, j1], value=nl.max(z, axis=1), mask=ok)
    return out, top


def ragged_scale_ref(a, s):
    z = np.where(a > 0, np.exp(a) * s, a)
    return z, z.max(axis=1, keepdims=True)


_NOTE = re.compile(
    r"compile budget of 0 s spent: (\d+) of (\d+) instructions hosted on the interpreter this "
    r"launch; (\d+) library kernels? and the driver left to compile"
)


def test_each_launch_compiles_more_and_results_stay_bit_exact(monkeypatch):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 40)).astype(np.float32)  # 3 tiles, the last one masked
    s = rng.uniform(0.5, 2.0, (300, 1)).astype(np.float32)
    ref_out, ref_top = nki.jit(ragged_scale, backend="numpy")(a, s)
    e_out, e_top = ragged_scale_ref(a, s)
    np.testing.assert_allclose(ref_out, e_out, rtol=1e-6)
    k = nki.jit(ragged_scale, backend="numba")
    hosted, left, totals, reasons = [], [], set(), []
    for _ in range(12):
        out, top = k(a, s)
        assert k.last_run.backend == "numba"  # hosting is still the Numba backend's run
        np.testing.assert_array_equal(out.view(np.uint32), ref_out.view(np.uint32))
        np.testing.assert_array_equal(top.view(np.uint32), ref_top.view(np.uint32))
        reasons.append(k.last_run.reason)
        m = _NOTE.search(k.last_run.reason)
        if m is None:
            break
        hosted.append(int(m[1]))
        left.append(int(m[3]))
        totals.add(int(m[2]))
    p, _ = numba_backend.plan(k.last_ir, k.config())
    n = len(p.kernels)
    assert n >= 4 and totals == {len(p.instrs)}
    # one cold library kernel compiled per launch, the most executed first
    assert left == list(range(n - 1, 0, -1))
    assert hosted[0] > 0 and hosted == sorted(hosted, reverse=True) and hosted[-1] > 0
    # every kernel built: the driver runs as plain Python, its compile does not fit in 0 s
    assert "the driver ran as plain Python" in reasons[len(left)]
    assert "0 library kernels and the driver left" in reasons[len(left)]
    assert numba_backend.left_to_compile(p) == 1 and not numba_backend.is_compiled(p)
    # a budget the driver fits in: the next launch compiles it and runs fully compiled
    monkeypatch.setenv(numba_budget.ENV, "inf")
    out, _ = k(a, s)
    assert k.last_run.reason == "" and k.last_run.backend == "numba"
    assert numba_backend.is_compiled(p) and numba_backend.left_to_compile(p) == 0
    np.testing.assert_array_equal(out.view(np.uint32), ref_out.view(np.uint32))
    # a new process loads everything from the disk cache, with nothing left to compile
    numba_backend.forget_compiled()
    assert numba_backend.left_to_compile(p) == 0
    monkeypatch.setenv(numba_budget.ENV, "0")
    out, _ = k(a, s)
    assert k.last_run.reason == "" and numba_backend.is_compiled(p)
    np.testing.assert_array_equal(out.view(np.uint32), ref_out.view(np.uint32))


def many_ops(x):
    """More than PY_DRIVER_MIN instructions (a plain-Python driver), three library kernels."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    for _ in range(PY_DRIVER_MIN // 2):
        t = nl.multiply(t, 0.75)
        t = nl.maximum(t, -2.0)
    nl.store(out, value=nl.exp(t))
    return out


def test_a_plain_python_driver_is_done_once_its_kernels_are_built():
    x = np.linspace(-3, 3, 128 * 16, dtype=np.float32).reshape(128, 16)
    ref = nki.jit(many_ops, backend="numpy")(x)
    expect = x.astype(np.float32)
    for _ in range(PY_DRIVER_MIN // 2):
        expect = np.maximum(expect * np.float32(0.75), np.float32(-2.0))
    np.testing.assert_allclose(ref, np.exp(expect), rtol=1e-6)
    k = nki.jit(many_ops, backend="numba")
    left = []
    for _ in range(8):
        got = k(x)
        np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))
        if not k.last_run.reason:
            break
        left.append(int(re.search(r"; (\d+) library kernels? left", k.last_run.reason)[1]))
        assert "driver" not in k.last_run.reason  # no driver to compile
    p, _ = numba_backend.plan(k.last_ir, k.config())
    assert p.python and len(p.instrs) > PY_DRIVER_MIN
    assert left == list(range(len(p.kernels) - 1, 0, -1))
    assert numba_backend.is_compiled(p) and k.last_run.reason == ""


def test_auto_spends_at_most_the_budget_on_one_launch(monkeypatch):
    monkeypatch.setenv(numba_budget.ENV, "3")
    # compiling fits: all of it, then the compiled run
    assert numba_backend.this_launch(16.0, 0.5, 2.0) == (2.0, 0.5)
    # 20 s of compiling: 3 s of it this launch, the rest of the work at the interpreter's speed
    spend, run = numba_backend.this_launch(16.0, 0.5, 20.0)
    assert spend == 3.0 and run == pytest.approx(0.15 * 0.5 + 0.85 * 16.0)
    monkeypatch.setenv(numba_budget.ENV, "inf")
    assert numba_backend.this_launch(16.0, 0.5, 20.0) == (20.0, 0.5)


def small_add(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), 2.0))
    return out


def test_a_malformed_budget_is_a_located_config_error(monkeypatch):
    monkeypatch.setenv(numba_budget.ENV, "3 seconds")
    a = np.ones((128, 4), np.float32)
    k = nki.jit(small_add, backend="numba")
    with pytest.raises(NKIError) as ei:
        k(a)  # ERR
    e = ei.value
    assert e.code == "err_invalid_config"
    assert "NKI_SIM_COMPILE_BUDGET must be a number of seconds >= 0" in str(e)
    assert "'3 seconds'" in str(e)
    assert e.loc.file == __file__ and e.loc.line == line_of(
        test_a_malformed_budget_is_a_located_config_error
    )
