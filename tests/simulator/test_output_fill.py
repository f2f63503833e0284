"""Outputs the kernel provably overwrites entirely and never reads are not NaN-filled first;
every other output keeps the uninitialised-memory fill where no instruction writes it."""

from __future__ import annotations

import contextlib
import tracemalloc

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from simulator.checks.coverage import unfilled_outputs
from simulator.checks.unwritten import UnwrittenOutputWarning

import backends


def _warns_once(backend: str, region: str):
    """The static checks (and their unwritten-output warning) run once per traced kernel: on
    the first backend tried."""
    if backend != "batched":
        return contextlib.nullcontext()
    return pytest.warns(UnwrittenOutputWarning, match=region)


@nki.jit
def grid_copy(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    r, c = slice(i * 128, (i + 1) * 128), slice(j * 16, (j + 1) * 16)
    nl.store(out[r, c], value=nl.multiply(nl.load(a[r, c]), 2.0))
    return out


@nki.jit
def strided_rows(a):
    """Rows 2p and 2p + 1 from two stores: covered together, by neither alone."""
    out = nl.ndarray((256, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0 : a.shape[1]]
    t = nl.load(a[ip, jf])
    nl.store(out[2 * ip, jf], value=t)
    nl.store(out[2 * ip + 1, jf], value=t)
    return out


@nki.jit
def half_written(a):
    out = nl.ndarray((256, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:128, :], value=nl.load(a))
    return out


@nki.jit
def ragged(a):
    out = nl.ndarray((256, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0 : a.shape[1]]
    for i in nl.affine_range(2):
        nl.store(out[i * 128 + ip, jf], value=nl.load(a[ip, jf]), mask=(i * 128 + ip < 200))
    return out


@nki.jit
def read_back(a):
    scratch = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(scratch, value=nl.load(a))
    nl.store(out, value=nl.load(scratch))
    return out


def test_fully_overwritten_outputs_are_not_filled():
    a = np.arange(256 * 64, dtype=np.float32).reshape(256, 64)
    for backend in ("batched", "numpy"):
        k = grid_copy.configure(backend=backend)
        assert np.array_equal(k[2, 4](a), a * 2)
        assert unfilled_outputs(k.last_ir) == set(k.last_ir.outputs)


def test_partly_written_outputs_keep_the_fill():
    a = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    for backend in ("batched", "numpy"):
        k = half_written.configure(backend=backend)
        with _warns_once(backend, r"\[128:256, 0:8\]"):
            out = k(a)
        assert np.array_equal(out[:128], a) and np.isnan(out[128:]).all()
        assert unfilled_outputs(k.last_ir) == set()
        k = ragged.configure(backend=backend)
        with _warns_once(backend, r"\[200:256, 0:8\]"):
            out = k(a)
        assert np.array_equal(out[:128], a) and np.array_equal(out[128:200], a[:72])
        assert np.isnan(out[200:]).all()
        assert unfilled_outputs(k.last_ir) == set()


def test_outputs_covered_by_several_writes_are_not_filled_unless_read_back():
    a = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    out = strided_rows(a)
    assert np.array_equal(out[0::2], a) and np.array_equal(out[1::2], a)
    assert unfilled_outputs(strided_rows.last_ir) == {strided_rows.last_ir.outputs[0]}
    assert np.array_equal(read_back(a), a)
    ir = read_back.last_ir
    assert unfilled_outputs(ir) == {ir.outputs[0]}  # the scratch tensor is read: filled


@nki.jit
def tile_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    r, c = slice(i * 128, (i + 1) * 128), slice(j * 512, (j + 1) * 512)
    nl.store(out[r, c], value=nl.add(nl.load(a[r, c]), nl.load(b[r, c])))
    return out


def test_peak_memory_of_a_grid_launch_stays_near_its_output():
    """Read-only inputs are not copied, the output is not filled then copied, loads are views,
    and the interpreter frees each instance's tiles when it ends: a launch's peak stays near
    the size of its output, whatever the grid size."""
    rng = np.random.default_rng(0)
    for rows, backend in ((512, "batched"), (1024, "batched"), (512, "numpy")):
        a, b = (rng.standard_normal((rows, 2048)).astype(np.float32) for _ in range(2))
        k = tile_add.configure(backend=backend)
        k[rows // 128, 4](a, b)  # trace and plan outside the measurement
        tracemalloc.start()
        try:
            out = k[rows // 128, 4](a, b)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert k.last_run.backend == backend and np.array_equal(out, a + b)
        assert peak < 1.5 * out.nbytes, (backend, rows, peak / out.nbytes)


@nki.jit
def two_halves_one_gap(a):
    """Rows 0-99 and 101-255: one row is never written, whatever the backend."""
    out = nl.ndarray((256, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:100, :], value=nl.load(a[0:100, :]))
    nl.store(out[101:229, :], value=nl.load(a[0:128, :]))
    nl.store(out[229:256, :], value=nl.load(a[0:27, :]))
    return out


def test_a_gap_between_several_writes_keeps_the_fill():
    a = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    for backend in ("batched", "numpy"):
        k = two_halves_one_gap.configure(backend=backend)
        with _warns_once(backend, r"\[100:101, 0:8\]"):
            out = k(a)
        assert np.isnan(out[100]).all() and not np.isnan(np.delete(out, 100, axis=0)).any()
        assert unfilled_outputs(k.last_ir) == set()


@nki.jit
def ragged_rows(a):
    """The ragged-tile idiom: the mask only drops rows past the end of the tensor."""
    n, m = a.shape
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:m]
    for i in nl.affine_range((n + 127) // 128):
        t = nl.load(a[i * 128 + ip, jf], mask=(i * 128 + ip < n))
        nl.store(out[i * 128 + ip, jf], value=nl.multiply(t, 2.0), mask=(i * 128 + ip < n))
    return out


def test_a_mask_that_only_drops_rows_past_the_end_still_covers():
    a = np.arange(300 * 8, dtype=np.float32).reshape(300, 8)
    for backend in ("batched", "numpy"):
        k = ragged_rows.configure(backend=backend)
        assert np.array_equal(k(a), a * 2)
        assert unfilled_outputs(k.last_ir) == set(k.last_ir.outputs)


def test_footprints_join_along_one_dimension_at_a_time():
    # the row tiles of 600 unrolled stores join into one footprint (a tile of each of two
    # column halves, then the halves); a footprint that differs on two dimensions stays apart
    from simulator.checks.coverage import _merged

    rows = [np.arange(r * 4, r * 4 + 4) for r in range(600)]
    halves = [np.arange(0, 8), np.arange(8, 16)]
    prints = [[r, h] for h in halves for r in rows]
    odd = [np.array([5000]), np.array([99])]
    got = _merged([*prints, odd])
    assert len(got) == 2
    whole = next(p for p in got if len(p[0]) > 1)
    np.testing.assert_array_equal(whole[0], np.arange(2400))
    np.testing.assert_array_equal(whole[1], np.arange(16))
    assert any(p[0].tolist() == [5000] and p[1].tolist() == [99] for p in got)


@nki.jit
def in_place_on_a_fresh_tile(x):
    # the instruction that first writes t reads it too: t keeps its NaN fill for that read
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=0.0)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_a_tile_read_by_the_instruction_that_first_writes_it_keeps_its_fill():
    x = np.zeros((128, 64), np.float32)
    runs = backends.run_backends(in_place_on_a_fresh_tile, None, x, ran=backends.BACKENDS)
    assert np.isnan(runs[backends.REFERENCE]).all()
