"""The current-API twins of ``benchmarks/run.py``'s workloads: the same computations written
with the current API (destination-first ``nisa`` calls, tiles made with ``nl.ndarray``, the grid
add as ``kernel[2]`` on two cores), timed next to their classic versions."""

from __future__ import annotations

import math

import nki
import nki.isa as nisa
import nki.language as nl


def _tile(shape: tuple[int, ...], dtype: object, buffer: object = nl.sbuf) -> object:
    return nl.ndarray(shape, dtype=dtype, buffer=buffer)


@nki.jit
def tensor_add_lnc(a, b):
    """The grid add on two cores (kernel[2]): each core loops over its half of the tiles."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    half = a.shape[0] // 2
    base = nl.program_id(0) * half
    for i in nl.affine_range(half // 128):
        for j in nl.affine_range(a.shape[1] // 512):
            rows, cols = slice(base + i * 128, base + (i + 1) * 128), slice(j * 512, (j + 1) * 512)
            x, y, z = (_tile((128, 512), a.dtype) for _ in range(3))
            nisa.dma_copy(dst=x, src=a[rows, cols])
            nisa.dma_copy(dst=y, src=b[rows, cols])
            nisa.tensor_tensor(dst=z, data1=x, data2=y, op=nl.add)
            nisa.dma_copy(dst=out[rows, cols], src=z)
    return out


def _add_tiles(a, b, p: int, f: int):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // p):
        for j in nl.affine_range(a.shape[1] // f):
            r, c = slice(i * p, (i + 1) * p), slice(j * f, (j + 1) * f)
            x, y, z = (_tile((p, f), a.dtype) for _ in range(3))
            nisa.dma_copy(dst=x, src=a[r, c])
            nisa.dma_copy(dst=y, src=b[r, c])
            nisa.tensor_tensor(dst=z, data1=x, data2=y, op=nl.add)
            nisa.dma_copy(dst=out[r, c], src=z)
    return out


@nki.jit
def loop_add_current(a, b):
    """The loop add: affine_range over every [128, 512] tile."""
    return _add_tiles(a, b, 128, 512)


@nki.jit
def tiny_add_current(a, b):
    """The tiny-tile add: affine_range over [128, 8] tiles."""
    return _add_tiles(a, b, 128, 8)


@nki.jit
def tiled_matmul_current(a_t, b):
    """out = a_t.T @ b: nc_matmul into a PSUM tile over K (accumulate=None: the first matmul
    into an element overwrites, later ones add), copied to SBUF and out."""
    k_dim, m_dim = a_t.shape
    n_dim = b.shape[1]
    out = nl.ndarray((m_dim, n_dim), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_dim // 128):
        for n in nl.affine_range(n_dim // 512):
            acc = _tile((128, 512), nl.float32, nl.psum)
            for k in nl.affine_range(k_dim // 128):
                at, bt = _tile((128, 128), a_t.dtype), _tile((128, 512), b.dtype)
                nisa.dma_copy(dst=at, src=a_t[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                nisa.dma_copy(dst=bt, src=b[k * 128 : (k + 1) * 128, n * 512 : (n + 1) * 512])
                nisa.nc_matmul(dst=acc, stationary=at, moving=bt)
            res = _tile((128, 512), nl.float32)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * 128 : (m + 1) * 128, n * 512 : (n + 1) * 512], src=res)
    return out


@nki.jit
def row_softmax_current(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    f = x.shape[1]
    for i in nl.affine_range(x.shape[0] // 128):
        t, e, o = (_tile((128, f), nl.float32) for _ in range(3))
        neg_max, total, inv = (_tile((128, 1), nl.float32) for _ in range(3))
        nisa.dma_copy(dst=t, src=x[i * 128 : (i + 1) * 128, :])
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=t, axis=1, negate=True)
        nisa.activation(dst=e, op=nl.exp, data=t, bias=neg_max)
        nisa.tensor_reduce(dst=total, op=nl.add, data=e, axis=1)
        nisa.reciprocal(dst=inv, data=total)
        nisa.tensor_scalar(dst=o, data=e, op0=nl.multiply, operand0=inv)
        nisa.dma_copy(dst=out[i * 128 : (i + 1) * 128, :], src=o)
    return out


@nki.jit
def causal_attention_current(q, k, v):
    """The causal attention tutorial in the current API: q [d, Sq], k [d, Sk], v [Sk, d]."""
    d, sq = q.shape
    sk = k.shape[1]
    out = nl.ndarray((sq, d), dtype=q.dtype, buffer=nl.shared_hbm)
    q_sb, k_sb, v_sb = _tile(q.shape, q.dtype), _tile(k.shape, k.dtype), _tile(v.shape, v.dtype)
    for dst, src in ((q_sb, q), (k_sb, k), (v_sb, v)):
        nisa.dma_copy(dst=dst, src=src)
    scores = _tile((sq, sk), nl.float32, nl.psum)
    nisa.nc_matmul(dst=scores, stationary=q_sb, moving=k_sb)
    s, masked, p = (_tile((sq, sk), nl.float32) for _ in range(3))
    nisa.activation(dst=s, op=nl.copy, data=scores, scale=1.0 / math.sqrt(d))
    nisa.affine_select(dst=masked, pattern=[[-1, sk]], channel_multiplier=1, on_true_tile=s,
                       on_false_value=-9984.0, cmp_op=nl.greater_equal)  # fmt: skip
    neg_max, row_sum, inv = (_tile((sq, 1), nl.float32) for _ in range(3))
    nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=masked, axis=1, negate=True)
    nisa.activation_reduce(dst=p, op=nl.exp, data=masked, reduce_op=nl.add, reduce_res=row_sum,
                           bias=neg_max)  # fmt: skip
    nisa.reciprocal(dst=inv, data=row_sum)
    probs = _tile((sq, sk), q.dtype)
    nisa.tensor_scalar(dst=probs, data=p, op0=nl.multiply, operand0=inv)
    probs_t = _tile((sk, sq), q.dtype, nl.psum)
    nisa.nc_transpose(dst=probs_t, data=probs, engine=nisa.tensor_engine)
    probs_t_sb = _tile((sk, sq), q.dtype)
    nisa.tensor_copy(dst=probs_t_sb, src=probs_t)
    o = _tile((sq, d), nl.float32, nl.psum)
    nisa.nc_matmul(dst=o, stationary=probs_t_sb, moving=v_sb)
    o_sb = _tile((sq, d), q.dtype)
    nisa.tensor_copy(dst=o_sb, src=o)
    nisa.dma_copy(dst=out, src=o_sb)
    return out


@nki.jit
def flash_attention_current(q_t, k_t, v):
    """The flash attention workload in the current API (online softmax over key blocks)."""
    d, s = q_t.shape
    out = nl.ndarray((s, d), dtype=nl.float32, buffer=nl.shared_hbm)
    scale = 1.0 / math.sqrt(d)
    for i in nl.affine_range(s // 128):
        q = _tile((d, 128), q_t.dtype)
        nisa.dma_copy(dst=q, src=q_t[:, i * 128 : (i + 1) * 128])
        m, den, inv = (_tile((128, 1), nl.float32) for _ in range(3))
        acc = _tile((128, d), nl.float32)
        nisa.memset(dst=m, value=-1e30)
        nisa.memset(dst=den, value=0.0)
        nisa.memset(dst=acc, value=0.0)
        for j in nl.sequential_range(s // 128):
            k, vv = _tile((d, 128), k_t.dtype), _tile((128, d), v.dtype)
            nisa.dma_copy(dst=k, src=k_t[:, j * 128 : (j + 1) * 128])
            nisa.dma_copy(dst=vv, src=v[j * 128 : (j + 1) * 128, :])
            sc_ps = _tile((128, 128), nl.float32, nl.psum)
            nisa.nc_matmul(dst=sc_ps, stationary=q, moving=k)
            sc, p = _tile((128, 128), nl.float32), _tile((128, 128), nl.float32)
            nisa.activation(dst=sc, op=nl.copy, data=sc_ps, scale=scale)
            mx, m_new, neg, corr, rs = (_tile((128, 1), nl.float32) for _ in range(5))
            nisa.tensor_reduce(dst=mx, op=nl.maximum, data=sc, axis=1)
            nisa.tensor_tensor(dst=m_new, data1=m, data2=mx, op=nl.maximum)
            nisa.tensor_scalar(dst=neg, data=m_new, op0=nl.multiply, operand0=-1.0)
            nisa.activation(dst=p, op=nl.exp, data=sc, bias=neg)
            nisa.tensor_reduce(dst=rs, op=nl.add, data=p, axis=1)
            nisa.activation(dst=corr, op=nl.exp, data=m, bias=neg)
            nisa.scalar_tensor_tensor(dst=den, data=den, op0=nl.multiply, operand0=corr,
                                      op1=nl.add, operand1=rs)  # fmt: skip
            p_t = _tile((128, 128), nl.float32, nl.psum)
            nisa.nc_transpose(dst=p_t, data=p, engine=nisa.tensor_engine)
            p_t_sb = _tile((128, 128), nl.float32)
            nisa.tensor_copy(dst=p_t_sb, src=p_t)
            pv = _tile((128, d), nl.float32, nl.psum)
            nisa.nc_matmul(dst=pv, stationary=p_t_sb, moving=vv)
            nisa.scalar_tensor_tensor(dst=acc, data=acc, op0=nl.multiply, operand0=corr,
                                      op1=nl.add, operand1=pv)  # fmt: skip
            nisa.tensor_copy(dst=m, src=m_new)
        o = _tile((128, d), nl.float32)
        nisa.reciprocal(dst=inv, data=den)
        nisa.tensor_scalar(dst=o, data=acc, op0=nl.multiply, operand0=inv)
        nisa.dma_copy(dst=out[i * 128 : (i + 1) * 128, :], src=o)
    return out
