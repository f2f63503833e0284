"""No estimate exceeds a physical peak: over random DMA, element-wise and matmul kernels on
every target, the estimated latency leaves room for the bytes moved at the core's DMA
bandwidth (and each queue's), the FLOPs at the Tensor engine's peak, the elements at the
widest data path of each engine, and no engine is busy longer than the kernel runs."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import nki
import nki.language as nl
from simulator.cost.model import per_partition
from simulator.cost.table import table_for

TARGETS = st.sampled_from(["trn1", "trn2", "trn3"])
DTYPES = st.sampled_from([np.float32, ml_dtypes.bfloat16])
WIDEST_LANE = 4  # elements per lane per cycle: 512 of 2-byte data on 128 lanes [arch-v3/v4]
SLACK = 1 + 1e-9


def _shape(dtype, shape):
    return np.broadcast_to(np.zeros((), dtype), shape)


def _check_engines_and_dma(r) -> None:
    t = table_for(r.target)
    for engine, busy in r.busy_ns.items():
        if not engine.startswith("dma"):
            assert busy <= r.instance_ns * SLACK, (engine, busy, r.summary())
    assert r.dma_bytes <= t.dma_bytes_per_ns * r.instance_ns * SLACK, r.summary()
    for q, nbytes in r.dma_queue_bytes.items():
        assert nbytes <= t.dma_bytes_per_ns * r.busy_ns[q] * SLACK, (q, r.summary())


@nki.jit
def copy_tiles(a, rows, step):
    out = nl.ndarray((a.shape[0], a.shape[1] // step), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(rows)[:, None]
    i_f = nl.arange(a.shape[1] // step)[None, :]
    for i in nl.affine_range(a.shape[0] // rows):
        t = nl.load(a[i * rows + i_p, step * i_f])
        nl.store(out[i * rows + i_p, i_f], value=t)
    return out


@given(
    target=TARGETS,
    dtype=DTYPES,
    rows=st.sampled_from([1, 16, 64, 128]),
    tiles=st.integers(1, 24),
    cols=st.sampled_from([1, 8, 64, 512, 2048, 8192]),
    step=st.sampled_from([1, 1, 2, 3]),
)
def test_dma_never_beats_the_dma_bandwidth(target, dtype, rows, tiles, cols, step):
    a = _shape(dtype, (rows * tiles, cols * step))
    r = nki.estimate(copy_tiles, target=target)(a, rows, step)
    _check_engines_and_dma(r)
    assert r.dma_bytes == 2 * rows * tiles * cols * np.dtype(dtype).itemsize


@nki.jit
def elementwise(a, rows, ops):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // rows):
        x = nl.load(a[i * rows : (i + 1) * rows, :])
        for op in ops:
            if op == "exp":
                x = nl.exp(x)  # Scalar engine
            elif op == "add":
                x = nl.add(x, x)  # Vector, two inputs
            elif op == "scale":
                x = nl.multiply(x, 3.0)  # Vector, one input
            else:
                x = nl.copy(x)
        nl.store(out[i * rows : (i + 1) * rows, :], value=x)
    return out


@given(
    target=TARGETS,
    dtype=DTYPES,
    rows=st.sampled_from([1, 32, 128]),
    tiles=st.integers(1, 8),
    cols=st.sampled_from([1, 16, 256, 2048]),
    ops=st.lists(st.sampled_from(["exp", "add", "scale", "copy"]), min_size=1, max_size=5),
)
def test_compute_engines_never_beat_their_data_paths(target, dtype, rows, tiles, cols, ops):
    r = nki.estimate(elementwise, target=target)(
        _shape(dtype, (rows * tiles, cols)), rows, tuple(ops)
    )
    _check_engines_and_dma(r)
    t = table_for(r.target)
    elements: dict[str, float] = {}
    ir = r.compiler.ir
    for site in r.schedule.sites.values():
        if site.engine in t.engines and site.instr.dst is not None:
            n = per_partition(site.instr.dst, ir) * site.count
            elements[site.engine] = elements.get(site.engine, 0.0) + n
    for engine, n in elements.items():
        peak = t.engines[engine].clock_ghz * WIDEST_LANE  # elements per lane per ns
        assert n <= peak * r.busy_ns[engine] * SLACK, (engine, n, r.summary())
        assert n <= peak * r.instance_ns * SLACK


@nki.jit
def matmuls(lhsT, rhs):
    repeat, k, n = rhs.shape
    out = nl.ndarray((repeat, lhsT.shape[1], n), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(lhsT)
    for i in nl.affine_range(repeat):
        b = nl.load(rhs[i])  # a new moving tile each time (an invariant matmul is hoisted)
        acc = nl.matmul(a, b, transpose_x=True)
        nl.store(out[i], value=nl.copy(acc))
    return out


@given(
    target=TARGETS,
    dtype=DTYPES,
    k=st.integers(1, 128),
    m=st.integers(1, 128),
    n=st.integers(1, 512),
    repeat=st.integers(1, 16),
)
def test_matmuls_never_beat_the_tensor_engine_peak(target, dtype, k, m, n, repeat):
    r = nki.estimate(matmuls, target=target)(_shape(dtype, (k, m)), _shape(dtype, (repeat, k, n)))
    _check_engines_and_dma(r)
    t = table_for(r.target)
    assert r.flops == 2.0 * k * m * n * repeat
    assert r.flops <= t.peak_matmul_flops_per_ns() * r.busy_ns["tensor"] * SLACK
    assert r.flops <= t.peak_matmul_flops_per_ns() * r.instance_ns * SLACK
    assert math.isfinite(r.latency_ns) and r.latency_ns > 0
