"""Indirect DMA: nl.load / nl.store with an index tile on the partition dimension (gather
and scatter of rows), its run-time bounds check, and the free-dimension error."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import nki
import nki.language as nl
import nki.typing as nt
from nki.errors import NKIIndexError

from helpers import stored as _out


@nki.jit
def gather_rows(data, idx):
    n = idx.shape[0]
    i_p = nl.arange(n)[:, None]
    i_f = nl.arange(data.shape[1])[None, :]
    it = nl.load(idx)
    x = nl.load(data[it[i_p, 0], i_f])
    return _out(x)


def test_indirect_load_on_the_partition_dim():
    rng = np.random.default_rng(4)
    data = rng.standard_normal((1000, 64)).astype(np.float32)
    idx = rng.integers(0, 1000, (128, 1)).astype(np.int32)
    np.testing.assert_array_equal(gather_rows(data, idx), data[idx[:, 0]])
    assert "sb" in str(gather_rows.last_ir).split("dma.load(data[")[1].split(",")[0]


def test_indirect_load_out_of_bounds_is_a_runtime_error():
    data = np.zeros((10, 8), np.float32)
    idx = np.array([[3], [10]], np.int32)
    with pytest.raises(NKIIndexError) as ei:
        gather_rows(data, idx)
    assert "10" in str(ei.value)


def test_indirect_index_on_a_free_dim_is_rejected():
    @nki.jit
    def kernel(data, idx):
        it = nl.load(idx)
        i_p = nl.arange(4)[:, None]
        nl.load(data[i_p, it[i_p, 0]])

    line = inspect.getsourcelines(kernel.fn)[1] + 4
    with pytest.raises(NKIIndexError) as ei:
        kernel(np.zeros((4, 8), np.float32), np.zeros((4, 1), np.int32))
    assert ei.value.code == "err_indirect_indices_free_dim"
    assert ei.value.loc.line == line


def test_indirect_store_scatters_rows():
    @nki.jit
    def scatter(data: nt.mutable_tensor, idx, vals):
        i_p = nl.arange(4)[:, None]
        i_f = nl.arange(8)[None, :]
        it = nl.load(idx)
        nl.store(data[it[i_p, 0], i_f], nl.load(vals))
        return data

    d = np.zeros((10, 8), np.float32)
    vals = np.arange(32, dtype=np.float32).reshape(4, 8)
    out = scatter(d, np.array([[1], [3], [5], [9]], np.int32), vals)
    want = np.zeros((10, 8), np.float32)
    want[[1, 3, 5, 9]] = vals
    np.testing.assert_array_equal(out, want)


@nki.jit
def gather_from_scratch(data, idx):
    """Rows of a private HBM scratch tensor whose first half alone is written, gathered by
    index: with checks="full", a gathered row of the unwritten half is an uninitialised read."""
    n, d = data.shape
    scratch = nl.ndarray((2 * n, d), dtype=data.dtype, buffer=nl.private_hbm)
    nl.store(scratch[0:n, :], value=nl.load(data))
    i_p = nl.arange(idx.shape[0])[:, None]
    i_f = nl.arange(d)[None, :]
    it = nl.load(idx)
    x = nl.load(scratch[it[i_p, 0], i_f])  # GATHER
    return _out(x)


def test_gathered_rows_are_checked_for_initialisation():
    data = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    idx = np.arange(16, dtype=np.int32).reshape(16, 1) * 3
    k = gather_from_scratch.configure(backend="numpy", checks="full")
    np.testing.assert_array_equal(k(data, idx), data[idx[:, 0]])
    idx[5, 0] = 64 + 7  # a row of the unwritten half
    with pytest.raises(nki.NKIError) as e:
        k(data, idx)
    assert e.value.code == "err_uninitialized_read"
    assert "element (5, 0)" in str(e.value)
    src, start = inspect.getsourcelines(gather_from_scratch.fn)
    assert e.value.loc.line == start + next(i for i, s in enumerate(src) if "# GATHER" in s)
