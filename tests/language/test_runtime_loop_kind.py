"""Device loops (RuntimeLoop) are one question away for every pass: ``Loop.is_runtime`` /
``static_trips`` and ``KernelIR.has_runtime_loops``; the batched backend runs them per
instance with the interpreter, the Numba backend declines them, and the cost model counts a
static ``fori_loop``'s trips and says when it had to assume one trip."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.ir import Loop
from nki.isa.registers import register_alloc, register_load
from simulator.compiled.backend import BackendFallbackWarning

from helpers import line_of

RNG = np.random.default_rng(3)


def _sb(shape):
    return nl.ndarray(shape, dtype=nl.float32, buffer=nl.sbuf)


def prefix_sum(x, n, trips=None):
    """Sum of the first rows of x: ``trips`` rows (an int bound) or n[0, 0] rows (a register)."""
    out = nl.ndarray((1, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = _sb((1, 64))
    nisa.memset(dst=acc, value=0.0)
    bound = trips
    if trips is None:
        bound = register_alloc()
        register_load(bound, n)

    def body(i):
        row = _sb((1, 64))
        nisa.dma_copy(dst=row, src=x.ap([[64, 1], [1, 64]], offset=0, scalar_offset=i))
        nisa.tensor_tensor(dst=acc, data1=acc, data2=row, op=nl.add)

    nl.fori_loop(0, bound, body)  # LOOP
    nisa.dma_copy(dst=out, src=acc)
    return out


def _loops(ir):
    return [n for n, _ in ir.walk() if isinstance(n, Loop)]


def test_register_bound_is_a_runtime_loop_and_every_backend_sees_it():
    x = RNG.random((16, 64), dtype=np.float32)
    k = nki.jit(prefix_sum, backend="batched")
    got = k(x, np.array([[5]], np.int32))
    np.testing.assert_allclose(got, x[:5].sum(axis=0, keepdims=True), rtol=1e-6)
    ir = k.last_ir
    assert ir.has_runtime_loops
    assert [lp.is_runtime for lp in _loops(ir)] == [True]
    assert _loops(ir)[0].static_trips is None
    assert k.last_run.backend == "batched", k.last_run.reason
    assert "device loops run 1 time(s) batched" in k.last_run.reason
    kn = nki.jit(prefix_sum, backend="numba")
    with pytest.warns(BackendFallbackWarning, match="device loops"):
        np.testing.assert_array_equal(kn(x, np.array([[5]], np.int32)), got)
    assert kn.last_run.backend == "numpy"


def test_int_bounds_make_a_static_loop():
    x = RNG.random((16, 64), dtype=np.float32)
    k = nki.jit(prefix_sum)
    got = k(x, np.array([[0]], np.int32), trips=7)
    np.testing.assert_allclose(got, x[:7].sum(axis=0, keepdims=True), rtol=1e-6)
    assert not k.last_ir.has_runtime_loops
    assert [lp.static_trips for lp in _loops(k.last_ir)] == [range(0, 7)]


def test_cost_model_counts_static_trips_and_flags_runtime_ones():
    x = RNG.random((16, 64), dtype=np.float32)
    n = np.array([[8]], np.int32)
    est = {t: nki.estimate(nki.jit(prefix_sum))(x, n, trips=t) for t in (2, 4, 8)}
    lat = {t: e.latency_ns for t, e in est.items()}
    # each trip is estimated: the cost grows linearly with the trips (over a fixed part)
    step = (lat[4] - lat[2]) / 2
    assert step > 0 and abs((lat[8] - lat[4]) / 4 - step) <= 0.25 * step, lat
    assert not any(lint.rule == "runtime-trip-count" for e in est.values() for lint in e.lints)
    dyn = nki.estimate(nki.jit(prefix_sum))(x, n)
    flagged = [lint for lint in dyn.lints if lint.rule == "runtime-trip-count"]
    assert len(flagged) == 1 and "ONE trip" in flagged[0].message
    assert flagged[0].loc.line == line_of(prefix_sum, "# LOOP")
