"""Tracing is per thread: kernels traced at the same time in two threads do not see each
other's trace state (the trace stack is thread-local)."""

from __future__ import annotations

import threading

import numpy as np

import nki
import nki.language as nl

from helpers import run_threads


def _kernels(barrier: threading.Barrier):
    """Two different kernels that both stop mid-trace until the other is tracing too."""

    @nki.jit
    def add_then_scale(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        s = nl.add(nl.load(a), nl.load(b))
        barrier.wait(timeout=10)  # the other thread is now inside its own trace
        nl.store(out, value=nl.multiply(s, 3.0))
        return out

    @nki.jit
    def row_max_in_loop(x):
        out = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(x.shape[0] // 32):
            t = nl.load(x[i * 32 : i * 32 + 32, :])
            if i is not None:  # trace time: wait once, inside the symbolic loop
                barrier.wait(timeout=10)
            nl.store(out[i * 32 : i * 32 + 32, :], value=nl.max(t, axis=1, keepdims=True))
        return out

    return add_then_scale, row_max_in_loop


def test_two_threads_trace_at_once():
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((128, 64), np.float32), rng.standard_normal((128, 64), np.float32)
    x = rng.standard_normal((64, 96), np.float32)
    barrier = threading.Barrier(2)
    k1, k2 = _kernels(barrier)
    results: dict[str, object] = {}

    def run(name, fn, *args):
        try:
            results[name] = fn(*args)
        except BaseException as e:  # reported by the assertions below
            results[name] = e
            barrier.abort()

    threads = [
        threading.Thread(target=run, args=("add", k1, a, b)),
        threading.Thread(target=run, args=("max", k2, x)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    for name in ("add", "max"):
        assert not isinstance(results[name], BaseException), repr(results[name])
    np.testing.assert_allclose(results["add"], (a + b) * 3.0, rtol=1e-6)
    np.testing.assert_array_equal(results["max"], x.max(axis=1, keepdims=True))


def test_trace_stack_is_empty_in_a_new_thread():
    """A thread started while another thread is tracing is not inside a kernel."""
    seen: list[bool] = []

    @nki.jit
    def k(a):
        th = threading.Thread(target=lambda: seen.append(nki.tracer.tracing()))
        th.start()
        th.join()
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out

    a = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    np.testing.assert_array_equal(k(a), a)
    assert seen == [False]


def test_one_kernel_called_from_many_threads():
    """Eight threads call one kernel with different scalars while Python switches threads as
    often as it can; every result matches NumPy and nothing is reported."""

    @nki.jit
    def scale(x, s):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(x.shape[0] // 64):
            t = nl.load(x[i * 64 : (i + 1) * 64, :])
            nl.store(out[i * 64 : (i + 1) * 64, :], value=nl.multiply(t, s))
        return out

    x = np.random.default_rng(3).standard_normal((128, 32)).astype(np.float32)
    failures: list[str] = []

    def run(tid: int) -> None:
        for j in range(8):
            s = float(tid * 10 + j)
            try:
                got = scale(x, s)
            except Exception as e:  # noqa: BLE001 - collected and asserted below
                failures.append(f"s={s}: {e!r}")
                continue
            if not np.array_equal(got, x * np.float32(s)):
                failures.append(f"s={s}: wrong result")

    run_threads(run, 8)
    assert not failures, failures[:5]
    # the cache holds only correct traces afterwards
    for s in (1.5, -2.0, 7.0):
        np.testing.assert_array_equal(scale(x, s), x * np.float32(s))


def _scale_kernel():
    @nki.jit
    def scale(x, s):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.multiply(nl.load(x), s))
        return out

    return scale


def test_negative_zero_static_arg_is_its_own_trace():
    scale = _scale_kernel()
    x = np.ones((4, 8), np.float32)
    assert not np.signbit(scale(x, 0.0)).any()
    got = scale(x, -0.0)
    assert np.signbit(got).all() and (got == 0).all()
    assert scale.trace_count == 2


def test_nan_static_arg_traces_once():
    scale = _scale_kernel()
    x = np.ones((4, 8), np.float32)
    for _ in range(3):
        assert np.isnan(scale(x, float("nan"))).all()
    assert scale.trace_count == 1


def test_threads_by_kernels_by_shapes_stress():
    """Six threads call three kernels on three shapes with distinct scalars, with Python
    switching threads as often as it can; every result is compared with NumPy."""

    @nki.jit
    def mul(x, s):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.multiply(nl.load(x), s))
        return out

    @nki.jit
    def add_rowmax(x, s):
        out = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.add(nl.load(x), s)
        nl.store(out, value=nl.max(t, axis=1, keepdims=True))
        return out

    @nki.jit
    def tiled_sub(x, s):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(x.shape[1] // 8):
            t = nl.load(x[:, i * 8 : (i + 1) * 8])
            nl.store(out[:, i * 8 : (i + 1) * 8], value=nl.subtract(t, s))
        return out

    refs = {
        "mul": (mul, lambda x, s: x * np.float32(s)),
        "add_rowmax": (add_rowmax, lambda x, s: (x + np.float32(s)).max(axis=1, keepdims=True)),
        "tiled_sub": (tiled_sub, lambda x, s: x - np.float32(s)),
    }
    rng = np.random.default_rng(11)
    shapes = [(32, 16), (64, 8), (128, 24)]
    xs = [rng.standard_normal(sh).astype(np.float32) for sh in shapes]
    failures: list[str] = []

    def run(tid: int) -> None:
        for j in range(6):
            s = float(tid * 100 + j) * (-1) ** j
            for name, (k, ref) in refs.items():
                x = xs[(tid + j) % len(xs)]
                try:
                    got = k(x, s)
                except Exception as e:  # noqa: BLE001 - collected and asserted below
                    failures.append(f"{name} s={s}: {e!r}")
                    continue
                if not np.array_equal(got, ref(x, s)):
                    failures.append(f"{name} {x.shape} s={s}: wrong result")

    run_threads(run, 6)
    assert not failures, failures[:5]
    # each (kernel, shape, scalar) was traced exactly once
    assert mul.trace_count + add_rowmax.trace_count + tiled_sub.trace_count == len(
        {
            (name, xs[(t + j) % 3].shape, float(t * 100 + j) * (-1) ** j)
            for t in range(6)
            for j in range(6)
            for name in refs
        }
    )
