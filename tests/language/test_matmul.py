"""nl.matmul / nl.transpose / nl.load_transpose2d: values, PSUM fp32 accumulation over a
K loop, size-limit errors, and the tiled-matmul tutorial."""

from __future__ import annotations

import importlib.util
import inspect

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.language as nl
from nki.errors import NKIMemoryError, NKIShapeError, NKITypeError

from helpers import ROOT


@nki.jit
def k_loop_matmul(a_t, b):
    """sum over k of a_t[k].T @ b[k], accumulated in one fp32 PSUM tile."""
    k_size, m = a_t.shape
    out = nl.ndarray((m, b.shape[1]), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((m, b.shape[1]), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(k_size // 128):
        x = nl.load(a_t[k * 128 : (k + 1) * 128, :])
        y = nl.load(b[k * 128 : (k + 1) * 128, :])
        acc += nl.matmul(x, y, transpose_x=True)
    nl.store(out, acc)
    return out


@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16])
def test_psum_accumulation_equals_float32_matmul(dt):
    rng = np.random.default_rng(0)
    a_t = rng.standard_normal((1024, 128)).astype(dt)
    b = rng.standard_normal((1024, 512)).astype(dt)
    got = k_loop_matmul(a_t, b)
    want = a_t.astype(np.float32).T @ b.astype(np.float32)
    assert got.dtype == np.float32
    # only the fp32 summation order differs
    bound = 1024 * 2.0**-24 * (np.abs(a_t.astype(np.float64)).T @ np.abs(b.astype(np.float64)))
    assert np.all(np.abs(got - want) <= bound)


def test_psum_accumulation_is_not_rounded_to_bf16_between_iterations():
    # 1 + 8 * 2^-9: every partial sum would be lost in bf16, but PSUM keeps fp32
    a_t = np.zeros((1024, 1), dtype=ml_dtypes.bfloat16)
    a_t[0, 0] = 1.0
    a_t[128::128, 0] = 2.0**-9
    b = np.ones((1024, 1), dtype=ml_dtypes.bfloat16)
    got = k_loop_matmul(a_t, b)
    assert got[0, 0] == np.float32(1.0 + 7 * 2.0**-9)


def _mm_kernel(xs, ys, transpose_x, xdt=nl.float32):
    @nki.jit
    def kernel(a, b):
        x = nl.zeros(xs, xdt)
        y = nl.zeros(ys, nl.float32)
        r = nl.matmul(x, y, transpose_x=transpose_x)
        out = nl.ndarray(r.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, r)
        return out

    line = inspect.getsourcelines(kernel.fn)[1] + 4
    return kernel, line


@pytest.mark.parametrize(
    "xs,ys,tx,code,words",
    [
        ((128, 256), (128, 512), False, "err_matmul_tile_size_exceeds_limit", ["x", "256", "128"]),
        ((128, 128), (128, 1024), True, "err_matmul_tile_size_exceeds_limit", ["y", "1024", "512"]),
        ((64, 128), (64, 512), False, "err_matmul_contraction_mismatch", ["128", "64"]),
        ((64, 128), (128, 512), True, "err_matmul_contraction_mismatch", ["64", "128"]),
    ],
)
def test_matmul_size_limits(xs, ys, tx, code, words):
    kernel, line = _mm_kernel(xs, ys, tx)
    with pytest.raises(NKIShapeError) as ei:
        kernel(np.zeros(1, np.float32), np.zeros(1, np.float32))
    assert ei.value.code == code
    assert ei.value.loc.line == line
    for w in words:
        assert w in str(ei.value)


def test_matmul_rejects_integer_and_psum_operands():
    kernel, _ = _mm_kernel((64, 64), (64, 64), False, xdt=nl.int32)
    with pytest.raises(NKITypeError, match="int32"):
        kernel(np.zeros(1, np.float32), np.zeros(1, np.float32))

    @nki.jit
    def from_psum(a):
        x = nl.zeros((64, 64), nl.float32, buffer=nl.psum)
        nl.matmul(x, x)

    with pytest.raises(NKIMemoryError) as ei:
        from_psum(np.zeros(1, np.float32))
    assert ei.value.code == "err_unsupported_memory"


def test_matmul_without_transpose_and_transpose_ops():
    @nki.jit
    def kernel(a, b):
        x = nl.load(a)  # (M, K)
        y = nl.load(b)  # (K, N)
        p = nl.matmul(x, y)  # x @ y: the compiler transposes x
        t = nl.transpose(x)  # (K, M)
        lt = nl.load_transpose2d(a)  # (K, M) straight from HBM
        out = nl.ndarray(p.shape, nl.float32, buffer=nl.shared_hbm)
        out_t = nl.ndarray(t.shape, a.dtype, buffer=nl.shared_hbm)
        out_lt = nl.ndarray(lt.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, p)
        nl.store(out_t, t)
        nl.store(out_lt, lt)
        return out, out_t, out_lt

    rng = np.random.default_rng(2)
    a = rng.standard_normal((96, 80)).astype(np.float32)
    b = rng.standard_normal((80, 200)).astype(np.float32)
    p, t, lt = kernel(a, b)
    np.testing.assert_allclose(p, a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(t, a.T)
    np.testing.assert_array_equal(lt, a.T)


def test_transpose_limit():
    @nki.jit
    def kernel(a):
        x = nl.zeros((128, 256), nl.float32)
        nl.transpose(x)

    with pytest.raises(NKIShapeError) as ei:
        kernel(np.zeros(1, np.float32))
    assert ei.value.code == "err_transpose_tile_size_exceeds_limit"
    assert "256" in str(ei.value)


def test_tiled_matmul_tutorial_1024x512x1024_bf16():
    path = ROOT / "tutorials" / "matmul" / "tiled_matmul.py"
    spec = importlib.util.spec_from_file_location("tiled_matmul_tutorial", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((1024, 512)).astype(np.float32)
    b = rng.standard_normal((512, 1024)).astype(np.float32)
    assert mod.check(a, b)
    c = mod.tiled_matmul(a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16))
    ref = a.astype(ml_dtypes.bfloat16).astype(np.float32) @ b.astype(ml_dtypes.bfloat16).astype(
        np.float32
    )
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-3)


def test_psum_accumulate_is_one_instruction_without_a_temporary():
    a_t = np.ones((256, 128), np.float32)
    b = np.ones((256, 512), np.float32)
    k_loop_matmul(a_t, b)
    ir = k_loop_matmul.last_ir
    mms = [i for i, _ in ir.instructions() if i.kind == "matmul"]
    assert len(mms) == 1 and mms[0].accumulate == "add"
    psum_tiles = [t for t in ir.tensors if t.buffer == "psum"]
    assert len(psum_tiles) == 1  # only the accumulator: no per-iteration temporary
