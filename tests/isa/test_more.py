"""range_select (trn2+), mask= on nki.isa calls, the start-partition rule, and dtype coverage
not exercised elsewhere."""

import numpy as np
import pytest
from helpers import BF16, close, expect_error, f32, rand, run
from helpers import hbm_out as _out

import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError, NKIShapeError, NKITypeError, NKIUnsupportedError


def k_range(x, lo, hi, start):
    out = _out(x.shape, x.dtype)
    red = _out((x.shape[0], 1), nl.float32)
    m = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    r = nisa.range_select(  # ERR
        on_true_tile=nl.load(x),
        comp_op0=nl.greater_equal,
        comp_op1=nl.less,
        bound0=nl.load(lo),
        bound1=nl.load(hi),
        range_start=start,
        on_false_value=nl.fp32.min,
        reduce_res=m,
        reduce_cmd=nisa.reduce_cmd.reset_reduce,
    )
    nl.store(out, r)
    nl.store(red, m)
    return out, red


@pytest.mark.parametrize("dt", [np.float32, BF16])
def test_range_select_trn2(dt):
    x = rand((16, 40), dt)
    lo = np.arange(16, dtype=np.float32)[:, None] + 3
    hi = lo + 10
    got, red = run(k_range, x, lo, hi, 5)
    j = np.arange(40)[None, :] + 5
    want = np.where((j >= lo) & (j < hi), f32(x), np.finfo(np.float32).min)
    np.testing.assert_array_equal(f32(got), f32(want.astype(dt)))  # fp32.min -> -inf in bf16
    np.testing.assert_array_equal(red, want.max(axis=1, keepdims=True))


def k_range_bad(x, lo, which):
    t, b = nl.load(x), nl.load(lo)
    kw = dict(on_true_tile=t, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=b, bound1=4.0)
    if which == "op":
        kw["comp_op1"] = nl.not_equal
    elif which == "fill":
        kw["on_false_value"] = -50.0
    elif which == "bound":
        kw["bound0"] = nl.load(lo, dtype=nl.bfloat16)
    else:
        kw["on_true_tile"] = nl.load(x, dtype=nl.int32)
    r = nisa.range_select(**kw)  # ERR
    out = _out(x.shape, nl.float32)
    nl.store(out, r)
    return out


@pytest.mark.parametrize(
    "which, cls, code, frags",
    [
        ("op", NKIError, "err_unsupported_op", ["'comp_op1'=not_equal", "greater_equal"]),
        ("fill", NKIError, "err_invalid_argument", ["'on_false_value'=-50.0", "nl.fp32.min"]),
        ("bound", NKITypeError, "err_invalid_operand_dtype", ["'bound0'", "bfloat16"]),
        ("data", NKITypeError, "err_unsupported_dtype", ["'on_true_tile'", "int32"]),
    ],
)
def test_range_select_documented_constraints(which, cls, code, frags):
    x = rand((16, 40))
    lo = np.zeros((16, 1), np.float32)
    expect_error(k_range_bad, x, lo, which, cls=cls, code=code, fragments=frags)


def test_range_select_is_trn2_only():
    x = rand((16, 40))
    lo = np.zeros((16, 1), np.float32)
    expect_error(
        k_range,
        x,
        lo,
        lo + 4,
        0,
        target="trn1",
        cls=NKIUnsupportedError,
        code="err_unsupported_instruction_for_target",
        fragments=["nisa.range_select", "trn1", "trn2"],
    )


def k_masked(x, y):
    out = _out(x.shape, x.dtype)
    i_p = nl.arange(x.shape[0])[:, None]
    i_f = nl.arange(x.shape[1])[None, :]
    r = nisa.tensor_tensor(nl.load(x[i_p, i_f]), nl.load(y), op=np.add, mask=(i_p < 48))
    nl.store(out, r)
    return out


