"""NKI 0.7's (SDK 2.32) order of the nki.language parameters: past a call's operands, dtype,
keepdims, compute_dtype, transpose_x, buffer and name pass by position as well as by keyword,
and NKI 0.7's parameter names (``nl.copy(x=...)``, ``nl.device_print(print_prefix, tensor)``)
bind as the classic ones do. Values are checked against NumPy; misuse is a located error."""

from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.language as nl
from nki.errors import NKIError

RNG = np.random.default_rng(7)
X = RNG.standard_normal((64, 32)).astype(np.float32)
Y = RNG.standard_normal((64, 32)).astype(np.float32)


def positional_dtypes(x, y):
    outs = [nl.ndarray((64, 32), dtype=nl.bfloat16, buffer=nl.shared_hbm) for _ in range(2)]
    sums = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    a, b = nl.load(x), nl.load(y)
    nl.store(outs[0], nl.exp(a, nl.bfloat16))
    nl.store(outs[1], nl.add(a, b, nl.bfloat16))
    nl.store(sums, nl.sum(a, 1, nl.float32, True))
    return outs[0], outs[1], sums


def test_dtype_and_keepdims_pass_by_position():
    e, s, r = nki.jit(positional_dtypes)(X, Y)
    bf16 = ml_dtypes.bfloat16
    assert e.dtype == s.dtype == bf16 and r.shape == (64, 1)
    np.testing.assert_array_equal(e, np.exp(X).astype(bf16))
    np.testing.assert_array_equal(s, (X + Y).astype(bf16))
    np.testing.assert_allclose(r, X.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)


def renamed_parameters(x):
    out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    zeros = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.copy(x=nl.load(x))
    z = nl.zeros_like(x=t, dtype=nl.float32, buffer=nl.sbuf)
    nl.store(zeros, nl.add(z, 0.0))
    nl.device_print(print_prefix="t", tensor=t)
    nl.store(out, nl.multiply(t, 2.0))
    return out, zeros


def test_nki07_parameter_names_bind(capsys):
    out, zeros = nki.jit(renamed_parameters)(X)
    np.testing.assert_array_equal(out, X * 2)
    np.testing.assert_array_equal(zeros, np.zeros_like(X))
    assert "t" in capsys.readouterr().out


def rand_on_a_named_buffer(x):
    out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.rand((64, 32), nl.float32, nl.sbuf, "noise")
    nl.store(out, r)
    return out


def test_rand_takes_buffer_and_name():
    got = nki.jit(rand_on_a_named_buffer)(X)
    assert got.shape == (64, 32) and (got >= 0).all() and (got < 1).all()
    assert len(np.unique(got)) > 1000


def dtype_twice(x):
    out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.exp(nl.load(x), nl.float32, dtype=nl.float32))  # ERR
    return out


def both_names(x):
    out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, nl.copy(x=t, src=t))  # ERR
    return out


def too_many(x):
    out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.exp(nl.load(x), nl.float32, 1))  # ERR
    return out


def gather_on_another_axis(x):
    out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    idx = nl.zeros((64, 32), dtype=nl.uint32)
    nl.store(out, nl.gather_flattened(t, idx, 1))  # ERR
    return out


def rand_in_hbm(x):
    nl.rand((64, 32), nl.float32, nl.shared_hbm)  # ERR
    return x


def call_a_token(x):
    out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.prelu(nl.load(x)))  # ERR
    return out


@pytest.mark.parametrize(
    "fn,code,text",
    [
        (call_a_token, "err_unsupported_op", "nl.prelu is an op token, not a function"),
        (rand_in_hbm, "err_hbm_tensor_with_init_value_not_supported", "an initial value"),
        (dtype_twice, "err_invalid_argument", "multiple values for argument 'dtype'"),
        (both_names, "err_invalid_argument", "got both 'x' and 'src', two names of one parameter"),
        (too_many, "err_invalid_argument", "positional argument"),
        (gather_on_another_axis, "err_unsupported_operand", "axis=1"),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_misuse_is_a_located_error(fn, code, text):
    with pytest.raises(NKIError) as e:
        nki.jit(fn)(X)
    assert e.value.code == code and text in e.value.message, e.value.message
    src, first = inspect.getsourcelines(fn)
    line = first + next(i for i, text in enumerate(src) if "# ERR" in text)
    assert (e.value.loc.file, e.value.loc.line) == (__file__, line)


def test_every_dtype_is_an_nl_dtype():
    names = ["float32", "bfloat16", "float8_e4m3fn", "int32", "uint8", "float8_e4m3fn_x4"]
    assert all(isinstance(getattr(nl, n), nl.DType) for n in names)
    assert not isinstance(np.float32, nl.DType)
