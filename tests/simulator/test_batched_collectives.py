"""``nl.all_reduce`` on the batched backend: a group of instances is whole in the batch, so the
reduction folds along the group's batch axes in the order of the instances' grid coordinates.
Each launch must run batched, be bit-identical to the interpreter, equal a NumPy reduction and
report the interpreter's errors (message, line, instance)."""

from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError
from simulator.batched import backend as batched

from backends import run_backends
from helpers import all_reduce_kernel


@pytest.mark.parametrize(
    "op, ref", [(nl.add, np.sum), (nl.maximum, np.max), (nl.multiply, np.prod)]
)
@pytest.mark.parametrize("axes", [0, 1, (0, 1), [1, 0]])
def test_all_reduce_runs_batched_bit_identical(op, ref, axes):
    grid = (3, 4)
    x = np.random.default_rng(0).uniform(0.5, 1.5, (3 * 128, 4 * 64)).astype(np.float32)
    got = run_backends(all_reduce_kernel(op, axes), grid, x, ran=("batched",))["batched"]
    b = x.reshape(3, 128, 4, 64).transpose(0, 2, 1, 3).astype(np.float64)
    ax = tuple(axes) if isinstance(axes, (tuple, list)) else (axes,)
    want = np.broadcast_to(ref(b, axis=ax, keepdims=True), b.shape)
    np.testing.assert_allclose(got, want.transpose(0, 2, 1, 3).reshape(x.shape), rtol=3e-6)


@pytest.mark.parametrize(
    "dtype, out", [(ml_dtypes.bfloat16, nl.float32), (ml_dtypes.bfloat16, None), (np.int32, None)]
)
def test_all_reduce_dtypes(dtype, out):
    rng = np.random.default_rng(1)
    x = rng.integers(-(2**26), 2**26, (2 * 128, 2 * 64)).astype(dtype)
    kernel = all_reduce_kernel(nl.add, 0, dtype=out)
    got = run_backends(kernel, (2, 2), x, ran=("batched",))["batched"]
    b = x.astype(np.float64).reshape(2, 128, 128)
    want = np.broadcast_to(b.sum(0, keepdims=True), b.shape).reshape(x.shape)
    if dtype == np.int32:
        np.testing.assert_array_equal(got, want.astype(np.int32))  # exact integer sums
    else:
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-2)


@nki.jit
def masked_running_total(x):
    # (tests/language's running_total stores only from instance 0 through a mask, which the
    # batched HBM proof does not read: it declines that one; here each instance stores its rows)
    n, m = x.shape
    out = nl.ndarray((3 * 128, m), dtype=nl.float32, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    ip, jf = nl.mgrid[0:128, 0:32]
    for c in nl.affine_range(m // 32):
        ok = i * 128 + ip < n
        t = nl.load(x[i * 128 + ip, c * 32 + jf], mask=ok)
        s = nl.all_reduce(t, op=nl.add, program_axes=0, mask=ok, dtype=nl.float32)
        nl.store(out[i * 128 + ip, c * 32 + jf], s)  # every instance: the group's total
    return out


def test_masked_all_reduce_in_a_batched_loop():
    x = np.random.default_rng(2).standard_normal((300, 96)).astype(np.float32)
    got = run_backends(masked_running_total, 3, x, ran=("batched",))["batched"]
    want = np.zeros((128, 96))
    for r0 in range(0, 300, 128):
        blk = x[r0 : r0 + 128].astype(np.float64)
        want[: blk.shape[0]] += blk
    for i, rows in ((0, 128), (1, 128), (2, 300 - 256)):  # (the last tile's masked-in rows)
        blk = got[i * 128 : i * 128 + rows]
        np.testing.assert_allclose(blk, want[:rows], rtol=1e-5, atol=1e-6)


def test_reduced_grid_axis_is_never_chunked(monkeypatch):
    """With a budget of one instance's tiles per chunk, the other grid axis is chunked but the
    reduced one stays whole (a chunked group would reduce only part of its members)."""
    monkeypatch.setattr(batched, "BUDGET", 1)
    x = np.random.default_rng(3).standard_normal((4 * 128, 3 * 64)).astype(np.float32)
    got = run_backends(all_reduce_kernel(nl.add, 0), (4, 3), x, ran=("batched",))["batched"]
    b = x.astype(np.float64).reshape(4, 128, 3, 64)
    want = np.broadcast_to(b.sum(0, keepdims=True), b.shape).reshape(x.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@nki.jit
def reduce_then_overrun(x):
    out = nl.ndarray((2 * 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    t = nl.load(x[nl.ds(i * 128, 128), nl.ds(j * 32, 32)])
    s = nl.all_reduce(t, op=nl.add, program_axes=1)
    nl.store(out[nl.ds(i * 160, 128), nl.ds(j * 32, 32)], s)  # ERR: i=1 writes rows 160..287
    return out


def test_errors_after_a_collective_are_the_interpreters():
    """Instance (1, 0) fails after the collective; its group holds (1, 1), which runs after it:
    the replay must let the whole group meet to raise the interpreter's error."""
    x = np.ones((3 * 128, 64), np.float32)
    errs = []
    for backend in ("numpy", "batched"):
        with pytest.raises(NKIError) as e:
            reduce_then_overrun.configure(backend=backend, checks="none")[3, 2](x)
        errs.append(e.value)
    lines, start = inspect.getsourcelines(reduce_then_overrun.__wrapped__)
    line = start + next(i for i, t in enumerate(lines) if "# ERR" in t)
    assert str(errs[1]) == str(errs[0])
    assert errs[1].loc.line == line and tuple(errs[1].instance) == (1, 0)


@nki.jit
def reduce_in_a_device_loop(x, n):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    t[...] = nl.load(x[g * 128 : (g + 1) * 128, :])
    count = nisa.register_alloc()
    nisa.register_load(count, nl.load(n[g : g + 1, :]))

    def body(i):
        t[...] = nl.multiply(nl.all_reduce(t, op=nl.add, program_axes=0), 0.5)

    nl.fori_loop(0, count, body)
    nl.store(out[g * 128 : (g + 1) * 128, :], t)
    return out


def test_a_collective_inside_a_device_loop_is_declined():
    """Per-position trips of a device loop would not reach the collective together."""
    x = np.random.default_rng(4).standard_normal((2 * 128, 32)).astype(np.float32)
    n = np.full((2, 1), 2, np.int32)
    k = reduce_in_a_device_loop.configure(backend="batched")
    got = k[2](x, n)
    assert k.last_run.backend == "numpy"
    assert "'nl.all_reduce'" in k.last_run.reason and "device loop" in k.last_run.reason
    b = x.astype(np.float64).reshape(2, 128, 32)
    for _ in range(2):
        b = np.broadcast_to(b.sum(0, keepdims=True), b.shape) * 0.5
    np.testing.assert_allclose(got, b.reshape(x.shape), rtol=1e-5, atol=1e-5)
