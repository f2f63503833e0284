"""Cyclic garbage collection is paused while kernels are traced (``nki/collection.py``): one
pause shared by every thread's traces, which ends with the last of them, and never leaves
collection off when it was on."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import nki
import nki.language as nl
from nki.collection import paused

from helpers import run_threads


@pytest.fixture(autouse=True)
def _collection_on():
    assert gc.isenabled(), "an earlier test left garbage collection off"
    yield
    gc.enable()


def test_a_trace_pauses_collection_and_resumes_it():
    seen = []

    @nki.jit
    def double(a):
        seen.append(gc.isenabled())
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.multiply(nl.load(a), 2.0))
        return out

    @nki.jit
    def broken(a):
        seen.append(gc.isenabled())
        return nl.load(a[0:4, 0:4, 0:4])  # (three indices on a 2-D tensor: a located error)

    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    np.testing.assert_array_equal(double(a), a * 2)
    assert seen == [False] and gc.isenabled()
    with pytest.raises(nki.NKIError) as e:
        broken(a)
    assert "test_trace_collection.py" in str(e.value)
    assert seen == [False, False] and gc.isenabled()


def test_collection_off_before_a_trace_stays_off():
    seen = []

    @nki.jit
    def copy(a):
        seen.append(gc.isenabled())
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out

    a = np.ones((8, 8), dtype=np.float32)
    gc.disable()
    np.testing.assert_array_equal(copy(a), a)
    assert seen == [False] and not gc.isenabled()
    gc.enable()
    with paused():  # (the pause's own state is back to none running)
        assert not gc.isenabled()
    assert gc.isenabled()


def test_nested_pauses_end_with_the_outer_one():
    with paused():
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), paused():
        raise ValueError("inside")
    assert gc.isenabled()


def test_overlapping_traces_in_two_threads_share_one_pause():
    # thread 1's trace ends while thread 2's goes on: collection stays off until thread 2's
    # ends, and is on after both (each trace restoring what it saw could leave it off)
    first_done, second_started = threading.Event(), threading.Event()
    seen: dict[str, list[bool]] = {"one": [], "two": []}

    @nki.jit
    def one(a):
        second_started.wait(timeout=10)
        seen["one"].append(gc.isenabled())
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(nl.load(a), 1.0))
        return out

    @nki.jit
    def two(a):
        second_started.set()
        first_done.wait(timeout=10)  # (thread 1's trace and launch have ended)
        seen["two"].append(gc.isenabled())
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(nl.load(a), 2.0))
        return out

    a = np.zeros((4, 8), dtype=np.float32)
    got = {}

    def run(i: int) -> None:
        if i == 0:
            try:
                got[0] = one(a)
            finally:
                first_done.set()
        else:
            got[1] = two(a)

    run_threads(run, 2)
    np.testing.assert_array_equal(got[0], a + 1)
    np.testing.assert_array_equal(got[1], a + 2)
    assert seen == {"one": [False], "two": [False]}
    assert gc.isenabled()


def test_many_threads_tracing_leave_collection_on():
    got = {}

    def work(i: int) -> None:
        @nki.jit
        def scale(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=nl.multiply(nl.load(a), float(i)))
            return out

        a = np.full((4, 4 + i % 3), 1.0, dtype=np.float32)
        got[i] = ([scale(a) for _ in range(2)], a * i)

    run_threads(work, 8)
    assert sorted(got) == list(range(8))
    for outs, want in got.values():
        for g in outs:
            np.testing.assert_array_equal(g, want)
    assert gc.isenabled()
