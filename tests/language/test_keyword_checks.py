"""Unknown keyword arguments of nki.language calls are located errors naming the closest valid
keyword (issue 13 item 2); the classic loops' scheduling hint and the fills'
``lazy_initialization`` stay accepted."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import nki
import nki.language as nl
from nki.errors import NKIError

X = np.random.default_rng(2).standard_normal((128, 8)).astype(np.float32)


def _load_msk(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x, msk=nl.arange(128)[:, None] < 64)  # ERR
    nl.store(out, t)
    return out


def _exp_dtyp(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.exp(nl.load(x), dtyp=nl.bfloat16))  # ERR
    return out


def _matmul_tranpose(x):
    out = nl.ndarray((8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, nl.matmul(t, t, tranpose_x=True))  # ERR
    return out


def _store_dst(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(dst=out, value=nl.load(x), msk=None)  # ERR
    return out


CASES = [
    (_load_msk, "nl.load", "msk", "mask"),
    (_exp_dtyp, "nl.exp", "dtyp", "dtype"),
    (_matmul_tranpose, "nl.matmul", "tranpose_x", "transpose_x"),
    (_store_dst, "nl.store", "msk", "mask"),
]


@pytest.mark.parametrize("fn,api,bad,good", CASES, ids=[c[0].__name__ for c in CASES])
def test_unknown_keyword_is_a_located_error_with_a_suggestion(fn, api, bad, good):
    with pytest.raises(NKIError) as e:
        nki.jit(fn)(X)
    err = e.value
    assert err.code == "err_unexpected_keyword_argument"
    assert f"'{api}' got an unexpected keyword argument '{bad}'; did you mean '{good}'?" in (
        err.message
    )
    src, first = inspect.getsourcelines(fn)
    assert err.loc.file == __file__
    assert err.loc.line == first + next(i for i, s in enumerate(src) if "# ERR" in s)


def test_classic_loop_scheduling_hint_is_accepted():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2, precise_schedule=True):
            sl = slice(i * 64, (i + 1) * 64)
            nl.store(out[sl, :], nl.multiply(nl.load(x[sl, :]), 2.0))
        return out

    np.testing.assert_array_equal(k(X), X * 2)


def test_classic_lazy_initialization_is_accepted():
    # AWS's flash attention passes lazy_initialization= to nl.full / nl.zeros (classic **kwargs)
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        acc = nl.full(x.shape, fill_value=-1.0, dtype=nl.float32, lazy_initialization=False)
        zero = nl.zeros(x.shape, dtype=nl.float32, buffer=nl.sbuf, lazy_initialization=True)
        nl.store(out, nl.add(nl.add(acc, zero), nl.load(x)))
        return out

    np.testing.assert_array_equal(k(X), X - 1.0)
