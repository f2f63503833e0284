"""Current-API kernels (destination-first ``nisa`` calls) compile on the Numba backend like
their classic twins: the everyday ``nki.isa`` instructions are lowered natively (only
``nc_matmul`` is hosted, as the classic ``nl.matmul`` is), with the interpreter's results bit
for bit, special values included, and NumPy's within rounding."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from simulator.compiled import backend as numba_backend
from simulator.config import SimConfig

from backends import REFERENCE, run_backends, same_bits
from helpers import BF16, same_product_bits


@pytest.fixture(autouse=True)
def _compiled_path(monkeypatch):
    # checks=full and shuffled orders always run in the interpreter
    monkeypatch.delenv("NKI_SIM_CHECKS", raising=False)
    monkeypatch.delenv("NKI_SIM_SHUFFLE_SEED", raising=False)


def _tile(shape, dtype, buffer=nl.sbuf):
    return nl.ndarray(shape, dtype=dtype, buffer=buffer)


@nki.jit
def vector_ops(x, y, s):
    """Loads with a cast, the Vector / Scalar engines' ALU forms, reductions, copies."""
    n, f = x.shape
    out = nl.ndarray((n, 9 * f), dtype=x.dtype, buffer=nl.shared_hbm)
    red = nl.ndarray((n, 5), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(n // 128):
        rows = slice(i * 128, (i + 1) * 128)
        a, b = _tile((128, f), nl.float32), _tile((128, f), nl.float32)
        c = _tile((128, 1), nl.float32)
        nisa.dma_copy(dst=a, src=x[rows, :])  # x.dtype -> fp32
        nisa.dma_copy(dst=b, src=y[rows, :])
        nisa.dma_copy(dst=c, src=s[rows, :])
        res = [_tile((128, f), x.dtype) for _ in range(9)]
        nisa.tensor_tensor(dst=res[0], data1=a, data2=b, op=nl.subtract)
        nisa.tensor_tensor(dst=res[1], data1=a, data2=b, op=nl.maximum)
        nisa.tensor_scalar(dst=res[2], data=a, op0=nl.multiply, operand0=c)
        nisa.tensor_scalar(dst=res[3], data=a, op0=nl.subtract, operand0=2.5, reverse0=True,
                           op1=nl.minimum, operand1=c)  # fmt: skip
        nisa.scalar_tensor_tensor(dst=res[4], data=a, op0=nl.multiply, operand0=c,
                                  op1=nl.add, operand1=b)  # fmt: skip
        nisa.activation(dst=res[5], op=nl.exp, data=a, bias=c, scale=0.5)
        nisa.activation(dst=res[6], op=nl.copy, data=b, scale=c)
        nisa.reciprocal(dst=res[7], data=b)
        nisa.tensor_copy(dst=res[8], src=a)  # fp32 -> x.dtype, rounded
        for k, r in enumerate(res):
            nisa.dma_copy(dst=out[rows, k * f : (k + 1) * f], src=r)
        rs = [_tile((128, 1), nl.float32) for _ in range(5)]
        nisa.tensor_reduce(dst=rs[0], op=nl.add, data=a, axis=1)
        nisa.tensor_reduce(dst=rs[1], op=nl.maximum, data=a, axis=1, negate=True)
        nisa.tensor_reduce(dst=rs[2], op=nl.minimum, data=b, axis=1)
        nisa.memset(dst=rs[3], value=-3.0)
        nisa.tensor_copy(dst=rs[4], src=c)
        for k, r in enumerate(rs):
            nisa.dma_copy(dst=red[rows, k : k + 1], src=r)
    return out, red


def vector_ref(x, y, s):
    """NumPy model of ``vector_ops``: fp32 math, each result rounded to x.dtype once."""
    a, b, c = (v.astype(np.float32) for v in (x, y, s))
    with np.errstate(all="ignore"):
        res = [a - b, np.maximum(a, b), a * c, np.minimum(2.5 - a, c), a * c + b,
               np.exp(a * 0.5 + c), b * c, 1.0 / b, a]  # fmt: skip
        red = [a.sum(1), -a.max(1), b.min(1), np.full(len(a), -3.0), c[:, 0]]
    out = np.concatenate([np.asarray(r, np.float32).astype(x.dtype) for r in res], axis=1)
    return out, np.stack(red, axis=1).astype(np.float32)


@nki.jit
def transpose_matmul(q_t, k_t, v):
    """The flash-attention twin's Tensor-engine steps: scores by nc_matmul, an exact
    nc_transpose into PSUM, copied to SBUF, a second matmul accumulated over key blocks."""
    d, s = q_t.shape
    out = nl.ndarray((s, d), dtype=nl.float32, buffer=nl.shared_hbm)
    pt_out = nl.ndarray((s, s), dtype=v.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(s // 128):
        q = _tile((d, 128), q_t.dtype)
        nisa.dma_copy(dst=q, src=q_t[:, i * 128 : (i + 1) * 128])
        pv = _tile((128, d), nl.float32, nl.psum)
        for j in nl.affine_range(s // 128):
            k, vv = _tile((d, 128), k_t.dtype), _tile((128, d), v.dtype)
            nisa.dma_copy(dst=k, src=k_t[:, j * 128 : (j + 1) * 128])
            nisa.dma_copy(dst=vv, src=v[j * 128 : (j + 1) * 128, :])
            sc = _tile((128, 128), nl.float32, nl.psum)
            nisa.nc_matmul(dst=sc, stationary=q, moving=k)
            p = _tile((128, 128), v.dtype)
            nisa.tensor_copy(dst=p, src=sc)
            p_t = _tile((128, 128), v.dtype, nl.psum)
            nisa.nc_transpose(dst=p_t, data=p, engine=nisa.tensor_engine)
            p_t_sb = _tile((128, 128), v.dtype)
            nisa.tensor_copy(dst=p_t_sb, src=p_t)
            nisa.dma_copy(dst=pt_out[j * 128 : (j + 1) * 128, i * 128 : (i + 1) * 128],
                          src=p_t_sb)  # fmt: skip
            nisa.nc_matmul(dst=pv, stationary=p_t_sb, moving=vv)
        o = _tile((128, d), nl.float32)
        nisa.tensor_copy(dst=o, src=pv)
        nisa.dma_copy(dst=out[i * 128 : (i + 1) * 128, :], src=o)
    return out, pt_out


def _plan(r):
    p, reason = numba_backend.plan(r.kernel("numba").last_ir, SimConfig())
    assert p is not None, reason
    return p


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_vector_instructions_compile_natively(dtype):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((256, 64)).astype(dtype)
    y = rng.uniform(0.5, 2.0, (256, 64)).astype(dtype)
    s = rng.standard_normal((256, 1)).astype(dtype)
    r = run_backends(vector_ops, None, x, y, s, checks="static", ran=("numba", REFERENCE))
    (r_out, r_red), (g_out, g_red) = r[REFERENCE], r["numba"]
    assert same_bits(g_out, r_out) and same_bits(g_red, r_red)
    e_out, e_red = vector_ref(x, y, s)
    tol = 1e-5 if dtype == np.float32 else 1e-2
    np.testing.assert_allclose(g_out.astype(np.float32), e_out.astype(np.float32), rtol=tol,
                               atol=tol)  # fmt: skip
    np.testing.assert_allclose(g_red, e_red, rtol=1e-5, atol=1e-4)
    p = _plan(r)
    assert p.hosted_ops == [] and p.native_work == p.work


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_vector_instructions_bit_exact_on_special_values(dtype):
    special = np.array([0.0, -0.0, 1.0, -1.0, 0.5, np.inf, -np.inf, np.nan, 1e-45, 3e38],
                       dtype=np.float32)  # fmt: skip
    x = np.resize(special, (128, 40)).astype(dtype)
    y = np.resize(special[::-1], (128, 40)).astype(dtype)
    s = np.resize(special, (128, 1)).astype(dtype)
    r = run_backends(vector_ops, None, x, y, s, checks="static", ran=("numba", REFERENCE))
    (r_out, r_red), (g_out, g_red) = r[REFERENCE], r["numba"]
    assert same_bits(g_out, r_out) and same_bits(g_red, r_red)
    assert np.isnan(g_out).any() and np.isinf(g_out).any()  # the special values got through


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_transpose_and_matmul_twin_steps(dtype):
    rng = np.random.default_rng(6)
    d, s = 64, 256
    q_t, k_t = (rng.standard_normal((d, s)).astype(dtype) for _ in range(2))
    v = rng.standard_normal((s, d)).astype(dtype)
    r = run_backends(transpose_matmul, None, q_t, k_t, v, checks="static",
                     ran=("numba", REFERENCE))  # fmt: skip
    (r_out, r_pt), (g_out, g_pt) = r[REFERENCE], r["numba"]
    assert same_bits(g_out, r_out) and same_bits(g_pt, r_pt)
    p32 = (q_t.astype(np.float32).T @ k_t.astype(np.float32)).astype(dtype)
    same_product_bits(g_pt, p32.T)  # (NumPy's one product: its tiles' bits where BLAS keeps them)
    want = p32.astype(np.float32) @ v.astype(np.float32)
    np.testing.assert_allclose(g_out, want, rtol=1e-3, atol=1e-3)
    assert _plan(r).hosted_ops == ["isa.nc_matmul", "isa.nc_matmul"]


@nki.jit
def psum_group_forms(a, b):
    """PSUM accumulation groups: a tile a memset wrote (matmuls add onto it), a tile half
    started by a matmul into its left half, then whole-tile matmuls (the rest start there)."""
    out = nl.ndarray((128, 2 * b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    f = b.shape[1]
    pre = _tile((128, f), nl.float32, nl.psum)
    nisa.memset(dst=pre, value=1.5)
    half = _tile((128, f), nl.float32, nl.psum)
    for k in nl.affine_range(a.shape[0] // 128):
        x, y = _tile((128, 128), a.dtype), _tile((128, f), b.dtype)
        nisa.dma_copy(dst=x, src=a[k * 128 : (k + 1) * 128, :])
        nisa.dma_copy(dst=y, src=b[k * 128 : (k + 1) * 128, :])
        nisa.nc_matmul(dst=pre, stationary=x, moving=y)
        if k == 0:
            nisa.nc_matmul(dst=half[:, 0 : f // 2], stationary=x, moving=y[:, 0 : f // 2])
        nisa.nc_matmul(dst=half, stationary=x, moving=y)
    for j, t in enumerate((pre, half)):
        o = _tile((128, f), nl.float32)
        nisa.tensor_copy(dst=o, src=t)
        nisa.dma_copy(dst=out[:, j * f : (j + 1) * f], src=o)
    return out


def test_psum_group_forms_match_numpy():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((384, 128)).astype(np.float32)
    b = rng.standard_normal((384, 64)).astype(np.float32)
    r = run_backends(psum_group_forms, None, a, b, checks="static", ran=("numba", REFERENCE))
    got = r["numba"]
    prods = [a[k * 128 : (k + 1) * 128].T @ b[k * 128 : (k + 1) * 128] for k in range(3)]
    np.testing.assert_allclose(got[:, :64], 1.5 + sum(prods), rtol=1e-4, atol=1e-4)
    half = sum(prods)
    half[:, :32] += prods[0][:, :32]  # the left half started at the half-tile matmul
    np.testing.assert_allclose(got[:, 64:], half, rtol=1e-4, atol=1e-4)
    full = psum_group_forms.configure(checks="full")(a, b)  # the interpreter's tracked reads
    assert same_bits(full, got)
