"""Races between the two cores of an LNC=2 launch through dynamic (run-time) offsets: a row of
shared HBM that one core reaches through ``.ap(scalar_offset=...)`` is placed only when the
launch runs, so the run time checks each element. A read of a row the other core changed, a
change of a row the other core read, and two different changes of one row are a
``CoreRaceWarning`` at the kernel's line, once per launch and pair of accesses (the run goes
on, core 0 first); rows the cores do not share, a write that stores what is already there, and
accesses ordered by ``nisa.core_barrier`` run quietly and match NumPy."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import CoreRaceWarning

RNG = np.random.default_rng(31)
F = 64


def _row(t, slot):
    """Row ``slot`` (a run-time [1, 1] int32 SBUF value) of the 2-D HBM tensor ``t``."""
    return t.ap([[F, 1], [1, F]], offset=0, scalar_offset=slot, indirect_dim=0)


def _slot(idx, pid):
    s = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=idx[pid : pid + 1].reshape((1, 1)))
    return s


def write_or_read(state, idx, fill, barrier):
    """Core 0 stores ``fill`` into row idx[0] of ``state``; core 1 reads row idx[1] into row 1
    of ``out`` (after a core barrier when ``barrier``)."""
    out = nl.ndarray((2, F), dtype=state.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    slot = _slot(idx, pid)
    t = nl.ndarray((1, F), dtype=state.dtype, buffer=nl.sbuf)
    if pid == 0:
        nisa.memset(dst=t, value=fill)
        nisa.dma_copy(dst=_row(state, slot), src=t)  # WRITE
        nisa.dma_copy(dst=out[0:1, :], src=t)
        if barrier:
            nisa.core_barrier(out, (0, 1))
    else:
        if barrier:
            nisa.core_barrier(out, (0, 1))
        nisa.dma_copy(dst=t, src=_row(state, slot))  # READ
        nisa.dma_copy(dst=out[1:2, :], src=t)
    return out, state


def both_write(state, idx, fills):
    """Each core p stores fills[p] into row idx[p] of ``state``."""
    pid = nl.program_id(0)
    slot = _slot(idx, pid)
    t = nl.ndarray((1, F), dtype=state.dtype, buffer=nl.sbuf)
    nisa.memset(dst=t, value=fills[pid])
    nisa.dma_copy(dst=_row(state, slot), src=t)  # BOTH
    return state


def zero_then_read(a, idx):
    """Both cores zero all of ``buf``, then core p reads row idx[p] of it (zeroed by both)."""
    buf = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray((2, F), dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    z = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.memset(dst=z, value=0.0)
    nisa.dma_copy(dst=buf, src=z)
    t = nl.ndarray((1, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=_row(buf, _slot(idx, pid)))
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=out[pid : pid + 1, :], src=t)
    return out


def _line(marker: str) -> int:
    src = open(__file__).read().splitlines()
    return next(i for i, s in enumerate(src, 1) if f"# {marker}" in s)


def _state():
    return RNG.standard_normal((4, F)).astype(np.float32)


def _races(run, *args):
    """The launch's result and its CoreRaceWarnings."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        out = run(*args)
    return out, [w for w in got if issubclass(w.category, CoreRaceWarning)]


def test_a_read_of_the_row_the_other_core_changes_is_a_race():
    state = _state()
    (out, new), races = _races(
        nki.jit(write_or_read)[2], state.copy(), np.array([2, 2], np.int32), 7.0, False
    )
    assert len(races) == 1
    msg = str(races[0].message)
    assert "core 0 writes" in msg and "core 1 reads" in msg
    assert "through a dynamic (run-time) offset" in msg and "another order" in msg
    assert f"(line {_line('READ')})" in msg
    assert (races[0].filename, races[0].lineno) == (__file__, _line("WRITE"))
    # (the run went on in the simulator's order: core 0's write first)
    np.testing.assert_array_equal(out[1], np.full(F, 7.0, np.float32))


def test_a_launch_without_races_warns_nothing():
    _, races = _races(nki.jit(write_or_read)[2], _state(), np.array([2, 3], np.int32), 7.0, False)
    assert races == []


def test_rows_the_cores_do_not_share_run():
    state = _state()
    want = state.copy()
    out, new = nki.jit(write_or_read)[2](state, np.array([2, 3], np.int32), 7.0, False)
    np.testing.assert_array_equal(out[0], np.full(F, 7.0, np.float32))
    np.testing.assert_array_equal(out[1], want[3])  # the row core 0 did not touch
    want[2] = 7.0
    np.testing.assert_array_equal(new, want)


def test_storing_what_is_already_there_is_no_race():
    state = _state()
    state[2] = 5.0
    want = state.copy()
    out, new = nki.jit(write_or_read)[2](state, np.array([2, 2], np.int32), 5.0, False)
    np.testing.assert_array_equal(out[1], want[2])
    np.testing.assert_array_equal(new, want)


def test_a_core_barrier_orders_the_write_before_the_read():
    state = _state()
    out, _ = nki.jit(write_or_read)[2](state, np.array([1, 1], np.int32), 7.0, True)
    np.testing.assert_array_equal(out[1], np.full(F, 7.0, np.float32))


@pytest.mark.parametrize("rows,fills,race", [
    ((0, 0), (1.0, 2.0), True),
    ((0, 0), (3.0, 3.0), False),
    ((0, 3), (1.0, 2.0), False),
])  # fmt: skip
def test_both_cores_writing_one_row(rows, fills, race):
    state = _state()
    got, races = _races(nki.jit(both_write)[2], state.copy(), np.array(rows, np.int32), fills)
    if race:
        assert len(races) == 1
        msg = str(races[0].message)
        assert "core 0 writes" in msg and "core 1 writes" in msg
        assert (races[0].filename, races[0].lineno) == (__file__, _line("BOTH"))
    else:
        assert races == []
    want = state.copy()
    for r, v in zip(rows, fills):  # (core 1's write lands last in the simulator's order)
        want[r] = v
    np.testing.assert_array_equal(got, want)


def test_both_cores_zeroing_what_they_then_read_is_no_race():
    # (each core wrote the zeros it reads itself: whichever core's zeros land last, it reads 0)
    out = nki.jit(zero_then_read)[2](_state(), np.array([1, 1], np.int32))
    np.testing.assert_array_equal(out, np.ones((2, F), np.float32))


def zero_then_write_one_row(a, idx):
    """Both cores zero all of ``out``; then core 0 stores a row of ``a`` into row idx[0]."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    z = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.memset(dst=z, value=0.0)
    nisa.dma_copy(dst=out, src=z)  # ZEROS
    if pid == 0:
        t = nl.ndarray((1, F), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[0:1, :])
        nisa.dma_copy(dst=_row(out, _slot(idx, pid)), src=t)  # ROW
    return out


def test_a_dynamic_write_over_both_cores_zeros_is_a_warning_not_an_error():
    # (the pattern of a public MoE token-packing kernel: both cores' static zeros are a write
    # of equal values, and core 0's later row, placed at run time, races with core 1's zeros)
    a = _state()
    got, races = _races(nki.jit(zero_then_write_one_row)[2], a, np.array([2, 0], np.int32))
    assert len(races) == 1
    msg = str(races[0].message)
    assert "core 0 writes" in msg and "core 1 writes" in msg
    assert f"(line {_line('ZEROS')})" in msg and f"(line {_line('ROW')})" in msg
    # (the simulator's order: core 0's zeros and row, then core 1's zeros)
    np.testing.assert_array_equal(got, np.zeros_like(a))
