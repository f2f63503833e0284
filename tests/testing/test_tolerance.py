"""assert_allclose: per-dtype tolerances (a correct rounding passes, computing in a narrower
format fails) and the content of the failure message."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from nki.testing import TOLERANCES, assert_allclose, compare, tolerance

RNG = np.random.default_rng(0)
X = RNG.uniform(-4, 4, (64, 64)).astype(np.float64)
Y = RNG.uniform(0.5, 4, (64, 64)).astype(np.float64)


def _round(x, dt):
    return np.asarray(x, dtype=np.float64).astype(np.float32).astype(dt)


def _through(dt, x, y):
    """x * y + x / y with every intermediate rounded into dt (a kernel computing in dt)."""
    x, y = _round(x, dt), _round(y, dt)
    p = _round(x.astype(np.float64) * y, dt)
    q = _round(x.astype(np.float64) / y, dt)
    return _round(p.astype(np.float64) + q, dt)


EXACT = X * Y + X / Y
CASES = [
    # result dtype, a narrower format that must fail its tolerance
    ("float32", ml_dtypes.bfloat16),
    ("float32", np.float16),
    ("float16", ml_dtypes.bfloat16),
    ("bfloat16", ml_dtypes.float8_e4m3),
    ("bfloat16", ml_dtypes.float8_e5m2),
    ("float8_e4m3", ml_dtypes.float8_e5m2),
]


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "float8_e4m3", "float8_e5m2"])
def test_correct_rounding_passes(name):
    dt = np.dtype(name) if name in ("float32", "float16") else getattr(ml_dtypes, name)
    x, y = _round(X, dt), _round(Y, dt)  # the kernel's inputs, already in dt
    exact = x.astype(np.float64) * y + x.astype(np.float64) / y
    got = _through(dt, x, y)  # three roundings into dt
    assert_allclose(got, exact, dtype=name)


@pytest.mark.parametrize("name,narrow", CASES, ids=[f"{a}-vs-{np.dtype(b).name}" for a, b in CASES])
def test_computing_in_a_narrower_format_fails(name, narrow):
    dt = np.dtype(name) if name in ("float32", "float16") else getattr(ml_dtypes, name)
    x, y = _round(X, dt), _round(Y, dt)
    exact = x.astype(np.float64) * y + x.astype(np.float64) / y
    sloppy = _through(narrow, x.astype(np.float32), y.astype(np.float32)).astype(dt)
    with pytest.raises(AssertionError, match="Arrays not close"):
        assert_allclose(sloppy, exact, dtype=name)


def test_tolerance_table():
    assert tolerance("float32") == (1e-5, 1e-5)
    assert tolerance("bfloat16") == (2.0**-7, 2.0**-7)
    assert tolerance(ml_dtypes.bfloat16) == tolerance("bf16")
    assert tolerance("float16") == (2.0**-10, 2.0**-10)
    assert tolerance("float8_e4m3") == (0.125, 0.125)
    assert tolerance("float8_e5m2") == (0.25, 0.25)
    for name in ("int8", "int16", "int32", "uint8", "uint16", "uint32", "bool_"):
        assert tolerance(name) == (0.0, 0.0)
    # tighter formats get tighter tolerances
    order = ["float32", "float16", "bfloat16", "float8_e4m3", "float8_e5m2"]
    assert [TOLERANCES[n][0] for n in order] == sorted(TOLERANCES[n][0] for n in order)


@pytest.mark.parametrize("dt", [np.int8, np.int32, np.uint16])
def test_integers_are_exact(dt):
    a = np.arange(12, dtype=dt).reshape(3, 4)
    assert_allclose(a, a.copy())
    b = a.copy()
    b[2, 1] += 1
    with pytest.raises(AssertionError) as ei:
        assert_allclose(b, a)
    msg = str(ei.value)
    assert "1 of 12 elements differ" in msg
    assert "index (2, 1): actual 10, expected 9" in msg


def test_failure_message_reports_worst_element_and_max_errors():
    e = np.ones((8, 16), np.float32)
    a = e.copy()
    a[3, 5] = 1.5  # worst: abs 0.5
    a[6, 2] = 1.01  # small but past the fp32 tolerance
    e2 = e.copy()
    e2[0, 0] = 1e-3
    a[0, 0] = 2e-3  # abs 1e-3, rel 1.0: the max relative error
    with pytest.raises(AssertionError) as ei:
        assert_allclose(a, e2)
    msg = str(ei.value)
    assert "dtype float32, rtol=1e-05, atol=1e-05" in msg
    assert "3 of 128 elements differ" in msg
    assert "worst element at index (3, 5): actual 1.5, expected 1 " in msg
    assert "abs error 0.5, rel error 0.5" in msg
    assert "max abs error 0.5 at index (3, 5)" in msg
    assert "max rel error 1 at index (0, 0)" in msg


def test_explicit_tolerances_and_dtype_override():
    e = np.ones(4, np.float32)
    a = e * np.float32(1.003)
    with pytest.raises(AssertionError):
        assert_allclose(a, e)  # fp32 tolerance
    assert_allclose(a, e, dtype="bfloat16")  # within bf16's
    assert_allclose(a, e, rtol=0.01, atol=0)
    with pytest.raises(AssertionError, match="rtol=0.001, atol=0"):
        assert_allclose(a, e, rtol=1e-3, atol=0)


def test_nan_inf_and_shape():
    e = np.array([1.0, np.nan, np.inf, -np.inf], np.float32)
    assert_allclose(e.copy(), e)  # NaN == NaN, inf == inf by default
    with pytest.raises(AssertionError):
        assert_allclose(e.copy(), e, equal_nan=False)
    a = e.copy()
    a[2] = 3.0e38
    with pytest.raises(AssertionError) as ei:
        assert_allclose(a, e)
    assert "index (2,)" in str(ei.value) and "expected inf" in str(ei.value)
    a = e.copy()
    a[0] = np.nan
    with pytest.raises(AssertionError, match="NaN in one array but not the other at 1"):
        assert_allclose(a, e)
    with pytest.raises(AssertionError, match=r"shape: actual \(4,\) vs expected \(2, 2\)"):
        assert_allclose(e, e.reshape(2, 2))


def test_accepts_torch_tensors_including_bfloat16():
    torch = pytest.importorskip("torch")
    t = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.bfloat16)
    assert_allclose(t, np.array([[1.0, 2.0], [3.0, 4.0]]))
    assert compare(t, np.array([[1.0, 2.0], [3.0, 4.5]])) is not None
