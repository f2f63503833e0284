"""Runtime loops of the current API (nl.fori_loop, nl.while_loop), executed per iteration in
the interpreter and checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.language as nl
from nki.errors import NKIError, RemovedFormWarning
from nki.isa.registers import register_alloc, register_load, register_store

import backends
from helpers import line_of

RNG = np.random.default_rng(7)


def _run(kernel, *args):
    return np.asarray(nki.simulate_kernel(kernel, *args))


@nki.jit
def k_fori_static(x):
    # out row i = x row i * 2, for i in range(1, 7, 2); rows read with the register offset
    out = nl.ndarray((8, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    zero = nl.zeros((8, 64), dtype=x.dtype)
    nl.store(out, zero)

    def body(i):
        row = nl.load(x.ap([[64, 1], [1, 64]], offset=0, scalar_offset=i))
        nl.store(out.ap([[64, 1], [1, 64]], offset=0, scalar_offset=i), nl.multiply(row, 2.0))

    nl.fori_loop(1, 7, body, step=2)
    return out


def test_fori_loop_with_int_bounds_matches_numpy():
    x = RNG.standard_normal((8, 64)).astype(np.float32)
    want = np.zeros_like(x)
    want[1:7:2] = 2 * x[1:7:2]
    np.testing.assert_array_equal(_run(k_fori_static, x), want)


@nki.jit
def k_fori_dynamic(x, n):
    # a prefix sum over the first n[0, 0] rows (n read at run time into a register)
    out = nl.ndarray((1, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((1, 64), dtype=nl.float32)
    nb = nl.load(n)
    ub = register_alloc()
    register_load(ub, nb)

    def body(i):
        row = nl.load(x.ap([[64, 1], [1, 64]], offset=0, scalar_offset=i))
        acc[...] = nl.add(acc, row)

    nl.fori_loop(0, ub, body)
    nl.store(out, acc)
    return out


@pytest.mark.parametrize("n", [0, 1, 5, 16])
def test_fori_loop_with_register_bound_runs_the_runtime_trip_count(n):
    x = RNG.standard_normal((16, 64)).astype(np.float32)
    got = _run(k_fori_dynamic, x, np.array([[n]], dtype=np.int32))
    np.testing.assert_allclose(got, x[:n].sum(axis=0, keepdims=True), rtol=1e-5, atol=1e-6)


def test_fori_loop_register_bound_out_of_range_reports_the_body_line():
    x = RNG.standard_normal((16, 64)).astype(np.float32)
    with pytest.raises(NKIError, match="out-of-bound") as e:
        _run(k_fori_dynamic, x, np.array([[17]], dtype=np.int32))
    assert e.value.loc.line == line_of(k_fori_dynamic.fn, "row = nl.load")


@nki.jit
def k_while(x, n):
    # halve a tile while the countdown register (starting at n) is non-zero
    out = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.sbuf)
    t[...] = nl.load(x)
    cnt = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    cnt[...] = nl.load(n)
    r = register_alloc()
    register_load(r, cnt)

    def body(c):
        t[...] = nl.multiply(t, 0.5)
        register_store(cnt, c)
        cnt[...] = nl.subtract(cnt, 1, dtype=nl.int32)
        nxt = register_alloc()
        register_load(nxt, cnt)
        return nxt

    nl.while_loop(r, body)
    nl.store(out, t)
    return out


@pytest.mark.parametrize("n", [0, 1, 3])
def test_while_loop_matches_numpy(n):
    x = RNG.standard_normal((128, 32)).astype(np.float32)
    got = _run(k_while, x, np.array([[n]], dtype=np.int32))
    np.testing.assert_array_equal(got, x * np.float32(0.5**n))


@nki.jit
def k_while_register(x, n):
    # the NKI 0.4-0.6 form of k_while: `while reg:` tests the register before every trip
    out = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.sbuf)
    t[...] = nl.load(x)
    cnt = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    cnt[...] = nl.load(n)
    r = register_alloc()
    register_load(r, cnt)
    while r:  # WHILE
        t[...] = nl.add(nl.multiply(t, 0.5), 1.0)
        cnt[...] = nl.subtract(cnt, 1, dtype=nl.int32)
        register_load(r, cnt)
    nl.store(out, nl.multiply(t, 3.0))
    return out


@pytest.mark.parametrize("n", [0, 1, 4])
def test_while_on_a_register_loops_on_the_device(n):
    x = RNG.standard_normal((128, 32)).astype(np.float32)
    want = x.copy()
    for _ in range(n):
        want = want * np.float32(0.5) + np.float32(1.0)
    runs = backends.run_backends(k_while_register, None, x, np.array([[n]], dtype=np.int32))
    np.testing.assert_array_equal(runs[backends.REFERENCE], want * np.float32(3.0))


def test_while_on_a_register_warns_that_nki_0_7_removed_it():
    x = np.zeros((128, 32), np.float32)
    with pytest.warns(RemovedFormWarning, match="use nl.while_loop") as w:
        nki.jit(k_while_register.fn)(x, np.array([[1]], dtype=np.int32))
    hit = [r for r in w if r.category is RemovedFormWarning]
    assert hit[0].lineno == line_of(k_while_register.fn, "# WHILE")


def test_break_in_a_while_on_a_register_is_located():
    @nki.jit
    def k(x, n):
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        r = register_alloc()
        register_load(r, nl.load(n))
        while r:
            if x.shape[0] == 1:
                break  # BREAK
            register_load(r, nl.load(n))
        register_store(out, r)
        return out

    with pytest.raises(NKIError, match="'break' inside a 'while reg:' loop") as e:
        _run(k, np.zeros((1, 1), np.int32), np.ones((1, 1), np.int32))
    assert e.value.loc.line == line_of(k, "# BREAK")


def test_if_on_a_register_stays_an_error():
    @nki.jit
    def k(x):
        r = register_alloc(1)
        if r:  # IF
            register_store(x, r)
        return x

    with pytest.raises(NKIError, match="cannot drive Python control flow") as e:
        _run(k, np.zeros((1, 1), np.int32))
    assert e.value.loc.line == line_of(k, "# IF")


@nki.jit
def k_while_forever(x):
    out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    r = register_alloc(1)

    def body(c):
        return c

    nl.while_loop(r, body)  # FOREVER
    register_store(out, r)
    return out


def test_non_terminating_while_loop_is_reported(monkeypatch):
    import nki.language.loops as loops

    monkeypatch.setattr(loops, "MAX_WHILE_ITERATIONS", 50)
    with pytest.raises(NKIError, match="does not terminate") as e:
        _run(k_while_forever, np.zeros((1, 1), np.int32))
    assert e.value.loc.line == line_of(k_while_forever.fn, "# FOREVER")


def test_fori_loop_rejects_a_non_int_step():
    @nki.jit
    def k(x):
        nl.fori_loop(0, 4, lambda i: None, step=0)  # STEP
        return x

    with pytest.raises(NKIError, match="positive int") as e:
        _run(k, np.zeros((1, 1), np.float32))
    assert e.value.loc.line == line_of(k, "# STEP")
