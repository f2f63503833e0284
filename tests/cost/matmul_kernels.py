"""Four matmul kernels of increasing optimisation, in the steps of the NKI matmul tutorial
(basic tiling, hoisted loads, blocked free dimensions, fully optimised), written for the cost
model's calibration. Each computes ``result[M, N] = lhsT[K, M].T @ rhs[K, N]`` with K on the
partition axis (``lhsT`` is passed transposed, so every load is a plain DMA).

Published trn1 figures for 4096 x 8192 @ 8192 x 8192 bf16: 51.80, 42.96, 22.07, 6.97 ms."""

from __future__ import annotations

import nki
import nki.language as nl

TK, TM, TN = 128, 128, 512  # contraction (partitions), stationary free, moving free


@nki.jit
def matmul_basic(lhsT, rhs):
    """One 128 x 512 output tile at a time; both operands reloaded for every tile."""
    k_size, m_size = lhsT.shape
    n_size = rhs.shape[1]
    result = nl.ndarray((m_size, n_size), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_size // TM):
        for n in nl.affine_range(n_size // TN):
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // TK):
                a = nl.load(lhsT[k * TK : (k + 1) * TK, m * TM : (m + 1) * TM])
                b = nl.load(rhs[k * TK : (k + 1) * TK, n * TN : (n + 1) * TN])
                acc += nl.matmul(a, b, transpose_x=True)
            out = nl.copy(acc, dtype=lhsT.dtype)
            nl.store(result[m * TM : (m + 1) * TM, n * TN : (n + 1) * TN], value=out)
    return result


@nki.jit
def matmul_hoisted(lhsT, rhs):
    """The stationary column block is loaded once per output row block, not once per tile."""
    k_size, m_size = lhsT.shape
    n_size = rhs.shape[1]
    kt = k_size // TK
    result = nl.ndarray((m_size, n_size), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_size // TM):
        a = nl.ndarray((kt, nl.par_dim(TK), TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(kt):
            a[k] = nl.load(lhsT[k * TK : (k + 1) * TK, m * TM : (m + 1) * TM])
        for n in nl.affine_range(n_size // TN):
            b = nl.ndarray((kt, nl.par_dim(TK), TN), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(kt):
                b[k] = nl.load(rhs[k * TK : (k + 1) * TK, n * TN : (n + 1) * TN])
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(kt):
                acc += nl.matmul(a[k], b[k], transpose_x=True)
            out = nl.copy(acc, dtype=lhsT.dtype)
            nl.store(result[m * TM : (m + 1) * TM, n * TN : (n + 1) * TN], value=out)
    return result


BM, BN = 2, 2  # output tiles per block in the blocked kernel


@nki.jit
def matmul_blocked(lhsT, rhs):
    """2 x 2 output tiles per block: each loaded operand tile feeds two matmuls."""
    k_size, m_size = lhsT.shape
    n_size = rhs.shape[1]
    result = nl.ndarray((m_size, n_size), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(m_size // (BM * TM)):
        for nb in nl.affine_range(n_size // (BN * TN)):
            acc = nl.zeros((BM, BN, nl.par_dim(TM), TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // TK):
                a = nl.load(lhsT[k * TK : (k + 1) * TK, mb * BM * TM : (mb + 1) * BM * TM])
                b = nl.load(rhs[k * TK : (k + 1) * TK, nb * BN * TN : (nb + 1) * BN * TN])
                for i in nl.affine_range(BM):
                    for j in nl.affine_range(BN):
                        acc[i, j] += nl.matmul(
                            a[:, i * TM : (i + 1) * TM],
                            b[:, j * TN : (j + 1) * TN],
                            transpose_x=True,
                        )
            for i in nl.affine_range(BM):
                for j in nl.affine_range(BN):
                    out = nl.copy(acc[i, j], dtype=lhsT.dtype)
                    nl.store(
                        result[
                            (mb * BM + i) * TM : (mb * BM + i + 1) * TM,
                            (nb * BN + j) * TN : (nb * BN + j + 1) * TN,
                        ],
                        value=out,
                    )
    return result


OM, ON = 4, 2  # output tiles per block in the optimised kernel (8 PSUM banks)


@nki.jit
def matmul_optimised(lhsT, rhs):
    """A 512-column stationary block hoisted over all of K, 2 KiB-per-partition moving loads,
    4 x 2 output tiles accumulating in all eight PSUM banks."""
    k_size, m_size = lhsT.shape
    n_size = rhs.shape[1]
    kt = k_size // TK
    result = nl.ndarray((m_size, n_size), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(m_size // (OM * TM)):
        a = nl.ndarray((kt, nl.par_dim(TK), OM * TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(kt):
            a[k] = nl.load(lhsT[k * TK : (k + 1) * TK, mb * OM * TM : (mb + 1) * OM * TM])
        for nb in nl.affine_range(n_size // (ON * TN)):
            acc = nl.zeros((OM, ON, nl.par_dim(TM), TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(kt):
                b = nl.load(rhs[k * TK : (k + 1) * TK, nb * ON * TN : (nb + 1) * ON * TN])
                for i in nl.affine_range(OM):
                    for j in nl.affine_range(ON):
                        acc[i, j] += nl.matmul(
                            a[k, :, i * TM : (i + 1) * TM],
                            b[:, j * TN : (j + 1) * TN],
                            transpose_x=True,
                        )
            for i in nl.affine_range(OM):
                for j in nl.affine_range(ON):
                    out = nl.copy(acc[i, j], dtype=lhsT.dtype)
                    nl.store(
                        result[
                            (mb * OM + i) * TM : (mb * OM + i + 1) * TM,
                            (nb * ON + j) * TN : (nb * ON + j + 1) * TN,
                        ],
                        value=out,
                    )
    return result


SEQUENCE = (
    ("basic tiling", matmul_basic, 51.80),
    ("hoisted loads", matmul_hoisted, 42.96),
    ("blocked free dims", matmul_blocked, 22.07),
    ("fully optimised", matmul_optimised, 6.97),
)
