"""Tiled matrix multiplication in the current NKI API: ``nisa.nc_matmul(dst, stationary,
moving)`` accumulating over the contraction dimension in one PSUM tile (``accumulate=None``:
per element, the first matmul overwrites and later ones add), checked against NumPy.

Run: ``python tutorials/current_api/tiled_matmul.py``"""

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmul(lhsT, rhs):
    """out[M, N] = lhsT[K, M].T @ rhs[K, N]; K and M multiples of 128, N <= 512."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        acc = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(K // 128):
            stationary = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
            moving = nl.ndarray((128, N), dtype=rhs.dtype, buffer=nl.sbuf)
            rows = slice(k * 128, (k + 1) * 128)
            nisa.dma_copy(dst=stationary, src=lhsT[rows, m * 128 : (m + 1) * 128])
            nisa.dma_copy(dst=moving, src=rhs[rows, :])
            nisa.nc_matmul(acc, stationary, moving)
        result = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=result, src=acc)
        nisa.dma_copy(dst=out[m * 128 : (m + 1) * 128, :], src=result)
    return out


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    lhsT = rng.standard_normal((512, 256)).astype(np.float32)
    rhs = rng.standard_normal((512, 512)).astype(np.float32)
    got = nki.simulate(matmul)(lhsT, rhs)
    want = lhsT.T.astype(np.float64) @ rhs
    err = float(np.max(np.abs(got - want)))
    print(f"max |error| vs NumPy: {err:.2e}")
    print("PASS" if np.allclose(got, want, rtol=1e-4, atol=1e-3) else "FAIL")
