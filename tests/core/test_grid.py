"""SPMD grids: program ids, num_programs, N-D grids and physical-core placement."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.language as nl


@nki.jit
def record_ids(ids, out):
    """Each instance copies ids[v] (== v) for v in (pid0, pid1, pid2, num_programs, ndim) into
    its own row of ``out``: program ids are index values, so they select rows of ``ids``."""
    nd = nl.program_ndim()
    lin = nl.program_id(0)
    for ax in range(1, nd):
        lin = lin * nl.num_programs(ax) + nl.program_id(ax)
    vals = [nl.program_id(ax) if ax < nd else 0 for ax in range(3)]
    vals += [nl.num_programs(), nd]
    for col, v in enumerate(vals):
        t = nl.load(ids[v : v + 1, 0:1])
        nl.store(out[lin : lin + 1, col : col + 1], value=t)


@pytest.mark.parametrize("grid", [(5,), (2, 3), (2, 3, 4)])
def test_program_ids_on_nd_grids(grid):
    n = int(np.prod(grid))
    ids = np.arange(32, dtype=np.int32).reshape(32, 1)
    out = np.full((n, 5), -1, np.int32)
    record_ids[grid](ids, out)
    expect = []
    for idx in np.ndindex(*grid):
        expect.append(list(idx) + [0] * (3 - len(grid)) + [n, len(grid)])
    np.testing.assert_array_equal(out, np.array(expect, np.int32))
    assert record_ids.last_run.num_cores == 1


def test_num_programs_per_axis_and_tuple():
    @nki.jit
    def k(ids, out):
        row = nl.program_id(0) * 3 + nl.program_id(1)
        vals = [nl.num_programs(0), nl.num_programs(1), nl.num_programs((0, 1)), nl.num_programs()]
        for col, v in enumerate(vals):
            nl.store(out[row : row + 1, col : col + 1], value=nl.load(ids[v : v + 1, 0:1]))

    ids = np.arange(8, dtype=np.int32).reshape(8, 1)
    out = np.zeros((6, 4), np.int32)
    k[2, 3](ids, out)
    np.testing.assert_array_equal(out, np.tile([2, 3, 6, 6], (6, 1)))


@pytest.mark.parametrize(
    "make_dim, cores",
    [
        (lambda: nl.spmd_dim(4, nl.nc(2)), [0, 1, 0, 1, 0, 1, 0, 1]),
        (lambda: nl.spmd_dim(nl.nc(2), 4), [0, 0, 0, 0, 1, 1, 1, 1]),
        (lambda: nl.nc(2) * 4, [0, 0, 0, 0, 1, 1, 1, 1]),
        (lambda: 4 * nl.nc(2), [0, 1, 0, 1, 0, 1, 0, 1]),
    ],
)
def test_physical_core_placement(make_dim, cores):
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        t = nl.load(a[i * 128 : (i + 1) * 128, :])
        nl.store(out[i * 128 : (i + 1) * 128, :], value=nl.add(t, 1.0))
        return out

    a = np.arange(8 * 128 * 4, dtype=np.float32).reshape(8 * 128, 4)
    np.testing.assert_array_equal(k[make_dim()](a), a + 1)
    run = k.last_run
    assert run.num_cores == 2
    got = [run.placement[(i,)] for i in range(8)]
    assert got == cores


def test_two_core_grid_rejected_on_trn1():
    from nki.errors import NKIError

    @nki.jit(platform_target="trn1")
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out

    with pytest.raises(NKIError) as ei:
        k[nl.spmd_dim(2, nl.nc(2))](np.zeros((128, 4), np.float32))
    assert ei.value.code == "err_invalid_grid"
    assert "2 physical NeuronCores" in str(ei.value) and "trn1" in str(ei.value)


def test_sbuf_is_per_core_hbm_shared():
    # both instances on different cores write the same SBUF tile name; results stay separate
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        t = nl.load(a[i * 128 : (i + 1) * 128, :])
        u = nl.add(t, t)
        nl.store(out[i * 128 : (i + 1) * 128, :], value=u)
        return out

    a = np.random.default_rng(0).standard_normal((256, 8)).astype(np.float32)
    got = k[nl.spmd_dim(1, nl.nc(2))](a)  # extent 1 * 2 = 2 instances
    np.testing.assert_array_equal(got, a + a)
    assert k.last_run.placement == {(0,): 0, (1,): 1}


def test_grid_larger_than_the_simulator_runs_is_a_clear_error():
    from nki.errors import NKIError

    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        return out

    a = np.ones((4, 4), np.float32)
    with pytest.raises(NKIError) as ei:
        k[10**9](a)  # would need ~10**9 simulated instances
    assert ei.value.code == "err_invalid_grid"
    assert "1000000000 instances" in str(ei.value) and "1048576" in str(ei.value)
    assert ei.value.loc.file == __file__
