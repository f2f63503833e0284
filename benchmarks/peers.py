"""The benchmark workloads written for the peer kernel interpreters: Triton's interpreter
(``TRITON_INTERPRET=1``) and JAX Pallas' interpret mode. Each builder returns ``None`` when its
framework is not installed, else ``name -> callable(inputs) -> NumPy array``; the inputs are the
NumPy arrays the nki-sim kernel gets, in the same layout (the callables convert them once)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import numpy as np

Peer = Callable[..., np.ndarray]


def triton_peers() -> dict[str, Callable[..., Peer]] | None:
    """Triton kernels run by its interpreter on torch CPU tensors (``TRITON_INTERPRET=1`` must
    be set before triton is imported; ``benchmarks/run.py`` does)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return None
    try:
        import torch
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def add_tile(x, y, o, ncols, BM: tl.constexpr, BN: tl.constexpr):
        r = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
        c = tl.program_id(1) * BN + tl.arange(0, BN)[None, :]
        tl.store(o + r * ncols + c, tl.load(x + r * ncols + c) + tl.load(y + r * ncols + c))

    # loop bounds are constexpr: Triton 3.6's interpreter passes runtime scalars as arrays,
    # which Python's range() cannot take (loops over runtime bounds fail there)
    @triton.jit
    def add_loop(x, y, o, nrows: tl.constexpr, ncols: tl.constexpr, BM: tl.constexpr,
                 BN: tl.constexpr):  # fmt: skip
        for i in range(0, nrows // BM):
            for j in range(0, ncols // BN):
                r = i * BM + tl.arange(0, BM)[:, None]
                c = j * BN + tl.arange(0, BN)[None, :]
                v = tl.load(x + r * ncols + c) + tl.load(y + r * ncols + c)
                tl.store(o + r * ncols + c, v)

    @triton.jit
    def matmul(a_t, b, o, K: tl.constexpr, M: tl.constexpr, N: tl.constexpr, BM: tl.constexpr,
               BN: tl.constexpr, BK: tl.constexpr):  # fmt: skip
        # o[m, n] = sum_k a_t[k, m] * b[k, n], fp32 accumulation
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K // BK):
            rk = k0 * BK + tl.arange(0, BK)
            at = tl.load(a_t + rk[:, None] * M + rm[None, :])  # [BK, BM]
            bt = tl.load(b + rk[:, None] * N + rn[None, :])  # [BK, BN]
            # bf16 tiles are widened first (exact): the interpreter's bf16 tl.dot is wrong here
            acc += tl.dot(tl.trans(at.to(tl.float32)), bt.to(tl.float32))
        tl.store(o + rm[:, None] * N + rn[None, :], acc)

    @triton.jit
    def softmax_rows(x, o, ncols, BR: tl.constexpr, BC: tl.constexpr):
        r = tl.program_id(0) * BR + tl.arange(0, BR)[:, None]
        c = tl.arange(0, BC)[None, :]
        v = tl.load(x + r * ncols + c)
        e = tl.exp(v - tl.max(v, axis=1)[:, None])
        tl.store(o + r * ncols + c, e / tl.sum(e, axis=1)[:, None])

    @triton.jit
    def attention(q_t, k_t, v, o, S: tl.constexpr, D: tl.constexpr, BQ: tl.constexpr,
                  BK: tl.constexpr, CAUSAL: tl.constexpr):  # fmt: skip
        # one program per block of BQ queries; online softmax over blocks of BK keys
        iq = tl.program_id(0) * BQ + tl.arange(0, BQ)
        dd = tl.arange(0, D)
        q = tl.load(q_t + dd[:, None] * S + iq[None, :])  # [D, BQ]
        m = tl.full((BQ,), -1e30, tl.float32)
        den = tl.zeros((BQ,), tl.float32)
        acc = tl.zeros((BQ, D), tl.float32)
        for j in range(0, S // BK):
            ik = j * BK + tl.arange(0, BK)
            k = tl.load(k_t + dd[:, None] * S + ik[None, :])  # [D, BK]
            s = tl.dot(tl.trans(q), k) * (1.0 / math.sqrt(D))
            if CAUSAL:
                s = tl.where(iq[:, None] >= ik[None, :], s, -1e30)
            m_new = tl.maximum(m, tl.max(s, axis=1))
            p = tl.exp(s - m_new[:, None])
            corr = tl.exp(m - m_new)
            den = den * corr + tl.sum(p, axis=1)
            vv = tl.load(v + ik[:, None] * D + dd[None, :])  # [BK, D]
            acc = acc * corr[:, None] + tl.dot(p, vv)
            m = m_new
        tl.store(o + iq[:, None] * D + dd[None, :], acc / den[:, None])

    def t(a: np.ndarray) -> torch.Tensor:
        if a.dtype.name == "bfloat16":
            return torch.from_numpy(a.view(np.uint16).astype(np.int32) << 16).view(
                torch.float32
            ).to(torch.bfloat16)  # fmt: skip
        return torch.from_numpy(a)

    def grid_add(bm: int, bn: int) -> Peer:
        def run(x: np.ndarray, y: np.ndarray) -> np.ndarray:
            xt, yt = t(x), t(y)
            o = torch.empty_like(xt)
            add_tile[(x.shape[0] // bm, x.shape[1] // bn)](xt, yt, o, x.shape[1], bm, bn)
            return o.numpy()

        return run

    def loop_add(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        xt, yt = t(x), t(y)
        o = torch.empty_like(xt)
        add_loop[(1,)](xt, yt, o, x.shape[0], x.shape[1], 128, 512)
        return o.numpy()

    def mm(a_t: np.ndarray, b: np.ndarray) -> np.ndarray:
        at, bt = t(a_t), t(b)
        k, m = a_t.shape
        n = b.shape[1]
        o = torch.empty((m, n), dtype=torch.float32)
        matmul[(m // 128, n // 512)](at, bt, o, k, m, n, 128, 512, 128)
        return o.numpy()

    def softmax(x: np.ndarray) -> np.ndarray:
        xt = t(x)
        o = torch.empty_like(xt)
        softmax_rows[(x.shape[0] // 16,)](xt, o, x.shape[1], 16, x.shape[1])
        return o.numpy()

    def attn(causal: bool) -> Peer:
        def run(q_t: np.ndarray, k_t: np.ndarray, v: np.ndarray) -> np.ndarray:
            d, s = q_t.shape
            o = torch.empty((s, d), dtype=torch.float32)
            bq = min(128, s)
            attention[(s // bq,)](t(q_t), t(k_t), t(v), o, s, d, bq, bq, causal)
            return o.numpy()

        return run

    return {
        "grid_add": lambda: grid_add(128, 512),
        "loop_add": lambda: loop_add,
        "tiny_add": lambda: grid_add(128, 8),
        "matmul": lambda: mm,
        "softmax": lambda: softmax,
        "causal_attention": lambda: attn(True),
        "flash_attention": lambda: attn(False),
    }


def pallas_peers() -> dict[str, Callable[..., Peer]] | None:
    """The same kernels in JAX Pallas' interpret mode on CPU."""
    try:
        import jax
        import jax.numpy as jnp
        from jax.experimental import pallas as pl
    except ImportError:
        return None

    def add_body(x, y, o):
        o[...] = x[...] + y[...]

    def grid_add(bm: int, bn: int) -> Peer:
        def run(x: np.ndarray, y: np.ndarray) -> np.ndarray:
            spec = pl.BlockSpec((bm, bn), lambda i, j: (i, j))
            f = pl.pallas_call(add_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                               grid=(x.shape[0] // bm, x.shape[1] // bn), in_specs=[spec, spec],
                               out_specs=spec, interpret=True)  # fmt: skip
            return np.asarray(_jit(f, ("add", bm, bn, x.shape))(x, y))

        return run

    def loop_body(x, y, o):
        nr, nc = x.shape[0] // 128, x.shape[1] // 512

        def step(k, carry):
            i, j = k // nc, k % nc
            r, c = pl.ds(i * 128, 128), pl.ds(j * 512, 512)
            o[r, c] = x[r, c] + y[r, c]
            return carry

        jax.lax.fori_loop(0, nr * nc, step, 0)

    def loop_add(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        f = pl.pallas_call(loop_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                           interpret=True)  # fmt: skip
        return np.asarray(_jit(f, ("loop", x.shape))(x, y))

    def mm_body(a_t, b, o):
        @pl.when(pl.program_id(2) == 0)
        def _():
            o[...] = jnp.zeros(o.shape, jnp.float32)

        o[...] += jnp.dot(a_t[...].T, b[...], preferred_element_type=jnp.float32)

    def mm(a_t: np.ndarray, b: np.ndarray) -> np.ndarray:
        k, m = a_t.shape
        n = b.shape[1]
        f = pl.pallas_call(
            mm_body,
            out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
            grid=(m // 128, n // 512, k // 128),
            in_specs=[
                pl.BlockSpec((128, 128), lambda i, j, kk: (kk, i)),
                pl.BlockSpec((128, 512), lambda i, j, kk: (kk, j)),
            ],  # fmt: skip
            out_specs=pl.BlockSpec((128, 512), lambda i, j, kk: (i, j)),
            interpret=True,
        )
        return np.asarray(_jit(f, ("mm", a_t.shape, b.shape, str(a_t.dtype)))(a_t, b))

    def sm_body(x, o):
        v = x[...]
        e = jnp.exp(v - v.max(axis=1, keepdims=True))
        o[...] = e / e.sum(axis=1, keepdims=True)

    def softmax(x: np.ndarray) -> np.ndarray:
        spec = pl.BlockSpec((128, x.shape[1]), lambda i: (i, 0))
        f = pl.pallas_call(sm_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                           grid=(x.shape[0] // 128,), in_specs=[spec], out_specs=spec,
                           interpret=True)  # fmt: skip
        return np.asarray(_jit(f, ("sm", x.shape))(x))

    def attn(causal: bool) -> Peer:
        def run(q_t: np.ndarray, k_t: np.ndarray, v: np.ndarray) -> np.ndarray:
            d, s = q_t.shape
            bq = min(128, s)

            def body(q_ref, k_ref, v_ref, o_ref):
                q = q_ref[...]  # [d, bq]
                iq = pl.program_id(0) * bq + jnp.arange(bq)[:, None]

                def step(j, carry):
                    m, den, acc = carry
                    k = k_ref[:, pl.ds(j * bq, bq)]
                    vv = v_ref[pl.ds(j * bq, bq), :]
                    sc = jnp.dot(q.T, k, preferred_element_type=jnp.float32) / math.sqrt(d)
                    if causal:
                        sc = jnp.where(iq >= j * bq + jnp.arange(bq)[None, :], sc, -1e30)
                    m_new = jnp.maximum(m, sc.max(axis=1, keepdims=True))
                    p = jnp.exp(sc - m_new)
                    corr = jnp.exp(m - m_new)
                    den = den * corr + p.sum(axis=1, keepdims=True)
                    acc = acc * corr + jnp.dot(p, vv, preferred_element_type=jnp.float32)
                    return m_new, den, acc

                init = (jnp.full((bq, 1), -1e30, jnp.float32), jnp.zeros((bq, 1), jnp.float32),
                        jnp.zeros((bq, d), jnp.float32))  # fmt: skip
                _, den, acc = jax.lax.fori_loop(0, s // bq, step, init)
                o_ref[...] = acc / den

            f = pl.pallas_call(
                body,
                out_shape=jax.ShapeDtypeStruct((s, d), jnp.float32),
                grid=(s // bq,),
                in_specs=[
                    pl.BlockSpec((d, bq), lambda i: (0, i)),
                    pl.BlockSpec((d, s), lambda i: (0, 0)),
                    pl.BlockSpec((s, d), lambda i: (0, 0)),
                ],  # fmt: skip
                out_specs=pl.BlockSpec((bq, d), lambda i: (i, 0)),
                interpret=True,
            )
            return np.asarray(_jit(f, ("attn", causal, q_t.shape))(q_t, k_t, v))

        return run

    return {
        "grid_add": lambda: grid_add(128, 512),
        "loop_add": lambda: loop_add,
        "tiny_add": lambda: grid_add(128, 8),
        "matmul": lambda: mm,
        "softmax": lambda: softmax,
        "causal_attention": lambda: attn(True),
        "flash_attention": lambda: attn(False),
    }


_JITTED: dict[tuple, Callable] = {}


def _jit(f: Callable, key: tuple) -> Callable:
    """``jax.jit`` once per shape, so repeats measure the run, not the trace."""
    import jax

    if key not in _JITTED:
        _JITTED[key] = jax.jit(f)
    return _JITTED[key]
