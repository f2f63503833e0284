"""GpSimd instructions in both calling forms: nisa.iota, memset, affine_select (the
destination-first pattern / channel_multiplier / offset form too), tensor_partition_reduce,
local_gather, sequence_bounds, and the current API's nc_n_gather, nonzero_with_count and topk,
against NumPy references, with each documented rule's located error."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError

from backends import REFERENCE, run_backends
from helpers import BF16, DTS, close, expect_error, f32, line_of, rand, run
from helpers import hbm_out as _out

RNG = np.random.default_rng(11)


def k_iota(n, dtype):
    out = _out((64, 48), dtype)
    i_p = nl.arange(64)[:, None]
    i_f = nl.arange(48)[None, :]
    for k in nl.affine_range(n.shape[0]):
        nl.store(out, nisa.iota(i_p * 100 - 2 * i_f + 7 + k, dtype=dtype))
    return out


@pytest.mark.parametrize("dt", [nl.int32, nl.float32, nl.bfloat16])
def test_iota(dt):
    got = run(k_iota, np.zeros((1, 1), np.float32), dt)
    p, f = np.mgrid[0:64, 0:48]
    want = (p * 100 - 2 * f + 7).astype(np.float32)
    np.testing.assert_array_equal(f32(got), f32(want.astype(dt.np)))


def k_iota_pid(x):
    # a scalar expression (a program id plus a loop iterator) gives a [1, 1] tile, as vLLM's
    # paged attention builds its head index
    out = nl.ndarray((4, 3), dtype=nl.int32, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    for j in nl.affine_range(3):
        t = nisa.iota(10 * i + j, dtype=nl.int32).reshape((1, 1))
        nl.store(out[i : i + 1, j : j + 1], t)
    return out


def test_iota_of_a_scalar_expression():
    import nki

    got = nki.jit(k_iota_pid)[4](np.zeros((1, 1), np.float32))
    want = 10 * np.arange(4)[:, None] + np.arange(3)[None, :]
    np.testing.assert_array_equal(got, want)


def k_memset(v, dtype):
    out = _out((32, 16), dtype)
    nl.store(out, nisa.memset((32, 16), v, dtype))
    return out


def test_memset():
    np.testing.assert_array_equal(run(k_memset, 3.5, nl.float32), np.full((32, 16), 3.5))
    np.testing.assert_array_equal(run(k_memset, 7, nl.int16), np.full((32, 16), 7, np.int16))
    np.testing.assert_array_equal(
        f32(run(k_memset, 1.00390625, nl.bfloat16)), f32(np.full((32, 16), 1.00390625, BF16))
    )


def k_band(x):
    out = _out(x.shape, x.dtype)
    i_q, i_k = nl.mgrid[0 : x.shape[0], 0 : x.shape[1]]
    nl.store(out, nisa.affine_select((i_q - i_k + 2 >= 0) & (i_k - i_q + 2 >= 0), nl.load(x), 0.0))
    return out


def k_causal(x):
    out = _out(x.shape, x.dtype)
    i_q = nl.arange(x.shape[0])[:, None]
    i_k = nl.arange(x.shape[1])[None, :]
    nl.store(out, nisa.affine_select(i_q >= i_k, nl.load(x), -9984.0))
    return out


@pytest.mark.parametrize("dt", DTS)
def test_affine_select_masks(dt):
    x = rand((64, 64), dt)
    q, k = np.mgrid[0:64, 0:64]
    np.testing.assert_array_equal(
        f32(run(k_causal, x)), np.where(q >= k, f32(x), f32(np.float32(-9984.0).astype(dt)))
    )
    np.testing.assert_array_equal(f32(run(k_band, x)), np.where(abs(q - k) <= 2, f32(x), 0.0))


def k_part_reduce(x, op):
    out = _out((1, x.shape[1]), x.dtype)
    nl.store(out, nisa.tensor_partition_reduce(op, nl.load(x)))
    return out


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("op,ref", [(np.add, np.sum), (nl.maximum, np.max)])
def test_tensor_partition_reduce(dt, op, ref):
    x = rand((128, 20), dt)
    close(
        run(k_part_reduce, x, op),
        ref(f32(x), axis=0, keepdims=True),
        dt,
        rtol=2e-2 if dt == BF16 else 1e-4,
        atol=5e-2 if dt == BF16 else 1e-4,
    )


def k_part_reduce_masked(x, op):
    """Partitions 10-69 of columns 0-19 only; columns 20+ select none and keep their 7s."""
    out = _out((1, x.shape[1]), x.dtype)
    ip, jf = nl.mgrid[0 : x.shape[0], 0 : x.shape[1]]
    t = nl.load(x)
    r = nl.full((1, x.shape[1]), 7, dtype=x.dtype)
    r[...] = nisa.tensor_partition_reduce(
        op, t[ip, jf], mask=(ip >= 10) & (ip < 70) & (jf < 20)
    )  # fmt: skip
    nl.store(out, r)
    return out


@pytest.mark.parametrize("backend", ["numpy", "batched", "numba"])
@pytest.mark.parametrize(
    "op,ref", [(np.add, np.sum), (nl.maximum, np.max), (nl.average, np.mean)]
)  # fmt: skip
def test_tensor_partition_reduce_folds_in_only_what_its_mask_selects(backend, op, ref):
    x = RNG.integers(-1000, 1000, size=(128, 32)).astype(np.float32)  # (exact sums)
    want = np.full((1, 32), 7, dtype=np.float32)
    want[0, :20] = ref(x[10:70, :20], axis=0)
    got = nki.jit(k_part_reduce_masked, api="classic").configure(backend=backend)(x, op)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def k_part_average_current(x, op):
    out = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    r = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_partition_reduce(dst=r, op=op, data=t)
    nisa.dma_copy(dst=out, src=r)
    return out


@pytest.mark.parametrize("op", [nl.average, nl.mean, np.mean, "mean"])
@pytest.mark.parametrize("p", [128, 96, 3])
def test_tensor_partition_reduce_averages(op, p):
    # the fp32 sum of the partitions over their count: integer values sum exactly, so the
    # result is the correctly rounded quotient; random ones agree with float64 to fp32's error
    ints = RNG.integers(-1000, 1000, size=(p, 24)).astype(np.float32)
    want = (ints.astype(np.float64).sum(0, keepdims=True) / p).astype(np.float32)
    np.testing.assert_array_equal(run(k_part_reduce, ints, op), want)
    np.testing.assert_array_equal(run(k_part_average_current, ints, op), want)
    x = rand((p, 24))
    close(run(k_part_reduce, x, op), f32(x).astype(np.float64).mean(0, keepdims=True), np.float32,
          rtol=1e-5, atol=1e-6)  # fmt: skip


@pytest.mark.parametrize("dt", [np.int32, np.uint8])
def test_tensor_partition_reduce_bitwise_xor(dt):
    x = np.random.default_rng(5).integers(0, 100, size=(64, 16)).astype(dt)
    got = run(k_part_reduce, x, nl.bitwise_xor)
    np.testing.assert_array_equal(got, np.bitwise_xor.reduce(x, axis=0, keepdims=True))


def k_part_reduce_sub(x):
    out = _out((1, x.shape[1]), x.dtype)
    nl.store(out, nisa.tensor_partition_reduce(np.subtract, nl.load(x)))  # ERR
    return out


def test_tensor_partition_reduce_refuses_other_ops():
    expect_error(
        k_part_reduce_sub, rand((8, 4)), cls=NKIError, code="err_unsupported_reduce_op",
        fragments=("'op'=subtract", "add, average, maximum, minimum, bitwise_or, bitwise_and, "
                   "bitwise_xor"),
    )  # fmt: skip


def test_average_is_an_op_token_not_a_function():
    with pytest.raises(NKIError, match="nl.average is an op token"):
        nl.average(rand((4, 4)))


def k_gather(src, idx, n, nvalid):
    g = nisa.local_gather(nl.load(src), nl.load(idx), num_elem_per_idx=n, num_valid_indices=nvalid)
    out = _out(g.shape, src.dtype)
    nl.store(out, g)
    return out


def test_local_gather():
    src = rand((32, 64, 4))
    per_core = np.random.default_rng(2).integers(0, 64, size=(16, 3)).astype(np.uint16)
    idx = np.tile(per_core, (2, 1))
    got = run(k_gather, src, (idx * 4).astype(np.uint16), 4, 40)
    want = np.empty((32, 40, 4), np.float32)
    for c in range(2):
        ind = idx[c * 16 : (c + 1) * 16].flatten(order="F")[:40]
        want[c * 16 : (c + 1) * 16] = src[c * 16 : (c + 1) * 16][:, ind, :]
    np.testing.assert_array_equal(got, want)


def k_gather_bf16(src, idx):
    g = nisa.local_gather(nl.load(src), nl.load(idx), num_elem_per_idx=2)
    out = _out(g.shape, src.dtype)
    nl.store(out, g)
    return out


def test_local_gather_bf16_all_indices():
    src = rand((16, 10), BF16)
    idx = np.random.default_rng(4).integers(0, 5, size=(16, 2)).astype(np.uint16) * 2
    got = run(k_gather_bf16, src, idx)
    ind = idx.flatten(order="F")
    want = np.stack([src[:, i : i + 2] for i in ind], axis=1)  # (P, 32, 2), partition-first
    # every index valid: the (P, F, 16, n) layout, element [:, f, q] from index [q, f]
    assert got.shape == (16, 2, 16, 2)
    np.testing.assert_array_equal(f32(got).reshape(16, 32, 2), f32(want))
    np.testing.assert_array_equal(f32(got)[:, 1, 3], f32(src[:, idx[3, 1] : idx[3, 1] + 2]))


def _bounds_ref(ids):
    n = len(ids)
    start, end = np.zeros(n), np.zeros(n)
    for i in range(n):
        j = i
        while j > 0 and ids[j - 1] == ids[i]:
            j -= 1
        k = i
        while k < n - 1 and ids[k + 1] == ids[i]:
            k += 1
        start[i], end[i] = (n, -1) if ids[i] == 0 else (j, k + 1)
    return np.stack([start, end])[None]


@nki.jit
def bounds(ids):
    out = nl.ndarray((1, 2, ids.shape[1]), dtype=ids.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.sequence_bounds(segment_ids=nl.load(ids)))
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_sequence_bounds(dtype):
    ids = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3, 5]], dtype=dtype)
    got = bounds(ids)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, _bounds_ref(ids[0]).astype(dtype))


@nki.jit
def causal_scores(q_t, k_t):
    # scores = q @ k.T in PSUM, causal-masked straight from PSUM by affine_select
    n = q_t.shape[1]
    out = nl.ndarray((n, n), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((n, n), dtype=nl.float32, buffer=nl.psum)
    ps[...] = nisa.nc_matmul(nl.load(q_t), nl.load(k_t))
    i_q, i_k = nl.mgrid[0:n, 0:n]
    nl.store(out, nisa.affine_select(i_q >= i_k, ps[i_q, i_k], -1e4))
    return out


def test_affine_select_from_psum():
    q_t, k_t = RNG.random((16, 64), dtype=np.float32), RNG.random((16, 64), dtype=np.float32)
    s = q_t.T @ k_t
    want = np.where(np.tril(np.ones_like(s)) > 0, s, -1e4)
    np.testing.assert_allclose(causal_scores(q_t, k_t), want, rtol=1e-5)


def _load(a):
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    return t


def k_n_gather(data, idx):
    out = nl.ndarray(idx.shape, dtype=data.dtype, buffer=nl.shared_hbm)
    d, i = _load(data), _load(idx)
    g = nl.ndarray(idx.shape, dtype=data.dtype, buffer=nl.sbuf)
    nisa.nc_n_gather(g, d, i)
    nisa.dma_copy(out, g)
    return out


def test_nc_n_gather_indexes_each_partitions_flattened_free_dims():
    data = RNG.standard_normal((32, 4, 8)).astype(np.float32)
    idx = RNG.integers(0, 32, size=(32, 3, 5)).astype(np.uint32)
    got = run(k_n_gather, data, idx)
    flat = data.reshape(32, -1)
    want = np.take_along_axis(flat, idx.reshape(32, -1).astype(np.int64), axis=1)
    np.testing.assert_array_equal(got, want.reshape(idx.shape))
    # bit-exact for integers beyond fp32's 2^24 (no cast)
    big = RNG.integers(2**30, 2**31 - 1, size=(16, 8)).astype(np.int32)
    i2 = RNG.integers(0, 8, size=(16, 8)).astype(np.uint32)
    np.testing.assert_array_equal(
        run(k_n_gather, big, i2), np.take_along_axis(big, i2.astype(np.int64), 1)
    )


def test_nc_n_gather_reports_an_index_past_the_partitions_elements():
    data = np.zeros((16, 8), np.float32)
    idx = np.zeros((16, 2), np.uint32)
    idx[3, 1] = 8
    try:
        run(k_n_gather, data, idx)
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


def iota_and_select(a):
    out = nl.ndarray((2, 64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    io = nl.ndarray((64, 32), dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(io, [[3, 32]], offset=5, channel_multiplier=2)
    f = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(f, io)
    nisa.dma_copy(out[0], f)
    at = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(at, a)
    s = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    # causal mask: keep a[p, i] where p - i >= 0
    nisa.affine_select(s, [[-1, 32]], 1, at, -9.0, cmp_op=nl.greater_equal)
    nisa.dma_copy(out[1], s)
    return out


def test_iota_pattern_and_affine_select_match_numpy():
    a = np.random.default_rng(1).random((64, 32), dtype=np.float32)
    got = nki.jit(iota_and_select)(a)
    p, i = np.arange(64)[:, None], np.arange(32)[None, :]
    np.testing.assert_array_equal(got[0], 5 + 2 * p + 3 * i)
    np.testing.assert_array_equal(got[1], np.where(p - i >= 0, a, np.float32(-9.0)))


def affine_select_all_positional(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    at = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(at, a)
    s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    # SDK 2.32's order: dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op,
    # offset (keep a[p, i] where 3 + p - i >= 0)
    nisa.affine_select(s, [[-1, a.shape[1]]], 1, at, -5.0, nl.greater_equal, 3)
    nisa.dma_copy(out, s)
    return out


def test_affine_select_takes_offset_positionally():
    a = np.random.default_rng(2).random((16, 24), dtype=np.float32)
    got = nki.jit(affine_select_all_positional)(a)
    p, i = np.arange(16)[:, None], np.arange(24)[None, :]
    np.testing.assert_array_equal(got, np.where(3 + p - i >= 0, a, np.float32(-5.0)))


def iota_two_pairs_into_one_free_dim(x):
    out = nl.ndarray((128, 32), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 32), dtype=nl.int32, buffer=nl.sbuf)
    # pairs outermost first: element f of a partition is (f // 8, f % 8) of the pattern
    nisa.iota(t, [[1, 4], [100, 8]], offset=3, channel_multiplier=1000)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_iota_pattern_with_more_pairs_than_dst_free_dims_walks_dst_in_order():
    got = nki.jit(iota_two_pairs_into_one_free_dim)(np.zeros(1, np.float32))
    p = np.arange(128)[:, None, None]
    a, b = np.arange(4)[None, :, None], np.arange(8)[None, None, :]
    np.testing.assert_array_equal(got, (3 + 1000 * p + a + 100 * b).reshape(128, 32))


def iota_pattern_too_short(x):
    t = nl.ndarray((128, 32), dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(t, [[1, 4], [100, 4]])
    return x


def test_iota_pattern_that_does_not_cover_dst_is_a_located_error():
    with pytest.raises(NKIError, match="16 elements per partition") as e:
        nki.jit(iota_pattern_too_short)(np.zeros((1, 1), np.float32))
    assert e.value.code == "err_free_size_mismatch"
    assert e.value.loc.line == iota_pattern_too_short.__code__.co_firstlineno + 2


def causal_rows_per_core(x):
    """Each of the two cores masks its 128 query rows: the diagonal's offset is the core's."""
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    q0 = nl.program_id(0) * 128
    t = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[q0 : q0 + 128, :])
    m = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
    nisa.affine_select(dst=m, pattern=[[-1, 256]], channel_multiplier=1, on_true_tile=t,
                       on_false_value=-1e30, cmp_op=nl.greater_equal, offset=q0)  # fmt: skip
    ids = nl.ndarray((128, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=ids, value=nl.program_id(0))
    nisa.tensor_tensor(dst=m[:, 0:1], data1=m[:, 0:1], data2=ids, op=nl.add)
    nisa.dma_copy(dst=out[q0 : q0 + 128, :], src=m)
    return out


def test_affine_select_offset_and_memset_value_take_the_program_id_of_each_core():
    x = np.random.default_rng(3).standard_normal((256, 256)).astype(np.float32)
    got = nki.jit(causal_rows_per_core)[2](x)
    p, f = np.arange(256)[:, None], np.arange(256)[None, :]
    want = np.where(p >= f, x, np.float32(-1e30))
    want[:, 0] += np.repeat([0, 1], 128).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def iota_offset_from_loop_and_grid(x):
    out = nl.ndarray((2, 2, 16, 8), dtype=nl.int32, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    for j in nl.affine_range(2):
        t = nl.ndarray((16, 8), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(t, [[3, 8]], offset=g * 1000 + j * 100 + 7, channel_multiplier=10)
        nisa.dma_copy(dst=out[g, j], src=t)
    return out


def test_iota_offset_may_be_a_loop_iterator_and_program_id_expression():
    runs = run_backends(nki.jit(iota_offset_from_loop_and_grid), 2, np.zeros(1, np.float32))
    g, j = np.arange(2)[:, None, None, None], np.arange(2)[None, :, None, None]
    p, f = np.arange(16)[None, None, :, None], np.arange(8)[None, None, None, :]
    want = g * 1000 + j * 100 + 7 + 10 * p + 3 * f
    np.testing.assert_array_equal(runs.results[REFERENCE], want)


def iota_register_offset(n):
    nsb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=nsb, src=n)
    r = nisa.register_alloc()
    nisa.register_load(r, nsb)
    t = nl.ndarray((4, 6), dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(dst=t, pattern=[[2, 6]], offset=r, channel_multiplier=10)
    return n


def test_iota_register_offset_is_a_located_unsupported_error():
    with pytest.raises(NKIError, match="is a register") as e:
        nki.jit(iota_register_offset)(np.array([[5]], np.int32))
    assert e.value.code == "err_unsupported_attribute"
    assert e.value.loc.line == iota_register_offset.__code__.co_firstlineno + 6


@nki.jit
def select_by_a_flat_pattern(a):
    # the pattern's pairs [8, 8] walk dst's 64 elements per partition (the docs: any free
    # shape whose element count is the pairs' product): a causal mask p >= f
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    d = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.affine_select(dst=d, pattern=[[-8, 8], [-1, 8]], channel_multiplier=1, on_true_tile=x,
                       on_false_value=-9.0, cmp_op=nl.greater_equal)  # fmt: skip
    nisa.dma_copy(dst=out, src=d)
    return out


def test_affine_select_pattern_in_another_free_shape():
    a = rand((128, 64))
    got = run_backends(select_by_a_flat_pattern, None, a)[REFERENCE]
    np.testing.assert_array_equal(got, np.where(np.arange(128)[:, None] >= np.arange(64), a, -9))
