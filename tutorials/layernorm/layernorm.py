"""Layer normalisation with the Vector engine's statistics instructions.

Each 128-row tile: ``nisa.bn_stats`` on <= 512-column chunks, one ``nisa.bn_aggr`` for mean and
variance, ``rsqrt(var + eps)`` on the Scalar engine, then ``nisa.tensor_scalar`` subtracts the
mean and multiplies by the reciprocal standard deviation in one instruction, and
``nisa.tensor_tensor`` applies gamma and beta.

Run: python tutorials/layernorm/layernorm.py
Prints, for fp32 and bfloat16 inputs, the largest difference from a NumPy layernorm and PASS /
FAIL."""

from __future__ import annotations

import math
import sys

import ml_dtypes
import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

EPS = 1e-5


@nki.jit
def layernorm_kernel(x, gamma, beta):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis of x [N, D]."""
    n, d = x.shape
    y = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    fmax = nl.tile_size.bn_stats_fmax
    chunks = math.ceil(d / fmax)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(d)[None, :]
    g = nl.load(gamma[i_p * 0, i_f])  # gamma / beta broadcast to every partition
    b = nl.load(beta[i_p * 0, i_f])
    eps = nisa.memset((128, 1), EPS, nl.float32)
    for t in nl.affine_range(n // 128):
        xt = nl.load(x[t * 128 + i_p, i_f])
        stats = nl.ndarray((128, 6 * chunks), dtype=nl.float32, buffer=nl.sbuf)
        for c in nl.static_range(chunks):
            lo, hi = c * fmax, min(d, (c + 1) * fmax)
            stats[:, 6 * c : 6 * c + 6] = nisa.bn_stats(xt[:, lo:hi], dtype=nl.float32)
        mv = nisa.bn_aggr(stats)
        rstd = nisa.activation(nl.rsqrt, mv[:, 1:2], bias=eps)
        norm = nisa.tensor_scalar(
            xt, np.subtract, mv[:, 0:1], op1=np.multiply, operand1=rstd, dtype=nl.float32
        )
        scaled = nisa.tensor_tensor(norm, g, op=np.multiply, dtype=nl.float32)
        out = nisa.tensor_tensor(scaled, b, op=np.add, dtype=x.dtype)
        nl.store(y[t * 128 + i_p, i_f], out)
    return y


def reference(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    xf = x.astype(np.float64)
    mean = xf.mean(axis=1, keepdims=True)
    var = xf.var(axis=1, keepdims=True)
    return (xf - mean) / np.sqrt(var + EPS) * gamma.astype(np.float64) + beta.astype(np.float64)


def main() -> int:
    rng = np.random.default_rng(0)
    ok = True
    for dtype, tol in ((np.float32, 1e-4), (ml_dtypes.bfloat16, 5e-2)):
        x = (rng.standard_normal((256, 1000)) * 3 + 1).astype(dtype)
        gamma = rng.uniform(0.5, 1.5, (1, 1000)).astype(dtype)
        beta = rng.uniform(-1, 1, (1, 1000)).astype(dtype)
        got = layernorm_kernel(x, gamma, beta).astype(np.float32)
        want = reference(x, gamma, beta)
        err = float(np.max(np.abs(got - want)))
        good = err <= tol * max(1.0, float(np.max(np.abs(want))))
        ok &= good
        print(
            f"{np.dtype(dtype).name:9s} (256, 1000): max |nki - numpy| = {err:.3g} "
            f"{'ok' if good else 'TOO LARGE'}"
        )
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
