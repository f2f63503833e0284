"""Soundness at any scale: the write-conflict checks are decided at any grid size or trip
count (or say plainly that they were not), a grid of rank 63+ runs on every backend, and
running out of host memory anywhere is an ``err_host_memory_exhausted`` error."""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest

import nki
import nki.language as nl
from nki.errors import NKIDependencyError, NKIMemoryError
from nki.ir import Grid
from simulator.checks import coverage, races

from backends import BACKENDS, run_backends


@nki.jit
def same_tile_every_instance(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a))
    return out


@pytest.mark.parametrize("n", [2048, 2049, 100_000])
def test_spmd_race_is_reported_at_any_grid_size(n):
    a = np.ones((128, 8), np.float32)
    with pytest.raises(NKIDependencyError) as e:
        same_tile_every_instance[n](a)
    assert e.value.code == "err_spmd_write_race"
    assert "grid instances (0,) and (1,) both write" in str(e.value)
    assert e.value.loc.line == same_tile_every_instance.fn.__code__.co_firstlineno + 3


@nki.jit
def rows_by_instance(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    nl.store(out[i : i + 1, :], value=nl.load(a[i : i + 1, :]))
    return out


@nki.jit
def every_other_row_twice(a):
    """Instance i writes rows i // 2 (through 2 * (i // 2) ... as i and i + 1 on odd grids)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    j = nl.program_id(1)
    nl.store(out[i : i + 1, :], value=nl.load(a[i + j : i + j + 1, :]))
    return out


def test_disjoint_writes_of_a_large_grid_pass_and_a_second_axis_races():
    a = np.arange(3000 * 4, dtype=np.float32).reshape(3000, 4)
    np.testing.assert_array_equal(rows_by_instance[3000](a), a)
    with pytest.raises(NKIDependencyError) as e:  # instances (i, 0) and (i, 1) write row i
        every_other_row_twice[1500, 2](a)
    assert "grid instances (0, 0) and (0, 1) both write" in str(e.value)


@nki.jit
def loop_rewrites_one_row(a):
    out = nl.ndarray((1, 4), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0]):
        nl.store(out[0:1, :], value=nl.load(a[i : i + 1, :]))
    return out


def test_loop_carried_write_is_reported_past_2048_iterations():
    a = np.ones((5000, 4), np.float32)
    with pytest.raises(NKIDependencyError) as e:
        loop_rewrites_one_row(a)
    assert e.value.code == "err_unexpected_output_dependencies"
    assert "iterations 0 and 1" in str(e.value)


def test_a_check_past_its_limit_says_it_was_not_decided(monkeypatch):
    """Two writes with different index forms are compared pair by pair; past the limit the
    check warns (at the kernel) instead of passing silently."""

    @nki.jit
    def two_forms(a):
        out = nl.ndarray((64, 4), dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        nl.store(out[i : i + 1, :], value=nl.load(a[0:1, :]))
        nl.store(out[2 * i : 2 * i + 1, :], value=nl.load(a[0:1, :]))
        return out

    a = np.ones((64, 4), np.float32)
    with pytest.raises(NKIDependencyError):  # within the limit: decided (1 and 2 * 1 meet)
        two_forms[32](a)
    monkeypatch.setattr(races, "_MAX_PAIRS", 100)
    with pytest.warns(races.UndecidedCheckWarning, match="not decided for SPMD grid") as w:
        two_forms[16](a)  # (each store against itself is decided: no race)
    assert w[0].lineno == two_forms.fn.__code__.co_firstlineno + 1  # (its def line)


@pytest.mark.parametrize("rank", [63, 64, 70])
def test_grid_of_high_rank_runs_on_every_backend(rank):
    a = np.arange(16, dtype=np.float32).reshape(2, 8)
    runs = run_backends(rows_by_instance, (2,) + (1,) * (rank - 1), a)
    for b in BACKENDS:
        np.testing.assert_array_equal(runs[b], a)
    assert "NumPy's 64 dimensions" in runs.info("batched").reason


def test_coverage_of_a_huge_loop_allocates_little():
    a = np.broadcast_to(np.float32(1), (1 << 36, 4))  # no memory behind it
    k = loop_rewrites_one_row
    ir = k.trace(Grid(()), k.bind((a,), {}), "trn2")
    tracemalloc.start()
    try:
        assert coverage.fully_written(ir, ir.outputs[0]) in (True, False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak


def test_memory_error_anywhere_becomes_host_memory_exhausted(monkeypatch):
    from simulator import launch as sim_launch

    def exhausted(*args, **kwargs):
        np.empty(1 << 62, dtype=np.uint8)  # NumPy's own _ArrayMemoryError

    a = np.ones((4, 8), np.float32)
    monkeypatch.setattr(sim_launch, "storage_input", exhausted)
    with pytest.raises(NKIMemoryError) as e:
        rows_by_instance[4](a)
    assert e.value.code == "err_host_memory_exhausted"
    assert "simulating kernel 'rows_by_instance'" in str(e.value)
    assert e.value.loc.line == rows_by_instance.fn.__code__.co_firstlineno + 1  # (its def)


@pytest.mark.parametrize("backend", ["batched", "numpy"])
def test_memory_error_in_an_instruction_is_located_there(monkeypatch, backend):
    import simulator.executors as ex

    def failing(real):
        def lookup(instr, *rest):
            fn = real(instr, *rest)
            if instr.kind != "dma" or fn is None:
                return fn

            def run(*args):
                raise MemoryError("simulated")

            return run

        return lookup

    real = ex.executor_of
    monkeypatch.setattr(ex, "executor_of", failing(real))
    for mod in ("simulator.interpreter", "simulator.batched.backend"):
        monkeypatch.setattr(f"{mod}.executor_of", failing(real))
    # (the batched walk finds its executors once, with their kind's check)
    monkeypatch.setattr("simulator.batched.backend.checked_once", failing(ex.checked_once))
    a = np.ones((4, 8), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NKIMemoryError) as e:
            rows_by_instance.configure(backend=backend)[4](a)
    assert e.value.code == "err_host_memory_exhausted"
    assert e.value.loc.line == rows_by_instance.fn.__code__.co_firstlineno + 4
