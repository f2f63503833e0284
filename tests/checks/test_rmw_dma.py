"""Read-modify-write DMAs (``nisa.dma_copy(..., dst_rmw_op=nl.add)``): duplicate destination
rows accumulate every update, and accumulating DMAs are not reported as loop-carried
dependencies or SPMD races (they are order-independent up to rounding)."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


def scatter_add(table, ids, vals):
    out = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(table))
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(table.shape[1])[None, :]
    idx = nl.load(ids[i_p, 0])
    nisa.dma_copy(dst=out[idx, i_f], src=nl.load(vals), dst_rmw_op=nl.add)
    return out


@pytest.mark.parametrize("checks", ["static", "full"])
def test_duplicate_rows_all_accumulate(checks):
    table = np.zeros((8, 4), np.float32)
    ids = np.zeros((128, 1), np.int32)  # every row lands on row 0
    vals = np.ones((128, 4), np.float32)
    got = nki.jit(scatter_add, checks=checks)(table, ids, vals)
    want = table.copy()
    want[0] = 128.0
    np.testing.assert_array_equal(got, want)


def test_random_duplicates_match_numpy_add_at():
    rng = np.random.default_rng(3)
    table = rng.standard_normal((16, 8)).astype(np.float32)
    ids = rng.integers(0, 16, size=(128, 1)).astype(np.int32)
    vals = rng.standard_normal((128, 8)).astype(np.float32)
    got = nki.jit(scatter_add)(table, ids, vals)
    want = table.copy()
    np.add.at(want, ids[:, 0], vals)  # sequential fp32 adds, row order
    np.testing.assert_array_equal(got, want)


def test_rmw_dma_in_affine_range_is_not_a_dependency():
    def rmw_loop(a):
        out = nl.ndarray((128, 4), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.zeros((128, 4), nl.float32))
        for i in nl.affine_range(4):
            nisa.dma_copy(dst=out, src=nl.load(a[i]), dst_rmw_op=nl.add)
        return out

    a = np.random.default_rng(0).random((4, 128, 4)).astype(np.float32)
    got = nki.jit(rmw_loop)(a)
    np.testing.assert_allclose(got, a.sum(0), rtol=1e-6)


def test_rmw_dma_over_a_grid_is_not_a_race():
    def rmw_grid(a, out):  # out: a legacy output argument, zero-filled by the caller
        i = nl.program_id(0)
        nisa.dma_copy(dst=out, src=nl.load(a[i]), dst_rmw_op=nl.add)

    a = np.random.default_rng(1).random((4, 128, 4)).astype(np.float32)
    out = np.zeros((128, 4), np.float32)
    nki.jit(rmw_grid)[4](a, out)
    np.testing.assert_allclose(out, a.sum(0), rtol=1e-6)
