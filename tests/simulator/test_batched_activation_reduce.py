"""``activation_reduce`` (an ``activation`` that resets the Scalar engine's accumulator registers
before folding its rows into them) runs batched over a grid and an ``affine_range`` loop: its
``reduce_res`` is its own row reduction, so no engine state crosses instructions. Results must
be the NumPy backend's (the reference interpreter's) bit for bit and agree with a NumPy
formula. Where another instruction reads the registers, the reduction is hosted with the
instance's engine state."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import nki
import nki.isa as nisa
import nki.language as nl

from backends import REFERENCE, run_backends, same_bits

L = 2  # affine_range iterations per instance
BACKENDS = ("batched", REFERENCE)
_OPS = {"add": (nl.add, np.sum), "max": (nl.maximum, np.max)}


@nki.jit
def exp_rows(a, bias, scale, op_name="add", res_bf16=False, scaled=False):
    """Per 128-row tile t (t = instance * L + iteration): e = exp(a * s + bias) over a
    (128, 4, W) tile (s: 0.25, or with ``scaled`` the (P, 1) tile of ``scale``), and its row
    reduction (over both free axes) in ``reduce_res``."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    red_dt = nl.bfloat16 if res_bf16 else nl.float32
    rows = nl.ndarray((a.shape[0], 1), dtype=red_dt, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    for j in nl.affine_range(L):
        t = g * L + j
        x = nl.load(a[t * 128 : (t + 1) * 128, :, :])
        b = nl.load(bias[t * 128 : (t + 1) * 128, :])
        s = nl.load(scale[t * 128 : (t + 1) * 128, :]) if scaled else 0.25
        rs = nl.ndarray((128, 1), dtype=red_dt, buffer=nl.sbuf)
        e = nisa.activation_reduce(
            nl.exp, x, reduce_op=_OPS[op_name][0], reduce_res=rs, bias=b, scale=s
        )
        nl.store(out[t * 128 : (t + 1) * 128, :, :], value=e)
        nl.store(rows[t * 128 : (t + 1) * 128, :], value=rs)
    return out, rows


def _reference(a, bias, scale, op_name, scaled):
    s = scale[:, :, None] if scaled else np.float32(0.25)
    e = np.exp(a.astype(np.float32) * s + bias[:, :, None])
    return e, _OPS[op_name][1](e.reshape(a.shape[0], -1), axis=1)


@given(
    grid=st.integers(1, 3),
    op_name=st.sampled_from(sorted(_OPS)),
    bf16=st.booleans(),
    res_bf16=st.booleans(),
    scaled=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_activation_reduce_runs_batched_bit_for_bit(grid, op_name, bf16, res_bf16, scaled, seed):
    dt = ml_dtypes.bfloat16 if bf16 else np.float32
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((grid * L * 128, 4, 6)).astype(dt)
    bias = rng.standard_normal((grid * L * 128, 1)).astype(np.float32)
    scale = rng.uniform(0.1, 1.0, (grid * L * 128, 1)).astype(np.float32)
    r = run_backends(
        exp_rows, grid, a, bias, scale, op_name, res_bf16, scaled, backends=BACKENDS,
        ran=("batched",),
    )  # fmt: skip
    (got, got_rows), (want, want_rows), info = r.against("batched")
    assert "hosted" not in info.reason, info.reason
    assert "1 affine_range loop(s) batched" in info.reason, info.reason
    assert same_bits(got, want) and same_bits(got_rows, want_rows)
    e, rows = _reference(a, bias, scale, op_name, scaled)
    tol = 2e-2 if bf16 or res_bf16 else 1e-5
    np.testing.assert_allclose(got.astype(np.float32), e, rtol=tol, atol=tol)
    np.testing.assert_allclose(got_rows[:, 0].astype(np.float32), rows, rtol=tol)


@nki.jit
def sums_then_fold(a):
    """activation_reduce's row sums, then a second activation folding exp(a / 2) into the same
    registers (``reduce_cmd=reduce``): the registers cross instructions."""
    sums = nl.ndarray((a.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    x = nl.load(a[g * 128 : (g + 1) * 128, :])
    first = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    both = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation_reduce(nl.exp, x, reduce_op=nl.add, reduce_res=first)
    nisa.activation(
        nl.exp, x, scale=0.5, reduce_op=nl.add, reduce_res=both, reduce_cmd=nisa.reduce_cmd.reduce
    )
    nl.store(sums[g * 128 : (g + 1) * 128, 0:1], value=first)
    nl.store(sums[g * 128 : (g + 1) * 128, 1:2], value=both)
    return sums


def test_registers_read_by_another_instruction_stay_hosted():
    grid = 3
    a = np.random.default_rng(5).standard_normal((grid * 128, 20)).astype(np.float32)
    r = run_backends(sums_then_fold, grid, a, backends=BACKENDS, ran=("batched",))
    got, want, info = r.against("batched")
    assert "2 instruction(s) hosted" in info.reason, info.reason
    assert same_bits(got, want)
    first = np.exp(a).sum(axis=1)
    np.testing.assert_allclose(got[:, 0], first, rtol=1e-5)
    np.testing.assert_allclose(got[:, 1], first + np.exp(a / 2).sum(axis=1), rtol=1e-5)


def test_causal_attention_tutorial_runs_without_hosting():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tutorials" / "attention"))
    from causal_attention import causal_attention_kernel, reference

    rng = np.random.default_rng(0)
    q, k = (rng.standard_normal((32, 128)).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((128, 32)).astype(np.float32)
    r = run_backends(causal_attention_kernel, 1, q, k, v, backends=BACKENDS, ran=("batched",))
    got, want, info = r.against("batched")
    assert "hosted" not in info.reason, info.reason
    assert same_bits(got, want)
    np.testing.assert_allclose(got, reference(q, k, v), rtol=1e-4, atol=1e-4)
