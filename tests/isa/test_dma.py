"""DMA instructions: nisa.dma_copy and nisa.dma_transpose (casts, read-modify-write,
out-of-bounds modes, DMA engine choice per target) and dma_compute (sums of sources,
scatter-add and gather-add through vector_offset views), against NumPy, with their located
errors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki.isa as nisa
import nki.language as nl
from nki.errors import (
    NKIError,
    NKIIndexError,
    NKIMemoryError,
    NKIUnsupportedError,
)

from helpers import BF16, expect_error, f32, rand, run
from helpers import hbm_out as _out


def k_copy_cast(x):
    out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_dma_copy_casts():
    x = rand((64, 80))
    np.testing.assert_array_equal(f32(run(k_copy_cast, x)), f32(x.astype(BF16)))


def k_rmw(acc, x):
    t = nl.load(x)
    nisa.dma_copy(dst=acc[0:64, 0:32], src=t, dst_rmw_op=np.add)
    nisa.dma_copy(dst=acc[0:64, 0:32], src=t, dst_rmw_op=nl.add)
    return None


@pytest.mark.parametrize("dt", [np.float32, BF16])
def test_dma_copy_dst_rmw_add(dt):
    acc = rand((64, 48), dt)
    x = rand((64, 32), dt)
    before = f32(acc).copy()
    run(k_rmw, acc, x, jit_opts={"precise_fp": True})  # rounds to bf16 after each add
    want = before.copy()
    want[:, :32] = f32((f32(before[:, :32]) + f32(x)).astype(dt))
    want[:, :32] = f32((want[:, :32] + f32(x)).astype(dt))
    np.testing.assert_allclose(f32(acc), want, rtol=1e-2 if dt == BF16 else 1e-6)


def k_gather(table, idx, mode):
    out = nl.ndarray((idx.shape[0], table.shape[1]), dtype=table.dtype, buffer=nl.shared_hbm)
    ix = nl.load(idx)
    t = nl.ndarray((idx.shape[0], table.shape[1]), dtype=table.dtype, buffer=nl.sbuf)
    t[...] = 0.0
    i_f = nl.arange(table.shape[1])[None, :]
    nisa.dma_copy(dst=t, src=table[ix, i_f], oob_mode=mode)  # ERR
    nl.store(out, t)
    return out


def test_dma_copy_oob_modes():
    table = rand((10, 16))
    idx = np.array([[3], [12], [0], [9], [-1], [5]], np.int32)
    got = run(k_gather, table, idx, nisa.oob_mode.skip)
    want = np.zeros((6, 16), np.float32)
    for r, i in enumerate(idx[:, 0]):
        if 0 <= i < 10:
            want[r] = table[i]
    np.testing.assert_array_equal(got, want)
    expect_error(
        k_gather,
        table,
        idx,
        nisa.oob_mode.error,
        cls=NKIIndexError,
        code="err_tensor_access_out_of_bound",
        fragments=["12", "10"],
    )


def k_scatter_rows_3d(x, idx, mode):
    # a 3-D access pattern over HBM rows, its partition dim offset per partition by a (P, 1)
    # index tile (AWS's MoE backward kernel scatters gradient rows this way)
    out = nl.ndarray((10, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    zero = nl.ndarray((10, 16), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(zero, 0.0)
    nisa.dma_copy(dst=out, src=zero)
    t = nl.load(x)
    ix = nl.load(idx)
    rows = out.ap([[16, 6], [1, 1], [1, 16]], offset=0, vector_offset=ix, indirect_dim=0)
    nisa.dma_copy(dst=rows, src=t, oob_mode=mode)
    return out


def test_dma_copy_skips_out_of_bounds_rows_of_a_3d_indirect_pattern():
    x = rand((6, 16))
    idx = np.array([[3], [12], [0], [9], [-1], [5]], np.int32)
    got = run(k_scatter_rows_3d, x, idx, nisa.oob_mode.skip)
    want = np.zeros((10, 16), np.float32)
    for r, i in enumerate(idx[:, 0]):
        if 0 <= i < 10:
            want[i] = x[r]
    np.testing.assert_array_equal(got, want)


def k_gather_rows_3d(table, idx, mode):
    # the gather of the pattern above: a (6, 1, 16) indirect source into a (6, 16) tile
    out = nl.ndarray((6, 16), dtype=table.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((6, 16), dtype=table.dtype, buffer=nl.sbuf)
    nisa.memset(t, 0.0)
    ix = nl.load(idx)
    rows = table.ap([[16, 6], [1, 1], [1, 16]], offset=0, vector_offset=ix, indirect_dim=0)
    nisa.dma_copy(dst=t, src=rows, oob_mode=mode)
    nl.store(out, t)
    return out


def test_dma_copy_skips_out_of_bounds_source_rows_of_another_shape():
    table = rand((10, 16))
    idx = np.array([[3], [12], [0], [9], [-1], [5]], np.int32)
    got = run(k_gather_rows_3d, table, idx, nisa.oob_mode.skip)
    want = np.array([table[i] if 0 <= i < 10 else np.zeros(16, np.float32) for i in idx[:, 0]])
    np.testing.assert_array_equal(got, want)


def k_hwdge(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x, dge_mode=nisa.dge_mode.hwdge)  # ERR
    nl.store(out, t)
    return out


def test_hwdge_trn2_only():
    x = rand((8, 8))
    np.testing.assert_array_equal(run(k_hwdge, x, target="trn2"), x)
    expect_error(
        k_hwdge,
        x,
        target="trn1",
        cls=NKIUnsupportedError,
        code="err_unsupported_dge_mode",
        fragments=["hwdge", "trn1"],
    )


def k_bad_rmw(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x, dst_rmw_op=np.multiply)  # ERR
    return None


def k_count(x):
    t = nl.ndarray((8, 4), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)  # ERR
    return None


def k_psum_dma(x):
    ps = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum)
    nisa.dma_copy(dst=ps, src=x)  # ERR
    return None


def test_dma_copy_rules():
    x = rand((8, 8))
    expect_error(
        k_bad_rmw, x, cls=NKIError, code="err_unsupported_op", fragments=["dst_rmw_op", "multiply"]
    )
    expect_error(
        k_psum_dma,
        x,
        cls=NKIMemoryError,
        code="err_unsupported_memory",
        fragments=["'dst'", "psum"],
    )
    expect_error(
        k_count, x, cls=NKIError, code="err_dma_element_count_mismatch", fragments=["64", "32"]
    )


def k_dma_t(x):
    t = nisa.dma_transpose(x)
    out = nl.ndarray(t.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, t)
    return out


@pytest.mark.parametrize("shape", [(48, 96), (4, 6, 8)])
def test_dma_transpose(shape):
    x = rand(shape, BF16)
    got = run(k_dma_t, x)
    np.testing.assert_array_equal(f32(got), np.transpose(f32(x), tuple(range(len(shape)))[::-1]))


def k_dma_t_dge(x, mode):
    t = nisa.dma_transpose(x, dge_mode=mode)  # ERR
    out = nl.ndarray(t.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, t)
    return out


@pytest.mark.parametrize("mode", ["unknown", "swdge", "hwdge"])
def test_classic_dma_transpose_takes_a_dge_mode(mode):
    x = rand((48, 96), BF16)
    got = run(k_dma_t_dge, x, getattr(nisa.dge_mode, mode), jit_opts={"api": "classic"})
    np.testing.assert_array_equal(f32(got), f32(x).T)


def test_classic_dma_transpose_hwdge_needs_trn2():
    expect_error(
        k_dma_t_dge, rand((48, 96), BF16), nisa.dge_mode.hwdge, target="trn1",
        jit_opts={"api": "classic"}, cls=NKIError, code="err_unsupported_dge_mode",
        fragments=["trn2"],
    )  # fmt: skip


def k_dma_t32(x):
    t = nisa.dma_transpose(x)
    out = _out(t.shape, x.dtype)
    nl.store(out, t)
    return out


def test_dma_transpose_fp32():
    x = rand((20, 100))
    np.testing.assert_array_equal(run(k_dma_t32, x), x.T)


RNG = np.random.default_rng(11)


BF16 = ml_dtypes.bfloat16


def _load(a):
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    return t


def k_dma_compute(a, b, c):
    out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    ta, tb = _load(a), _load(b)
    nisa.dma_compute(out, [ta, tb, c], nl.add, scales=[1.0, 1.0, 1.0])
    return out


def test_dma_compute_sums_sources_in_fp32_and_casts_once():
    a, b = RNG.standard_normal((2, 64, 16)).astype(np.float32)
    c = RNG.standard_normal((64, 16)).astype(BF16)
    got = run(k_dma_compute, a, b, c)
    want = ((a + b) + c.astype(np.float32)).astype(BF16)
    np.testing.assert_array_equal(got, want)


def k_scatter_add(table, rows, data, unique):
    r, d = _load(rows), _load(data)
    view = table.ap([[16, 32], [1, 16]], offset=0, vector_offset=r)
    nisa.dma_compute(view, [view, d], nl.add, unique_indices=unique)
    return table


def k_gather_add(table, rows, data):
    out = nl.ndarray(data.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    r, d = _load(rows), _load(data)
    nisa.dma_compute(d, [d, table.ap([[16, 32], [1, 16]], offset=0, vector_offset=r)], nl.add)
    nisa.dma_copy(out, d)
    return out


def test_dma_compute_scatter_add_and_gather_add_through_vector_offset():
    table = RNG.standard_normal((100, 16)).astype(np.float32)
    rows = RNG.permutation(100)[:32].astype(np.int32).reshape(32, 1)
    data = RNG.standard_normal((32, 16)).astype(np.float32)
    want = table.copy()
    want[rows[:, 0]] += data
    np.testing.assert_array_equal(run(k_scatter_add, table.copy(), rows, data, True), want)
    np.testing.assert_array_equal(run(k_gather_add, table, rows, data), data + table[rows[:, 0]])
    # repeated rows: an error with unique_indices=True, every update lands with False
    rows[1] = rows[0]
    try:
        run(k_scatter_add, table.copy(), rows, data, True)
    except NKIError as e:
        assert e.code == "err_runtime" and "unique_indices=True" in e.message
    else:
        raise AssertionError("a repeated scatter row ran with unique_indices=True")
    want = table.copy()
    np.add.at(want, rows[:, 0], data)
    np.testing.assert_allclose(run(k_scatter_add, table.copy(), rows, data, False), want, rtol=1e-6)


def k_dma_compute_max(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    t = _load(a)
    nisa.dma_compute(out, [t, t], nl.maximum)  # ERR
    return out


def test_dma_compute_only_adds():
    expect_error(
        k_dma_compute_max,
        np.ones((8, 8), np.float32),
        cls=NKIError,
        code="err_unsupported_op",
        fragments=["maximum", "nl.add"],
    )
