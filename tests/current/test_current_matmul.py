"""Destination-first ``nisa.nc_matmul(dst, stationary, moving, accumulate=...)``: a tiled matmul
accumulating over K in PSUM, and the accumulate modes per element (NumPy references)."""

from __future__ import annotations

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


def tiled_matmul(lhsT, rhs):
    """out[M, N] = lhsT[K, M].T @ rhs[K, N], K in 128-row tiles accumulated in one PSUM tile
    (accumulate=None: the first matmul into an element overwrites, the later ones add)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        acc = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(K // 128):
            a = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
            b = nl.ndarray((128, N), dtype=rhs.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=lhsT[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
            nisa.dma_copy(dst=b, src=rhs[k * 128 : (k + 1) * 128, :])
            nisa.nc_matmul(acc, a, b)
        res = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out[m * 128 : (m + 1) * 128, :], src=res)
    return out


def test_tiled_matmul_accumulates_over_k_in_psum():
    rng = np.random.default_rng(3)
    lhsT = rng.standard_normal((384, 256), dtype=np.float32)
    rhs = rng.standard_normal((384, 192), dtype=np.float32)
    got = nki.jit(tiled_matmul)(lhsT, rhs)
    np.testing.assert_allclose(got, lhsT.T.astype(np.float64) @ rhs, rtol=2e-5, atol=2e-4)


def accumulate_modes(x, y):
    """Row block 0: two matmuls, accumulate=None (sum). Row block 1: memset 1, then
    accumulate=True (1 + product). Row block 2: a matmul then accumulate=False (last product)."""
    out = nl.ndarray((96, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    xt = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    yt = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    y2 = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(xt, x)
    nisa.dma_copy(yt, y)
    nisa.tensor_scalar(y2, yt, nl.multiply, 3.0)
    ps = nl.ndarray((96, 32), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps[0:32, :], xt, yt)
    nisa.nc_matmul(ps[0:32, :], xt, y2, accumulate=None)
    nisa.memset(ps[32:64, :], 1.0)
    nisa.nc_matmul(ps[32:64, :], xt, yt, accumulate=True)
    nisa.nc_matmul(ps[64:96, :], xt, yt)
    nisa.nc_matmul(dst=ps[64:96, :], stationary=xt, moving=y2, accumulate=False)
    res = nl.ndarray((96, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(res, ps)
    nisa.dma_copy(out, res)
    return out


def test_accumulate_modes_of_nc_matmul():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 32), dtype=np.float32)
    y = rng.standard_normal((64, 32), dtype=np.float32)
    p = x.T.astype(np.float64) @ y
    got = nki.jit(accumulate_modes)(x, y)
    np.testing.assert_allclose(got[0:32], p + 3 * p, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[32:64], 1 + p, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[64:96], 3 * p, rtol=1e-5, atol=1e-4)


def overlapping(x, y):
    """Two matmuls into overlapping PSUM rows with accumulate=None: per element, rows written
    once hold one product, rows written twice the sum."""
    out = nl.ndarray((96, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    xt = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
    yt = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(xt, x)
    nisa.dma_copy(yt, y)
    ps = nl.ndarray((96, 32), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps[0:64, :], xt, yt)
    nisa.nc_matmul(ps[32:96, :], xt, yt)
    res = nl.ndarray((96, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(res, ps)
    nisa.dma_copy(out, res)
    return out


def test_overlapping_accumulation_regions_add_per_element():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((64, 64), dtype=np.float32)
    y = rng.standard_normal((64, 32), dtype=np.float32)
    p = x.T.astype(np.float64) @ y
    want = np.zeros((96, 32))
    want[0:64] += p
    want[32:96] += p
    np.testing.assert_allclose(nki.jit(overlapping)(x, y), want, rtol=1e-5, atol=1e-4)
