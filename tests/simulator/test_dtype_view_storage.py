"""A returned output stored from ``tile.view(dtype)`` of another width (an fp32 scale read as
four fp8 bytes) keeps its bytes: the unwritten-output analysis counts the view's elements in
the tile's own elements, and fast-fp storage (narrow floats held as float32, which cannot be
reinterpreted) gives way to exact storage for such a kernel."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from simulator.checks.unwritten import UnwrittenOutputWarning
from simulator.compiled.backend import BackendFallbackWarning


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


@nki.jit
def block_scale_bytes(x):
    """A classic block-first tile ``(G, par_dim(128), 1)`` fp32, stored as fp8 bytes per group."""
    out = nl.ndarray((256, 4), dtype=nl.float8_e4m3, buffer=nl.shared_hbm)
    t = nl.ndarray((2, nl.par_dim(128), 1), dtype=nl.float32, buffer=nl.sbuf)
    for g in nl.affine_range(2):
        t[g, :, :] = nl.load(x[nl.ds(g * 128, 128), :])
        nl.store(out[nl.ds(g * 128, 128), :], value=t.view(nl.float8_e4m3)[g, :, :4])
    return out


@pytest.mark.parametrize("backend", ["numpy", "batched", "numba"])
@pytest.mark.parametrize("checks", ["static", "full"])
def test_block_first_tile_read_as_fp8_bytes(backend, checks):
    x = (np.arange(256, dtype=np.float32).reshape(256, 1) - 100) / 9
    k = block_scale_bytes.configure(backend=backend, checks=checks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BackendFallbackWarning)  # (views run on the interpreter)
        got = np.asarray(k(x))
    np.testing.assert_array_equal(np.ascontiguousarray(got).view(np.float32), x)


def test_block_first_view_must_run_along_the_last_dim():
    @nki.jit
    def across(x):
        out = nl.ndarray((128, 8), dtype=nl.uint8, buffer=nl.shared_hbm)
        t = nl.ndarray((2, nl.par_dim(128), 2), dtype=nl.float32, buffer=nl.sbuf)
        t[0, :, :] = nl.load(x)
        t[1, :, :] = nl.load(x)
        nl.store(out, value=t[:, :, 0].view(nl.uint8))  # line: the view's last axis is blocks
        return out

    with pytest.raises(nki.errors.NKIError, match="must run along the tile's last dim") as e:
        across(np.ones((128, 2), np.float32))
    assert e.value.loc.line == across.__wrapped__.__code__.co_firstlineno + 6


def test_full_checks_follow_a_tile_read_at_another_width():
    """checks="full" tracks uninitialised elements per element; a tile also read as bytes is
    not tracked (no false alarm, no crash) and its bytes round-trip."""

    @nki.jit
    def as_bytes(x):
        out = nl.ndarray((128, 8), dtype=nl.uint8, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out, value=t.view(nl.uint8))
        return out

    x = np.random.default_rng(0).standard_normal((128, 2)).astype(np.float32)
    got = as_bytes.configure(checks="full")(x)
    np.testing.assert_array_equal(got, x.view(np.uint8))


def test_reinterpret_cast_is_the_current_apis_name_for_view():
    """``t.reinterpret_cast(dtype)`` (nki 0.7) reads the same bytes as ``t.view(dtype)``, on
    chip and in HBM."""

    @nki.jit
    def as_words(x):
        out = nl.ndarray((128, 2), dtype=nl.int32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 8), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.reinterpret_cast(nl.uint8))
        nisa.dma_copy(dst=out, src=t.reinterpret_cast(nl.int32))
        return out

    x = np.random.default_rng(1).standard_normal((128, 2)).astype(np.float32)
    np.testing.assert_array_equal(as_words(x), x.view(np.int32))
