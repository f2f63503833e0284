"""GpSimd instructions: nisa.iota, memset, affine_select, tensor_partition_reduce,
local_gather and sequence_bounds, against NumPy."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl

from helpers import BF16, DTS, close, f32, rand, run
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
