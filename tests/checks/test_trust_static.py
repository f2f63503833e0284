"""Diagnostics users can trust, found before the kernel runs (issue 13): static messages name the
user's variables, kernels the simulator would otherwise run wrongly without saying so are
located errors, and legal accumulate-on-write DMAs are not reported as races."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError

from helpers import expect, line_of

X = np.ones((128, 8), np.float32)


# ---- static out-of-bounds and race messages name the user's variable -----------------------


def _oob_local(x):
    out = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(2):
        nl.store(out, value=buf[:, i * 8 : i * 8 + 8])  # ERR
    return out


def test_static_out_of_bounds_names_the_sbuf_variable():
    e = expect(_oob_local, X, code="err_tensor_access_out_of_bound", values=["'buf'", "[0, 15]"])
    assert "sb" not in e.message.split("tensor ")[1].split(" ")[0]


def _oob_unnamed(x):
    out = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        nl.store(out, value=nl.load(x)[:, i * 8 : i * 8 + 8])  # ERR
    return out


def test_static_out_of_bounds_of_an_unnamed_tile_gives_the_line_that_created_it():
    e = expect(_oob_unnamed, X, code="err_tensor_access_out_of_bound")
    assert f"(created at line {line_of(_oob_unnamed)})" in e.message


def _loop_carried(x):
    result = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for step in nl.affine_range(4):  # noqa: B007 (the loop variable named in the message)
        nl.store(result[0:128, :], value=nl.load(x))  # ERR
    return result


def test_loop_carried_dependency_names_the_output_and_the_loop_variable():
    e = expect(_loop_carried, X, code="err_unexpected_output_dependencies", values=["'result'"])
    assert "'result[i0, i1]'" in e.message
    assert "'step'" in e.message


def _race(x):
    shared = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(shared, value=nl.load(x))  # ERR
    return shared


def test_spmd_race_names_the_output():
    # kernel[2] of a current-API kernel is two cores: the SPMD grid of the classic API here
    e = expect(_race, X, code="err_spmd_write_race", values=["'shared'"], grid=2, api="classic")
    assert "hbm" not in e.message.split("tensor ")[1].split(" ")[0]


# ---- item 11: kernels that used to run wrongly without a word ------------------------------


def _break_in_affine(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        nl.store(out[i * 64 : (i + 1) * 64, :], value=nl.load(x[i * 64 : (i + 1) * 64, :]))
        break  # ERR
    return out


def _return_in_affine(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        nl.store(out[i * 64 : (i + 1) * 64, :], value=nl.load(x[i * 64 : (i + 1) * 64, :]))
        return out  # ERR
    return out


@pytest.mark.parametrize("fn", [_break_in_affine, _return_in_affine])
def test_break_or_return_inside_affine_range_is_a_located_error(fn):
    # (a current-API kernel's loop is Python's range: it is unrolled and left)
    e = expect(fn, X, api="classic", cls=NKIError, code="err_dynamic_control_flow_not_supported")
    assert "nl.static_range" in e.message and "mask" in e.message


def _break_in_sequential(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.sequential_range(2):
        nl.store(out[i * 64 : (i + 1) * 64, :], value=nl.load(x[i * 64 : (i + 1) * 64, :]))
        break  # ERR
    return out


def test_break_inside_a_symbolic_sequential_range_is_a_located_error_too():
    # the body is traced once for every iteration: a break cannot stop the loop either
    expect(_break_in_sequential, X, api="classic", code="err_dynamic_control_flow_not_supported")


def _break_never_taken(x, stop_early=False):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        nl.store(out[i * 64 : (i + 1) * 64, :], value=nl.load(x[i * 64 : (i + 1) * 64, :]))
        if stop_early:
            break
    return out


def test_a_break_the_trace_never_takes_is_not_reported():
    x = np.arange(1024, dtype=np.float32).reshape(128, 8)
    np.testing.assert_array_equal(nki.jit(_break_never_taken, api="classic")(x), x)
    with pytest.raises(NKIError) as e:
        nki.jit(_break_never_taken, api="classic")(x, stop_early=True)
    assert e.value.code == "err_dynamic_control_flow_not_supported"
    assert e.value.loc.line == line_of(_break_never_taken, "            break")


def _break_in_static(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.zeros(x.shape, dtype=x.dtype))
    for i in nl.static_range(2):
        nl.store(out[i * 64 : (i + 1) * 64, :], value=nl.load(x[i * 64 : (i + 1) * 64, :]))
        break
    return out


def test_break_inside_static_range_unrolls_as_python():
    got = nki.jit(_break_in_static)(np.arange(1024, dtype=np.float32).reshape(128, 8))
    want = np.zeros((128, 8), np.float32)
    want[:64] = np.arange(512).reshape(64, 8)
    np.testing.assert_array_equal(got, want)


def _program_id_3(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    p = nl.program_id(3)  # ERR
    nl.store(out, value=nl.load(x) + p)
    return out


def test_program_id_beyond_a_missing_grid_is_a_located_error():
    expect(_program_id_3, X, code="err_invalid_program_axis", values=["axis 3", "no launch grid"])


def _rmw_in_loop(x, table):
    for i in nl.affine_range(4):
        nisa.dma_copy(dst=table[0:128, :], src=x[i * 128 : (i + 1) * 128, :], dst_rmw_op=nl.add)


def _rmw_over_grid(x, table):
    nisa.dma_copy(dst=table[0:128, :], src=x[0:128, :], dst_rmw_op=nl.add)


def test_accumulate_on_write_dma_is_not_a_loop_carried_dependency_or_race():
    x = np.arange(512 * 8, dtype=np.float32).reshape(512, 8)
    table = np.zeros((128, 8), np.float32)
    nki.jit(_rmw_in_loop)(x, table)
    np.testing.assert_array_equal(table, x.reshape(4, 128, 8).sum(axis=0))
    table = np.ones((128, 8), np.float32)
    nki.jit(_rmw_over_grid)[4](x, table)
    np.testing.assert_array_equal(table, 1 + 4 * x[:128])


# ---- item 4: secondary outputs (reduce_res) in the loop-carried dependency analysis ----------


def _reduce_res_shared(x):
    out = nl.ndarray((128, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    sums = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(4):
        t = nl.load(x[:, i * 8 : (i + 1) * 8])
        nisa.activation_reduce(op=nl.exp, data=t, reduce_op=nl.add, reduce_res=sums)  # ERR
    nl.store(out, value=sums)
    return out


def test_reduce_res_written_by_every_affine_iteration_is_a_loop_carried_dependency():
    x = np.zeros((128, 32), np.float32)
    e = expect(_reduce_res_shared, x, code="err_unexpected_output_dependencies", values=["'sums'"])
    assert "read after the loop" in e.message


def _reduce_res_private(x):
    out = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        sums = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        t = nl.load(x[:, i * 8 : (i + 1) * 8])
        nisa.activation_reduce(op=nl.exp, data=t, reduce_op=nl.add, reduce_res=sums)
        nl.store(out[:, i : i + 1], value=sums)
    return out


def test_reduce_res_allocated_per_iteration_is_independent():
    x = np.random.default_rng(0).standard_normal((128, 32)).astype(np.float32)
    got = nki.jit(_reduce_res_private)(x)
    want = np.exp(x).reshape(128, 4, 8).sum(axis=2)
    np.testing.assert_allclose(got, want, rtol=1e-5)
