"""Host memory of on-chip tiles follows the tiles live on the device: a tile allocated in each
iteration of an unrolled loop gives its host storage back once it is dead, on every backend,
with results and errors unchanged (``simulator/lifetimes.py``)."""

from __future__ import annotations

import tracemalloc
from dataclasses import replace

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import simulator.checks.capacity as capacity
from nki.errors import NKIMemoryError, NKIRuntimeError
from nki.ir import Alloc, Loop
from simulator.lifetimes import lifetimes

from backends import BACKENDS, run_backends
from helpers import expect, line_of
from helpers import randn as rand

SHAPE = (128, 512)  # 256 KiB of fp32 per tile


def unrolled(a, n):
    # current API: ``float(i % 3)`` needs the iterator's value, so the loop is unrolled and
    # each iteration allocates two tiles of its own, dead at the end of the iteration
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(acc, 0.0)
    for i in range(n):
        t = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(t, a)
        u = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(u, t, nl.multiply, float(i % 3))
        nisa.tensor_tensor(acc, acc, u, nl.add)
    nisa.dma_copy(out, acc)
    return out


def unrolled_want(a, n):
    acc = np.zeros(a.shape, np.float32)
    for i in range(n):
        acc = acc + a * np.float32(i % 3)
    return acc


def classic_unrolled(a, b, n):
    # classic API: a new accumulator tile and a PSUM tile per unrolled iteration
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.static_range(n):
        p = nl.matmul(nl.load(a), nl.load(b), transpose_x=True)
        acc = nl.add(acc, nl.multiply(p, float(i % 3)))
    nl.store(out, acc)
    return out


def classic_want(a, b, n):
    p = (a.astype(np.float64).T @ b.astype(np.float64)).astype(np.float32)
    acc = np.zeros((128, 512), np.float32)
    for i in range(n):
        acc = acc + p * np.float32(i % 3)
    return acc


def _peak(launch, *args) -> tuple[int, np.ndarray]:
    """Peak bytes NumPy and Python allocate during one launch (traced and compiled before)."""
    launch(*args)
    tracemalloc.start()
    try:
        got = launch(*args)
        return tracemalloc.get_traced_memory()[1], got
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("backend", [*BACKENDS, "numpy-full"])
def test_unrolled_tiles_take_host_memory_of_one_iteration(backend):
    a = rand(SHAPE)
    full = backend == "numpy-full"  # (the interpreter with its shadows of written elements)
    opts = {"backend": "numpy", "checks": "full"} if full else {"backend": backend}
    k = nki.jit(unrolled).configure(**opts)
    peaks = {}
    for n in (8, 32):
        peaks[n], got = _peak(k, a, n)
        assert k.last_run.backend == opts["backend"], k.last_run.reason
        np.testing.assert_array_equal(got, unrolled_want(a, n))
    # 4x the trips (and 4x the tiles, 16 MiB of them at 32) within 1.5x the memory
    assert peaks[32] < 1.5 * peaks[8], peaks
    assert peaks[32] < 8 * 2**20, peaks


@pytest.mark.parametrize("backend", BACKENDS)
def test_classic_unrolled_psum_tiles_take_host_memory_of_one_iteration(backend):
    a, b = rand((128, 128), seed=1), rand((128, 512), seed=2)
    k = nki.jit(classic_unrolled).configure(backend=backend)
    peaks = {}
    for n in (4, 16):
        peaks[n], got = _peak(k, a, b, n)
        np.testing.assert_allclose(got, classic_want(a, b, n), rtol=1e-5, atol=1e-4)
    assert peaks[16] < 1.5 * peaks[4], peaks


def test_results_stay_bit_identical_across_backends():
    a = rand(SHAPE, seed=3)
    runs = run_backends(nki.jit(unrolled), None, a, 12, ran=BACKENDS)
    np.testing.assert_array_equal(runs["numpy"], unrolled_want(a, 12))
    b, c = rand((128, 128), seed=4), rand((128, 512), seed=5)
    run_backends(nki.jit(classic_unrolled), None, b, c, 6, ran=BACKENDS)


