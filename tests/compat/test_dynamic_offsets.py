"""Dynamic offsets: a value read at run time from a one-element SBUF tile starts an index
(``t[i_p, idx[0, j] + i_f]``), with nisa.tensor_copy_dynamic_src / _dst and DMA loads.
Compared with NumPy; an offset past the end is a located run-time error."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError


@nki.jit
def gather_columns(x, cols):
    # out[:, j] = x[:, cols[0, j]] with the column read from SBUF at run time
    n = cols.shape[1]
    out = nl.ndarray((x.shape[0], n), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    idx = nl.load(cols)
    res = nl.ndarray((x.shape[0], n), dtype=x.dtype)
    i_p, i_f = nl.mgrid[0 : x.shape[0], 0:1]
    for j in nl.affine_range(n):
        res[i_p, j] = nisa.tensor_copy_dynamic_src(t[i_p, idx[0, j] + i_f])
    nl.store(out, res)
    return out


def test_tensor_copy_dynamic_src():
    rng = np.random.default_rng(0)
    x = rng.random((32, 20), dtype=np.float32)
    cols = np.array([[7, 0, 19, 3, 3]], dtype=np.int32)
    np.testing.assert_array_equal(gather_columns(x, cols), x[:, cols[0]])


def test_dynamic_offset_out_of_bounds_is_an_error():
    x = np.zeros((8, 10), np.float32)
    with pytest.raises(NKIError, match="out-of-bound|out of bound"):
        gather_columns(x, np.array([[2, 10]], dtype=np.int32))


@nki.jit
def window_load(x, start):
    # a 16-column window of x loaded from a start column read at run time
    out = nl.ndarray((x.shape[0], 16), dtype=x.dtype, buffer=nl.shared_hbm)
    s = nl.load(start)
    i_p, i_f = nl.mgrid[0 : x.shape[0], 0:16]
    nl.store(out, nl.load(x[i_p, s[0, 0] + i_f]))
    return out


def test_dma_load_with_dynamic_offset():
    x = np.arange(4 * 64, dtype=np.float32).reshape(4, 64)
    np.testing.assert_array_equal(window_load(x, np.array([[37]], np.int32)), x[:, 37:53])


@nki.jit
def scatter_columns(x, cols):
    out = nl.ndarray((x.shape[0], 12), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    idx = nl.load(cols)
    res = nl.zeros((x.shape[0], 12), dtype=x.dtype)
    i_p, i_f = nl.mgrid[0 : x.shape[0], 0:1]
    for j in nl.affine_range(x.shape[1]):
        nisa.tensor_copy_dynamic_dst(dst=res[i_p, idx[0, j] + i_f], src=t[i_p, j + i_f])
    nl.store(out, res)
    return out


def test_tensor_copy_dynamic_dst():
    x = np.random.default_rng(1).random((16, 3), dtype=np.float32)
    cols = np.array([[11, 2, 5]], dtype=np.int32)
    want = np.zeros((16, 12), np.float32)
    want[:, cols[0]] = x
    np.testing.assert_array_equal(scatter_columns(x, cols), want)
