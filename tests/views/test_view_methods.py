"""View methods of the current API beyond slicing: ``rearrange`` (einops-style), the view
queries (``is_contiguous``, ``get_pattern``, ``is_indirect``), ``.view(dtype)`` and the
NeuronCore-v4 tensor indirection ``.indirect(index)``, checked against NumPy."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError

RNG = np.random.default_rng(5)
P = 128


def _line(fn, mark: str) -> int:
    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, ln in enumerate(src) if mark in ln)


@nki.jit
def rearranged(x):
    """(128, 24) -> (128, 6, 4): split the free axis into (h=4, w=6) and swap them; then
    merge back on HBM with a rearrange of the output."""
    t = nl.ndarray((P, 24), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    v = t.rearrange(("b", ("h", "w")), ("b", "w", "h"), {"h": 4})
    assert v.shape == (P, 6, 4) and not v.is_contiguous() and t.is_contiguous()
    assert v.get_pattern() == [[24, P], [1, 6], [6, 4]] and not v.is_indirect()
    r = nl.ndarray((P, 6, 4), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=v)
    out = nl.ndarray((P, 24), dtype=x.dtype, buffer=nl.shared_hbm)
    merged = out.rearrange(
        src_pattern=("b", ("w", "h")), dst_pattern=("b", "w", "h"), fixed_sizes={"h": 4}
    )
    nisa.dma_copy(dst=merged, src=r)
    return out


def test_rearrange_splits_reorders_and_merges():
    x = RNG.standard_normal((P, 24)).astype(np.float32)
    want = x.reshape(P, 4, 6).transpose(0, 2, 1).reshape(P, 24)
    np.testing.assert_array_equal(nki.simulate(rearranged)(x), want)


@nki.jit
def bad_rearrange(x):
    t = nl.ndarray((P, 24), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    t.rearrange(("b", ("h", "w")), ("b", "w", "h"))  # UNKNOWN_SIZES
    return x


def test_rearrange_needs_all_but_one_split_size():
    with pytest.raises(NKIError, match="cannot infer the sizes") as e:
        nki.simulate(bad_rearrange)(np.zeros((P, 24), np.float32))
    assert e.value.loc.line == _line(bad_rearrange.fn, "# UNKNOWN_SIZES")


@nki.jit
def gather_columns(x, idx):
    """r[p, i] = x[p, 8 + idx[i, 0]] through tensor indirection on a (128, 32) window."""
    out = nl.ndarray((P, 10), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    i = nl.ndarray((P, 2), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=i, src=idx)
    v = t[:, 8:40].indirect(i, num_elem=10)
    assert v.shape == (P, 10) and v.is_indirect()
    r = nl.ndarray((P, 10), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=v)
    nisa.dma_copy(dst=out, src=r)
    return out


@nki.jit
def scatter_columns(x, idx):
    out = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=t, value=0.0)
    s = nl.ndarray((P, 4), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=x[:, 0:4])
    i = nl.ndarray((P, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=i, src=idx)
    nisa.tensor_copy(dst=t.indirect(i, num_elem=4), src=s)  # SCATTER
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.fixture
def trn3(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")


def test_indirect_gathers_columns(trn3):
    x = RNG.standard_normal((P, 64)).astype(np.float32)
    idx = RNG.integers(0, 32, (P, 2)).astype(np.int32)
    np.testing.assert_array_equal(nki.simulate(gather_columns)(x, idx), x[:, 8 + idx[:10, 0]])


def test_indirect_scatters_columns_and_checks_bounds_at_run_time(trn3):
    x = RNG.standard_normal((P, 64)).astype(np.float32)
    idx = np.zeros((P, 1), np.int32)
    idx[:4, 0] = [5, 9, 60, 1]
    want = np.zeros_like(x)
    want[:, [5, 9, 60, 1]] = x[:, 0:4]
    np.testing.assert_array_equal(nki.simulate(scatter_columns)(x, idx), want)
    idx[2, 0] = 64
    with pytest.raises(NKIError, match="out-of-bound") as e:
        nki.simulate(scatter_columns)(x, idx)
    assert e.value.loc.line == _line(scatter_columns.fn, "# SCATTER")


def test_indirect_needs_neuroncore_v4():
    x, idx = np.zeros((P, 64), np.float32), np.zeros((P, 2), np.int32)
    with pytest.raises(NKIError, match="NeuronCore-v4") as e:
        nki.simulate(gather_columns.configure(target="trn2"))(x, idx)
    assert e.value.loc.line == _line(gather_columns.fn, ".indirect(")


@nki.jit
def index_edges(x):
    # on chip results stay >= 2-D (select too); on HBM indexed dims drop down to 1-D
    t = nl.ndarray((64, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[1])
    assert t[:, 2].shape == (64, 1) and t.select(1, 2).shape == (64, 1) and t[3, 2].shape == (1, 1)
    assert x[1, 2, 3].shape == (1,) and x[:, 1].shape == (2, 8)
    out = nl.ndarray((64, 2), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[:, 0:1], src=t.select(1, 2))
    nisa.dma_copy(dst=out[:, 1:2], src=x[0, :, 5])
    one = nl.ndarray((1, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=one[0], src=x[1, 2, 3])
    return out, one


def test_integer_indexing_edge_cases():
    x = RNG.standard_normal((2, 64, 8)).astype(np.float32)
    out, one = nki.simulate(index_edges)(x)
    np.testing.assert_array_equal(out, np.stack([x[1, :, 2], x[0, :, 5]], axis=1))
    assert one[0, 0] == x[1, 2, 3]


@nki.jit(checks="full")
def zero_fill_through_ap(w, rows: int):
    out = nl.ndarray(w.shape, dtype=w.dtype, buffer=nl.shared_hbm)
    E, H, G, I = w.shape
    z = nl.ndarray((H, G, I), dtype=w.dtype, buffer=nl.sbuf)
    nisa.memset(z, value=0.0)
    for e in range(E):
        at = e * H * G * I
        nisa.dma_copy(dst=out.ap([[G * I, rows], [I, G], [1, I]], offset=at), src=z[0:rows])
    return out


def test_full_checks_see_writes_through_an_hbm_access_pattern():
    w = np.ones((2, 64, 2, 32), np.float32)
    np.testing.assert_array_equal(nki.simulate(zero_fill_through_ap)(w, 64), np.zeros_like(w))
    with pytest.raises(NKIError) as ei:
        nki.simulate(zero_fill_through_ap)(w, 63)  # the last row of each plane is not written
    assert ei.value.code == "err_unwritten_output"
    assert "[0:2, 63:64, 0:2, 0:32]" in str(ei.value)
