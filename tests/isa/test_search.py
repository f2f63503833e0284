"""Search instructions: nisa.max8, nc_find_index8 and nc_match_replace8, against NumPy, with
their size rules."""

import numpy as np
import pytest

import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIShapeError

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
