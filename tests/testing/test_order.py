"""assert_order_independent catches races the static analysis cannot see (a read of HBM that
another instance writes, data-dependent scatter writes, SBUF loop-carried overwrites), names the
disagreeing seeds and the first differing element, and leaves correct kernels alone."""

from __future__ import annotations

import re

import numpy as np
import pytest

import nki
import nki.language as nl
from nki.errors import NKIDependencyError
from nki.testing import OrderDependenceError, assert_order_independent


@nki.jit
def block_cumsum_racy(x):
    # instance i adds its rows to the result instance i - 1 stored in HBM: a read-after-write
    # race between instances (only writes are analysed statically)
    m = x.shape[1]
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    i_p, i_f = nl.mgrid[0:8, 0:m]
    mine = nl.load(x[i * 8 + i_p, i_f])
    nl.store(out[i * 8 + i_p, i_f], mine)
    prev = nl.load(out[(i - 1) * 8 + i_p, i_f], mask=(i > 0))
    total = nl.add(mine, prev, mask=(i > 0))
    nl.store(out[i * 8 + i_p, i_f], total, mask=(i > 0))
    return out


@nki.jit
def scatter_rows(x, idx):
    # out[idx[r]] = x[r]; instances race when two of them scatter to the same row
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    i_p, i_f = nl.mgrid[0:4, 0 : x.shape[1]]
    rows = nl.load(idx[i * 4 + i_p, 0])
    nl.store(out[rows, i_f], nl.load(x[i * 4 + i_p, i_f]))
    return out


@nki.jit
def tiles_x2(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    for j in nl.affine_range(a.shape[1] // 8):
        t = nl.load(a[i * 16 : (i + 1) * 16, j * 8 : (j + 1) * 8])
        nl.store(out[i * 16 : (i + 1) * 16, j * 8 : (j + 1) * 8], nl.multiply(t, 2.0))
    return out


X = np.random.default_rng(1).uniform(-1, 1, (32, 3)).astype(np.float32)


def test_correct_kernel_is_order_independent_and_returns_its_result():
    a = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    out = assert_order_independent(tiles_x2, a, grid=(4,), seeds=range(4))
    np.testing.assert_array_equal(out, 2 * a)


def test_read_after_write_race_between_instances_is_caught(monkeypatch):
    monkeypatch.delenv("NKI_SIM_SHUFFLE_SEED", raising=False)  # plain calls below run in order
    # under checks=full the race is reported as a read of unwritten HBM instead (test_dynamic)
    monkeypatch.delenv("NKI_SIM_CHECKS", raising=False)
    with pytest.raises(OrderDependenceError) as ei:
        assert_order_independent(block_cumsum_racy, X, grid=(4,))
    msg = str(ei.value)
    assert "kernel 'block_cumsum_racy' gives different results" in msg
    bad = re.search(r"seeds that disagree with the default order: \[([\d, ]+)\]", msg)
    assert bad, msg
    seeds = [int(s) for s in bad.group(1).split(",")]
    # each disagreeing seed is explained: the first differing element and both orders
    for s in seeds:
        assert re.search(rf"seed {s}: output 0 first differs at index \((\d+), 0\)", msg), msg
    assert "instance order: default [(0,), (1,), (2,), (3,)]" in msg
    # the reported element really differs between the two orders
    m = re.search(rf"seed {seeds[0]}: output 0 first differs at index \((\d+), 0\)", msg)
    row = int(m.group(1))
    base = block_cumsum_racy[4](X)
    shuffled = block_cumsum_racy.configure(shuffle_seed=seeds[0])[4](X)
    assert not np.array_equal(base[row], shuffled[row], equal_nan=True)
    assert np.array_equal(base[:row], shuffled[:row], equal_nan=True)
    # in the default (sequential) order the racy kernel computes the intended result
    np.testing.assert_allclose(base, np.cumsum(X.reshape(4, 8, 3), axis=0).reshape(32, 3), 1e-6)


def test_data_dependent_scatter_race_is_caught_only_with_colliding_indices():
    x = np.arange(24, dtype=np.float32).reshape(8, 3)
    perm = np.array([3, 1, 0, 2, 7, 5, 6, 4], np.int32)[:, None]
    assert_order_independent(scatter_rows, x, perm, grid=(2,))  # a permutation: no race
    dup = perm.copy()
    dup[5, 0] = 1  # instance 1 also writes row 1, which instance 0 writes
    with pytest.raises(OrderDependenceError, match=r"first differs at index \(1, 0\): 3 vs 15"):
        assert_order_independent(scatter_rows, x, dup, grid=(2,))


def test_affine_range_loop_carried_sbuf_overwrite_is_caught():
    def last_iteration_wins(a):
        out = nl.ndarray((8, 4), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((8, 4), dtype=a.dtype, buffer=nl.sbuf)
        for i in nl.affine_range(4):
            t[...] = nl.load(a[i * 8 : (i + 1) * 8, :])
        nl.store(out, t)
        return out

    a = np.repeat(np.arange(4, dtype=np.float32), 32).reshape(32, 4)
    kernel = nki.jit(last_iteration_wins, api="classic")  # (current: run in program order)
    with pytest.raises(NKIDependencyError, match="read after the loop"):
        assert_order_independent(kernel, a)  # found statically
    with pytest.raises(OrderDependenceError, match="seeds that disagree"):
        assert_order_independent(kernel, a, checks="none")


def test_statically_visible_race_is_an_nki_error_unless_checks_are_off():
    def all_write_row0(a):
        out = nl.ndarray((1, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        nl.store(out, nl.load(a[i : i + 1, :]))
        return out

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(NKIDependencyError):
        assert_order_independent(all_write_row0, a, grid=(3,))
    with pytest.raises(OrderDependenceError, match=r"index \(0, 0\)"):
        assert_order_independent(all_write_row0, a, grid=(3,), checks="none")


def test_misuse(monkeypatch):
    monkeypatch.delenv("NKI_SIM_SHUFFLE_SEED", raising=False)
    with pytest.raises(ValueError, match="at least one shuffle seed"):
        assert_order_independent(tiles_x2, np.ones((16, 8), np.float32), seeds=[])
    with pytest.raises(TypeError, match="already launched"):
        assert_order_independent(tiles_x2[2], np.ones((32, 8), np.float32), grid=(2,))
