"""Symbolic loops in the current API: ``nl.affine_range`` / ``nl.sequential_range`` / ``range``
bodies are traced once with a symbolic iterator and give the same results as unrolling; a loop
is unrolled only where Python needs its iterator's int (an ``if`` that varies, ``min``,
``int``, a list index, a range bound, float arithmetic, formatting) or where its body carries
Python state to the next iteration (a counter, a list it appends to, a rebound tile, a
``break``). References: NumPy, and the same kernel with every loop ``nl.static_range``."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIDependencyError, NKIError
from nki.ir import Loop

P = 128
RNG = np.random.default_rng(23)


def _loops(ir) -> list[Loop]:
    return [n for n, _ in ir.walk() if isinstance(n, Loop)]


def _line(fn, mark: str) -> int:
    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, ln in enumerate(src) if mark in ln)


def _sb(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


# ---- traced once: the IR keeps the loop --------------------------------------------------------
def add_tiles(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in range(a.shape[0] // P):
        for j in nl.affine_range(a.shape[1] // 64):
            r, c = slice(i * P, (i + 1) * P), slice(j * 64, (j + 1) * 64)
            x, y = _sb((P, 64), a.dtype), _sb((P, 64), a.dtype)
            nisa.dma_copy(dst=x, src=a[r, c])
            nisa.dma_copy(dst=y, src=b[r, c])
            nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.add)
            nisa.dma_copy(dst=out[r, c], src=x)
    return out


def test_range_and_affine_range_bodies_are_traced_once():
    a, b = RNG.random((3 * P, 256), dtype=np.float32), RNG.random((3 * P, 256), dtype=np.float32)
    k = nki.jit(add_tiles)
    np.testing.assert_array_equal(k(a, b), a + b)
    loops = _loops(k.last_ir)
    assert [(lp.trip_count, lp.kind) for lp in loops] == [(3, "affine"), (4, "affine")]
    assert sum(1 for n, _ in k.last_ir.walk() if type(n).__name__ == "Instr") == 4
    assert k.trace_count == 1


def test_a_loop_outside_a_for_statement_is_a_range():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        rows = list(nl.affine_range(x.shape[0] // P))  # real ints
        for i, r in zip(range(len(rows)), rows):
            t = _sb((P, x.shape[1]))
            nisa.dma_copy(dst=t, src=x[r * P : (r + 1) * P, :])
            nisa.dma_copy(dst=out[i * P : (i + 1) * P, :], src=t)
        return out

    x = RNG.random((2 * P, 8), dtype=np.float32)
    assert rows_are_ints(kernel, x)
    np.testing.assert_array_equal(kernel(x), x)


def rows_are_ints(kernel, x) -> bool:
    kernel(x)
    return not _loops(kernel.last_ir)  # zip / list iterate real ints: nothing symbolic


# ---- where Python needs the int: the loop is unrolled ------------------------------------------
def ragged_rows(x):
    n, f = x.shape
    out = nl.ndarray((n, f), dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range((n + P - 1) // P):
        rows = min(P, n - t * P)  # MIN
        buf = _sb((P, f), x.dtype)
        nisa.dma_copy(dst=buf[0:rows, :], src=x[t * P : t * P + rows, :])
        nisa.dma_copy(dst=out[t * P : t * P + rows, :], src=buf[0:rows, :])
    return out


def test_min_on_the_iterator_unrolls_only_when_it_varies():
    k = nki.jit(ragged_rows)
    x = RNG.random((300, 16), dtype=np.float32)
    np.testing.assert_array_equal(k(x), x)
    assert not _loops(k.last_ir)  # 300 = 2 * 128 + 44: the last tile differs, unrolled
    x = RNG.random((256, 16), dtype=np.float32)
    np.testing.assert_array_equal(k(x), x)
    assert [lp.trip_count for lp in _loops(k.last_ir)] == [2]  # min() is 128 everywhere


def first_and_rest(x):
    """Row block 0 is copied, later blocks doubled: `if i == 0` decides per iteration."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for j in nl.affine_range(2):  # stays symbolic: nothing needs j's int
        for i in nl.sequential_range(x.shape[0] // P):
            t = _sb((P, 32), x.dtype)
            nisa.dma_copy(dst=t, src=x[i * P : (i + 1) * P, j * 32 : (j + 1) * 32])
            if i > 0:  # IF
                nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
            nisa.dma_copy(dst=out[i * P : (i + 1) * P, j * 32 : (j + 1) * 32], src=t)
    return out


def test_if_on_the_iterator_unrolls_that_loop_only():
    k = nki.jit(first_and_rest)
    x = RNG.random((3 * P, 64), dtype=np.float32)
    want = np.concatenate([x[:P], 2 * x[P:]])
    np.testing.assert_array_equal(k(x), want)
    assert [(lp.sym.name, lp.trip_count) for lp in _loops(k.last_ir)] == [("j", 2)]


def picks(x, w):
    """A Python list of tiles indexed by the iterator, int() and a range() bound on it."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    scales = [1.0, 2.0, 3.0]
    for i in nl.affine_range(3):
        t = _sb((P, x.shape[1]), x.dtype)
        nisa.dma_copy(dst=t, src=x[i * P : (i + 1) * P, :])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=scales[i])  # LIST
        for _ in range(int(i)):  # INT
            nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=out[i * P : (i + 1) * P, :], src=t)
    return out


def test_list_index_int_and_range_bound_unroll():
    x = RNG.random((3 * P, 8), dtype=np.float32)
    k = nki.jit(picks)
    want = np.concatenate([x[i * P : (i + 1) * P] * (i + 1) + i for i in range(3)])
    np.testing.assert_array_equal(k(x, None), want)
    # the outer loop unrolled; the inner range(i) loops of i = 1, 2 are traced once each, in
    # order (each iteration updates t in place)
    assert [(lp.trip_count, lp.kind) for lp in _loops(k.last_ir)] == [
        (1, "sequential"),
        (2, "sequential"),
    ]


def test_float_arithmetic_and_formatting_need_the_int():
    seen = []

    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(x.shape[0] // P):
            t = _sb((P, x.shape[1]), x.dtype)
            nisa.memset(dst=t, value=0.5 * i + 1.0)  # a float: unrolled
            seen.append(f"{i}")
            nisa.dma_copy(dst=out[i * P : (i + 1) * P, :], src=t)
        return out

    x = np.zeros((3 * P, 4), np.float32)
    got = kernel(x)
    np.testing.assert_array_equal(got, np.repeat([1.0, 1.5, 2.0], P)[:, None] * np.ones((1, 4)))
    assert seen[-3:] == ["0", "1", "2"]


def test_what_the_kernel_prints_is_printed_once_when_the_trace_restarts(capsys):
    @nki.jit
    def kernel(x):
        print("start")
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(x.shape[0] // P):
            print("tile", i)  # needs the int: the trace restarts with the loop unrolled
            t = _sb((P, x.shape[1]), x.dtype)
            nisa.dma_copy(dst=t, src=x[i * P : (i + 1) * P, :])
            nisa.dma_copy(dst=out[i * P : (i + 1) * P, :], src=t)
        return out

    x = RNG.random((2 * P, 4), dtype=np.float32)
    np.testing.assert_array_equal(kernel(x), x)
    assert capsys.readouterr().out == "start\ntile 0\ntile 1\n"


def test_affine_arithmetic_and_exact_division_stay_symbolic():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((x.shape[0] // 2, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(x.shape[0] // (2 * P)):
            k = (4 * i + 2) // 2  # exact: 2 * i + 1
            r = (6 * i + 3) % 3  # 0
            t = _sb((P, x.shape[1]), x.dtype)
            nisa.dma_copy(dst=t, src=x[(k + r) * P : (k + r + 1) * P, :])
            nisa.dma_copy(dst=out[((k - 1) // 2) * P : ((k + 1) // 2) * P, :], src=t)
        return out

    x = RNG.random((4 * P, 8), dtype=np.float32)
    got = kernel(x)
    np.testing.assert_array_equal(got, np.concatenate([x[P : 2 * P], x[3 * P :]]))
    assert [lp.trip_count for lp in _loops(kernel.last_ir)] == [2]


# ---- Python state carried from one iteration to the next --------------------------------------
def offsets(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    off = 0
    tiles = []
    for _ in nl.affine_range(x.shape[0] // P):
        t = _sb((P, x.shape[1]), x.dtype)
        nisa.dma_copy(dst=t, src=x[off : off + P, :])
        tiles.append(t)
        off += P
    for i, t in enumerate(reversed(tiles)):
        nisa.dma_copy(dst=out[i * P : (i + 1) * P, :], src=t)
    return out


def test_a_counter_and_a_list_carried_across_iterations_unroll_the_loop():
    x = RNG.random((3 * P, 8), dtype=np.float32)
    k = nki.jit(offsets)
    np.testing.assert_array_equal(k(x), np.concatenate([x[2 * P :], x[P : 2 * P], x[:P]]))


def rebound_sum(x):
    """acc = nl.add(acc, t): a new tile each iteration, the next one reads it."""
    acc = nl.zeros((P, x.shape[1]), dtype=nl.float32)
    for i in nl.affine_range(x.shape[0] // P):
        t = nl.load(x[i * P : (i + 1) * P, :])
        acc = nl.add(acc, t)
    out = nl.ndarray((P, x.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, acc)
    return out


def test_a_rebound_accumulator_is_summed_in_program_order():
    x = RNG.random((4 * P, 8), dtype=np.float32)
    k = nki.jit(rebound_sum)
    want = x[:P] + x[P : 2 * P] + x[2 * P : 3 * P] + x[3 * P :]
    np.testing.assert_allclose(k(x), want, rtol=1e-6)
    assert k.last_ir.generation == "current"


def test_break_unrolls_and_leaves_the_loop():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        for i in nl.affine_range(3):
            t = _sb((P, x.shape[1]), x.dtype)
            nisa.memset(dst=t, value=7.0)
            nisa.dma_copy(dst=out[i * P : (i + 1) * P, :], src=t)
            break
        return out

    x = RNG.random((3 * P, 4), dtype=np.float32)
    got = kernel(x)
    np.testing.assert_array_equal(got[:P], np.full((P, 4), 7.0, np.float32))
    np.testing.assert_array_equal(got[P:], x[P:])


def test_a_value_of_the_loop_used_after_it_is_the_last_iterations():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((P, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(x.shape[0] // P):
            last = x[i * P : (i + 1) * P, :]
        t = _sb((P, x.shape[1]), x.dtype)
        nisa.dma_copy(dst=t, src=last)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = RNG.random((3 * P, 4), dtype=np.float32)
    np.testing.assert_array_equal(kernel(x), x[2 * P :])


def test_a_tile_created_in_the_loop_and_used_after_it_is_the_last_iterations():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((P, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in range(x.shape[0] // P):
            t = _sb((P, x.shape[1]), x.dtype)
            nisa.dma_copy(dst=t, src=x[i * P : (i + 1) * P, :])
        nisa.dma_copy(dst=out, src=t)  # (Python's: the last iteration's tile)
        return out

    x = RNG.random((4 * P, 4), dtype=np.float32)
    np.testing.assert_array_equal(kernel(x), x[3 * P :])


# ---- memory carried across iterations: program order ------------------------------------------
def prefix_rows(x):
    """Row block i of the output = row block i of x + the output's block i - 1 (written by the
    previous iteration): an HBM dependency across affine_range iterations."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = _sb((P, x.shape[1]), x.dtype)
    nisa.dma_copy(dst=t, src=x[0:P, :])
    nisa.dma_copy(dst=out[0:P, :], src=t)
    for i in nl.affine_range(1, x.shape[0] // P):
        a, b = _sb((P, x.shape[1]), x.dtype), _sb((P, x.shape[1]), x.dtype)
        nisa.dma_copy(dst=a, src=x[i * P : (i + 1) * P, :])
        nisa.dma_copy(dst=b, src=out[(i - 1) * P : i * P, :])
        nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
        nisa.dma_copy(dst=out[i * P : (i + 1) * P, :], src=a)
    return out


def test_an_iteration_reading_an_earlier_ones_output_runs_in_order():
    x = RNG.random((4 * P, 8), dtype=np.float32)
    k = nki.jit(prefix_rows)
    want = np.cumsum(x.reshape(4, P, 8), axis=0).reshape(4 * P, 8)
    np.testing.assert_allclose(k(x), want, rtol=1e-6)
    assert [lp.kind for lp in _loops(k.last_ir)] == ["sequential"]


def running_sum(x):
    out = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = _sb((P, 1))
    nisa.memset(dst=acc, value=0.0)
    for b in nl.affine_range(x.shape[1] // 100):
        t, s = _sb((P, 100)), _sb((P, 1))
        nisa.dma_copy(dst=t, src=x[:, b * 100 : (b + 1) * 100])
        nisa.tensor_reduce(dst=s, op=nl.add, data=t, axis=1)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=s, op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_an_sbuf_accumulator_across_affine_range_iterations_runs_in_order():
    x = RNG.random((P, 500), dtype=np.float32)
    k = nki.jit(running_sum)
    want = np.zeros((P, 1), np.float32)
    for b in range(5):
        want += x[:, b * 100 : (b + 1) * 100].sum(axis=1, keepdims=True, dtype=np.float32)
    np.testing.assert_allclose(k(x), want, rtol=1e-5)
    assert [lp.kind for lp in _loops(k.last_ir)] == ["sequential"]
    np.testing.assert_allclose(k.configure(checks="full")(x), want, rtol=1e-5)


def same_row(x):
    out = nl.ndarray((P, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // P):
        t = _sb((P, x.shape[1]), x.dtype)
        nisa.dma_copy(dst=t, src=x[i * P : (i + 1) * P, :])
        nisa.dma_copy(dst=out, src=t)  # SAME
    return out


def test_affine_range_iterations_writing_one_hbm_element_is_an_error():
    with pytest.raises(NKIDependencyError) as e:
        nki.jit(same_row)(RNG.random((2 * P, 4), dtype=np.float32))
    assert e.value.code == "err_unexpected_output_dependencies"
    assert e.value.loc.line == _line(same_row, "# SAME")


def test_the_hbm_write_conflict_is_reported_even_when_the_loop_carries_an_accumulator():
    def both(x):
        out = nl.ndarray((P, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
        acc = _sb((P, x.shape[1]))
        nisa.memset(dst=acc, value=0.0)
        for i in nl.affine_range(x.shape[0] // P):
            t = _sb((P, x.shape[1]))
            nisa.dma_copy(dst=t, src=x[i * P : (i + 1) * P, :])
            nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)  # carried in SBUF
            nisa.dma_copy(dst=out, src=acc)  # SAME
        return out

    with pytest.raises(NKIDependencyError) as e:
        nki.jit(both)(RNG.random((2 * P, 4), dtype=np.float32))
    assert e.value.code == "err_unexpected_output_dependencies"
    assert e.value.loc.line == _line(both, "# SAME")


def test_the_same_writes_in_a_range_loop_are_program_order():
    def last_wins(x):
        out = nl.ndarray((P, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in range(x.shape[0] // P):
            t = _sb((P, x.shape[1]), x.dtype)
            nisa.dma_copy(dst=t, src=x[i * P : (i + 1) * P, :])
            nisa.dma_copy(dst=out, src=t)
        return out

    x = RNG.random((3 * P, 4), dtype=np.float32)
    k = nki.jit(last_wins)
    np.testing.assert_array_equal(k(x), x[2 * P :])
    assert [lp.kind for lp in _loops(k.last_ir)] == ["sequential"]


def test_a_loop_too_large_to_unroll_is_named(monkeypatch):
    monkeypatch.setattr("nki.tracer.loops.MAX_UNROLLED_ITERATIONS", 100)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(x.shape[0]):  # BIG
            if i % 7 == 3:
                t = _sb((1, x.shape[1]), x.dtype)
                nisa.dma_copy(dst=t, src=x[i : i + 1, :])
                nisa.dma_copy(dst=out[i : i + 1, :], src=t)
        return out

    with pytest.raises(NKIError) as e:
        nki.jit(kernel)(np.zeros((1000, 4), np.float32))
    err = e.value
    assert err.code == "err_loop_too_large_to_unroll"
    assert err.loc.line == _line(kernel, "# BIG")
    assert "'i'" in str(err) and "1000 iterations" in str(err) and "'%'" in str(err)


# ---- Python numbers with program ids and loop iterators ---------------------------------------
def fill_core_ids(x):
    out = nl.ndarray((2 * P, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    t = _sb((P, 4))
    nisa.memset(dst=t, value=10.0 * nl.num_programs() + nl.program_id(0))
    nisa.dma_copy(dst=out[nl.program_id(0) * P : (nl.program_id(0) + 1) * P, :], src=t)
    return out


def test_python_float_arithmetic_with_program_ids_runs_per_core():
    got = nki.jit(fill_core_ids)[2](np.zeros((1, 1), np.float32))
    np.testing.assert_array_equal(got[:P], np.full((P, 4), 20.0, np.float32))
    np.testing.assert_array_equal(got[P:], np.full((P, 4), 21.0, np.float32))


def test_in_a_classic_grid_float_arithmetic_with_a_program_id_is_a_located_error():
    def kernel(x):
        out = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        v = 0.5 * nl.program_id(0)  # FLOAT
        t = nisa.memset((1, 4), v, nl.float32)
        nl.store(out[nl.program_id(0), :], t)
        return out

    with pytest.raises(NKIError) as e:
        nki.jit(kernel)[4](np.zeros((1, 1), np.float32))
    assert e.value.code == "err_unsupported_index_expression"
    assert e.value.loc.line == _line(kernel, "# FLOAT")
    assert "float" in str(e.value)


def test_in_a_classic_grid_dividing_a_program_id_is_a_located_error_with_grid_advice():
    def kernel(x):
        out = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        g = nl.program_id(1) // 2  # DIV
        nl.store(out[nl.program_id(1), :], nl.load(x[g, :]))
        return out

    with pytest.raises(NKIError) as e:
        nki.jit(kernel)[1, 4](np.zeros((4, 4), np.float32))
    assert e.value.code == "err_unsupported_index_expression"
    assert e.value.loc.line == _line(kernel, "# DIV")
    assert "grid axes of their own" in str(e.value)
    assert "NKI_CLASSIC" not in str(e.value)  # (classic mode unrolls loops, not grids)


# ---- property: symbolic loops give what unrolling gives --------------------------------------
def _build(outer: str, inner: str, n_o: int, n_i: int, step: int, carry: bool, use_if: bool):
    """A kernel over a (n_o * P, n_i * 8 * step) input with loops of the given kinds; every
    loop "static" is the unrolled reference."""
    loops = {
        "affine": nl.affine_range,
        "sequential": nl.sequential_range,
        "range": nl.range,
        "static": nl.static_range,
    }
    lo, li = loops[outer], loops[inner]

    def kernel(x):
        out = nl.ndarray((n_o * P, n_i * 8), dtype=nl.float32, buffer=nl.shared_hbm)
        for o in lo(n_o):
            acc = _sb((P, 8))
            nisa.memset(dst=acc, value=0.0)
            for j in li(n_i):
                t = _sb((P, 8))
                nisa.dma_copy(dst=t, src=x[o * P : (o + 1) * P, j * 8 * step : j * 8 * step + 8])
                if use_if and j == 1:
                    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=-1.0)
                if carry:
                    nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
                    nisa.dma_copy(dst=out[o * P : (o + 1) * P, j * 8 : (j + 1) * 8], src=acc)
                else:
                    nisa.dma_copy(dst=out[o * P : (o + 1) * P, j * 8 : (j + 1) * 8], src=t)
        return out

    return kernel


@settings(max_examples=25, deadline=None)
@given(
    outer=st.sampled_from(["affine", "sequential", "range"]),
    inner=st.sampled_from(["affine", "sequential", "range"]),
    n_o=st.integers(1, 3),
    n_i=st.integers(1, 4),
    step=st.integers(1, 3),
    carry=st.booleans(),
    use_if=st.booleans(),
)
def test_symbolic_loops_match_unrolled_loops(outer, inner, n_o, n_i, step, carry, use_if):
    x = RNG.standard_normal((n_o * P, n_i * 8 * step)).astype(np.float32)
    sym = nki.jit(_build(outer, inner, n_o, n_i, step, carry, use_if))
    ref = nki.jit(_build("static", "static", n_o, n_i, step, carry, use_if))
    got, want = sym(x), ref(x)
    np.testing.assert_array_equal(got, want)
    assert not _loops(ref.last_ir)
    if n_o > 1:  # the outer loop never needs its int: traced once
        assert any(lp.trip_count == n_o for lp in _loops(sym.last_ir))
