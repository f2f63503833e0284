"""Vector-engine instructions against independent NumPy formulations (fp32 and bf16)."""

import numpy as np
import pytest

import nki.isa as nisa
import nki.language as nl

from .util import BF16, close, f32, rand, run

DTS = [np.float32, BF16]


def _out(shape, dtype):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.shared_hbm)


def k_tensor_tensor(x, y, op):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.tensor_tensor(nl.load(x), nl.load(y), op=op))
    return out


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize(
    "op,ref",
    [
        (np.add, np.add),
        (nl.subtract, np.subtract),
        (nl.multiply, np.multiply),
        (np.maximum, np.maximum),
        (nl.greater, lambda a, b: (a > b).astype(np.float32)),
    ],
)
def test_tensor_tensor(dt, op, ref):
    x, y = rand((128, 64), dt), rand((128, 64), dt)
    close(run(k_tensor_tensor, x, y, op), ref(f32(x), f32(y)), dt)


def test_tensor_tensor_bitvec_on_raw_bits():
    x = np.array([[-1, 5, 0x7FFF0000, -8]] * 4, np.int32)
    y = np.array([[0xFF, 3, 0x0000FFFF, 2]] * 4, np.int32)
    np.testing.assert_array_equal(run(k_tensor_tensor, x, y, nl.bitwise_and), x & y)
    np.testing.assert_array_equal(run(k_tensor_tensor, x, y, np.bitwise_xor), x ^ y)
    # logical shift right of the unsigned bit pattern
    sh = run(k_tensor_tensor, x, np.full_like(x, 4), nl.right_shift)
    np.testing.assert_array_equal(sh, (x.view(np.uint32) >> 4).view(np.int32))


def k_tensor_scalar(x, v, op0, rev0, op1, rev1, engine):
    out = _out(x.shape, x.dtype)
    vt = nl.load(v)
    r = nisa.tensor_scalar(
        nl.load(x), op0, vt, reverse0=rev0, op1=op1, operand1=2.5, reverse1=rev1, engine=engine
    )
    nl.store(out, r)
    return out


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("rev0,rev1", [(False, False), (True, False), (False, True), (True, True)])
def test_tensor_scalar_reverse(dt, rev0, rev1):
    x, v = rand((64, 40), dt), rand((64, 1), np.float32)
    got = run(k_tensor_scalar, x, v, np.subtract, rev0, np.divide, rev1, nisa.vector_engine)
    a, b = f32(x), f32(v)
    t = (b - a) if rev0 else (a - b)
    want = (2.5 / t) if rev1 else (t / 2.5)
    close(got, want, dt, rtol=2e-2 if dt == BF16 else 1e-4)


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_tensor_scalar_on_scalar_engine(target):
    x, v = rand((32, 16)), rand((32, 1))
    got = run(
        k_tensor_scalar, x, v, np.multiply, False, np.add, False, nisa.scalar_engine, target=target
    )
    close(got, x * v + 2.5)


def k_stt(x, y):
    out = _out(x.shape, x.dtype)
    r = nisa.scalar_tensor_tensor(
        data=nl.load(x),
        op0=np.subtract,
        operand0=1.5,
        op1=np.multiply,
        operand1=nl.load(y),
        reverse0=True,
    )
    nl.store(out, r)
    return out


@pytest.mark.parametrize("dt", DTS)
def test_scalar_tensor_tensor(dt):
    x, y = rand((128, 32), dt), rand((128, 32), dt)
    close(run(k_stt, x, y), (1.5 - f32(x)) * f32(y), dt)


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


def k_scan(a, b, init, op0, op1, rev0, rev1):
    out = _out(a.shape, a.dtype)
    iv = nl.load(init)
    r = nisa.tensor_tensor_scan(nl.load(a), nl.load(b), iv, op0, op1, reverse0=rev0, reverse1=rev1)
    nl.store(out, r)
    return out


def _scan_ref(a, b, init, f0, f1, rev0, rev1):
    r = np.empty_like(a)
    prev = init[:, 0]
    for i in range(a.shape[1]):
        t = f0(prev, a[:, i]) if rev0 else f0(a[:, i], prev)
        prev = f1(b[:, i], t) if rev1 else f1(t, b[:, i])
        r[:, i] = prev
    return r


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("rev0,rev1", [(False, False), (True, True)])
def test_scan_recurrence(dt, rev0, rev1):
    a, b = rand((32, 20), dt, 0.2, 0.9), rand((32, 20), dt)
    init = rand((32, 1))
    got = run(k_scan, a, b, init, np.multiply, np.subtract, rev0, rev1)
    want = _scan_ref(f32(a), f32(b), init, np.multiply, np.subtract, rev0, rev1)
    close(got, want, dt, rtol=2e-2 if dt == BF16 else 1e-4, atol=2e-2 if dt == BF16 else 1e-5)


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


