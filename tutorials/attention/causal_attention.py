"""Causal single-tile attention with nki.isa instructions.

``nisa.nc_matmul`` computes the scores Q^T K into PSUM, ``nisa.activation`` scales them,
``nisa.affine_select`` applies the causal mask ``i_q >= i_k``, ``nisa.tensor_reduce`` finds the
(negated) row maximum, ``nisa.activation_reduce(exp)`` exponentiates and sums each row,
``nisa.reciprocal`` + ``nisa.tensor_scalar`` normalise, ``nisa.nc_transpose`` turns the
probabilities around for the second ``nisa.nc_matmul`` with V.

Run: python tutorials/attention/causal_attention.py
Prints, for fp32 and bfloat16 inputs, the largest difference from a NumPy causal softmax
attention and PASS / FAIL."""

from __future__ import annotations

import math
import sys

import ml_dtypes
import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def causal_attention_kernel(q, k, v):
    """q: [d, Sq], k: [d, Sk] (head dim on partitions), v: [Sk, d] -> out [Sq, d]."""
    d, sq = q.shape
    sk = k.shape[1]
    out = nl.ndarray((sq, d), dtype=q.dtype, buffer=nl.shared_hbm)
    q_sb = nl.load(q)
    k_sb = nl.load(k)
    v_sb = nl.load(v)
    scores = nisa.nc_matmul(q_sb, k_sb)  # [Sq, Sk] = q.T @ k, fp32 in PSUM
    s = nisa.activation(nl.copy, scores, scale=1.0 / math.sqrt(d), dtype=nl.float32)
    i_q = nl.arange(sq)[:, None]
    i_k = nl.arange(sk)[None, :]
    masked = nisa.affine_select(i_q >= i_k, s, -9984.0)
    neg_max = nisa.tensor_reduce(np.max, masked, axis=(1,), keepdims=True, negate=True)
    row_sum = nl.ndarray((sq, 1), dtype=nl.float32, buffer=nl.sbuf)
    p = nisa.activation_reduce(nl.exp, masked, reduce_op=nl.add, reduce_res=row_sum, bias=neg_max)
    inv = nisa.reciprocal(row_sum)
    probs = nisa.tensor_scalar(p, np.multiply, inv, dtype=q.dtype)
    probs_t = nisa.nc_transpose(probs, engine=nisa.tensor_engine)  # [Sk, Sq] in PSUM
    probs_t_sb = nisa.tensor_copy(probs_t, dtype=q.dtype)
    o = nisa.nc_matmul(probs_t_sb, v_sb)  # [Sq, d] = probs @ v
    nl.store(out, nisa.tensor_copy(o, dtype=q.dtype))
    return out


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    qf, kf, vf = (a.astype(np.float64) for a in (q, k, v))
    s = qf.T @ kf / math.sqrt(q.shape[0])
    s = np.where(np.tril(np.ones_like(s, dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return p @ vf


def main() -> int:
    rng = np.random.default_rng(0)
    ok = True
    for dtype, tol in ((np.float32, 1e-4), (ml_dtypes.bfloat16, 3e-2)):
        d, s = 64, 128
        q = rng.standard_normal((d, s)).astype(dtype)
        k = rng.standard_normal((d, s)).astype(dtype)
        v = rng.standard_normal((s, d)).astype(dtype)
        got = causal_attention_kernel(q, k, v).astype(np.float32)
        err = float(np.max(np.abs(got - reference(q, k, v))))
        good = err <= tol
        ok &= good
        print(
            f"{np.dtype(dtype).name:9s} d={d} S={s}: max |nki - numpy| = {err:.3g} "
            f"{'ok' if good else 'TOO LARGE'}"
        )
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
