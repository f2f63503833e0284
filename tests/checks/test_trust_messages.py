"""Messages that say what is wrong and how to write it (issue 13, item 8) and classic mask forms
(item 14): Python control flow on traced values, int()/float() of tiles, dynamic nl.ds
offsets, one partition-quadrant rule for nl.* and nisa.*, and Python ``and`` in masks."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIControlFlowError, NKIError, NKIShapeError

from helpers import expect, line_of

X = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)


def _if_on_iterator(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for blk in nl.affine_range(2):
        if blk == 0:  # ERR
            nl.store(out[0:64, :], value=nl.load(x[0:64, :]))
    return out


def test_if_on_a_loop_iterator_names_the_iterator_and_the_ways_to_write_it():
    e = expect(
        _if_on_iterator,
        X,
        api="classic",  # a current-API kernel unrolls the loop for the `if`
        cls=NKIControlFlowError,
        code="err_control_flow_condition_depending_on_arange",
        values=["loop iterator 'blk'", f"line {line_of(_if_on_iterator, 'affine_range')}"],
    )
    for fix in ("nl.static_range", "mask", "classic mode"):
        assert fix in e.message
    assert "mask predicate" not in e.message


def _if_on_program_id(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    if nl.program_id(0) == 0:  # ERR
        nl.store(out, value=nl.load(x))
    return out


def test_if_on_a_program_id_names_the_program_id():
    e = expect(
        _if_on_program_id,
        X,
        cls=NKIControlFlowError,
        code="err_control_flow_condition_depending_on_arange",
        values=["nl.program_id(0)", "mask"],
        grid=4,  # (a grid of 2 could be an LNC=2 launch, where the program id is an int)
    )
    assert "loop iterator" not in e.message


def _int_of_tile(x):
    t = nl.load(x)
    n = int(t)  # ERR
    return n


def _float_of_tile(x):
    t = nl.load(x)
    v = float(t[0, 0])  # ERR
    return v


@pytest.mark.parametrize("fn", [_int_of_tile, _float_of_tile])
def test_int_or_float_of_a_tile_is_a_located_error(fn):
    e = expect(fn, X, cls=NKIError, code="err_dynamic_control_flow_not_supported")
    assert "its values exist only when the kernel runs" in e.message


def _ds_with_tile_start(x, idx):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    st = nl.load(idx)
    t = nl.load(x[:, nl.ds(st, 64)])  # ERR
    nl.store(out, value=t)
    return out


def test_ds_with_a_tile_start_names_the_supported_dynamic_offset_forms():
    e = expect(
        _ds_with_tile_start,
        np.ones((128, 256), np.float32),
        np.zeros((1, 1), np.int32),
        code="err_unsupported_index_expression",
        values=["loop iterator / program id", "indirect access"],
    )
    assert e.code != "err_tensor_access_out_of_bound"


def _nl_exp_misaligned(x):
    out = nl.ndarray((64, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, value=nl.exp(t[16:80, :]))  # ERR
    return out


def _nisa_exp_misaligned(x):
    out = nl.ndarray((64, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, value=nisa.activation(op=nl.exp, data=t[16:80, :]))  # ERR
    return out


@pytest.mark.parametrize("fn", [_nl_exp_misaligned, _nisa_exp_misaligned])
def test_one_partition_quadrant_rule_for_nl_and_nisa(fn):
    expect(
        fn,
        X,
        cls=NKIShapeError,
        code="err_unsupported_start_partition",
        values=["starting at partition 16 of 't'", "[0, 64]"],
    )


def _nl_exp_aligned(x):
    out = nl.ndarray((64, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, value=nl.exp(t[64:128, :]))
    return out


def test_an_aligned_partition_slice_is_accepted_by_nl():
    got = nki.jit(_nl_exp_aligned)(X / 1000)
    np.testing.assert_allclose(got, np.exp(X[64:] / 1000), rtol=1e-6)


# ---- item 14: Python `and` between mask predicates --------------------------------------------


def _and_mask(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.zeros((128, 64), dtype=x.dtype))
    ix = nl.arange(128)[:, None]
    iy = nl.arange(64)[None, :]
    nl.store(out[ix, iy], value=nl.load(x[ix, iy]), mask=(ix < 128 // 2 and iy < 64 // 2))
    return out


def _and3_mask(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.zeros((128, 64), dtype=x.dtype))
    ix = nl.arange(128)[:, None]
    iy = nl.arange(64)[None, :]
    m = ix < 64 and iy < 32 and iy >= 8
    nl.store(out[ix, iy], value=nl.load(x[ix, iy]), mask=m)
    return out


def test_python_and_between_mask_predicates_is_a_conjunction():
    x = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
    want = np.zeros_like(x)
    want[:64, :32] = x[:64, :32]
    np.testing.assert_array_equal(nki.jit(_and_mask)(x), want)
    want[:, :8] = 0
    np.testing.assert_array_equal(nki.jit(_and3_mask)(x), want)


def _or_mask(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.zeros((128, 64), dtype=x.dtype))
    ix = nl.arange(128)[:, None]
    iy = nl.arange(64)[None, :]
    nl.store(out[ix, iy], value=nl.load(x[ix, iy]), mask=(ix < 64 or iy < 32))
    return out


def test_python_or_between_mask_predicates_is_a_disjunction():
    x = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
    ix, iy = np.mgrid[0:128, 0:64]
    want = np.where(np.logical_or(ix < 64, iy < 32), x, 0)
    np.testing.assert_array_equal(nki.jit(_or_mask)(x), want)


def _or_mask_right_not_a_comparison(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(128)[:, None]
    iy = nl.arange(64)[None, :]
    m = iy < 32
    nl.store(out[ix, iy], value=nl.load(x[ix, iy]), mask=(ix < 64 or m))  # ERR
    return out


def test_or_with_a_right_operand_that_is_not_a_comparison_is_a_located_error():
    x = np.ones((128, 64), np.float32)
    expect(
        _or_mask_right_not_a_comparison,
        x,
        code="err_unsupported_expression_in_mask",
        values=["'or'", "comparison"],
    )


def _if_and(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        if i < 1 and i >= 0:  # ERR
            nl.store(out, value=nl.load(x))
    return out


def test_and_in_an_if_statement_stays_a_control_flow_error():
    expect(
        _if_and,
        X,
        api="classic",  # a current-API kernel unrolls the loop for the `if`
        cls=NKIControlFlowError,
        code="err_control_flow_condition_depending_on_arange",
    )


# ---- item 14: nc_stream_shuffle broadcast from a one-partition source ----------------------


def _shuffle_broadcast(x):
    out = nl.ndarray((32, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    row = nl.load(x[5:6, :])
    d = nl.ndarray((32, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.nc_stream_shuffle(src=row, dst=d, shuffle_mask=[0] * 32)
    nl.store(out, value=d)
    return out


def test_stream_shuffle_broadcasts_one_partition_to_a_quadrant():
    got = nki.jit(_shuffle_broadcast)(X)
    np.testing.assert_array_equal(got, np.broadcast_to(X[5], (32, 8)))


def _shuffle_reads_missing_partition(x):
    out = nl.ndarray((32, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    row = nl.load(x[0:1, :])
    d = nl.ndarray((32, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.nc_stream_shuffle(src=row, dst=d, shuffle_mask=[0] * 31 + [1])  # ERR
    nl.store(out, value=d)
    return out


def test_stream_shuffle_reading_a_partition_the_source_lacks_is_located():
    expect(
        _shuffle_reads_missing_partition,
        X,
        code="err_invalid_shuffle_mask",
        values=["destination partition 31", "source partition 1", "[1, 8]"],
    )