@pytest.mark.parametrize("dt", [np.float32, BF16])
def test_mask_limits_computed_partitions(dt):
    x, y = rand((64, 16), dt), rand((64, 16), dt)
    got = f32(run(k_masked, x, y, jit_opts={"checks": "static"}))  # reads the unwritten rows
    close(got[:48], f32(x)[:48] + f32(y)[:48], dt)
    assert np.isnan(got[48:]).all()  # never computed: the fresh tile's NaN fill shows through


def k_start(x):
    out = _out((32, x.shape[1]), x.dtype)
    t = nl.load(x)
    nl.store(out, nisa.tensor_scalar(t[16:48, :], np.add, 1.0))  # ERR
    return out


def k_start_ok(x):
    out = _out((32, x.shape[1]), x.dtype)
    t = nl.load(x)
    nl.store(out, nisa.tensor_scalar(t[64:96, :], np.add, 1.0))
    return out


def test_start_partition_rule():
    x = rand((128, 8))
    expect_error(
        k_start,
        x,
        cls=NKIShapeError,
        code="err_unsupported_start_partition",
        fragments=["32 partitions", "partition 16", "[0, 32, 64, 96]"],
    )
    close(run(k_start_ok, x), x[64:96] + 1)


def k_gather_bf16(src, idx):
    g = nisa.local_gather(nl.load(src), nl.load(idx), num_elem_per_idx=2)
    out = _out(g.shape, src.dtype)
    nl.store(out, g)
    return out


def test_local_gather_bf16_all_indices():
    src = rand((16, 10), BF16)
    idx = np.random.default_rng(4).integers(0, 5, size=(16, 2)).astype(np.uint16) * 2
    got = run(k_gather_bf16, src, idx)
    ind = idx.flatten(order="F")
    want = np.stack([src[:, i : i + 2] for i in ind], axis=1)  # (P, 32, 2), partition-first
    # every index valid: the (P, F, 16, n) layout, element [:, f, q] from index [q, f]
    assert got.shape == (16, 2, 16, 2)
    np.testing.assert_array_equal(f32(got).reshape(16, 32, 2), f32(want))
    np.testing.assert_array_equal(f32(got)[:, 1, 3], f32(src[:, idx[3, 1] : idx[3, 1] + 2]))


def k_dma_t32(x):
    t = nisa.dma_transpose(x)
    out = _out(t.shape, x.dtype)
    nl.store(out, t)
    return out


def test_dma_transpose_fp32():
    x = rand((20, 100))
    np.testing.assert_array_equal(run(k_dma_t32, x), x.T)


def k_copy_same(x):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.tensor_copy(nl.load(x), engine=nisa.gpsimd_engine))
    return out


@pytest.mark.parametrize("dt", [np.float32, BF16, np.int32])
def test_tensor_copy_bit_exact(dt):
    x = (rand((16, 16)) * 1000).astype(dt)
    if dt == np.int32:
        x[0, 0] = 2**31 - 1
    np.testing.assert_array_equal(run(k_copy_same, x).view(np.uint8), x.view(np.uint8))


def k_select_idle(pred, on_true):
    red = _out((on_true.shape[0], 1), nl.float32)
    dst = nl.ndarray(on_true.shape, dtype=on_true.dtype, buffer=nl.sbuf)
    m = nl.ndarray((on_true.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    p, t = nl.load(pred), nl.load(on_true)
    rr, acc = nisa.reduce_cmd.reset_reduce, nisa.reduce_cmd.reduce
    nisa.select_reduce(dst=dst, predicate=p, on_true=t, on_false=-1.0, reduce_cmd=rr)
    nisa.select_reduce(dst=dst, predicate=p, on_true=t, on_false=5.0, reduce_res=m, reduce_cmd=acc)
    nl.store(red, m)
    return red


def test_select_reduce_accumulates_max_across_calls():
    t = rand((8, 12))
    p = (np.random.default_rng(1).random((8, 12)) > 0.5).astype(np.uint8)
    got = run(k_select_idle, p, t)
    a = np.where(p != 0, t, -1.0).max(1)
    b = np.where(p != 0, t, 5.0).max(1)
    np.testing.assert_array_equal(got[:, 0], np.maximum(a, b))


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
