"""The differential harness (tests/backends.py) runs every backend of the registry and fails when
one of them gives other bits, or another error, than the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.language as nl
from nki.errors import NKIError, NKIIndexError
from nki.ir import Instr
from simulator import (
    executors,
    launch,  # noqa: F401 - loads every backend
)
from simulator.batched import backend as batched_backend

from backends import BACKENDS, REFERENCE, run_backends


@nki.jit
def scaled(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    rows = slice(i * 128, (i + 1) * 128)
    nl.store(out[rows, :], value=nl.multiply(nl.load(a[rows, :]), 3.0))
    return out


@nki.jit
def doubled_in_place(a):
    i = nl.program_id(0)
    rows = slice(i * 128, (i + 1) * 128)
    nl.store(a[rows, :], value=nl.add(nl.load(a[rows, :]), nl.load(a[rows, :])))


@nki.jit
def reads_past_the_end(a, n):
    out = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    rows = nl.load(n)
    ip, jf = nl.arange(128)[:, None], nl.arange(a.shape[1])[None, :]
    nl.store(out, value=nl.load(a[rows[ip, 0], jf]))
    return out


def _break_batched_multiply(monkeypatch):
    """The batched backend's element-wise executor, one ulp off for multiplies."""
    right = executors.entry_of(Instr("ew", "multiply", None, ()), "batched").run

    def off_by_one_ulp(instr, ctx):
        right(instr, ctx)
        if instr.op == "multiply":
            t = ctx.arrays[instr.dst.tensor]
            t[...] = np.nextafter(t, np.float32(np.inf))

    monkeypatch.setitem(executors._RUNS["batched"], ("ew", "*"), off_by_one_ulp)
    _forget_executors(monkeypatch)


def _forget_executors(monkeypatch):
    """Forget the executors found so far (the registry's and the batched walks' caches)."""
    monkeypatch.setattr(executors, "_ENTRIES", {})
    monkeypatch.setattr(executors, "_RESOLVED", {})
    monkeypatch.setattr(batched_backend, "_READY", {})


def test_every_backend_runs_and_agrees():
    a = np.random.default_rng(0).standard_normal((256, 32)).astype(np.float32)
    r = run_backends(scaled, 2, a, ran=("batched",))
    assert set(r.results) == set(BACKENDS)
    np.testing.assert_array_equal(r[REFERENCE], a * np.float32(3))
    got = run_backends(doubled_in_place, 2, make_args=lambda: (a.copy(),)).arguments
    for b in BACKENDS:
        np.testing.assert_array_equal(got[b][0], a + a)


def test_a_backend_with_other_bits_fails(monkeypatch):
    a = np.random.default_rng(1).standard_normal((256, 32)).astype(np.float32)
    _break_batched_multiply(monkeypatch)
    k = scaled.configure(backend="batched")
    k[2](a)
    assert k.last_run.backend == "batched"  # (the broken executor really ran)
    with pytest.raises(AssertionError, match="output 0 of batched differs from numpy's"):
        run_backends(scaled, 2, a)


def test_the_same_error_everywhere_is_the_references():
    a = np.zeros((100, 8), np.float32)
    n = np.full((128, 1), 100, np.int32)
    with pytest.raises(NKIIndexError) as e:
        run_backends(reads_past_the_end, None, a, n)
    assert e.value.code == "err_tensor_access_out_of_bound"


def test_an_error_on_one_backend_only_fails(monkeypatch):
    def fails(instr, ctx):
        raise NKIError("a broken executor", code="err_internal")

    monkeypatch.setitem(executors._RUNS["batched"], ("ew", "*"), fails)
    _forget_executors(monkeypatch)
    a = np.ones((256, 32), np.float32)
    with pytest.raises(AssertionError, match=r"only \['batched'\] raised"):
        run_backends(scaled, 2, a)
