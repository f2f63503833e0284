"""Copy and selection instructions: nisa.tensor_copy, tensor_copy_predicated, select_reduce,
range_select and nc_stream_shuffle (destination first in current kernels too), against NumPy,
with their rules."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import (
    NKIError,
    NKITypeError,
    NKIUnsupportedError,
)

from helpers import BF16, DTS, close, expect_error, f32, rand, run
from helpers import hbm_out as _out


def k_copy(x, engine, dtype):
    out = _out(x.shape, dtype)
    nl.store(out, nisa.tensor_copy(nl.load(x), engine=engine, dtype=dtype))
    return out


@pytest.mark.parametrize("engine", [nisa.vector_engine, nisa.gpsimd_engine, nisa.scalar_engine])
def test_tensor_copy_cast(engine):
    x = rand((64, 32))
    close(run(k_copy, x, engine, nl.bfloat16), x.astype(BF16), BF16, rtol=0, atol=0)


def test_scalar_engine_copy_is_lossy_for_int32_on_trn1_only():
    x = np.array([[16777217, 2**30 + 1, -5, 7]], np.int32).repeat(4, 0)
    np.testing.assert_array_equal(run(k_copy, x, nisa.scalar_engine, nl.int32, target="trn2"), x)
    lossy = run(k_copy, x, nisa.scalar_engine, nl.int32, target="trn1")
    np.testing.assert_array_equal(lossy, x.astype(np.float32).astype(np.int32))
    assert (lossy != x).any()


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


def k_pred_copy(src, dst, pred, rev):
    out = _out(dst.shape, dst.dtype)
    d = nl.load(dst)
    nisa.tensor_copy_predicated(src=nl.load(src), dst=d, predicate=nl.load(pred), reverse_pred=rev)
    nl.store(out, d)
    return out


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("rev", [False, True])
def test_tensor_copy_predicated(dt, rev):
    s, d = rand((64, 16), dt), rand((64, 16), dt)
    p = (np.random.default_rng(5).random((64, 16)) > 0.5).astype(np.uint8)
    keep = (p == 0) if rev else (p != 0)
    np.testing.assert_array_equal(
        f32(run(k_pred_copy, s, d, p, rev)), np.where(keep, f32(s), f32(d))
    )


def k_pred_dtype(x, p):
    d = nl.load(x)
    nisa.tensor_copy_predicated(src=nl.load(x), dst=d, predicate=nl.load(p))  # ERR
    out = _out(x.shape, x.dtype)
    nl.store(out, d)
    return out


def test_predicate_dtype_rule():
    expect_error(
        k_pred_dtype,
        rand((8, 8)),
        rand((8, 8)),
        cls=NKITypeError,
        code="err_unsupported_dtype",
        fragments=["predicate", "float32", "uint8"],
    )


def k_select(pred, on_true, neg):
    out = _out(on_true.shape, on_true.dtype)
    red = _out((on_true.shape[0], 1), nl.float32)
    dst = nl.ndarray(on_true.shape, dtype=on_true.dtype, buffer=nl.sbuf)
    m = nl.ndarray((on_true.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(
        dst=dst,
        predicate=nl.load(pred),
        on_true=nl.load(on_true),
        on_false=neg,
        reduce_res=m,
        reduce_cmd=nisa.reduce_cmd.reset_reduce,
        reduce_op=np.max,
    )
    nl.store(out, dst)
    nl.store(red, m)
    return out, red


@pytest.mark.parametrize("dt", DTS)
def test_select_reduce(dt):
    t = rand((32, 24), dt)
    p = (np.random.default_rng(9).random((32, 24)) > 0.3).astype(np.uint8)
    got, red = run(k_select, p, t, -100.0)
    want = np.where(p != 0, f32(t), -100.0)
    close(got, want, dt, rtol=0, atol=0)
    close(red, want.max(axis=1, keepdims=True))


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


def k_shuffle(x, mask):
    out = _out(x.shape, x.dtype)
    d = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    d[...] = 0
    nisa.nc_stream_shuffle(src=nl.load(x), dst=d, shuffle_mask=mask)
    nl.store(out, d)
    return out


@pytest.mark.parametrize("dt", DTS)
def test_stream_shuffle(dt):
    x = rand((64, 8), dt)
    mask = list(range(31, -1, -1))
    mask[4] = 255
    got = f32(run(k_shuffle, x, mask))
    want = np.zeros((64, 8), np.float32)
    for q in (0, 32):
        for i, m in enumerate(mask):
            if m != 255:
                want[q + i] = f32(x)[q + m]
    np.testing.assert_array_equal(got, want)


def k_shuffle_bad(x):
    d = nl.load(x)
    nisa.nc_stream_shuffle(src=nl.load(x), dst=d, shuffle_mask=[0] * 31)  # ERR
    return None


def test_shuffle_mask_rule():
    expect_error(
        k_shuffle_bad,
        rand((32, 4)),
        cls=NKIError,
        code="err_invalid_shuffle_mask",
        fragments=["32 integers"],
    )


def shuffle(x):
    out = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    xt = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(xt, x)
    d = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(d, 0.0)
    nisa.nc_stream_shuffle(d, xt, list(range(31, -1, -1)))  # dst first in the current API
    nisa.dma_copy(out, d)
    return out


def test_nc_stream_shuffle_takes_dst_first_in_current_kernels():
    x = np.arange(32 * 8, dtype=np.float32).reshape(32, 8)
    np.testing.assert_array_equal(nki.jit(shuffle, api="current")(x), x[::-1])


def k_shuffle_broadcast_partition(in_tensor):
    """AWS's classic nc_stream_shuffle example 2: an integer beside an nl.mgrid index selects
    partition 0 (an advanced index, as in NumPy), broadcast to 32 partitions by the mask."""
    out_tensor = nl.ndarray(shape=(32, 128), dtype=np.float32, buffer=nl.shared_hbm)
    a = nl.load(in_tensor)
    b = nl.ndarray(shape=(32, 128), dtype=np.float32)
    dst_mgrid = nl.mgrid[0:32, 0:128]
    src_mgrid = nl.mgrid[0:1, 0:128]
    shuffle_mask = [0] * 32
    nisa.nc_stream_shuffle(src=a[0, src_mgrid.x], dst=b[dst_mgrid.p, dst_mgrid.x],
                           shuffle_mask=shuffle_mask)  # fmt: skip
    nl.store(out_tensor, value=b)
    return out_tensor


def k_integer_beside_arange(x):
    i_f = nl.arange(x.shape[1])[None, :]
    t = nl.load(x)
    out = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.tensor_copy(t[32, i_f]))  # (a quadrant start)
    return out


def test_integer_index_beside_an_mgrid_index_is_not_a_slice():
    x = np.random.default_rng(1).random((1, 128), dtype=np.float32)
    got = run(k_shuffle_broadcast_partition, x, jit_opts={"api": "classic"})
    np.testing.assert_array_equal(got, np.broadcast_to(x, (32, 128)))
    y = np.random.default_rng(2).random((64, 16), dtype=np.float32)
    i_f = np.arange(16)[None, :]
    np.testing.assert_array_equal(run(k_integer_beside_arange, y), y[32, i_f])  # NumPy's meaning
