"""Classic masks on a partition/free transpose: ``nisa.nc_transpose(t[i, j], mask=...)``,
``nl.transpose`` and ``nl.load_transpose2d`` take the mask over the input tile's axes (the
variables the instruction reads with), so only the transposes of the selected input elements
are written; a mask that only fits the result's shape is taken over the result."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl

from helpers import randn


def k_ragged_transpose(src, rows: int, cols: int, engine: str):
    # the last tiles of a tiled transpose: a full-size (square) tile, ragged along both axes
    n = 32 if engine == "vector" else 128
    out = nl.ndarray((n, n), dtype=nl.float32, buffer=nl.shared_hbm)
    i, j = nl.arange(n)[:, None], nl.arange(n)[None, :]
    p, q = nl.arange(n)[:, None], nl.arange(n)[None, :]
    mask = (i < rows) & (j < cols)
    dst = nl.zeros((n, n), dtype=nl.float32, buffer=nl.sbuf)
    if engine == "load":
        dst[p, q] = nl.load_transpose2d(src[i, j], mask=mask)
        nl.store(out[p, q], dst[p, q])
        return out
    local = nl.load(src[i, j], mask=mask)
    if engine == "nl":
        dst[p, q] = nl.transpose(local[i, j], mask=mask)
    elif engine == "vector":
        dst[p, q] = nisa.nc_transpose(local[i, j], mask=mask, engine=nisa.vector_engine)
    else:  # the compiler's choice: the Tensor engine into PSUM, copied to dst
        dst[p, q] = nisa.nc_transpose(local[i, j], mask=mask)
    nl.store(out[p, q], dst[p, q])
    return out


@pytest.mark.parametrize("engine", ["tensor", "vector", "nl", "load"])
def test_mask_over_the_input_selects_input_elements(engine):
    n = 32 if engine == "vector" else 128
    rows, cols = n - 5, n // 3  # different remainders: a mask taken over the result differs
    src = randn((n, n), seed=5)
    got = nki.jit(k_ragged_transpose)(src, rows, cols, engine)
    want = np.zeros((n, n), np.float32)
    want[:cols, :rows] = src[:rows, :cols].T
    np.testing.assert_array_equal(got, want)


def k_result_shaped_mask(src):
    # a (64, 128) input; the mask uses the result's (128, 64) variables
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    p, q = nl.arange(128)[:, None], nl.arange(64)[None, :]
    dst = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    dst[p, q] = nisa.nc_transpose(nl.load(src), mask=(p < 100) & (q < 10))
    nl.store(out, dst)
    return out


def test_mask_that_fits_only_the_result_is_taken_over_the_result():
    src = randn((64, 128), seed=6)
    want = np.zeros((128, 64), np.float32)
    want[:100, :10] = src.T[:100, :10]
    np.testing.assert_array_equal(nki.jit(k_result_shaped_mask)(src), want)
