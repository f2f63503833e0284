"""Search instructions: nisa.max8, nc_find_index8 and nc_match_replace8, against NumPy, with
their size rules."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIShapeError

from backends import REFERENCE, run_backends
from helpers import DTS, expect_error, f32, rand, run
from helpers import hbm_out as _out


def k_top8(x):
    out = _out((x.shape[0], 8), x.dtype)
    idx = _out((x.shape[0], 8), nl.uint32)
    rep = _out(x.shape, x.dtype)
    t = nl.load(x)
    m = nisa.max8(src=t)
    nl.store(out, m)
    nl.store(idx, nisa.nc_find_index8(data=t, vals=m))
    nl.store(rep, nisa.nc_match_replace8(data=t, vals=m, imm=-1000.0))
    return out, idx, rep


@pytest.mark.parametrize("dt", DTS)
def test_max8_find_index_match_replace(dt):
    x = np.stack([np.random.default_rng(i).permutation(64) for i in range(16)]).astype(dt)
    top, idx, rep = run(k_top8, x)
    xf = f32(x)
    want = -np.sort(-xf, axis=1)[:, :8]
    np.testing.assert_array_equal(f32(top), want)
    np.testing.assert_array_equal(idx, np.argsort(-xf, axis=1, kind="stable")[:, :8])
    r = xf.copy()
    np.put_along_axis(r, np.argsort(-xf, axis=1, kind="stable")[:, :8], -1000.0, axis=1)
    np.testing.assert_array_equal(f32(rep), r)


def test_find_index_duplicates_and_missing():
    from simulator.isa import formulas as isa_math

    data = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8]], np.float32)
    vals = np.array([[3, 8, 8, 8, 8, 8, 8, 9]], np.float32)
    got = isa_math.find_index8(data, vals, 0xFFFFFFFF)
    np.testing.assert_array_equal(got[0], [2, 4, 5, 6, 7, 8, 9, 0xFFFFFFFF])
    _, idx = isa_math.match_replace8(
        data, np.array([[3, 8, 8, 8, 8, 8, 8, 8]], np.float32), 0.0, 0xFFFF
    )
    np.testing.assert_array_equal(idx[0], [2, 10, 9, 8, 7, 6, 5, 4])


def k_max8_small(x):
    out = _out((x.shape[0], 8), x.dtype)
    nl.store(out, nisa.max8(src=nl.load(x)))  # ERR
    return out


def test_max8_size_rule():
    expect_error(
        k_max8_small,
        rand((8, 5)),
        cls=NKIShapeError,
        code="err_size_of_dimension_exceed_arch_limit",
        fragments=["5", "8", "16384"],
    )


def k_max8_source_mask(in_tensor):
    """AWS's classic nc_match_replace8 example: max8 over the masked part of the source (the
    mask is over src's iteration space, not the (P, 8) result's)."""
    n, m = in_tensor.shape
    out = nl.ndarray([n, 8], dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray([n, 8], dtype=nl.uint32, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:n, 0:m]
    inp_tile = nl.load(in_tensor)
    max_vals = nisa.max8(src=inp_tile[ix, iy], mask=(ix < n // 2 and iy < m // 2))
    nl.store(out[0 : n // 2, :], value=max_vals[0 : n // 2, :])
    keep = (ix < n // 2) & (iy < m // 2)  # the mask applies to the data
    where = nisa.nc_find_index8(data=inp_tile[ix, iy], vals=max_vals, mask=keep)
    nl.store(idx[0 : n // 2, :], value=where[0 : n // 2, :])
    return out, idx


def test_max8_and_find_index8_masks_over_the_source():
    a = np.random.default_rng(0).random((128, 512), dtype=np.float32)
    a[3, 300] = 2.0  # the largest value of row 3, outside the masked columns
    a[5, 10] = 2.0  # inside them
    want = -np.sort(-a[:64, :256], axis=1)[:, :8]
    want_idx = np.argsort(-a[:64, :256], axis=1, kind="stable")[:, :8]
    runs = run_backends(nki.jit(k_max8_source_mask, api="classic"), None, a)
    got, idx = runs[REFERENCE]
    np.testing.assert_array_equal(got[:64], want)
    np.testing.assert_array_equal(idx[:64], want_idx.astype(np.uint32))


def k_match_replace_masked(x, vals):
    """Replace matches within the first 32 columns of partitions 0-63 only: a match outside
    them is not taken, and partitions 64+ keep dst_idx's 7s."""
    n, m = x.shape
    rep = _out(x.shape, x.dtype)
    idx = _out((n, 8), nl.uint32)
    ip, jf = nl.mgrid[0:n, 0:m]
    t = nl.load(x)
    v = nl.load(vals)
    where = nl.full((n, 8), 7, dtype=nl.uint32)
    r = nl.full((n, m), 5.0, dtype=x.dtype)
    r[ip, jf] = nisa.nc_match_replace8(
        data=t[ip, jf], vals=v, imm=-1.0, dst_idx=where, mask=(jf < 32) & (ip < 64)
    )
    nl.store(rep, r)
    nl.store(idx, where)
    return rep, idx


def test_match_replace8_under_a_mask_searches_only_the_selected_elements():
    rng = np.random.default_rng(2)
    x = np.stack([rng.permutation(64) for _ in range(128)]).astype(np.float32)
    vals = np.repeat(np.arange(56, 64, dtype=np.float32)[None, :], 128, axis=0)
    vals[:, 0] = x[:, 0]  # a value found in every row's selected columns
    want_rep = np.full(x.shape, 5.0, dtype=np.float32)
    want_rep[:64, :32] = x[:64, :32]
    want_idx = np.full((128, 8), 7, dtype=np.uint32)
    want_idx[:64] = 0xFFFFFFFF  # (not found)
    for r in range(64):
        for i in range(7, -1, -1):  # vals[7] first; an element is replaced once
            hits = np.flatnonzero((x[r, :32] == vals[r, i]) & (want_rep[r, :32] != -1.0))
            if hits.size:
                want_idx[r, i] = hits[0]
                want_rep[r, hits[0]] = -1.0
    runs = run_backends(nki.jit(k_match_replace_masked, api="classic"), None, x, vals)
    rep, idx = runs[REFERENCE]  # (every backend gave its bits)
    np.testing.assert_array_equal(rep, want_rep)
    np.testing.assert_array_equal(idx, want_idx)
