"""Masks that select every element are dropped from the traced kernel
(``simulator/vacuous_masks.py``): the ragged-tile idiom on whole tiles traces as the plain
instruction and gives the same values; a mask that leaves lanes out, or guards an access that
leaves its tensor, stays."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.language as nl
from nki.errors import NKIError
from nki.ir import Instr

RNG = np.random.default_rng(11)


@nki.jit
def ragged_scale(x):
    """out = 2 * x, in (128, 64) tiles whose last rows and columns are masked."""
    m, n = x.shape
    out = nl.ndarray((m, n), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.arange(128)[:, None], nl.arange(64)[None, :]
    for i in nl.affine_range((m + 127) // 128):
        for j in nl.affine_range((n + 63) // 64):
            rows, cols = i * 128 + ip, j * 64 + jf
            ok = (rows < m) & (cols < n)
            t = nl.load(x[rows, cols], mask=ok)
            nl.store(out[rows, cols], nl.multiply(t, 2.0, mask=ok), mask=ok)
    return out


def _masks(kernel):
    return [n.mask for n, _ in kernel.last_ir.walk() if isinstance(n, Instr)]


def test_a_mask_that_holds_everywhere_is_dropped_and_the_values_agree():
    x = RNG.standard_normal((256, 128)).astype(np.float32)
    got = ragged_scale(x)
    assert _masks(ragged_scale) and all(m is None for m in _masks(ragged_scale))
    np.testing.assert_array_equal(got, 2 * x)
    # (unmasked, the batched backend reads the load in place)
    on_batched = ragged_scale.configure(backend="batched")
    np.testing.assert_array_equal(on_batched(x), 2 * x)
    assert "1 load(s) read in place" in on_batched.last_run.reason
    np.testing.assert_array_equal(ragged_scale.configure(backend="numpy")(x), 2 * x)


def test_a_mask_that_leaves_lanes_out_stays():
    x = RNG.standard_normal((200, 100)).astype(np.float32)
    for backend in ("auto", "numpy"):
        k = ragged_scale.configure(backend=backend)
        np.testing.assert_array_equal(k(x), 2 * x)
        assert all(m is not None for m in _masks(k))


@nki.jit
def pid_masked(x):
    """One (128, 32) tile per instance; the mask on the program id holds for grid 4 only."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    ip, jf = nl.arange(128)[:, None], nl.arange(32)[None, :]
    keep = i * 128 + ip < 512
    t = nl.load(x[i * 128 + ip, jf], mask=keep)
    nl.store(out[i * 128 + ip, jf], nl.exp(t, mask=keep), mask=keep)
    return out


def test_a_mask_over_program_ids_is_dropped_only_where_it_holds_for_every_instance():
    x = RNG.standard_normal((640, 32)).astype(np.float32)
    got = pid_masked[4](x[:512])
    np.testing.assert_allclose(got, np.exp(x[:512]), rtol=1e-6)
    assert all(m is None for m in _masks(pid_masked))
    got = pid_masked[5](x)  # (the fifth instance's rows are masked out: never written)
    np.testing.assert_allclose(got[:512], np.exp(x[:512]), rtol=1e-6)
    assert all(m is not None for m in _masks(pid_masked))


@nki.jit
def guarded_past_the_edge(x):
    out = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.arange(128)[:, None], nl.arange(32)[None, :]
    t = nl.load(x[ip + 1, jf], mask=(ip < 128))  # (row 128 is past x's 128 rows)
    nl.store(out[ip, jf], t)
    return out


@nki.jit
def stored_past_the_edge(x):
    out = nl.ndarray((256, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.arange(128)[:, None], nl.arange(32)[None, :]
    for i in nl.affine_range(2):
        t = nl.load(x[i * 128 + ip, jf])
        nl.store(out[i * 128 + ip + 1, jf], t, mask=(ip < 128))  # (the last row: 256)
    return out


# (kernel, input shape, the failing line after the def, the message's range, masked or not per
# instruction)
PAST_THE_EDGE = [
    (guarded_past_the_edge, (128, 32), 4, "[1, 128] exceeds the dimension size of 128",
     [True, False]),
    (stored_past_the_edge, (256, 32), 6, "[129, 256] exceeds the dimension size of 256",
     [False, True]),
]  # fmt: skip


@pytest.mark.parametrize("backend", ["auto", "batched", "numpy"])
@pytest.mark.parametrize("case", PAST_THE_EDGE, ids=["load", "store in a batched loop"])
def test_a_mask_over_an_access_past_the_edge_stays_and_the_error_is_reported(case, backend):
    kernel, shape, line, message, masked = case
    k = kernel.configure(backend=backend)
    with pytest.raises(NKIError) as e:
        k(RNG.standard_normal(shape).astype(np.float32))
    assert e.value.code == "err_tensor_access_out_of_bound"
    assert e.value.loc is not None and e.value.loc.line == kernel.fn.__code__.co_firstlineno + line
    assert f"index range {message}" in str(e.value)
    assert [m is not None for m in _masks(k)] == masked
