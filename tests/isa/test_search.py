"""Statistics and search instructions: nisa.bn_stats / bn_aggr (mean and variance),
max8, nc_find_index8 and nc_match_replace8, against NumPy, with their size rules."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIShapeError

from helpers import DTS, expect_error, f32, rand, run
from helpers import hbm_out as _out

RNG = np.random.default_rng(11)


def k_bn(x):
    out = _out((x.shape[0], 2), nl.float32)
    stats = nl.ndarray((x.shape[0], 12), dtype=nl.float32, buffer=nl.sbuf)
    t = nl.load(x)
    stats[:, 0:6] = nisa.bn_stats(t[:, 0:300], dtype=nl.float32)
    stats[:, 6:12] = nisa.bn_stats(t[:, 300 : x.shape[1]], dtype=nl.float32)
    nl.store(out, nisa.bn_aggr(stats))
    return out


@pytest.mark.parametrize("dt", DTS)
def test_bn_stats_aggr_vs_mean_var(dt):
    x = rand((128, 701), dt, -3, 5)
    got = run(k_bn, x)
    np.testing.assert_allclose(got[:, 0], f32(x).mean(axis=1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[:, 1], f32(x).var(axis=1), rtol=1e-4, atol=1e-4)


def k_bn_stats(x):
    out = _out((x.shape[0], 6), nl.float32)
    nl.store(out, nisa.bn_stats(nl.load(x), dtype=nl.float32))
    return out


def test_bn_stats_layout_even_odd():
    x = rand((8, 9))
    s = run(k_bn_stats, x)
    ev, od = x[:, 0::2], x[:, 1::2]
    want = np.stack(
        [np.full(8, 5.0), ev.mean(1), ev.var(1) * 5, np.full(8, 4.0), od.mean(1), od.var(1) * 4],
        axis=1,
    )
    np.testing.assert_allclose(s, want, rtol=1e-5, atol=1e-5)


def k_bn_aggr_bad(x):
    out = _out((x.shape[0], 2), nl.float32)
    nl.store(out, nisa.bn_aggr(nl.load(x)))  # ERR
    return out


def k_bn_big(x):
    out = _out((x.shape[0], 6), nl.float32)
    nl.store(out, nisa.bn_stats(nl.load(x)))  # ERR
    return out


def test_bn_rules():
    expect_error(
        k_bn_big,
        rand((8, 513)),
        cls=NKIShapeError,
        code="err_size_of_dimension_exceed_arch_limit",
        fragments=["513", "512", "bn_stats_fmax"],
    )
    expect_error(
        k_bn_aggr_bad,
        rand((8, 7)),
        cls=NKIShapeError,
        code="err_bn_aggr_free_size",
        fragments=["7", "multiple of 3"],
    )


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


@nki.jit
def chunked_mean_var(x):
    # 2 bn_stats chunks of 64 columns over 100 columns: the second is masked to 36 columns
    out = nl.ndarray((x.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    n = x.shape[1]
    i_p = nl.arange(x.shape[0])[:, None]
    i_f = nl.arange(64)[None, :]
    i_s = nl.arange(6)[None, :]
    stats = nl.ndarray((x.shape[0], 12), dtype=nl.float32)
    for j in nl.affine_range(2):
        stats[i_p, j * 6 + i_s] = nisa.bn_stats(t[i_p, j * 64 + i_f], mask=(j * 64 + i_f < n))
    nl.store(out, nisa.bn_aggr(stats))
    return out


def test_bn_stats_mask_selects_input_columns():
    x = RNG.random((32, 100), dtype=np.float32)
    got = chunked_mean_var(x)
    np.testing.assert_allclose(got[:, 0], x.mean(1), rtol=1e-5)
    np.testing.assert_allclose(got[:, 1], x.var(1), rtol=1e-4)
