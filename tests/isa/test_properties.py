"""Property tests: random shapes, ops and operand orders against NumPy."""

import numpy as np
from helpers import run
from hypothesis import given
from hypothesis import strategies as st

import nki.isa as nisa
import nki.language as nl

OPS = {
    "add": (np.add, np.add),
    "subtract": (nl.subtract, np.subtract),
    "multiply": (np.multiply, np.multiply),
    "maximum": (nl.maximum, np.maximum),
    "minimum": (np.minimum, np.minimum),
}


def k_ts(x, v, op0, rev0, op1, rev1):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nisa.tensor_scalar(
        nl.load(x), op0, nl.load(v), reverse0=rev0, op1=op1, operand1=0.75, reverse1=rev1
    )
    nl.store(out, t)
    return out


@given(
    p=st.integers(1, 128),
    f=st.integers(1, 48),
    o0=st.sampled_from(sorted(OPS)),
    o1=st.sampled_from(sorted(OPS)),
    rev0=st.booleans(),
    rev1=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_tensor_scalar_any_pair(p, f, o0, o1, rev0, rev1, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, (p, f)).astype(np.float32)
    v = rng.uniform(-3, 3, (p, 1)).astype(np.float32)
    got = run(k_ts, x, v, OPS[o0][0], rev0, OPS[o1][0], rev1)
    f0, f1 = OPS[o0][1], OPS[o1][1]
    t = f0(v, x) if rev0 else f0(x, v)
    want = f1(np.float32(0.75), t) if rev1 else f1(t, np.float32(0.75))
    np.testing.assert_array_equal(got, want.astype(np.float32))


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


def k_bn(x):
    out = nl.ndarray((x.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nisa.bn_aggr(nisa.bn_stats(nl.load(x), dtype=nl.float32)))
    return out


@given(p=st.integers(1, 128), f=st.integers(1, 512), seed=st.integers(0, 999))
def test_bn_stats_aggr_any_width(p, f, seed):
    x = np.random.default_rng(seed).normal(2, 3, (p, f)).astype(np.float32)
    got = run(k_bn, x)
    np.testing.assert_allclose(got[:, 0], x.mean(1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[:, 1], x.var(1), rtol=1e-4, atol=1e-3)
