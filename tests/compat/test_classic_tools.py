"""Classic tooling entry points run in the simulator: nki.trace + nki.simulate_kernel,
nki.benchmark and nki.profile (decorator and call forms, shape placeholders as arguments)."""

from __future__ import annotations

import math

import numpy as np

import nki
import nki.language as nl
import nki.typing as nt


def _exp_rows(in_tensor, out_tensor):
    # legacy form: the output is a parameter; rows beyond the tensor are masked
    sz_p, sz_f = in_tensor.shape
    i_f = nl.arange(sz_f)[None, :]
    for p in nl.affine_range(math.ceil(sz_p / nl.tile_size.pmax)):
        i_p = p * nl.tile_size.pmax + nl.arange(nl.tile_size.pmax)[:, None]
        t = nl.load(in_tensor[i_p, i_f], mask=(i_p < sz_p))
        nl.store(out_tensor[i_p, i_f], value=nl.exp(t), mask=(i_p < sz_p))


def test_trace_and_simulate_kernel():
    k = nki.trace(_exp_rows)
    x = np.random.default_rng(0).random((200, 64), dtype=np.float32)
    out = np.zeros_like(x)
    nki.simulate_kernel(k, x, out)
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)


def test_benchmark_decorator_runs_and_reports_latency():
    k = nki.benchmark(warmup=2, iters=5, save_neff_name="f.neff")(_exp_rows)
    x = np.random.default_rng(1).random((130, 32), dtype=np.float32)
    out = np.zeros_like(x)
    k(x, out)
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)
    p50 = k.benchmark_result.nc_latency.get_latency_percentile(50)
    assert p50 > 0.0


def test_benchmark_accepts_shape_placeholders():
    k = nki.benchmark(_exp_rows, save_trace_name="p.ntff")
    assert k(nt.tensor[[250, 512], nl.float32], nt.tensor[[250, 512], nl.float32]) is None
    assert k.benchmark_result.nc_latency.get_latency_percentile(99) > 0.0
    assert k.trace_count == 1


def test_profile_returns_outputs():
    @nki.profile(working_directory="/nonexistent", profile_nth=2)
    def double(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a) * 2.0)
        return out

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(double(a), a * 2)
    np.testing.assert_array_equal(double(a + 1), (a + 1) * 2)
    assert double.trace_count == 1  # same signature: traced once
