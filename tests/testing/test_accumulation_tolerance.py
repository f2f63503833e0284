"""Accumulations in the testing toolkit: ``check_kernel``'s default tolerance scales with the
number of terms a kernel sums (a correct fp32 matmul with K = 1024 passes, a kernel computing
in bf16 still fails), and order shuffling accepts the rounding of a reordered legal
accumulation (``psum += nl.matmul(...)`` across ``affine_range``) while still reporting real
order dependences, saying which comparison failed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import strategies as st

import nki
import nki.isa as nisa
import nki.language as nl
from nki.testing import OrderDependenceError, assert_order_independent, check_kernel
from nki.testing.check import KernelCheckError
from nki.testing.tolerance import accumulations

from helpers import line_of

ROOT = Path(__file__).resolve().parents[2]


def _tutorial_matmul():
    path = ROOT / "tutorials" / "matmul" / "tiled_matmul.py"
    spec = importlib.util.spec_from_file_location("tiled_matmul_tutorial", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def k_tiled_mm(a, b):
    c = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(a.shape[1] // 128):
        at = nl.load_transpose2d(a[0:128, k * 128 : (k + 1) * 128])
        acc += nl.matmul(at, nl.load(b[k * 128 : (k + 1) * 128, 0:512]), transpose_x=True)
    nl.store(c, nl.copy(acc))
    return c


def k_bf16_mm(a, b):
    # computes in bf16 although the output is fp32: must still fail the fp32 tolerance
    c = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(a.shape[1] // 128):
        at = nl.load_transpose2d(a[0:128, k * 128 : (k + 1) * 128], dtype=nl.bfloat16)
        bt = nl.load(b[k * 128 : (k + 1) * 128, 0:512], dtype=nl.bfloat16)
        acc += nl.matmul(at, bt, transpose_x=True)
    nl.store(c, nl.copy(acc))
    return c


def mm_ref(a, b):
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


SHAPES = [(128, 1024), (1024, 512)]


def test_fp32_matmul_with_k_1024_passes_the_default_tolerance():
    n = check_kernel(
        nki.jit(k_tiled_mm), mm_ref, shapes=SHAPES, max_examples=2, min_value=-4, max_value=4
    )
    assert n == 2


def test_kernel_computing_in_bf16_still_fails_the_widened_tolerance():
    rng = np.random.default_rng(5)

    def fixed(shape, dtype):  # one drawn example (nothing to shrink: keeps the test fast)
        return st.just(rng.uniform(-4, 4, shape).astype(np.float32))

    with pytest.raises(KernelCheckError, match="1024-term fp32 accumulation at line"):
        check_kernel(nki.jit(k_bf16_mm), mm_ref, shapes=SHAPES, max_examples=1, values=fixed)


def test_accumulation_length_is_read_from_the_traced_kernel():
    k = nki.jit(k_tiled_mm)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 1024)).astype(np.float32)
    b = rng.standard_normal((1024, 512)).astype(np.float32)
    np.testing.assert_allclose(k(a, b), a @ b, rtol=1e-4, atol=1e-3)
    (acc,) = accumulations(k.last_ir).values()
    assert (acc.terms, acc.reordered) == (1024, 8)
    src = k_tiled_mm.__code__
    assert acc.loc.file == src.co_filename and acc.loc.line == src.co_firstlineno + 5


def test_tiled_matmul_tutorial_passes_order_shuffling():
    mod = _tutorial_matmul()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 512)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((512, 512)).astype(ml_dtypes.bfloat16)
    c = assert_order_independent(mod.tiled_matmul, a, b, seeds=range(4))
    want = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)
    check_kernel(
        mod.tiled_matmul,
        lambda x, y: x @ y,
        shapes=[(128, 512), (512, 512)],
        dtypes="bfloat16",
        max_examples=2,
        shuffle_seeds=(0, 1),
    )


def k_acc_plus_last_wins(a, b):
    # out0 = a legal accumulation + the tile of whichever iteration ran last (a real order
    # dependence); out1 = that tile alone (no accumulation: compared bit for bit)
    out0 = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    out1 = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    last = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    for k in nl.affine_range(4):
        at = nl.load_transpose2d(a[0:128, k * 128 : (k + 1) * 128])
        bt = nl.load(b[k * 128 : (k + 1) * 128, 0:512])
        acc += nl.matmul(at, bt, transpose_x=True)
        last[...] = nl.copy(bt)
    nl.store(out0, nl.add(acc, last))
    nl.store(out1, last)
    return out0, out1


def test_real_order_dependence_is_still_reported_and_named():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((128, 512)).astype(np.float32)
    b = rng.standard_normal((512, 512)).astype(np.float32)
    with pytest.raises(OrderDependenceError) as ei:
        # (classic: the current API runs a loop whose iterations rewrite `last` in order)
        kernel = nki.jit(k_acc_plus_last_wins, api="classic")
        assert_order_independent(kernel, a, b, seeds=range(4), checks="none")
    msg = str(ei.value)
    assert "output 0" in msg and "beyond reassociation" in msg, msg
    assert "4 partial sums of the 512-term accumulation at line" in msg, msg


def test_order_dependence_outside_accumulations_is_compared_bit_for_bit():
    def k_last_only(a, b):
        return k_acc_plus_last_wins(a, b)[1]

    rng = np.random.default_rng(2)
    a = rng.standard_normal((128, 512)).astype(np.float32)
    b = rng.standard_normal((512, 512)).astype(np.float32)
    with pytest.raises(OrderDependenceError, match="compared bit for bit"):
        kernel = nki.jit(k_last_only, api="classic")
        assert_order_independent(kernel, a, b, seeds=range(4), checks="none")


def k_nc_matmul_bf16_out(a, b):
    c = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    ps = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(a.shape[0] // 128):
        at = nl.load(a[k * 128 : (k + 1) * 128, 0:128])
        ps += nisa.nc_matmul(at, nl.load(b[k * 128 : (k + 1) * 128, 0:512]))
    nl.store(c, nl.copy(ps, dtype=nl.bfloat16))
    return c


def test_nc_matmul_accumulation_with_bf16_output_passes_shuffling():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1024, 128)).astype(np.float32)
    b = rng.standard_normal((1024, 512)).astype(np.float32)
    c = assert_order_independent(k_nc_matmul_bf16_out, a, b, seeds=range(3))
    np.testing.assert_allclose(c.astype(np.float32), a.T @ b, rtol=2**-7, atol=0.1)


def test_a_sum_of_sums_counts_every_term():
    def k_sum_of_row_sums(a):
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 1), nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(4):
            acc[...] = nl.add(acc, nl.sum(nl.load(a[i]), axis=1, keepdims=True))  # ACC
        nl.store(out, acc)
        return out

    k = nki.jit(k_sum_of_row_sums, api="classic")  # (the current API sums in program order)
    a = np.random.default_rng(4).random((4, 128, 256)).astype(np.float32)
    np.testing.assert_allclose(k(a)[:, 0], a.sum(axis=(0, 2)), rtol=1e-5)
    (acc,) = accumulations(k.last_ir).values()
    assert (acc.terms, acc.reordered) == (4 * 256, 4)
    assert acc.loc.line == line_of(k_sum_of_row_sums, "# ACC")
