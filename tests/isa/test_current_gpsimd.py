"""The current-API-only GpSimd / DMA instructions (``nc_n_gather``, ``nonzero_with_count``,
``topk``, ``dma_compute``) against NumPy references, with each documented rule's located
error."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError

from helpers import expect_error, line_of, run

RNG = np.random.default_rng(11)
BF16 = ml_dtypes.bfloat16


def _load(a):
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    return t


# ---- nc_n_gather ----------------------------------------------------------------------------


def k_gather(data, idx):
    out = nl.ndarray(idx.shape, dtype=data.dtype, buffer=nl.shared_hbm)
    d, i = _load(data), _load(idx)
    g = nl.ndarray(idx.shape, dtype=data.dtype, buffer=nl.sbuf)
    nisa.nc_n_gather(g, d, i)
    nisa.dma_copy(out, g)
    return out


def test_nc_n_gather_indexes_each_partitions_flattened_free_dims():
    data = RNG.standard_normal((32, 4, 8)).astype(np.float32)
    idx = RNG.integers(0, 32, size=(32, 3, 5)).astype(np.uint32)
    got = run(k_gather, data, idx)
    flat = data.reshape(32, -1)
    want = np.take_along_axis(flat, idx.reshape(32, -1).astype(np.int64), axis=1)
    np.testing.assert_array_equal(got, want.reshape(idx.shape))
    # bit-exact for integers beyond fp32's 2^24 (no cast)
    big = RNG.integers(2**30, 2**31 - 1, size=(16, 8)).astype(np.int32)
    i2 = RNG.integers(0, 8, size=(16, 8)).astype(np.uint32)
    np.testing.assert_array_equal(
        run(k_gather, big, i2), np.take_along_axis(big, i2.astype(np.int64), 1)
    )


def test_nc_n_gather_reports_an_index_past_the_partitions_elements():
    data = np.zeros((16, 8), np.float32)
    idx = np.zeros((16, 2), np.uint32)
    idx[3, 1] = 8
    try:
        run(k_gather, data, idx)
    except NKIError as e:
        assert e.code == "err_tensor_access_out_of_bound"
        assert "indices[3, 1] = 8" in e.message
    else:
        raise AssertionError("an out-of-range index ran")


def k_gather_int16_index(data, idx):
    out = nl.ndarray(idx.shape, dtype=data.dtype, buffer=nl.shared_hbm)
    d, i = _load(data), _load(idx)
    g = nl.ndarray(idx.shape, dtype=data.dtype, buffer=nl.sbuf)
    nisa.nc_n_gather(g, d, i)  # ERR
    nisa.dma_copy(out, g)
    return out


def test_nc_n_gather_needs_uint32_indices():
    expect_error(
        k_gather_int16_index,
        np.zeros((16, 8), np.float32),
        np.zeros((16, 2), np.int16),
        cls=NKIError,
        code="err_unsupported_dtype",
        fragments=["'indices'", "int16", "uint32"],
    )


# ---- nonzero_with_count ---------------------------------------------------------------------


def k_nonzero(x, before):
    out = nl.ndarray(before.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    t = _load(x)
    d = _load(before)
    nisa.nonzero_with_count(d, t, index_offset=100, padding_val=-7)
    nisa.dma_copy(out, d)
    return out


def test_nonzero_with_count_writes_partitions_0_16_and_keeps_the_others():
    x = (RNG.random((32, 12)) > 0.6).astype(np.float32) * RNG.standard_normal((32, 12))
    x = x.astype(np.float32)
    x[16] = 0  # a row with no nonzero at all: all padding, count 0
    before = np.full((32, 13), 55, np.int32)
    got = run(k_nonzero, x, before)
    want = before.copy()
    for r in (0, 16):
        pos = np.flatnonzero(x[r])
        want[r] = -7
        want[r, : pos.size] = pos + 100
        want[r, 12] = pos.size
    np.testing.assert_array_equal(got, want)
    assert got[16, 12] == 0 and (got[16, :12] == -7).all()


def k_nonzero_bad_width(x):
    out = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    t = _load(x)
    d = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.nonzero_with_count(d, t)  # ERR
    nisa.dma_copy(out, d)
    return out


def test_nonzero_with_count_rules_and_target():
    x = np.ones((16, 8), np.float32)
    expect_error(
        k_nonzero_bad_width, x, cls=NKIError, code="err_free_size_mismatch", fragments=["8 + 1"]
    )
    expect_error(
        k_nonzero_bad_width,
        x,
        cls=NKIError,
        code="err_unsupported_instruction_for_target",
        fragments=["nisa.nonzero_with_count", "trn2"],
        target="trn1",
    )


# ---- topk -----------------------------------------------------------------------------------


def _topk_kernel(k, n):
    def k_topk(src, vals0, idx0):
        vout = nl.ndarray(vals0.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        iout = nl.ndarray(idx0.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
        s, v, i = _load(src), _load(vals0), _load(idx0)
        nisa.topk(v, i, s, n)
        nisa.dma_copy(vout, v)
        nisa.dma_copy(iout, i)
        return vout, iout

    return k_topk


def _topk_reference(src, n, k, vals0, idx0):
    vals, idx = vals0.astype(np.float32).copy(), idx0.copy()
    last = (k - 1) // 16  # the last result position: its lanes past k get unspecified values
    vals[:, last] = np.nan
    idx[:, last] = 0xFFFFFFFF
    for g in range(0, src.shape[0], 16):
        snake = [float(src[g + e % 16, e // 16]) for e in range(n)]
        ranked = sorted(range(n), key=lambda e: (-snake[e], e))[:k]
        ranked.sort(key=lambda e: (snake[e], e))
        for j, e in enumerate(ranked):
            vals[g + j % 16, j // 16] = snake[e]
            idx[g + j % 16, j // 16] = e
    return vals, idx


def test_topk_reads_and_writes_the_16_partition_snake_in_ascending_order():
    n, k = 70, 20
    src = RNG.standard_normal((32, math.ceil(n / 16) + 1)).astype(BF16)
    src[5, 1] = src[7, 2]  # a tie (elements 21 and 39)
    src[0, 5] = src[10, 4] = 100.0  # elements past n (80, 74): ignored
    vals0 = np.full((32, k), -1, BF16)
    idx0 = np.full((32, k), 9999, np.uint32)
    gv, gi = run(_topk_kernel(k, n), src, vals0, idx0)
    wv, wi = _topk_reference(src, n, k, vals0, idx0)
    np.testing.assert_array_equal(gv.astype(np.float32), wv)
    np.testing.assert_array_equal(gi, wi)
    assert (gv[:, 2:] == -1).all()  # only ceil(k / 16) = 2 positions are written


def test_topk_limits():
    src = np.zeros((16, 4), BF16)
    for k, n, frag in ((4, 7, "8 <= n"), (9, 8, "K <= n")):
        kernel = _topk_kernel(k, n)
        try:
            run(kernel, src, np.zeros((16, k), BF16), np.zeros((16, k), np.uint32))
        except NKIError as e:
            assert e.code == "err_invalid_argument" and frag in e.message, e
            assert e.loc is not None and e.loc.file == __file__
        else:
            raise AssertionError((k, n))


def k_topk_partitions(src, v0, i0):
    vout = nl.ndarray(v0.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    s, v, i = _load(src), _load(v0), _load(i0)
    nisa.topk(v, i, s, 16)  # ERR
    nisa.dma_copy(vout, v)
    return vout


def test_topk_partition_count_is_a_multiple_of_16():
    expect_error(
        k_topk_partitions,
        np.zeros((8, 4), BF16),
        np.zeros((8, 8), BF16),
        np.zeros((8, 8), np.uint32),
        cls=NKIError,
        code="err_num_partition_mismatch",
        fragments=["multiple of 16"],
    )


# ---- dma_compute ----------------------------------------------------------------------------


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


# ---- uninitialised memory: only the elements an instruction uses are read ---------------------


def k_gather_half_written(data, idx):
    out = nl.ndarray((16, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    d = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(d[:, 0:4], data)  # columns 4..7 never written
    g = nl.ndarray((16, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.nc_n_gather(g, d, _load(idx))  # POISON
    nisa.dma_copy(out, g)  # ERR
    return out


def test_nc_n_gather_reads_only_the_gathered_elements_under_full_checks():
    data = np.arange(64, dtype=np.float32).reshape(16, 4)
    ok = np.tile(np.array([[3, 1]], np.uint32), (16, 1))
    got = run(k_gather_half_written, data, ok, jit_opts={"checks": "full"})
    np.testing.assert_array_equal(got, data[:, [3, 1]])
    bad = ok.copy()
    bad[:, 0] = 5  # an unwritten column reaches the output
    e = expect_error(
        k_gather_half_written,
        data,
        bad,
        cls=NKIError,
        code="err_uninitialized_read",
        jit_opts={"checks": "full"},
    )
    assert e.related and e.related[0][1].line == line_of(k_gather_half_written, "# POISON")


def k_nonzero_core_rows(x):
    out = nl.ndarray((2, 13), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((32, 12), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(t[0:1, :], x[0:1, :])  # only the partitions the GpSimd cores read
    nisa.dma_copy(t[16:17, :], x[1:2, :])
    d = nl.ndarray((32, 13), dtype=nl.int32, buffer=nl.sbuf)
    nisa.nonzero_with_count(d, t)
    nisa.dma_copy(out[0:1, :], d[0:1, :])
    nisa.dma_copy(out[1:2, :], d[16:17, :])
    return out


def test_nonzero_with_count_reads_only_partitions_0_16_under_full_checks():
    x = np.array([[0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3], [1] * 12], np.float32)
    got = run(k_nonzero_core_rows, x, jit_opts={"checks": "full"})
    np.testing.assert_array_equal(got[0], [1, 3, 11] + [-1] * 9 + [3])
    np.testing.assert_array_equal(got[1], list(range(12)) + [12])


@given(
    groups=st.integers(1, 2),
    n=st.integers(8, 120),
    k_frac=st.floats(0.0, 1.0),
    seed=st.integers(0, 999),
)
def test_topk_matches_the_snake_reference_for_any_size(groups, n, k_frac, seed):
    k = max(1, min(n, round(k_frac * min(n, 40))))
    rng = np.random.default_rng(seed)
    src = rng.integers(-20, 20, size=(16 * groups, math.ceil(n / 16))).astype(BF16)  # ties
    vals0 = np.full((16 * groups, k), 7, BF16)
    idx0 = np.full((16 * groups, k), 5, np.uint32)
    gv, gi = run(_topk_kernel(k, n), src, vals0, idx0)
    wv, wi = _topk_reference(src, n, k, vals0, idx0)
    np.testing.assert_array_equal(gv.astype(np.float32), wv)
    np.testing.assert_array_equal(gi, wi)


def k_topk_read_spill(src, like):
    out = nl.ndarray(like.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    v = nl.ndarray((16, 4), dtype=nl.bfloat16, buffer=nl.sbuf)
    i = nl.ndarray((16, 4), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.topk(v, i, _load(src), 32)
    m = like.shape[0]  # the 4 results are partitions 0..3 of column 0; 5 reads a spilled lane
    r = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(r[0:m, :], v[0:m, 0:1])
    nisa.dma_copy(out, r[0:m, :])  # ERR
    return out


def test_topk_lanes_past_k_of_the_last_column_are_undefined():
    src = np.arange(32, dtype=np.float32).reshape(2, 16).T.astype(BF16)  # snake 0..31
    got = run(k_topk_read_spill, src, np.zeros((4, 1), np.float32), jit_opts={"checks": "full"})
    np.testing.assert_array_equal(got[:4, 0], [28, 29, 30, 31])
    expect_error(
        k_topk_read_spill,
        src,
        np.zeros((5, 1), np.float32),
        cls=NKIError,
        code="err_uninitialized_read",
        jit_opts={"checks": "full"},
    )
