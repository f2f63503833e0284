"""The batched backend makes an exact on-chip copy / transpose of a tile written once into a
fresh tile written only by it a view of its source (``simulator/batched/moves.py``), with the
interpreter's results bit for bit; a source or destination written again keeps its copy."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from simulator.batched.plan import plan
from simulator.config import SimConfig

from backends import REFERENCE, run_backends, same_bits
from helpers import BF16


def _tile(shape, dtype, buffer=nl.sbuf):
    return nl.ndarray(shape, dtype=dtype, buffer=buffer)


@nki.jit
def transpose_then_matmul(x, v):
    """Per row block: p = exp(x), p^T into PSUM by nc_transpose, copied to SBUF, then p @ v,
    and p^T stored (the moved tiles are read by a matmul and by a store)."""
    n, f = x.shape
    out = nl.ndarray((n, v.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    pts = nl.ndarray((n // 128, f, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    vv = _tile(v.shape, v.dtype)
    nisa.dma_copy(dst=vv, src=v)
    for i in nl.affine_range(n // 128):
        a, p = _tile((128, f), x.dtype), _tile((128, f), x.dtype)
        nisa.dma_copy(dst=a, src=x[i * 128 : (i + 1) * 128, :])
        nisa.activation(dst=p, op=nl.exp, data=a)
        p_t = _tile((f, 128), x.dtype, nl.psum)
        nisa.nc_transpose(dst=p_t, data=p, engine=nisa.tensor_engine)
        p_t_sb = _tile((f, 128), x.dtype)
        nisa.tensor_copy(dst=p_t_sb, src=p_t)
        pv = _tile((128, v.shape[1]), nl.float32, nl.psum)
        nisa.nc_matmul(dst=pv, stationary=p_t_sb, moving=vv)
        o = _tile((128, v.shape[1]), nl.float32)
        nisa.tensor_copy(dst=o, src=pv)
        nisa.dma_copy(dst=out[i * 128 : (i + 1) * 128, :], src=o)
        nisa.dma_copy(dst=pts[i], src=p_t_sb)
    return out, pts


@nki.jit
def copies_written_again(x):
    """b = copy(a), then a is overwritten (b must keep the old values); d = copy(c), then d is
    accumulated into (c must keep its values)."""
    out = nl.ndarray((128, 4 * x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    f = x.shape[1]
    a, b, c, d = (_tile((128, f), x.dtype) for _ in range(4))
    nisa.dma_copy(dst=a, src=x)
    nisa.tensor_copy(dst=b, src=a)
    nisa.tensor_tensor(dst=a, data1=b, data2=b, op=nl.add)
    nisa.activation(dst=c, op=nl.copy, data=a, scale=3.0)
    nisa.tensor_copy(dst=d, src=c)
    nisa.tensor_tensor(dst=d, data1=d, data2=c, op=nl.multiply)
    for k, t in enumerate((a, b, c, d)):
        nisa.dma_copy(dst=out[:, k * f : (k + 1) * f], src=t)
    return out


def _moved(r) -> frozenset[str]:
    return plan(r.kernel("batched").last_ir, SimConfig()).moved_names


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_transpose_and_copy_become_views(dtype):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((512, 96)).astype(dtype)
    v = rng.standard_normal((96, 64)).astype(dtype)
    r = run_backends(transpose_then_matmul, None, x, v, ran=("batched", REFERENCE))
    (r_out, r_pts), (g_out, g_pts) = r[REFERENCE], r["batched"]
    assert same_bits(g_out, r_out) and same_bits(g_pts, r_pts)
    assert len(_moved(r)) == 2  # p_t and its SBUF copy: no pass over the tile
    p = np.exp(x.astype(np.float32)).astype(dtype)
    want_pts = np.stack([p[i * 128 : (i + 1) * 128].T for i in range(4)])
    np.testing.assert_array_equal(g_pts.astype(np.float32), want_pts.astype(np.float32))
    want = p.astype(np.float32) @ v.astype(np.float32)
    np.testing.assert_allclose(g_out, want, rtol=1e-3, atol=1e-3)


def test_copies_of_tiles_written_again_are_copied():
    x = np.random.default_rng(9).standard_normal((128, 32)).astype(np.float32)
    r = run_backends(copies_written_again, None, x, ran=("batched", REFERENCE))
    got = r["batched"]
    assert _moved(r) == frozenset()
    a2 = x + x
    want = np.concatenate([a2, x, 3 * a2, (3 * a2) * (3 * a2)], axis=1)
    np.testing.assert_array_equal(got, want)
