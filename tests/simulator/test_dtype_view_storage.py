"""A returned output stored from ``tile.view(dtype)`` of another width (an fp32 scale read as
four fp8 bytes) keeps its bytes: the unwritten-output analysis counts the view's elements in
the tile's own elements, and fast-fp storage (narrow floats held as float32, which cannot be
reinterpreted) gives way to exact storage for such a kernel."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from simulator.unwritten import UnwrittenOutputWarning


@nki.jit
def scale_bytes(x):
    out = nl.ndarray((128, 4), dtype=nl.float8_e4m3, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t.view(nl.float8_e4m3))
    return out


@nki.jit
def half_written(x):
    out = nl.ndarray((128, 4), dtype=nl.float8_e4m3, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.sbuf)
    t[:, 0:1] = nl.load(x)
    nl.store(out, value=t.view(nl.float8_e4m3)[:, 4:8])  # the bytes of column 1: unwritten
    return out


X = (np.arange(128, dtype=np.float32).reshape(128, 1) + 1) / 7


@pytest.mark.parametrize("precise_fp", [True, False])
def test_fp32_read_as_fp8_bytes_round_trips(precise_fp):
    got = np.asarray(scale_bytes.configure(precise_fp=precise_fp)(X))
    np.testing.assert_array_equal(np.ascontiguousarray(got).view(np.float32), X)


def test_unwritten_bytes_behind_a_dtype_view_are_reported():
    with pytest.warns(UnwrittenOutputWarning, match="no instruction writes"):
        half_written(X)
