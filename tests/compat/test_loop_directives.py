"""Classic loop directives: ``directives=nki.compiler.no_reorder()`` on ``nl.sequential_range`` /
``affine_range`` (AWS's attention performance tutorial, v10 and v11) keeps the loop's values;
``ncc.no_reorder()`` is also a ``with`` block; a misspelt keyword stays a located error."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.compiler as ncc
import nki.language as nl
from nki.errors import NKIError

X = np.random.default_rng(7).standard_normal((512, 64)).astype(np.float32)


def _prefix_sums(x):
    # running sum over 128-row blocks (a loop-carried dependency: sequential)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, x.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(x.shape[0] // 128, directives=ncc.no_reorder()):
        acc[...] = nl.add(acc, nl.load(x[i * 128 : (i + 1) * 128, :]))
        nl.store(out[i * 128 : (i + 1) * 128, :], acc)
    return out


def _scaled(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128, directives=ncc.no_reorder()):
        with ncc.no_reorder():
            t = nl.multiply(nl.load(x[i * 128 : (i + 1) * 128, :]), 3.0)
        nl.store(out[i * 128 : (i + 1) * 128, :], t)
    return out


def test_sequential_range_no_reorder_directive():
    want = np.cumsum(X.reshape(4, 128, 64), axis=0, dtype=np.float32).reshape(512, 64)
    np.testing.assert_allclose(nki.jit(_prefix_sums)(X), want, rtol=1e-5, atol=1e-5)


def test_affine_range_directive_and_no_reorder_block():
    np.testing.assert_array_equal(nki.jit(_scaled)(X), X * np.float32(3.0))


def test_misspelt_directives_keyword_is_an_error():
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.sequential_range(4, directive=ncc.no_reorder()):
            nl.store(out[i * 128 : (i + 1) * 128, :], nl.load(x[i * 128 : (i + 1) * 128, :]))
        return out

    with pytest.raises(NKIError) as e:
        nki.jit(k)(X)
    assert e.value.code == "err_unexpected_keyword_argument"
    assert "'directive'" in e.value.message