def k_bn(x):
    out = _out((x.shape[0], 2), nl.float32)
    stats = nl.ndarray((x.shape[0], 12), dtype=nl.float32, buffer=nl.sbuf)
    t = nl.load(x)
    stats[:, 0:6] = nisa.bn_stats(t[:, 0:300], dtype=nl.float32)
    stats[:, 6:12] = nisa.bn_stats(t[:, 300 : x.shape[1]], dtype=nl.float32)
    nl.store(out, nisa.bn_aggr(stats))
    return out


def k_bn_stats(x):
    out = _out((x.shape[0], 6), nl.float32)
    nl.store(out, nisa.bn_stats(nl.load(x), dtype=nl.float32))
    return out


@pytest.mark.parametrize("dt", DTS)
def test_bn_stats_aggr_vs_mean_var(dt):
    x = rand((128, 701), dt, -3, 5)
    got = run(k_bn, x)
    np.testing.assert_allclose(got[:, 0], f32(x).mean(axis=1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[:, 1], f32(x).var(axis=1), rtol=1e-4, atol=1e-4)


def test_bn_stats_layout_even_odd():
    x = rand((8, 9))
    s = run(k_bn_stats, x)
    ev, od = x[:, 0::2], x[:, 1::2]
    want = np.stack(
        [np.full(8, 5.0), ev.mean(1), ev.var(1) * 5, np.full(8, 4.0), od.mean(1), od.var(1) * 4],
        axis=1,
    )
    np.testing.assert_allclose(s, want, rtol=1e-5, atol=1e-5)


def k_top8(x):
    out = _out((x.shape[0], 8), x.dtype)
    idx = _out((x.shape[0], 8), nl.uint32)
    rep = _out(x.shape, x.dtype)
    t = nl.load(x)
    m = nisa.max8(src=t)
    nl.store(out, m)
    nl.store(idx, nisa.nc_find_index8(data=t, vals=m))
    nl.store(rep, nisa.nc_match_replace8(data=t, vals=m, imm=-1000.0))
    return out, idx, rep


@pytest.mark.parametrize("dt", DTS)
def test_max8_find_index_match_replace(dt):
    x = np.stack([np.random.default_rng(i).permutation(64) for i in range(16)]).astype(dt)
    top, idx, rep = run(k_top8, x)
    xf = f32(x)
    want = -np.sort(-xf, axis=1)[:, :8]
    np.testing.assert_array_equal(f32(top), want)
    np.testing.assert_array_equal(idx, np.argsort(-xf, axis=1, kind="stable")[:, :8])
    r = xf.copy()
    np.put_along_axis(r, np.argsort(-xf, axis=1, kind="stable")[:, :8], -1000.0, axis=1)
    np.testing.assert_array_equal(f32(rep), r)


def test_find_index_duplicates_and_missing():
    from simulator.isa import formulas as isa_math

    data = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8]], np.float32)
    vals = np.array([[3, 8, 8, 8, 8, 8, 8, 9]], np.float32)
    got = isa_math.find_index8(data, vals, 0xFFFFFFFF)
    np.testing.assert_array_equal(got[0], [2, 4, 5, 6, 7, 8, 9, 0xFFFFFFFF])
    _, idx = isa_math.match_replace8(
        data, np.array([[3, 8, 8, 8, 8, 8, 8, 8]], np.float32), 0.0, 0xFFFF
    )
    np.testing.assert_array_equal(idx[0], [2, 10, 9, 8, 7, 6, 5, 4])


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


def k_recip(x):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.reciprocal(nl.load(x)))
    return out


@pytest.mark.parametrize("dt", DTS)
def test_reciprocal(dt):
    x = rand((32, 32), dt, 0.5, 4.0)
    close(run(k_recip, x), 1.0 / f32(x), dt)


def k_dropout(x, prob):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.dropout(nl.load(x), prob))
    return out


@pytest.mark.parametrize("dt", DTS)
def test_dropout(dt):
    x = rand((128, 256), dt, 1, 2)
    np.testing.assert_array_equal(f32(run(k_dropout, x, 0.0)), f32(x))
    assert (f32(run(k_dropout, x, 1.0)) == 0).all()
    y = f32(run(k_dropout, x, 0.3))
    kept = y != 0
    np.testing.assert_array_equal(y[kept], f32(x)[kept])  # kept elements unchanged, not rescaled
    assert abs(1 - kept.mean() - 0.3) < 0.02
