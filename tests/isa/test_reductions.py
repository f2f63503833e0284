"""Vector-engine reductions, scans and statistics: nisa.tensor_reduce, tensor_scalar_reduce,
tensor_tensor_scan, tensor_scalar_cumulative (running reductions), bn_stats / bn_aggr (mean and
variance, also as a property over every tile width), against NumPy, with their axis, dtype,
memory and size rules."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nki
import nki.isa as nisa
import nki.language as nl
import nki.optable as optable
from nki.errors import (
    NKIError,
    NKIMemoryError,
    NKIShapeError,
)
from nki.isa import reduce_cmd as RC

import backends
from helpers import ALU_OPS as OPS
from helpers import BF16, DTS, close, expect_error, f32, rand, run
from helpers import hbm_out as _out
from helpers import load_sbuf as _load
from helpers import sbuf_tile as _tile


def k_tsr(x, op):
    out = _out(x.shape, x.dtype)
    red = _out((x.shape[0], 1), nl.float32)
    acc = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    r = nisa.tensor_scalar_reduce(
        data=nl.load(x), op0=np.multiply, operand0=3.0, reduce_op=op, reduce_res=acc
    )
    nl.store(out, r)
    nl.store(red, acc)
    return out, red


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("op,ref", [(np.add, np.sum), (np.max, np.max), (nl.minimum, np.min)])
def test_tensor_scalar_reduce(dt, op, ref):
    x = rand((96, 48), dt)
    got, red = run(k_tsr, x, op)
    close(got, f32(x) * 3, dt)
    close(red, ref(f32(x) * 3, axis=1, keepdims=True), np.float32, rtol=1e-4, atol=1e-4)


def k_reduce(x, op, axis, negate, keepdims):
    r = nisa.tensor_reduce(op, nl.load(x), axis=axis, negate=negate, keepdims=keepdims)
    out = _out(r.shape, x.dtype)
    nl.store(out, r)
    return out


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize(
    "op,ref", [(np.add, np.sum), (nl.maximum, np.max), (np.min, np.min), (nl.multiply, np.prod)]
)
def test_tensor_reduce(dt, op, ref):
    x = rand((64, 4, 8), dt, 0.5, 1.5)
    got = run(k_reduce, x, op, (1, 2), False, False)
    assert got.shape == (64, 1)
    close(got, ref(f32(x), axis=(1, 2))[:, None], dt, rtol=2e-2 if dt == BF16 else 1e-4)
    got = run(k_reduce, x, op, 2, True, True)
    assert got.shape == (64, 4, 1)
    close(got, -ref(f32(x), axis=2, keepdims=True), dt, rtol=2e-2 if dt == BF16 else 1e-4)


def test_tensor_reduce_bitwise():
    x = RNGI = np.random.default_rng(3).integers(0, 2**16, size=(16, 12)).astype(np.int32)
    del RNGI
    got = run(k_reduce, x, nl.bitwise_or, 1, False, True)
    np.testing.assert_array_equal(got[:, 0], np.bitwise_or.reduce(x, axis=1))


def k_reduce_masked(x, op, negate):
    """A mask over the data (the reduced axis and the partitions); partitions 100+ select
    nothing and keep the 7s the result tile held."""
    out = _out((x.shape[0], 1), x.dtype)
    ip, jf = nl.mgrid[0 : x.shape[0], 0 : x.shape[1]]
    t = nl.load(x)
    r = nl.full((x.shape[0], 1), 7, dtype=x.dtype)
    r[...] = nisa.tensor_reduce(
        op, t[ip, jf], axis=(1,), mask=(jf >= 5) & (jf < 40) & (ip < 100), negate=negate,
        keepdims=True,
    )  # fmt: skip
    nl.store(out, r)
    return out


@pytest.mark.parametrize("backend", ["numpy", "batched", "numba"])
@pytest.mark.parametrize(
    "op,negate", [(np.add, False), (np.max, True), (np.subtract, False), (nl.bitwise_or, False)]
)
def test_tensor_reduce_folds_in_only_what_its_mask_selects(backend, op, negate):
    rng = np.random.default_rng(5)
    bitvec = op is nl.bitwise_or
    x = (
        rng.integers(0, 2**16, (128, 48)).astype(np.int32)
        if bitvec
        else rng.uniform(0.5, 1.5, (128, 48)).astype(np.float32)
    )
    sel = x[:100, 5:40]
    want = np.full((128, 1), 7, dtype=x.dtype)
    if op is np.subtract:  # a left fold from the first selected element
        want[:100, 0] = sel[:, 0] - sel[:, 1:].sum(1)
    else:
        ref = {np.add: np.sum, np.max: np.max, nl.bitwise_or: np.bitwise_or.reduce}[op]
        want[:100, 0] = -ref(sel, axis=1) if negate else ref(sel, axis=1)
    got = nki.jit(k_reduce_masked).configure(backend=backend)(x, op, negate)
    if bitvec:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def k_reduce_axis(x, axis):
    r = nisa.tensor_reduce(np.add, nl.load(x), axis=axis)  # ERR
    out = _out(r.shape, x.dtype)
    nl.store(out, r)
    return out


def test_tensor_reduce_axis_rule():
    x = rand((8, 4, 4))
    for axis in (0, 1, (1, 3)):
        expect_error(
            k_reduce_axis,
            x,
            axis,
            cls=NKIError,
            code="err_invalid_axis",
            fragments=[repr(axis), "last axis 2"],
        )


def k_red(x, op, nfree):
    axes = tuple(range(x.ndim - nfree, x.ndim))
    r = nisa.tensor_reduce(op, nl.load(x), axis=axes, keepdims=True)
    out = nl.ndarray(r.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, r)
    return out


@given(
    shape=st.lists(st.integers(1, 9), min_size=2, max_size=4),
    p=st.integers(1, 128),
    op=st.sampled_from(["add", "maximum", "minimum"]),
    data=st.data(),
)
def test_tensor_reduce_trailing_axes(shape, p, op, data):
    shape = (p, *shape[1:])
    nfree = data.draw(st.integers(1, len(shape) - 1))
    x = np.random.default_rng(p).uniform(-1, 1, shape).astype(np.float32)
    ref = {"add": np.sum, "maximum": np.max, "minimum": np.min}[op]
    axes = tuple(range(len(shape) - nfree, len(shape)))
    got = run(k_red, x, OPS[op][0], nfree)
    np.testing.assert_allclose(got, ref(x, axis=axes, keepdims=True), rtol=1e-5, atol=1e-5)


def _scan_ref(a, b, init, f0, f1, rev0, rev1):
    r = np.empty_like(a)
    prev = init[:, 0]
    for i in range(a.shape[1]):
        t = f0(prev, a[:, i]) if rev0 else f0(a[:, i], prev)
        prev = f1(b[:, i], t) if rev1 else f1(t, b[:, i])
        r[:, i] = prev
    return r


def k_scan(a, b, init, op0, op1, rev0, rev1):
    out = _out(a.shape, a.dtype)
    iv = nl.load(init)
    r = nisa.tensor_tensor_scan(nl.load(a), nl.load(b), iv, op0, op1, reverse0=rev0, reverse1=rev1)
    nl.store(out, r)
    return out


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("rev0,rev1", [(False, False), (True, True)])
def test_scan_recurrence(dt, rev0, rev1):
    a, b = rand((32, 20), dt, 0.2, 0.9), rand((32, 20), dt)
    init = rand((32, 1))
    got = run(k_scan, a, b, init, np.multiply, np.subtract, rev0, rev1)
    want = _scan_ref(f32(a), f32(b), init, np.multiply, np.subtract, rev0, rev1)
    close(got, want, dt, rtol=2e-2 if dt == BF16 else 1e-4, atol=2e-2 if dt == BF16 else 1e-5)


def k_scan_scalar_init(a, b):
    out = _out(a.shape, a.dtype)
    nl.store(out, nisa.tensor_tensor_scan(nl.load(a), nl.load(b), 1.0, np.add, np.multiply))
    return out


def test_scan_scalar_initial():
    a, b = rand((4, 6), lo=0.1, hi=1.0), rand((4, 6), lo=0.5, hi=1.0)
    want = np.empty_like(a)
    prev = np.ones(4, np.float32)
    for i in range(6):
        prev = (a[:, i] + prev) * b[:, i]
        want[:, i] = prev
    close(run(k_scan_scalar_init, a, b), want)


def k_scan_psum(a, b, one_in_psum):
    out = _out(a.shape)
    pa = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.psum)
    pa[...] = nl.load(a)
    if one_in_psum:
        sb = nl.load(b)
    else:
        sb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.psum)
        sb[...] = nl.load(b)
    r = nisa.tensor_tensor_scan(pa, sb, 0.5, np.multiply, np.add)  # ERR
    nl.store(out, r)
    return out


def test_scan_operands_not_both_psum():
    a, b = rand((16, 12), lo=0.1, hi=0.9), rand((16, 12))
    got = run(k_scan_psum, a, b, True)
    want = np.empty_like(a)
    prev = np.full(16, 0.5, np.float32)
    for i in range(a.shape[1]):  # r[:, i] = (data0[:, i] * r[:, i-1]) + data1[:, i]
        prev = a[:, i] * prev + b[:, i]
        want[:, i] = prev
    close(got, want, rtol=1e-5)
    expect_error(
        k_scan_psum,
        a,
        b,
        False,
        cls=NKIMemoryError,
        code="err_unsupported_memory",
        fragments=["'data0'", "'data1'", "nisa.tensor_tensor_scan", "PSUM"],
    )


RNG = np.random.default_rng(7)


def _x(shape=(64, 32), lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def k_cumulative(a, init):
    out = nl.ndarray((5, 64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    x, it = _load(a), _load(init)
    r = [_tile((64, 32)) for _ in range(5)]
    nisa.tensor_scalar_cumulative(r[0], x, nl.multiply, nl.add, 2.0)  # cumsum of 2x
    nisa.tensor_scalar_cumulative(r[1], x, nl.add, nl.add, 0.0, reduce_cmd=RC.reduce)
    nisa.tensor_scalar_cumulative(
        r[2], x, nl.subtract, nl.maximum, 0.5, imm1=it, reduce_cmd=RC.load_reduce
    )
    nisa.tensor_scalar_cumulative(r[3], x, op0=nl.add, op1=nl.subtract, imm0=1.0)
    nisa.tensor_scalar_cumulative(r[4], x, nl.maximum, nl.multiply, 0.25)
    for i in range(5):
        nisa.dma_copy(out[i], r[i])
    return out


def _scan(t, start, step):
    out = np.empty_like(t)
    reg = start.astype(np.float32)
    for i in range(t.shape[1]):
        reg = step(t[:, i], reg).astype(np.float32)
        out[:, i] = reg
    return out


def test_tensor_scalar_cumulative_running_reductions_match_numpy():
    a, init = _x(), _x((64, 1), 0.0, 3.0)
    got = run(k_cumulative, a, init, target="trn2")
    zeros = np.zeros(64, np.float32)
    c0 = _scan(2 * a, zeros, np.add)
    np.testing.assert_allclose(got[0], c0, rtol=1e-6, atol=1e-6)
    # reduce: continues from the registers the previous call left (its last column)
    np.testing.assert_allclose(got[1], _scan(a, c0[:, -1], np.add), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[2], _scan(a - np.float32(0.5), init[:, 0], np.maximum))
    # subtract, read literally from the pseudo-code: reg = (x + 1) - reg
    np.testing.assert_allclose(
        got[3], _scan(a + 1, zeros, lambda x, r: x - r), rtol=1e-6, atol=1e-6
    )
    ones = np.ones(64, np.float32)
    np.testing.assert_allclose(got[4], _scan(np.maximum(a, 0.25), ones, np.multiply), rtol=1e-5)


def k_cumulative_int32(a):
    out = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    x = _load(a)
    d = _tile(a.shape, nl.int32)
    nisa.tensor_scalar_cumulative(d, x, nl.add, nl.add, 1)  # ERR
    nisa.dma_copy(out, d)
    return out


def test_tensor_scalar_cumulative_rejects_int32():
    expect_error(
        k_cumulative_int32,
        np.ones((8, 4), np.int32),
        cls=NKIError,
        code="err_unsupported_dtype",
        fragments=["'dst'", "int32"],
    )


def k_cumulative_no_imm1(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = _load(a)
    nisa.tensor_scalar_cumulative(x, x, nl.add, nl.add, 1.0, reduce_cmd=RC.load_reduce)  # ERR
    nisa.dma_copy(out, x)
    return out


def k_cumulative_bad_op1(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = _load(a)
    nisa.tensor_scalar_cumulative(x, x, nl.add, nl.divide, 1.0)  # ERR
    nisa.dma_copy(out, x)
    return out


def test_tensor_scalar_cumulative_rules():
    expect_error(
        k_cumulative_no_imm1, _x(), cls=NKIError, code="err_missing_operand", fragments=["imm1"]
    )
    expect_error(
        k_cumulative_bad_op1,
        _x(),
        cls=NKIError,
        code="err_unsupported_op",
        fragments=["'op1'=divide", "nl.add"],
    )


BN_RNG = np.random.default_rng(11)


def k_bn(x):
    out = _out((x.shape[0], 2), nl.float32)
    stats = nl.ndarray((x.shape[0], 12), dtype=nl.float32, buffer=nl.sbuf)
    t = nl.load(x)
    stats[:, 0:6] = nisa.bn_stats(t[:, 0:300], dtype=nl.float32)
    stats[:, 6:12] = nisa.bn_stats(t[:, 300 : x.shape[1]], dtype=nl.float32)
    nl.store(out, nisa.bn_aggr(stats))
    return out


@pytest.mark.parametrize("dt", DTS)
def test_bn_stats_aggr_vs_mean_var(dt):
    x = rand((128, 701), dt, -3, 5)
    got = run(k_bn, x)
    np.testing.assert_allclose(got[:, 0], f32(x).mean(axis=1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[:, 1], f32(x).var(axis=1), rtol=1e-4, atol=1e-4)


def k_bn_stats(x):
    out = _out((x.shape[0], 6), nl.float32)
    nl.store(out, nisa.bn_stats(nl.load(x), dtype=nl.float32))
    return out


def test_bn_stats_layout_even_odd():
    x = rand((8, 9))
    s = run(k_bn_stats, x)
    ev, od = x[:, 0::2], x[:, 1::2]
    want = np.stack(
        [np.full(8, 5.0), ev.mean(1), ev.var(1) * 5, np.full(8, 4.0), od.mean(1), od.var(1) * 4],
        axis=1,
    )
    np.testing.assert_allclose(s, want, rtol=1e-5, atol=1e-5)


def k_bn_aggr_bad(x):
    out = _out((x.shape[0], 2), nl.float32)
    nl.store(out, nisa.bn_aggr(nl.load(x)))  # ERR
    return out


def k_bn_big(x):
    out = _out((x.shape[0], 6), nl.float32)
    nl.store(out, nisa.bn_stats(nl.load(x)))  # ERR
    return out


def test_bn_rules():
    expect_error(
        k_bn_big,
        rand((8, 513)),
        cls=NKIShapeError,
        code="err_size_of_dimension_exceed_arch_limit",
        fragments=["513", "512", "bn_stats_fmax"],
    )
    expect_error(
        k_bn_aggr_bad,
        rand((8, 7)),
        cls=NKIShapeError,
        code="err_bn_aggr_free_size",
        fragments=["7", "multiple of 3"],
    )


@nki.jit
def chunked_mean_var(x):
    # 2 bn_stats chunks of 64 columns over 100 columns: the second is masked to 36 columns
    out = nl.ndarray((x.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    n = x.shape[1]
    i_p = nl.arange(x.shape[0])[:, None]
    i_f = nl.arange(64)[None, :]
    i_s = nl.arange(6)[None, :]
    stats = nl.ndarray((x.shape[0], 12), dtype=nl.float32)
    for j in nl.affine_range(2):
        stats[i_p, j * 6 + i_s] = nisa.bn_stats(t[i_p, j * 64 + i_f], mask=(j * 64 + i_f < n))
    nl.store(out, nisa.bn_aggr(stats))
    return out


def test_bn_stats_mask_selects_input_columns():
    x = BN_RNG.random((32, 100), dtype=np.float32)
    got = chunked_mean_var(x)
    np.testing.assert_allclose(got[:, 0], x.mean(1), rtol=1e-5)
    np.testing.assert_allclose(got[:, 1], x.var(1), rtol=1e-4)


def k_bn_moments(x):
    out = nl.ndarray((x.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nisa.bn_aggr(nisa.bn_stats(nl.load(x), dtype=nl.float32)))
    return out


@given(p=st.integers(1, 128), f=st.integers(1, 512), seed=st.integers(0, 999))
def test_bn_stats_aggr_any_width(p, f, seed):
    x = np.random.default_rng(seed).normal(2, 3, (p, f)).astype(np.float32)
    got = run(k_bn_moments, x)
    np.testing.assert_allclose(got[:, 0], x.mean(1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[:, 1], x.var(1), rtol=1e-4, atol=1e-3)


def k_row_sums(x):
    out = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    acc = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=acc, data=t, op=nl.add, axis=(1,))
    nisa.dma_copy(dst=out, src=acc)
    return out


@pytest.mark.parametrize("compiled", [False, True])  # (np.add.accumulate, or nki.seqsum)
@pytest.mark.parametrize("width", [7, 128, 4096])
def test_float_sums_add_in_order_as_the_engines_do(width, compiled, monkeypatch):
    # a device's tensor_reduce of fp32 rows equals the sequential fp32 sum bit for bit (public
    # runs on a Trainium: 4,096 rows of 128 values); NumPy's pairwise np.sum does not
    if compiled:
        monkeypatch.setattr(optable, "_COMPILED_SUM", 0)
    else:
        monkeypatch.setattr(optable, "_ROWS_SUM", [])
        monkeypatch.setattr(optable, "_ACCUMULATED", [0])
        monkeypatch.setattr(optable, "_numba_loaded", lambda: False)
    rng = np.random.default_rng(width)
    x = (rng.random((128, width)) * 10.0 ** rng.uniform(-3, 3, (128, width))).astype(np.float32)
    x[5, 3] = np.inf  # (an infinite row sums to infinity in either order)
    want = x[:, :1].copy()
    for k in range(1, width):
        want += x[:, k : k + 1]
    runs = backends.run_backends(nki.jit(k_row_sums), None, x)
    np.testing.assert_array_equal(runs[backends.REFERENCE], want)
    assert bool(optable._ROWS_SUM) == compiled
    if width >= 128:  # (the data are such that the two orders differ somewhere)
        assert not np.array_equal(want[:, 0], x.sum(axis=1))


def test_the_compiled_sum_is_loaded_at_once_where_numba_is(monkeypatch):
    """A process whose Numba compiler is loaded (here: a function of its own compiled) takes
    the compiled sum for its first small sum; one without Numba keeps np.add.accumulate for
    small sums and does not import Numba at all (about a second)."""
    code = (
        "import sys, numpy as np, nki, nki.language as nl, nki.isa as nisa\n"
        "from nki import optable\n"
        "@nki.jit\n"
        "def k_row_sums(x):\n"
        "    out = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    t = nl.load(x)\n"
        "    nl.store(out, nisa.tensor_reduce(op=nl.add, data=t, axis=(1,), keepdims=True))\n"
        "    return out\n"
        "x = np.arange(28, dtype=np.float32).reshape(4, 7)\n"
        "got = k_row_sums(x)\n"
        "assert np.array_equal(got[:, 0], x.sum(axis=1)), got\n"
        "print(sorted({'numba', 'nki.seqsum'} & set(sys.modules)), bool(optable._ROWS_SUM))\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=root, timeout=120)  # fmt: skip
    assert out.returncode == 0 and out.stdout.split() == ["[]", "False"], out.stdout + out.stderr
    numba = pytest.importorskip("numba")
    numba.njit("float32(float32)")(lambda v: v + np.float32(1.0))  # (Numba's compiler loaded)
    monkeypatch.setattr(optable, "_ROWS_SUM", [])
    monkeypatch.setattr(optable, "_ACCUMULATED", [0])
    rng = np.random.default_rng(3)
    x = (rng.random((128, 9)) * 10.0 ** rng.uniform(-3, 3, (128, 9))).astype(np.float32)
    want = x[:, :1].copy()
    for k in range(1, 9):
        want += x[:, k : k + 1]
    np.testing.assert_array_equal(nki.jit(k_row_sums)(x), want)
    assert optable._ROWS_SUM  # (the compiled sum, for 1,152 elements)


@pytest.mark.parametrize("shape", [(1, 1), (9, 5), (130, 300), (3, 4, 5)])
def test_the_op_tables_sum_over_any_axes_is_the_sequential_sum(shape, monkeypatch):
    monkeypatch.setattr(optable, "_COMPILED_SUM", 0)  # (the compiled sum serves every size)
    rng = np.random.default_rng(len(shape))
    x = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, shape)).astype(np.float32)
    add = optable.OPS["add"].reduce
    for axes in [tuple(range(x.ndim))] + [(a,) for a in range(x.ndim)]:
        moved = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
        flat = moved.reshape(*moved.shape[: x.ndim - len(axes)], -1)
        want = flat[..., 0].copy()
        for k in range(1, flat.shape[-1]):
            want += flat[..., k]
        got = add(x, axis=axes, keepdims=True)
        assert got.shape == np.sum(x, axis=axes, keepdims=True).shape
        np.testing.assert_array_equal(got.reshape(want.shape), want)
        x.flags.writeable = False  # (a read-only array: a broadcast operand, a view of one)
        np.testing.assert_array_equal(add(x, axis=axes, keepdims=True).reshape(want.shape), want)
        x.flags.writeable = True


@pytest.mark.parametrize("shape", [(64, 9), (200, 300), (3, 40), (40, 2000)])
def test_numpys_sum_paths_add_in_order_from_the_first_element(shape, monkeypatch):
    # without the compiled sum: rows summed as the columns of their transpose (many short rows)
    # or by np.add.accumulate, both element after element from the first, so a row of -0.0
    # sums to -0.0 and infinities and NaN stay where the engines' order puts them
    monkeypatch.setattr(optable, "_ROWS_SUM", [])
    monkeypatch.setattr(optable, "_ACCUMULATED", [0])
    monkeypatch.setattr(optable, "_numba_loaded", lambda: False)
    rng = np.random.default_rng(shape[1])
    x = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 6, shape)).astype(np.float32)
    x[0] = -0.0
    x[1, : shape[1] // 2] = -0.0
    x[2, 1], x[-1, -1] = np.inf, np.nan
    want = x[:, 0].copy()
    for k in range(1, shape[1]):
        want += x[:, k]
    got = optable.OPS["add"].reduce(x, axis=(1,), keepdims=True)
    assert not optable._ROWS_SUM and got.shape == (shape[0], 1)
    np.testing.assert_array_equal(got[:, 0].view(np.uint32), want.view(np.uint32))


def k_row_differences(x):
    out = _out((x.shape[0], 1), x.dtype)
    nl.store(out, nisa.tensor_reduce(np.subtract, nl.load(x), axis=(1,), keepdims=True))
    return out


@pytest.mark.parametrize("masked", [False, True])
def test_a_subtracting_reduction_folds_in_order(masked):
    # x0 - x1 - x2 ... one element after another, as the engines add (the same rounding as
    # the ordered sum of x0 and the others negated), on every backend
    rng = np.random.default_rng(3)
    x = (rng.random((128, 300)) * 10.0 ** rng.uniform(-3, 3, (128, 300))).astype(np.float32)
    lo, hi, rows = (5, 290, 100) if masked else (0, 300, 128)
    want = np.full((128, 1), 7, dtype=np.float32)
    want[:rows, 0] = x[:rows, lo]
    for k in range(lo + 1, hi):
        want[:rows, 0] -= x[:rows, k]
    if masked:
        runs = backends.run_backends(nki.jit(k_reduce_masked_at), None, x, lo, hi, rows)
    else:
        runs = backends.run_backends(nki.jit(k_row_differences), None, x)
    np.testing.assert_array_equal(runs[backends.REFERENCE], want)
    pairwise = x[:rows, lo] - x[:rows, lo + 1 : hi].sum(axis=1)
    assert not np.array_equal(pairwise, want[:rows, 0])  # (the data tell the orders apart)


def k_reduce_masked_at(x, lo, hi, rows):
    out = _out((x.shape[0], 1), x.dtype)
    ip, jf = nl.mgrid[0 : x.shape[0], 0 : x.shape[1]]
    r = nl.full((x.shape[0], 1), 7, dtype=x.dtype)
    r[...] = nisa.tensor_reduce(
        np.subtract, nl.load(x)[ip, jf], axis=(1,), mask=(jf >= lo) & (jf < hi) & (ip < rows),
        keepdims=True,
    )  # fmt: skip
    nl.store(out, r)
    return out
