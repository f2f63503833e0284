"""The batched backend's two-step ``tensor_scalar`` and ``scalar_tensor_tensor`` computed
straight into their destination: the same bits as the reference interpreter for pairs of ALU
ops, either operand order, scalar immediates and per-partition columns, fp32 and bf16 tiles,
and a column operand that is a column of the tile being overwritten."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl

from backends import REFERENCE, run_backends

OPS = (np.add, np.subtract, np.multiply, np.divide, np.maximum, np.minimum)
# (special values in the data: both zeros, infinities, NaN, a subnormal, large values)
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, 3e38, -7.5], dtype=np.float32)


def _data(dtype) -> np.ndarray:
    x = np.random.default_rng(7).standard_normal((32, 24)).astype(np.float32) * 3
    x[0, : SPECIAL.size] = SPECIAL
    return x.astype(dtype)


@nki.jit
def two_steps(x, col, op0, rev0, op1, rev1, column_first):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    c = nl.load(col)
    o0, o1 = (c, -1.25) if column_first else (0.75, c)
    r = nisa.tensor_scalar(nl.load(x), op0, o0, reverse0=rev0, op1=op1, operand1=o1, reverse1=rev1)
    nl.store(out, r)
    return out


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
@pytest.mark.parametrize("op0,op1", list(itertools.product(OPS, OPS))[::5])
def test_two_steps_match_the_reference_bit_for_bit(dtype, op0, op1):
    x = _data(dtype)
    col = np.random.default_rng(8).uniform(-2, 2, (32, 1)).astype(np.float32)
    col[:4, 0] = [0.0, -0.0, np.inf, np.nan]
    for rev0, rev1, column_first in itertools.product((False, True), repeat=3):
        runs = run_backends(
            two_steps, None, x, col, op0, rev0, op1, rev1, column_first,
            backends=("batched", REFERENCE), ran=("batched",),
        )  # fmt: skip
        assert runs.kernels["batched"].last_run.backend == "batched"


@nki.jit
def scalar_then_tensor(x, y, col, op0, rev0, op1, rev1, by_column):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    o0 = nl.load(col) if by_column else -0.5
    r = nisa.scalar_tensor_tensor(
        data=nl.load(x), op0=op0, operand0=o0, op1=op1, operand1=nl.load(y), reverse0=rev0,
        reverse1=rev1,
    )  # fmt: skip
    nl.store(out, r)
    return out


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
@pytest.mark.parametrize("op0,op1", list(itertools.product(OPS, OPS))[2::5])
def test_scalar_then_tensor_matches_the_reference_bit_for_bit(dtype, op0, op1):
    x, y = _data(dtype), _data(dtype)[::-1].copy()
    col = np.random.default_rng(9).uniform(-2, 2, (32, 1)).astype(np.float32)
    for rev0, rev1, by_column in itertools.product((False, True), repeat=3):
        runs = run_backends(
            scalar_then_tensor, None, x, y, col, op0, rev0, op1, rev1, by_column,
            backends=("batched", REFERENCE), ran=("batched",),
        )  # fmt: skip
        assert runs.kernels["batched"].last_run.backend == "batched"


@nki.jit
def in_place(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    # the second step's column is the destination's own first column: read before the first
    # step writes it
    t[...] = nisa.tensor_scalar(t, np.multiply, 2.0, op1=np.add, operand1=t[:, 0:1])
    nl.store(out, t)
    return out


def test_a_column_of_the_destination_is_read_before_the_first_step_writes_it():
    x = _data(np.float32)
    runs = run_backends(in_place, None, x, backends=("batched", REFERENCE), ran=("batched",))
    got = runs.results["batched"]
    want = x * np.float32(2) + x[:, 0:1]
    np.testing.assert_array_equal(got[1:], want[1:])  # (row 0 holds the special values)
