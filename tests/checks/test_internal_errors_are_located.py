"""Reproducers of internal errors (issue 13 item 12): each ends in a located NKIError naming
the kernel line and the rule, or runs correctly."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError

X = np.ones((128, 8), np.float32)


def _ndarray_none(x):
    nl.ndarray(None, dtype=nl.float32, buffer=nl.sbuf)  # ERR
    return x


def _zeros_nan(x):
    nl.zeros(float("nan"), dtype=nl.float32)  # ERR
    return x


def _tensor_scalar_list(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nisa.tensor_scalar(nl.load(x), [1, 2], 2.0)  # ERR
    nl.store(out, t)
    return out


def _list_of_affine_range(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in list(nl.affine_range(2)):
        nl.store(out[i * 64 : (i + 1) * 64, :], nl.load(x[i * 64 : (i + 1) * 64, :]))  # ERR
    return out


def _next_iter_affine_range(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i = next(iter(nl.affine_range(2)))
    nl.store(out[i * 64 : (i + 1) * 64, :], nl.load(x[i * 64 : (i + 1) * 64, :]))  # ERR
    return out


def _ds_with_array(x):
    out = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(x[nl.ds(np.ones((3, 3)), 8), :]))  # ERR
    return out


def _ds_with_tile(x):
    out = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    st = nl.load(x[0:1, 0:1])
    nl.store(out, nl.load(x[:, nl.ds(st, 4)]))  # ERR
    return out


def _full_with_a_string(x):
    out = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.full((128, 4), "x", nl.float32))  # ERR
    return out


def _int_of_a_tile(x):
    t = nl.load(x)
    n = int(t[0, 0])  # ERR
    return n


def _float_of_a_tile(x):
    t = nl.load(x)
    v = float(t)  # ERR
    return v


CASES = [
    (_int_of_a_tile, "err_dynamic_control_flow_not_supported", "int() of a tile"),
    (_float_of_a_tile, "err_dynamic_control_flow_not_supported", "float() of a tile"),
    (_full_with_a_string, "err_unsupported_dtype", "fill_value must be a number, got 'x'"),
    (_ndarray_none, "err_invalid_shape", "got None"),
    (_zeros_nan, "err_invalid_shape", "got nan"),
    (_tensor_scalar_list, "err_unsupported_op", "unsupported op [1, 2]"),
    (_list_of_affine_range, "err_local_variable_used_out_of_scope", "iterator of a loop"),
    (_next_iter_affine_range, "err_local_variable_used_out_of_scope", "iterator of a loop"),
    (_ds_with_array, "err_unsupported_index_expression", "nl.ds start must be"),
    (_ds_with_tile, "err_unsupported_index_expression", "got NkiTensor"),
]


# the iterator of a symbolic loop escapes its loop: classic API only (in the current API
# nl.affine_range outside a for statement is Python's range)
CLASSIC = {_list_of_affine_range, _next_iter_affine_range}


def _err_line(fn) -> int:
    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, s in enumerate(src) if "# ERR" in s)


@pytest.mark.parametrize("fn,code,text", CASES, ids=[c[0].__name__ for c in CASES])
@pytest.mark.parametrize("checks", ["static", "full"])
def test_reproducer_is_a_located_error(fn, code, text, checks):
    with pytest.raises(NKIError) as e:
        nki.jit(fn, checks=checks, api="classic" if fn in CLASSIC else None)(X)
    assert e.value.code == code
    assert text in e.value.message
    assert e.value.loc is not None and e.value.loc.file == __file__
    assert e.value.loc.line == _err_line(fn)


class _Doubler:
    def __call__(self, x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.multiply(nl.load(x), 2.0))
        return out


def test_callable_object_is_a_kernel():
    x = np.random.default_rng(1).standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_array_equal(nki.jit(_Doubler())(x), x * 2)


def test_recursive_kernel_is_a_located_error():
    @nki.jit
    def calls_itself(x):
        return calls_itself(x)

    with pytest.raises(NKIError) as e:
        calls_itself(X)
    assert e.value.code == "err_kernel_recursion"
    assert "'calls_itself' calls itself" in e.value.message
    src, first = inspect.getsourcelines(calls_itself.fn)
    assert e.value.loc.line == first + next(i for i, t in enumerate(src) if "return calls" in t)


def test_read_only_output_parameter_is_reported_before_running():
    @nki.jit
    def copy_into(a, out):
        nl.store(out, nl.load(a))

    out = np.zeros((128, 8), np.float32)
    out.flags.writeable = False
    with pytest.raises(NKIError) as e:
        copy_into(X, out)
    assert e.value.code == "err_readonly_output"
    assert "argument 'out'" in e.value.message and e.value.loc is not None
    assert e.value.loc.file == __file__


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_masked_store_broadcasting_a_column_over_a_wider_range(backend):
    @nki.jit(backend=backend)
    def spread(x):
        out = nl.ndarray((128, 2), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.zeros((128, 2), nl.float32))
        ip = nl.arange(128)[:, None]
        jf = nl.arange(2)[None, :]
        nl.store(out[ip, jf], value=nl.load(x[:, 0:1]), mask=(ip < 100))
        return out

    x = np.random.default_rng(4).standard_normal((128, 4)).astype(np.float32)
    ref = np.zeros((128, 2), np.float32)
    ref[:100] = x[:100, 0:1]
    np.testing.assert_array_equal(spread(x), ref)
