"""Diagnostics users can trust (issue 13): unwritten outputs and unset reduce registers are
reported under checks="full", masked-off lanes never raise false alarms."""

from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError, NKIWarning


def _line_of(fn, text: str) -> int:
    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, s in enumerate(src) if text in s)


def _partial_store(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    ip = nl.arange(128)[:, None]
    jf = nl.arange(64)[None, :]
    nl.store(out[ip, jf], value=nl.load(x), mask=(ip < 127))
    return out


def test_output_rows_a_mask_excludes_are_reported_under_full_checks():
    x = np.ones((128, 64), np.float32)
    k = nki.jit(_partial_store)
    with pytest.warns(NKIWarning, match=r"\[127:128, 0:64\]"):  # default: a static warning
        assert np.isnan(k(x)[127]).all()  # and the NaN sentinel (no runtime tracking)
    with pytest.raises(NKIError) as e:
        k.configure(checks="full")(x)
    err = e.value
    assert err.code == "err_unwritten_output"
    assert "'out'" in err.message and "64 element(s)" in err.message
    assert "[127:128, 0:64]" in err.message
    assert f"line {_line_of(_partial_store, 'nl.store(')} wrote the rest" in err.message
    assert err.loc.line == _line_of(_partial_store, "out = nl.ndarray")


def _zero_trip(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 256):
        nl.store(out[i * 128 : (i + 1) * 128, :], value=nl.load(x[i * 128 : (i + 1) * 128, :]))
    return out


def test_output_a_zero_trip_loop_never_writes_is_reported():
    with pytest.raises(NKIError) as e:
        nki.jit(_zero_trip, checks="full")(np.ones((128, 8), np.float32))
    assert e.value.code == "err_unwritten_output"
    assert "no instruction wrote any of it" in e.value.message
    assert e.value.loc.line == _line_of(_zero_trip, "out = nl.ndarray")


def _reduce_res_idle(x):
    out = nl.ndarray((128, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(op=nl.exp, data=nl.load(x), reduce_op=nl.add, reduce_res=s)
    nl.store(out, value=s)
    return out


def test_reduce_res_from_registers_never_reset_is_an_uninitialised_read():
    x = np.zeros((128, 16), np.float32)
    with pytest.raises(NKIError) as e:
        nki.jit(_reduce_res_idle, checks="full")(x)
    err = e.value
    assert err.code == "err_uninitialized_read"
    assert err.loc.line == _line_of(_reduce_res_idle, "nl.store(out")
    act = _line_of(_reduce_res_idle, "nisa.activation(")
    assert f"at line {act}" in err.message
    assert [loc.line for _, loc in err.related] == [act]


def _reduce_res_reset(x):
    out = nl.ndarray((128, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(
        op=nl.exp,
        data=nl.load(x),
        reduce_op=nl.add,
        reduce_res=s,
        reduce_cmd=nisa.reduce_cmd.reset_reduce,
    )
    nl.store(out, value=s)
    return out


def test_reduce_res_after_a_reset_is_not_reported():
    x = np.random.default_rng(0).standard_normal((128, 16)).astype(np.float32)
    got = nki.jit(_reduce_res_reset, checks="full")(x)
    np.testing.assert_allclose(got, np.exp(x).sum(axis=1, keepdims=True), rtol=1e-5)


def _oob_gather(x, ids):
    out = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    idx = nl.load(ids)
    rows = nl.load(x[idx, nl.arange(8)[None, :]])
    nl.store(out, value=nl.exp(nl.load(x[0:128, :])))
    nl.store(out, value=rows)
    return out


def test_messages_name_the_users_variable():
    """An out-of-bound indirect read names the kernel parameter; an uninitialised read names
    the assigned variable, not the internal 'sb'/'hbm' name."""
    x = np.ones((128, 8), np.float32)
    ids = np.full((128, 1), 500, np.int32)
    with pytest.raises(NKIError) as e:
        nki.jit(_oob_gather)(x, ids)
    assert "tensor 'x' on dimension 0" in e.value.message
    assert e.value.loc.line == _line_of(_oob_gather, "rows = nl.load(")

    def never_set(x):
        out = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        nl.store(out, value=acc)
        return out

    with pytest.raises(NKIError) as e:
        nki.jit(never_set, checks="full")(x)
    assert e.value.code == "err_uninitialized_read"
    assert "read of uninitialised memory: 'acc' element (0, 0)" in e.value.message

    def via_temporary(x):
        out = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        nl.store(out, value=nl.add(acc, nl.load(x)))
        return out

    with pytest.raises(NKIError) as e:
        nki.jit(via_temporary, checks="full")(x)
    line = _line_of(via_temporary, "nl.store(out")
    assert f"(created at line {line}) element (0, 0)" in e.value.message  # unnamed: where made


def test_an_uninitialised_read_names_the_kernels_loop_iterators_and_the_element():
    # the access is written with the kernel's own iterators and their values at the read, and
    # the element with the tensor's coordinates (not the loops' internal symbols)
    def blocks(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        acc = nl.ndarray((2, 3, nl.par_dim(128), 8), dtype=nl.float32, buffer=nl.sbuf)
        for a in nl.affine_range(2):
            for b in nl.affine_range(2):  # (the blocks of b == 2 are never written)
                acc[a, b] = nl.load(x[a, b])
        for a in nl.affine_range(2):
            for b in nl.affine_range(3):
                nl.store(out[a, b], value=acc[a, b])
        return out

    with pytest.raises(NKIError) as e:
        nki.jit(blocks, checks="full", api="classic")(np.ones((2, 3, 128, 8), np.float32))
    assert e.value.code == "err_uninitialized_read"
    msg = e.value.message
    assert "'acc' element (0, 0) of the access [a, b, i0, i1] with a=0, b=2" in msg, msg
    assert "(the tensor's element [0, 2, 0, 0])" in msg, msg


N_VALID = 100


def _ragged_gather(table, ids):
    out = nl.ndarray((N_VALID, 16), dtype=table.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(16)[None, :]
    idx = nl.load(ids[i_p, nl.arange(1)[None, :]], mask=i_p < N_VALID)
    rows = nl.load(table[idx, i_f], mask=i_p < N_VALID)
    nl.store(out[i_p, i_f], value=rows, mask=i_p < N_VALID)
    return out


def _ragged_scatter_add(table, ids, vals):
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(16)[None, :]
    idx = nl.load(ids[i_p, nl.arange(1)[None, :]], mask=i_p < N_VALID)
    v = nl.load(vals[i_p, i_f], mask=i_p < N_VALID)
    nl.atomic_rmw(table[idx, i_f], value=v, op=np.add, mask=i_p < N_VALID)


@pytest.mark.parametrize("checks", ["static", "full"])
def test_masked_ragged_gather_and_atomic_rmw_are_not_uninitialised_reads(checks):
    rng = np.random.default_rng(5)
    table = rng.standard_normal((300, 16)).astype(np.float32)
    ids = rng.integers(0, 300, (N_VALID, 1)).astype(np.int32)
    ids[:8] = 7  # duplicates: atomic_rmw applies every update
    ids128 = np.concatenate([ids, np.zeros((28, 1), np.int32)])
    got = nki.jit(_ragged_gather, checks=checks)(table, ids128)
    np.testing.assert_array_equal(got, table[ids[:, 0]])

    vals = rng.standard_normal((128, 16)).astype(np.float32)
    t = table.copy()
    nki.jit(_ragged_scatter_add, checks=checks)(t, ids128, vals)
    ref = table.copy()
    np.add.at(ref, ids[:, 0], vals[:N_VALID])
    np.testing.assert_allclose(t, ref, rtol=1e-6, atol=1e-6)


def test_numpy_scalar_argument_is_a_compile_time_scalar():
    @nki.jit
    def clamp_below(x, imm):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.maximum(nl.load(x), imm))
        return out

    x = np.random.default_rng(8).standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_array_equal(clamp_below(x, np.float32("-inf")), x)
    np.testing.assert_array_equal(clamp_below(x, np.float32(0.25)), np.maximum(x, 0.25))
    assert clamp_below.trace_count == 2


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16])
def test_a_scalar_type_argument_is_a_compile_time_dtype(dtype):
    @nki.jit
    def cast(x, dtype):  # (the SDK's range_select example takes its dtype so)
        out = nl.ndarray(x.shape, dtype=dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(nl.load(x), dtype=dtype))
        return out

    x = np.random.default_rng(9).standard_normal((128, 8)).astype(np.float32)
    got = cast(x, dtype)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got.view(np.uint8), x.astype(dtype).view(np.uint8))


def test_out_of_bounds_indirect_dma_is_an_index_error():
    x = np.ones((128, 8), np.float32)
    ids = np.full((128, 1), 500, np.int32)
    with pytest.raises(IndexError) as e:  # classic code catches IndexError
        nki.jit(_oob_gather)(x, ids)
    assert isinstance(e.value, NKIError)
    assert e.value.loc.line == _line_of(_oob_gather, "rows = nl.load(")
    assert issubclass(nki.errors.NKITypeError, TypeError)
    assert issubclass(nki.errors.NKIShapeError, ValueError)
