"""nki.isa forms used by real classic kernels: bn_stats with a mask over its input (ragged
last chunk), affine_select reading a matmul's PSUM result, nc_transpose (engine chosen by the
compiler) assigned to an SBUF buffer."""

from __future__ import annotations

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

RNG = np.random.default_rng(11)


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


@nki.jit
def transpose_blocks(x):
    # (128, 2*64) -> two 64x128 blocks transposed into one SBUF buffer, then stored
    out = nl.ndarray((64, 2, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    buf = nl.ndarray((nl.par_dim(64), 2, 128), dtype=x.dtype)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    j_p, j_f = nl.mgrid[0:64, 0:128]
    for b in nl.affine_range(2):
        buf[j_p, b, j_f] = nisa.nc_transpose(t[i_p, b * 64 + i_f])
    nl.store(out, buf)
    return out


def test_nc_transpose_into_sbuf_buffer():
    x = RNG.random((128, 128), dtype=np.float32)
    want = np.stack([x[:, :64].T, x[:, 64:].T], axis=1)
    np.testing.assert_array_equal(transpose_blocks(x), want)
