"""The selecting instructions run batched: ``nisa.affine_select`` (a predicate over the tile's
indices, program ids and ``affine_range`` iterators) and ``nl.where``, over a grid and an
``affine_range`` loop, with and without an instruction mask, in float32 and bfloat16. The batched
launch must not host them and must give the NumPy backend's (the reference interpreter's)
results bit for bit, and agree with a NumPy formula."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nki
import nki.isa as nisa
import nki.language as nl

from backends import REFERENCE, run_backends, same_bits

L = 3  # affine_range iterations per instance
W = 40  # columns per tile
BACKENDS = ("batched", REFERENCE)


@nki.jit
def shifted_causal(a, shift=0, masked=False):
    """Per 128-row tile (t = instance * L + iteration): keep a[r, c] where
    t + shift + p - c >= 0 and c < 30, else -7 (with ``masked``: only rows p < 100 written,
    the rest 0)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    ip = nl.arange(128)[:, None]
    jf = nl.arange(W)[None, :]
    for j in nl.affine_range(L):
        t = g * L + j
        x = nl.load(a[t * 128 + ip, jf])
        pred = (t + shift + ip - jf >= 0) & (jf < 30)
        res = nl.zeros((128, W), dtype=a.dtype, buffer=nl.sbuf)
        if masked:
            res[ip, jf] = nisa.affine_select(pred, x, -7.0, mask=ip < 100)
        else:
            res[ip, jf] = nisa.affine_select(pred, x, -7.0)
        nl.store(out[t * 128 + ip, jf], value=res)
    return out


def _causal_ref(a: np.ndarray, grid: int, shift: int, masked: bool) -> np.ndarray:
    p = np.arange(128)[:, None]
    c = np.arange(W)[None, :]
    out = np.empty_like(a)
    for t in range(grid * L):
        keep = (t + shift + p - c >= 0) & (c < 30)
        tile = np.where(keep, a[t * 128 : (t + 1) * 128], np.asarray(-7.0, a.dtype))
        if masked:
            tile = np.where(p < 100, tile, np.zeros((), a.dtype))
        out[t * 128 : (t + 1) * 128] = tile
    return out


@given(
    grid=st.integers(1, 3),
    shift=st.sampled_from([-200, -5, 0, 7, 200]),
    masked=st.booleans(),
    bf16=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_affine_select_runs_batched_bit_for_bit(grid, shift, masked, bf16, seed):
    dt = ml_dtypes.bfloat16 if bf16 else np.float32
    a = np.random.default_rng(seed).standard_normal((grid * L * 128, W)).astype(dt)
    r = run_backends(shifted_causal, grid, a, shift, masked, backends=BACKENDS, ran=("batched",))
    got, want, info = r.against("batched")
    assert "hosted" not in info.reason, info.reason
    assert "1 affine_range loop(s) batched" in info.reason, info.reason
    assert same_bits(got, want)
    assert same_bits(got, _causal_ref(a, grid, shift, masked))


@nki.jit
def where_max(a, b, masked=False):
    """Per tile: where(a > b, a, 2 * b) (with ``masked``: rows p < 50 only, the rest -1)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    ip = nl.arange(128)[:, None]
    jf = nl.arange(a.shape[1])[None, :]
    for j in nl.affine_range(L):
        rows = (g * L + j) * 128 + ip
        x = nl.load(a[rows, jf])
        y = nl.load(b[rows, jf])
        cond = nl.greater(x, y)
        twice = nl.multiply(y, 2, dtype=a.dtype)
        res = nl.full((128, a.shape[1]), -1, dtype=a.dtype, buffer=nl.sbuf)
        if masked:
            res[ip, jf] = nl.where(cond, x, twice, mask=ip < 50)
        else:
            res[ip, jf] = nl.where(cond, x, twice)
        nl.store(out[rows, jf], value=res)
    return out


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.int32])
@pytest.mark.parametrize("masked", [False, True])
def test_where_runs_batched_bit_for_bit(dtype, masked):
    grid = 2
    rng = np.random.default_rng(3)
    a, b = (
        (rng.standard_normal((grid * L * 128, 24)) * 100).astype(dtype) for _ in range(2)
    )  # fmt: skip
    r = run_backends(where_max, grid, a, b, masked, backends=BACKENDS, ran=("batched",))
    got, want, info = r.against("batched")
    assert "hosted" not in info.reason, info.reason
    assert same_bits(got, want)
    ref = np.where(a > b, a, (b.astype(np.float32) * 2).astype(dtype))
    if masked:
        rows = np.tile(np.arange(128) < 50, grid * L)[:, None]
        ref = np.where(rows, ref, np.asarray(-1, dtype))
    assert same_bits(got, ref)
