"""Issue 14's done-when kernels, written in the current API (``import nki``, destination-first
``nisa`` calls, views, ``.ap``, registers, ``nl.fori_loop``) from the public documentation's
descriptions of the algorithms, each run unmodified and checked against NumPy / torch."""

# ruff: noqa: B023 - fori_loop bodies close over tiles of the enclosing iteration on purpose:
# nl.fori_loop calls the body within that iteration

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import nki
import nki.isa as nisa
import nki.language as nl

RNG = np.random.default_rng(1414)
P = 128


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# --- tensor add: one core and the two cores of an LNC=2 launch --------------------------------
@nki.jit
def tensor_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    share = a.shape[0] // nl.num_programs(0)
    for t in range(share // P):
        lo = nl.program_id(0) * share + t * P
        at = nl.ndarray((P, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        bt = nl.ndarray((P, a.shape[1]), dtype=b.dtype, buffer=nl.sbuf)
        ct = nl.ndarray((P, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a[lo : lo + P, :])
        nisa.dma_copy(dst=bt, src=b[lo : lo + P, :])
        nisa.tensor_tensor(ct, at, bt, nl.add)  # positional, destination first
        nisa.dma_copy(dst=out[lo : lo + P, :], src=ct)
    return out


@pytest.mark.parametrize("lnc", [1, 2])
def test_tensor_add(lnc):
    a, b = _f32(512, 256), _f32(512, 256)
    run = tensor_add if lnc == 1 else tensor_add[2]
    np.testing.assert_array_equal(nki.simulate(run)(a, b), a + b)


# --- matmul: K-tiled PSUM accumulation, bf16 operands --------------------------------------------
@nki.jit
def matmul(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in range(M // P):
        acc = nl.ndarray((P, N), dtype=nl.float32, buffer=nl.psum)
        for k in range(K // P):
            st = nl.ndarray((P, P), dtype=lhsT.dtype, buffer=nl.sbuf)
            mv = nl.ndarray((P, N), dtype=rhs.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=st, src=lhsT[k * P : (k + 1) * P, m * P : (m + 1) * P])
            nisa.dma_copy(dst=mv, src=rhs[k * P : (k + 1) * P, :])
            nisa.nc_matmul(acc, st, mv, accumulate=k > 0)
        res = nl.ndarray((P, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out.slice(0, m * P, (m + 1) * P), src=res)
    return out


def test_matmul_bf16_accumulates_in_psum():
    lhsT = _f32(384, 256).astype(ml_dtypes.bfloat16)
    rhs = _f32(384, 512).astype(ml_dtypes.bfloat16)
    want = lhsT.astype(np.float64).T @ rhs.astype(np.float64)
    np.testing.assert_allclose(nki.simulate(matmul)(lhsT, rhs), want, rtol=1e-4, atol=1e-3)


# --- transpose on the Tensor engine ---------------------------------------------------------
@nki.jit
def transpose(x):
    n, f = x.shape  # (128, 96) -> (96, 128)
    out = nl.ndarray((f, n), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((n, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    tp = nl.ndarray((f, n), dtype=x.dtype, buffer=nl.psum)
    nisa.nc_transpose(dst=tp, data=t)
    ts = nl.ndarray((f, n), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=ts, src=tp)
    nisa.dma_copy(dst=out, src=ts)
    return out


def test_transpose():
    x = _f32(128, 96)
    np.testing.assert_array_equal(nki.simulate(transpose)(x), x.T)


# --- average pooling: a 5-D .ap window view reduced over its last two axes ------------------
@nki.jit
def avg_pool(x, k):
    C, H, W = x.shape
    out = nl.ndarray((C, H // k, W // k), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((C, H, W), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    windows = t.ap([[H * W, C], [k * W, H // k], [k, W // k], [W, k], [1, k]])
    s = nl.ndarray((C, H // k, W // k), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=s, op=nl.add, data=windows, axis=(3, 4))
    r = nl.ndarray((C, H // k, W // k), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=r, data=s, op0=nl.multiply, operand0=1.0 / (k * k))
    nisa.dma_copy(dst=out, src=r)
    return out


def test_average_pooling():
    x = _f32(96, 12, 12)
    want = torch.nn.functional.avg_pool2d(torch.from_numpy(x)[None], 3)[0].numpy()
    np.testing.assert_allclose(nki.simulate(avg_pool)(x, 3), want, rtol=1e-5, atol=1e-6)


# --- fused mamba selective scan: exp(delta * A), scan over time, sum over states ------------
@nki.jit
def mamba(delta, u, A, B, C):
    batch, channels, L = delta.shape
    _, n_state = A.shape
    out = nl.ndarray((batch, channels, L), dtype=delta.dtype, buffer=nl.shared_hbm)
    for b in range(batch):
        for c0 in range(0, channels, P):
            d_t = nl.ndarray((P, L), dtype=nl.float32, buffer=nl.sbuf)
            u_t = nl.ndarray((P, L), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=d_t, src=delta.select(0, b).slice(0, c0, c0 + P))
            nisa.dma_copy(dst=u_t, src=u[b, c0 : c0 + P, :])
            du = nl.ndarray((P, L), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=du, data1=d_t, data2=u_t, op=nl.multiply)
            acc = nl.ndarray((P, L), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=acc, value=0.0)
            for s in range(n_state):
                a_col = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=a_col, src=A[c0 : c0 + P, s : s + 1])
                dA = nl.ndarray((P, L), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=dA, op=nl.exp, data=d_t, scale=a_col)
                # B[b, s, :] and C[b, s, :] broadcast over the channel partitions (HBM views)
                b_row = nl.ndarray((P, L), dtype=nl.float32, buffer=nl.sbuf)
                c_row = nl.ndarray((P, L), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(
                    dst=b_row, src=B.select(0, b).select(0, s).expand_dim(0).broadcast(0, P)
                )
                nisa.dma_copy(dst=c_row, src=C[b, s : s + 1, :].broadcast(0, P))
                dBu = nl.ndarray((P, L), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=dBu, data1=du, data2=b_row, op=nl.multiply)
                h = nl.ndarray((P, L), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor_scan(h, dA, dBu, 0.0, nl.multiply, nl.add)
                y = nl.ndarray((P, L), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=y, data1=h, data2=c_row, op=nl.multiply)
                nisa.tensor_tensor(dst=acc, data1=acc, data2=y, op=nl.add)
            nisa.dma_copy(dst=out[b, c0 : c0 + P, :], src=acc)
    return out


def test_fused_mamba():
    batch, ch, L, n = 2, 128, 64, 3
    delta = RNG.uniform(0.01, 0.2, (batch, ch, L)).astype(np.float32)
    u, A = _f32(batch, ch, L), -RNG.uniform(0.2, 1.0, (ch, n)).astype(np.float32)
    B, C = _f32(batch, n, L), _f32(batch, n, L)
    want = np.zeros((batch, ch, L))
    for b in range(batch):
        for s in range(n):
            dA = np.exp(delta[b] * A[:, s : s + 1].astype(np.float64))
            dBu = delta[b] * u[b] * B[b, s][None, :].astype(np.float64)
            h = np.zeros(ch)
            for t in range(L):
                h = dA[:, t] * h + dBu[:, t]
                want[b, :, t] += h * C[b, s, t]
    got = nki.simulate(mamba)(delta, u, A, B, C)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# --- rmsnorm: views for row tiles and the gamma broadcast, reduce + rsqrt -------------------
@nki.jit
def rmsnorm(x, gamma, eps):
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=g, src=gamma.reshape((1, d)).broadcast(0, P))
    for i in range(0, n, P):
        rows = min(P, n - i)  # a ragged last tile: min()-bounded views
        t = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:rows], src=x.slice(0, i, i + rows))
        sq = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
        ss = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        # the sum of squares goes through the engine's accumulator registers: reset, then reduce
        nisa.activation(dst=sq[0:rows], op=nl.square, data=t[0:rows], reduce_op=nl.add,
                        reduce_res=ss[0:rows], reduce_cmd=nisa.reduce_cmd.reset_reduce)  # fmt: skip
        ms = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(ms[0:rows], ss[0:rows], nl.multiply, 1.0 / d, op1=nl.add, operand1=eps)
        rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rstd[0:rows], op=nl.rsqrt, data=ms[0:rows])
        y = nl.ndarray((P, d), dtype=x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(y[0:rows], t[0:rows], nl.multiply, rstd[0:rows], nl.multiply,
                                  g[0:rows])  # fmt: skip
        nisa.dma_copy(dst=out[i : i + rows, :], src=y[0:rows])
    return out


def test_rmsnorm_with_a_ragged_tile():
    x, gamma = _f32(300, 64), _f32(64)
    want = torch.nn.functional.rms_norm(torch.from_numpy(x), (64,), torch.from_numpy(gamma), 1e-5)
    got = nki.simulate(rmsnorm)(x, gamma, 1e-5)
    np.testing.assert_allclose(got, want.numpy(), rtol=2e-5, atol=2e-5)


# --- attention: scores for the row max, then a fori_loop over key blocks ---------------------
@nki.jit
def attention(q, k, v):
    """softmax(q k^T / sqrt(d)) v for one head; q, k, v: (S, d), S a multiple of 128, S <= 512.
    Key blocks are visited by a device loop (nl.fori_loop) whose register index moves the
    .ap views of k and v (scalar_offset)."""
    S, d = q.shape
    scale = 1.0 / float(np.sqrt(d))
    out = nl.ndarray((S, d), dtype=nl.float32, buffer=nl.shared_hbm)
    kT = nl.ndarray((d, S), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=kT, src=k.permute((1, 0)))
    for q0 in range(0, S, P):
        qT = nl.ndarray((d, P), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=qT, src=q.slice(0, q0, q0 + P).permute((1, 0)))
        s_ps = nl.ndarray((P, S), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(s_ps, qT, kT)
        neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=s_ps, axis=1, negate=True)
        nisa.tensor_scalar(neg_max, neg_max, nl.multiply, scale)
        row_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=row_sum, value=0.0)
        o_acc = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=o_acc, value=0.0)

        def key_block(j):  # j: a register holding the block's first key row
            kT_j = nl.ndarray((d, P), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=kT_j, src=k.ap([[1, d], [d, P]], offset=0, scalar_offset=j))
            v_j = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=v_j, src=v.ap([[d, P], [1, d]], offset=0, scalar_offset=j))
            s_j = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(s_j, qT, kT_j)
            p_j = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf)
            part = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=p_j, op=nl.exp, data=s_j, bias=neg_max, scale=scale,
                            reduce_op=nl.add, reduce_res=part,
                            reduce_cmd=nisa.reduce_cmd.reset_reduce)  # fmt: skip
            nisa.tensor_tensor(dst=row_sum, data1=row_sum, data2=part, op=nl.add)
            pT_ps = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_transpose(dst=pT_ps, data=p_j)
            pT = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=pT, src=pT_ps)
            o_ps = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(o_ps, pT, v_j)
            nisa.tensor_tensor(dst=o_acc, data1=o_acc, data2=o_ps, op=nl.add)

        nl.fori_loop(0, S, key_block, step=P)
        inv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv, data=row_sum)
        o = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=o, data=o_acc, op0=nl.multiply, operand0=inv)
        nisa.dma_copy(dst=out[q0 : q0 + P, :], src=o)
    return out


def test_attention_with_views_registers_and_fori_loop():
    S, d = 256, 64
    q, k, v = _f32(S, d), _f32(S, d), _f32(S, d)
    want = torch.nn.functional.scaled_dot_product_attention(
        torch.from_numpy(q)[None], torch.from_numpy(k)[None], torch.from_numpy(v)[None]
    )[0].numpy()
    np.testing.assert_allclose(nki.simulate(attention)(q, k, v), want, rtol=1e-4, atol=1e-5)


# --- registers: a run-time tile count drives the loop and the .ap offsets ----------------------
@nki.jit
def first_n_tiles_scaled(x, n_tiles):
    """out[t] = 3 * x[t] for the first n_tiles[0, 0] tiles of x (T, 128, F); the rest stay 0."""
    T, _, F = x.shape
    out = nl.ndarray((T, P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    zero = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zero, value=0.0)
    for t in range(T):
        nisa.dma_copy(dst=out.select(0, t), src=zero)
    n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n_sb, src=n_tiles)
    n_reg = nisa.register_alloc()
    nisa.register_load(n_reg, n_sb)

    def body(i):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.ap([[F, P], [1, F]], offset=0, scalar_offset=i))
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=3.0)
        nisa.dma_copy(dst=out.ap([[F, P], [1, F]], offset=0, scalar_offset=i), src=t)

    nl.fori_loop(0, n_reg, body)
    return out


@pytest.mark.parametrize("n", [0, 2, 4])
def test_register_trip_count_and_scalar_offset(n):
    x = _f32(4, P, 32)
    want = np.zeros_like(x)
    want[:n] = 3 * x[:n]
    got = nki.simulate(first_n_tiles_scaled)(x, np.array([[n]], np.int32))
    np.testing.assert_array_equal(got, want)


# --- gather: .ap(vector_offset=) reads one table row per partition ----------------------------
@nki.jit
def embedding(table, ids):
    V, D = table.shape
    out = nl.ndarray((P, D), dtype=table.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((P, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=ids)
    rows = nl.ndarray((P, D), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=table.ap([[D, P], [1, D]], offset=0, vector_offset=idx,
                                         indirect_dim=0))  # fmt: skip
    nisa.dma_copy(dst=out, src=rows)
    return out


def test_embedding_gather_with_vector_offset():
    table = _f32(1000, 48)
    ids = RNG.integers(0, 1000, (P, 1)).astype(np.int32)
    want = torch.nn.functional.embedding(
        torch.from_numpy(ids[:, 0]).long(), torch.from_numpy(table)
    )
    np.testing.assert_array_equal(nki.simulate(embedding)(table, ids), want.numpy())


# --- views: reshape / reshape_dim / view(dtype) / expand_dim / permute ----------------------
@nki.jit
def view_shuffle(x):
    """x (4, 128, 16) float32 -> out (128, 4, 16): out[p, t, f] = x[t, p, f], plus the raw bits
    of the first row tile as int32 through .view on SBUF."""
    T, _, F = x.shape
    out = nl.ndarray((P, T, F), dtype=x.dtype, buffer=nl.shared_hbm)
    bits = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((P, T * F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t.reshape((P, T, F)), src=x.permute((1, 0, 2)))
    r = nl.ndarray((P, T, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=t.reshape_dim(1, (T, F)))
    nisa.dma_copy(dst=out, src=r)
    first = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=first, src=r[:, 0].view(nl.int32))
    nisa.dma_copy(dst=bits, src=first.expand_dim(1).squeeze_dim(1))
    return out, bits


def test_view_methods_on_chip():
    x = _f32(4, P, 16)
    got, bits = nki.simulate(view_shuffle)(x)
    np.testing.assert_array_equal(got, x.transpose(1, 0, 2))
    np.testing.assert_array_equal(bits, x[0].view(np.int32))
