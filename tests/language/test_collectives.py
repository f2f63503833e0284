"""nl.all_reduce: a reduction across SPMD instances, against NumPy reductions over the blocks
the instances hold."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

import nki
import nki.language as nl
from nki.errors import NKIError

from helpers import BF16, all_reduce_kernel


def _blocks(x, grid):
    """x split into the (128, 64) blocks instance (i, j) loads: shape (gi, gj, 128, 64)."""
    gi, gj = grid
    return x.reshape(gi, 128, gj, 64).transpose(0, 2, 1, 3)


def _unblocks(b):
    gi, gj, p, f = b.shape
    return b.transpose(0, 2, 1, 3).reshape(gi * p, gj * f)


@pytest.mark.parametrize(
    "op, ref",
    [(np.add, np.sum), (nl.maximum, np.max), (np.minimum, np.min), (nl.multiply, np.prod)],
)
@pytest.mark.parametrize("axes", [0, 1, (0, 1), [1, 0]])
def test_all_reduce_matches_numpy_over_the_group(op, ref, axes):
    grid = (3, 2)
    x = np.random.default_rng(0).uniform(0.5, 1.5, (3 * 128, 2 * 64)).astype(np.float32)
    got = all_reduce_kernel(op, axes)[grid](x)
    b = _blocks(x, grid).astype(np.float64)
    ax = tuple(axes) if isinstance(axes, (tuple, list)) else (axes,)
    want = np.broadcast_to(ref(b, axis=ax, keepdims=True), b.shape)
    np.testing.assert_allclose(got, _unblocks(want), rtol=2e-6)


def test_bfloat16_input_reduced_in_fp32_into_a_float32_tile():
    grid = (4, 1)
    x = np.random.default_rng(1).standard_normal((4 * 128, 64)).astype(BF16)
    got = all_reduce_kernel(np.add, 0, dtype=nl.float32)[grid](x)
    assert got.dtype == np.float32
    b = _blocks(x.astype(np.float32), grid)
    want = np.broadcast_to(b.sum(axis=0, keepdims=True), b.shape)
    np.testing.assert_allclose(got, _unblocks(want), rtol=1e-6, atol=1e-6)


def test_integer_sum_is_exact():
    grid = (2, 2)
    x = np.random.default_rng(2).integers(-(2**28), 2**28, (256, 128)).astype(np.int32)
    got = all_reduce_kernel(np.add, (0, 1))[grid](x)
    b = _blocks(x.astype(np.int64), grid)
    want = np.broadcast_to(b.sum(axis=(0, 1), keepdims=True), b.shape)
    np.testing.assert_array_equal(got, _unblocks(want).astype(np.int32))


@nki.jit
def running_total(x):
    # per instance: for each column tile, the sum of that tile over all instances, accumulated
    # over the loop; with a ragged last row tile masked out
    n, m = x.shape
    out = nl.ndarray((128, m), dtype=nl.float32, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    ip, jf = nl.mgrid[0:128, 0:32]
    for c in nl.affine_range(m // 32):
        ok = i * 128 + ip < n
        t = nl.load(x[i * 128 + ip, c * 32 + jf], mask=ok)
        s = nl.all_reduce(t, op=np.add, program_axes=0, mask=ok, dtype=nl.float32)
        nl.store(out[ip, c * 32 + jf], s, mask=(i == 0))
    return out


def test_collective_in_a_loop_with_a_masked_ragged_tile_and_shuffled_orders():
    x = np.random.default_rng(3).standard_normal((300, 96)).astype(np.float32)
    want = np.zeros((128, 96))
    for r0 in range(0, 300, 128):
        blk = x[r0 : r0 + 128].astype(np.float64)
        want[: blk.shape[0]] += blk
    base = running_total[3](x)
    np.testing.assert_allclose(base, want, rtol=1e-5, atol=1e-6)
    for seed in (1, 2):  # instances meet at each collective whatever order they run in
        np.testing.assert_array_equal(running_total.configure(shuffle_seed=seed)[3](x), base)
    # the masked-off rows of the ragged tile are never read (checks=full tracks that)
    np.testing.assert_array_equal(running_total.configure(checks="full")[3](x), base)


def test_instances_on_two_cores_and_the_numba_backend_fallback(monkeypatch):
    monkeypatch.delenv("NKI_SIM_CHECKS", raising=False)  # checks=full has its own fallback
    x = np.random.default_rng(4).standard_normal((4 * 128, 2 * 64)).astype(np.float32)
    k = all_reduce_kernel(np.maximum, 1)
    launch = k[nl.spmd_dim(2, nl.nc(2)), 2]  # grid (4, 2), axis 0 spread over two cores
    got = launch(x)
    b = _blocks(x, (4, 2))
    np.testing.assert_array_equal(got, _unblocks(np.broadcast_to(b.max(1, keepdims=True), b.shape)))
    assert set(k.last_run.placement.values()) == {0, 1}
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        np.testing.assert_array_equal(
            k.configure(backend="numba")[nl.spmd_dim(2, nl.nc(2)), 2](x), got
        )
    assert any("all_reduce" in str(m.message) for m in w)


def _line(fn, marker="# ERR"):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, t in enumerate(lines) if marker in t)


def _bad_axis(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x[0:128, 0:64])
    nl.store(out, nl.all_reduce(t, op=np.add, program_axes=2))  # ERR
    return out


def _bad_op(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x[0:128, 0:64])
    nl.store(out, nl.all_reduce(t, op=np.subtract, program_axes=0))  # ERR
    return out


def _hbm_operand(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.all_reduce(x[0:128, 0:64], op=np.add, program_axes=0))  # ERR
    return out


@pytest.mark.parametrize(
    "fn, code, words",
    [
        (_bad_axis, "err_invalid_program_axis", ["program_axes=2", "[0, 2)", "[2, 2]"]),
        (_bad_op, "err_unsupported_op", ["subtract", "reduction operator"]),
        (_hbm_operand, "err_unsupported_memory", ["'x'", "shared_hbm"]),
    ],
)
def test_all_reduce_errors_name_the_rule_values_and_line(fn, code, words):
    x = np.zeros((256, 128), np.float32)
    with pytest.raises(NKIError) as ei:
        nki.jit(fn)[2, 2](x)
    e = ei.value
    assert e.code == code, str(e)
    for w in words:
        assert w in str(e), str(e)
    assert e.loc.line == _line(fn) and e.loc.file == __file__