def test_windows_end_at_the_last_access():
    k = nki.jit(unrolled)
    k(rand(SHAPE), 3)
    ir = k.last_ir
    lt = lifetimes(ir)
    acc, *per_iteration = [d.name for d in ir.tensors if d.on_chip and d.alias_of is None]
    # the accumulator lives from its allocation to the final copy; each iteration's two tiles
    # die within the iteration (before the next iteration's first allocation)
    per_iteration.sort(key=lambda t: lt.windows[t][0])
    assert len(per_iteration) == 6 and not lt.kept
    starts = [lt.windows[t][0] for t in per_iteration]
    ends = [lt.windows[t][1] for t in per_iteration]
    assert all(end < starts[i + 2] for i, end in enumerate(ends[:-2]))
    assert lt.windows[acc][1] > max(ends)


def stale_tile(a):
    out = nl.ndarray((4, 128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.sequential_range(4):
        u = nl.load(a[i])  # an allocation before t's: t of the last iteration is dead here
        t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        t[...] = nl.add(u, 1.0, mask=(i == 0))  # only the first iteration writes t
        nl.store(out[i], t)  # ERR
    return out


def test_carried_and_twice_allocated_tiles_are_kept():
    k = nki.jit(stale_tile)
    k(rand((4, 128, 8)))
    ir = k.last_ir
    (loop,) = [n for n in ir.body if isinstance(n, Loop)]
    store = loop.body[-1]
    t = store.srcs[0].tensor
    assert t in lifetimes(ir).windows and not lifetimes(ir).kept
    # the store moved before the loop body's allocations reads the previous iteration's t
    carried = replace(ir, body=(replace(loop, body=(store, *loop.body[:-1])),))
    assert lifetimes(carried).kept == {t} and t not in lifetimes(carried).windows
    alloc_t = next(n for n in loop.body if isinstance(n, Alloc) and n.tensor == t)
    twice = replace(ir, body=(replace(loop, body=(*loop.body, alloc_t)),))
    assert lifetimes(twice).kept == {t}


def test_reading_a_previous_iterations_tile_is_still_an_uninitialised_read():
    e = expect(
        stale_tile,
        rand((4, 128, 8)),
        checks="full",
        cls=NKIRuntimeError,
        code="err_uninitialized_read",
        values=["was never written before this instruction reads it", "(0, 0)"],
    )
    assert e.instance == ()


def all_live(a, n):
    out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    kept = []
    for i in nl.static_range(n):
        t = nl.add(nl.load(a), float(i))  # ERR
        kept.append(t)
    total = nl.zeros((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    for t in kept:  # every tile is read after the loop: all are live together
        total = nl.add(total, t[:, 0:8])
    nl.store(out, total)
    return out


def each_dead(a, n):
    out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    total = nl.zeros((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.static_range(n):
        t = nl.add(nl.load(a), float(i))
        total = nl.add(total, t[:, 0:8])
    nl.store(out, total)
    return out


def test_sbuf_capacity_still_counts_the_tiles_live_on_the_device():
    a = rand((128, 8192), seed=6)
    # 8 tiles of 32 KiB per partition live together do not fit trn3's SBUF (240 KiB)
    expect(
        all_live, a, 8, cls=NKIMemoryError, code="err_sbuf_capacity_exceeded",
        values=["SBUF capacity exceeded", "32768 B"],
    )  # fmt: skip
    # one at a time they do
    got = nki.jit(each_dead)(a, 8)
    want = np.zeros((128, 8), np.float32)
    for i in range(8):
        want = want + (a[:, 0:8] + np.float32(i))
    np.testing.assert_array_equal(got, want)


def test_host_memory_check_counts_the_live_tiles(monkeypatch):
    a = rand((128, 8192), seed=7)
    # 8 tiles of 4 MiB: 32 MiB together, 4 MiB (and the small ones) one at a time
    monkeypatch.setattr(capacity, "HOST_CHECK_MIN_BYTES", 0)
    monkeypatch.setattr(capacity, "host_available_bytes", lambda: 16 << 20)
    got = nki.jit(each_dead).configure(checks="none")(a, 8)
    assert got.shape == (128, 8)
    with pytest.raises(NKIMemoryError) as ei:
        nki.jit(all_live).configure(checks="none")(a, 8)
    e = ei.value
    assert e.code == "err_host_memory_exhausted", str(e)
    assert e.loc is not None and e.loc.line == line_of(all_live)
    assert "live on-chip tensors" in str(e) and "float32[128, 8192]" in str(e), str(e)
