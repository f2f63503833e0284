"""Tiled matrix multiplication: C = A @ B with 128 x 128 x 512 tiles accumulated in PSUM.

Run: python tutorials/matmul/tiled_matmul.py
A is (M, K) = (1024, 512) and B is (K, N) = (512, 1024), both bfloat16. For each (128, 512)
output tile the kernel walks K in 128-row steps with ``nl.affine_range``: it loads A's block
transposed (``nl.load_transpose2d``, so K sits on the partition axis as the Tensor Engine
wants), loads B's (128, 512) block and accumulates ``nl.matmul(..., transpose_x=True)`` into
an fp32 PSUM tile. The result is checked against

* NumPy's float32 matmul of the same bfloat16 values (the only differences left are fp32
  summation order), and
* the float64 product of the original, unrounded inputs, within the error that rounding the
  inputs to bfloat16 implies.

Prints PASS or FAIL."""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np

import nki
import nki.language as nl

TILE_M = nl.tile_size.gemm_stationary_fmax  # 128: stationary (lhs) free size
TILE_K = nl.tile_size.pmax  # 128: contraction on the partition axis
TILE_N = nl.tile_size.gemm_moving_fmax  # 512: moving (rhs) free size


@nki.jit
def tiled_matmul(a, b):
    """c[M, N] = a[M, K] @ b[K, N] in fp32 (M, K multiples of 128; N a multiple of 512)."""
    m_size, k_size = a.shape
    _, n_size = b.shape
    c = nl.ndarray((m_size, n_size), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_size // TILE_M):
        for n in nl.affine_range(n_size // TILE_N):
            acc = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // TILE_K):
                a_t = nl.load_transpose2d(
                    a[m * TILE_M : (m + 1) * TILE_M, k * TILE_K : (k + 1) * TILE_K]
                )
                b_tile = nl.load(b[k * TILE_K : (k + 1) * TILE_K, n * TILE_N : (n + 1) * TILE_N])
                acc += nl.matmul(a_t, b_tile, transpose_x=True)
            res = nl.copy(acc, dtype=nl.float32)
            nl.store(c[m * TILE_M : (m + 1) * TILE_M, n * TILE_N : (n + 1) * TILE_N], res)
    return c


def check(a32: np.ndarray, b32: np.ndarray) -> bool:
    a = a32.astype(ml_dtypes.bfloat16)
    b = b32.astype(ml_dtypes.bfloat16)
    c = tiled_matmul(a, b)
    same_inputs = a.astype(np.float32) @ b.astype(np.float32)
    err_fp32 = np.abs(c - same_inputs)
    # fp32 sums of K products may differ by at most ~K * 2^-24 * sum|a||b| (summation order)
    absprod = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    tol_fp32 = a.shape[1] * 2.0**-24 * absprod + 1e-30
    exact = a32.astype(np.float64) @ b32.astype(np.float64)
    # |a_bf16 - a| <= 2^-9 |a| (same for b): each product is off by <= ~2^-8 |a||b|
    bound = (2.0**-8 + 2.0**-16) * (np.abs(a32).astype(np.float64) @ np.abs(b32)) + 1e-6
    err_exact = np.abs(c - exact)
    ok_fp32 = bool(np.all(err_fp32 <= tol_fp32))
    ok_exact = bool(np.all(err_exact <= bound))
    print(
        f"A {a.shape} x B {b.shape} bfloat16 -> C {c.shape} {c.dtype}: "
        f"max |C - fp32 matmul of the bf16 inputs| = {float(err_fp32.max()):.3g} "
        f"(max / fp32 summation bound = {float(np.max(err_fp32 / tol_fp32)):.3f}) "
        f"{'ok' if ok_fp32 else 'TOO LARGE'}; "
        f"max |C - exact| / bf16-rounding bound = {float(np.max(err_exact / bound)):.3f} "
        f"{'ok' if ok_exact else 'EXCEEDED'}"
    )
    return ok_fp32 and ok_exact


def main() -> int:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1024, 512)).astype(np.float32)
    b = rng.standard_normal((512, 1024)).astype(np.float32)
    ok = check(a, b)
    print(f"traced {tiled_matmul.trace_count} time(s); IR:")
    print("\n".join(str(tiled_matmul.last_ir).splitlines()[:14]))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
