"""The current-API-only Vector / Scalar instructions (``exponential``, ``activate2``,
``tensor_scalar_cumulative``) against NumPy, including the engines' accumulator registers they
share with ``activation`` / ``select_reduce``, and each documented rule's located error."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError

from helpers import expect_error, run

RC = nisa.reduce_cmd
RNG = np.random.default_rng(7)


def _x(shape=(64, 32), lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def _load(a):
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    return t


def _tile(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


# ---- exponential --------------------------------------------------------------------------


def k_exponential(a, m):
    out = nl.ndarray((2, 64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    sums = nl.ndarray((64, 3), dtype=nl.float32, buffer=nl.shared_hbm)
    x, mt = _load(a), _load(m)
    e = _tile((64, 32))
    s = _tile((64, 3))
    nisa.exponential(e, x, max_value=mt, reduce_res=s[:, 0:1], reduce_cmd=RC.reset_reduce)
    nisa.dma_copy(out[0], e)
    # a second call keeps summing into the same registers; a third starts from reduce_init
    e2 = _tile((64, 32), nl.bfloat16)
    nisa.exponential(e2, x, 1.5, s[:, 1:2], RC.reduce)
    nisa.exponential(e2, x, 1.5, s[:, 2:3], RC.load_reduce, reduce_init=10.0)
    f = _tile((64, 32))
    nisa.tensor_copy(f, e2)
    nisa.dma_copy(out[1], f)
    nisa.dma_copy(sums, s)
    return out, sums


def test_exponential_subtracts_max_and_sums_into_the_vector_registers():
    a, m = _x(), _x((64, 1))
    out, sums = run(k_exponential, a, m, target="trn3")
    e = np.exp(a - m)
    e2 = np.exp(a - np.float32(1.5))
    np.testing.assert_allclose(out[0], e, rtol=1e-6)
    want = e2.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(out[1], want)
    s1 = e.sum(axis=1)
    np.testing.assert_allclose(sums[:, 0], s1, rtol=1e-5)
    np.testing.assert_allclose(sums[:, 1], s1 + e2.sum(axis=1), rtol=1e-5)
    # load_reduce: reduce_init, then this call's sum (the fp32 sum, not the bf16 dst's)
    np.testing.assert_allclose(sums[:, 2], 10.0 + e2.sum(axis=1), rtol=1e-5)


def k_exponential_stray_init(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = _load(a)
    nisa.exponential(x, x, reduce_init=1.0)  # ERR
    nisa.dma_copy(out, x)
    return out


def test_exponential_reduce_init_only_with_load_reduce():
    expect_error(
        k_exponential_stray_init,
        _x(),
        cls=NKIError,
        code="err_invalid_argument",
        fragments=["reduce_init", "load_reduce", "reduce_cmd=idle"],
        target="trn3",
    )


def k_exponential_only(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = _load(a)
    nisa.exponential(x, x)  # ERR
    nisa.dma_copy(out, x)
    return out


def test_exponential_needs_neuroncore_v4():
    expect_error(
        k_exponential_only,
        _x(),
        cls=NKIError,
        code="err_unsupported_instruction_for_target",
        fragments=["nisa.exponential", "trn2", "trn3"],
        target="trn2",
    )
    np.testing.assert_allclose(run(k_exponential_only, _x((8, 4)) * 0, target="trn3"), 1.0)


def k_exponential_uint32(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = _load(a)
    d = _tile(a.shape, nl.uint32)
    nisa.exponential(d, x)  # ERR
    nisa.dma_copy(out, x)
    return out


def test_exponential_rejects_a_uint32_destination():
    expect_error(
        k_exponential_uint32,
        _x(),
        cls=NKIError,
        code="err_unsupported_dtype",
        fragments=["'dst'", "uint32"],
        target="trn3",
    )


# ---- tensor_scalar_cumulative ---------------------------------------------------------------


def k_cumulative(a, init):
    out = nl.ndarray((5, 64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    x, it = _load(a), _load(init)
    r = [_tile((64, 32)) for _ in range(5)]
    nisa.tensor_scalar_cumulative(r[0], x, nl.multiply, nl.add, 2.0)  # cumsum of 2x
    nisa.tensor_scalar_cumulative(r[1], x, nl.add, nl.add, 0.0, reduce_cmd=RC.reduce)
    nisa.tensor_scalar_cumulative(
        r[2], x, nl.subtract, nl.maximum, 0.5, imm1=it, reduce_cmd=RC.load_reduce
    )
    nisa.tensor_scalar_cumulative(r[3], x, op0=nl.add, op1=nl.subtract, imm0=1.0)
    nisa.tensor_scalar_cumulative(r[4], x, nl.maximum, nl.multiply, 0.25)
    for i in range(5):
        nisa.dma_copy(out[i], r[i])
    return out


def _scan(t, start, step):
    out = np.empty_like(t)
    reg = start.astype(np.float32)
    for i in range(t.shape[1]):
        reg = step(t[:, i], reg).astype(np.float32)
        out[:, i] = reg
    return out


def test_tensor_scalar_cumulative_running_reductions_match_numpy():
    a, init = _x(), _x((64, 1), 0.0, 3.0)
    got = run(k_cumulative, a, init, target="trn2")
    zeros = np.zeros(64, np.float32)
    c0 = _scan(2 * a, zeros, np.add)
    np.testing.assert_allclose(got[0], c0, rtol=1e-6, atol=1e-6)
    # reduce: continues from the registers the previous call left (its last column)
    np.testing.assert_allclose(got[1], _scan(a, c0[:, -1], np.add), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[2], _scan(a - np.float32(0.5), init[:, 0], np.maximum))
    # subtract, read literally from the pseudo-code: reg = (x + 1) - reg
    np.testing.assert_allclose(
        got[3], _scan(a + 1, zeros, lambda x, r: x - r), rtol=1e-6, atol=1e-6
    )
    ones = np.ones(64, np.float32)
    np.testing.assert_allclose(got[4], _scan(np.maximum(a, 0.25), ones, np.multiply), rtol=1e-5)


def k_cumulative_int32(a):
    out = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    x = _load(a)
    d = _tile(a.shape, nl.int32)
    nisa.tensor_scalar_cumulative(d, x, nl.add, nl.add, 1)  # ERR
    nisa.dma_copy(out, d)
    return out


def test_tensor_scalar_cumulative_rejects_int32():
    expect_error(
        k_cumulative_int32,
        np.ones((8, 4), np.int32),
        cls=NKIError,
        code="err_unsupported_dtype",
        fragments=["'dst'", "int32"],
    )


def k_cumulative_no_imm1(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = _load(a)
    nisa.tensor_scalar_cumulative(x, x, nl.add, nl.add, 1.0, reduce_cmd=RC.load_reduce)  # ERR
    nisa.dma_copy(out, x)
    return out


def k_cumulative_bad_op1(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = _load(a)
    nisa.tensor_scalar_cumulative(x, x, nl.add, nl.divide, 1.0)  # ERR
    nisa.dma_copy(out, x)
    return out


def test_tensor_scalar_cumulative_rules():
    expect_error(
        k_cumulative_no_imm1, _x(), cls=NKIError, code="err_missing_operand", fragments=["imm1"]
    )
    expect_error(
        k_cumulative_bad_op1,
        _x(),
        cls=NKIError,
        code="err_unsupported_op",
        fragments=["'op1'=divide", "nl.add"],
    )


# ---- activate2 ------------------------------------------------------------------------------


def k_activate2(a, s, b):
    out = nl.ndarray((4, 64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    res = nl.ndarray((64, 3), dtype=nl.float32, buffer=nl.shared_hbm)
    x, st, bt = _load(a), _load(s), _load(b)
    y = [_tile((64, 32)) for _ in range(4)]
    r = _tile((64, 3))
    nisa.activate2(y[0], nl.tanh, x, st, bt, nl.multiply, nl.add)
    nisa.activate2(y[1], nl.exp, x, 0.5, 1.0, nl.multiply, nl.subtract, reverse1=True)
    nisa.activate2(
        y[2], nl.prelu, x, 1.0, 0.0, nl.subtract, nl.bypass, relu_param=st, reverse0=True,
        reduce_op=nl.abs_max, reduce_res=r[:, 0:1], reduce_cmd=RC.reset_reduce,
    )  # fmt: skip
    # activation and activate2 share the Scalar engine's registers
    nisa.activation(y[3], nl.copy, x, reduce_op=nl.add, reduce_cmd=RC.reset_reduce)
    nisa.activate2(
        y[3], nl.copy, x, None, None, nl.bypass, nl.bypass, reduce_op=nl.add,
        reduce_res=r[:, 1:2], reduce_cmd=RC.reduce,
    )  # fmt: skip
    nisa.activate2(
        y[3], nl.copy, x, 2.0, None, nl.add, nl.bypass, reduce_op=nl.minimum,
        reduce_res=r[:, 2:3], reduce_cmd=RC.reset_reduce,
    )  # fmt: skip
    for i in range(4):
        nisa.dma_copy(out[i], y[i])
    nisa.dma_copy(res, r)
    return out, res


def test_activate2_tensor_scalar_stage_activation_and_reductions():
    a, s, b = _x(), _x((64, 1), 0.1, 1.0), _x((64, 1))
    out, res = run(k_activate2, a, s, b, target="trn3")
    np.testing.assert_allclose(out[0], np.tanh(a * s + b), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out[1], np.exp(np.float32(1.0) - a * np.float32(0.5)), rtol=1e-6)
    t = np.float32(1.0) - a
    pre = np.where(t >= 0, t, s * t)
    np.testing.assert_allclose(out[2], pre, rtol=1e-6)
    # abs_max keeps the signed value of largest magnitude
    idx = np.argmax(np.abs(pre), axis=1)
    np.testing.assert_allclose(res[:, 0], pre[np.arange(64), idx], rtol=1e-6)
    np.testing.assert_allclose(res[:, 1], 2 * a.sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res[:, 2], (a + 2).min(axis=1), rtol=1e-6)
    np.testing.assert_allclose(out[3], a + 2, rtol=1e-6)


def k_activate2_bad_pair(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = _load(a)
    nisa.activate2(x, nl.exp, x, 1.0, 1.0, nl.add, nl.add)  # ERR
    nisa.dma_copy(out, x)
    return out


def test_activate2_rejects_an_undocumented_op_pair_and_older_targets():
    expect_error(
        k_activate2_bad_pair,
        _x(),
        cls=NKIError,
        code="err_unsupported_op",
        fragments=["(add, add)", "(multiply, add)"],
        target="trn3",
    )
    expect_error(
        k_activate2_bad_pair,
        _x(),
        cls=NKIError,
        code="err_unsupported_instruction_for_target",
        fragments=["nisa.activate2", "trn3"],
        target="trn2",
    )


# ---- the Vector engine's registers are shared between instructions --------------------------


def k_vector_registers(a, pred):
    res = nl.ndarray((64, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    x, pt = _load(a), _load(pred)
    r = _tile((64, 2))
    e = _tile((64, 32))
    nisa.exponential(e, x, reduce_cmd=RC.reset_reduce)
    nisa.select_reduce(e, pt, x, -100.0, reduce_res=r[:, 0:1], reduce_cmd=RC.idle)
    c = _tile((64, 32))
    nisa.tensor_scalar_cumulative(c, x, nl.add, nl.add, 0.0, reduce_cmd=RC.reduce)
    nisa.select_reduce(e, pt, x, -100.0, reduce_res=r[:, 1:2], reduce_cmd=RC.idle)
    nisa.dma_copy(res, r)
    return res


def test_vector_engine_registers_are_shared_across_instructions():
    a = _x()
    pred = (RNG.random((64, 32)) > 0.5).astype(np.uint8)
    res = run(k_vector_registers, a, pred, target="trn3")
    s = np.exp(a).sum(axis=1)
    np.testing.assert_allclose(res[:, 0], s, rtol=1e-5)  # idle reads what exponential left
    np.testing.assert_allclose(res[:, 1], s + a.sum(axis=1), rtol=1e-5, atol=1e-5)


def k_classic_then_current(a):
    x = nl.load(a)
    y = nisa.tensor_copy(x)
    nisa.exponential(y, x)  # ERR
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, y)
    return out


def test_a_current_only_instruction_in_a_classic_kernel_is_a_mixed_generation_error():
    with pytest.raises(NKIError) as e:
        nki.jit(k_classic_then_current, platform_target="trn3", api="classic")(_x())
    assert e.value.code == "err_mixed_api_generations"
    assert "nisa.exponential" in e.value.message


def k_tensor_scalar_reduce_registers(a):
    res = nl.ndarray((64, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    x = _load(a)
    r = _tile((64, 4))
    y = _tile((64, 32))
    # reduce_res=None: the sum stays in the Vector registers; the next call adds onto it
    nisa.tensor_scalar_reduce(y, x, nl.multiply, 2.0, nl.add)
    nisa.tensor_scalar_reduce(y, x, nl.add, 1.0, nl.add, r[:, 0:1], reduce_cmd=RC.reduce)
    nisa.tensor_scalar_reduce(
        y, x, nl.multiply, 1.0, nl.maximum, r[:, 1:2], reduce_cmd=RC.load_reduce,
        reduce_init=0.5, reduce_res_negate=True,
    )  # fmt: skip
    # exponential continues from what tensor_scalar_reduce left (the max, not negated)
    e = _tile((64, 32))
    nisa.exponential(e, x, reduce_res=r[:, 2:3], reduce_cmd=RC.reduce)
    nisa.tensor_scalar_reduce(y, x, nl.multiply, -1.0, nl.minimum, r[:, 3:4])
    nisa.dma_copy(res, r)
    return res


def test_tensor_scalar_reduce_shares_the_vector_registers_in_the_current_form():
    a = _x()
    got = run(k_tensor_scalar_reduce_registers, a, target="trn3")
    s = (2 * a).sum(axis=1) + (a + 1).sum(axis=1)
    np.testing.assert_allclose(got[:, 0], s, rtol=1e-5, atol=1e-5)
    mx = np.maximum(a.max(axis=1), 0.5)
    np.testing.assert_array_equal(got[:, 1], -mx)
    np.testing.assert_allclose(got[:, 2], mx + np.exp(a).sum(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(got[:, 3], (-a).min(axis=1))


def k_misspelled(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = _load(a)
    nisa.exponential(x, x, max_val=1.0)  # ERR
    nisa.dma_copy(out, x)
    return out


def test_a_misspelled_keyword_of_a_current_only_instruction_names_the_closest():
    expect_error(
        k_misspelled,
        _x(),
        cls=NKIError,
        code="err_unexpected_keyword_argument",
        fragments=["'max_val'", "did you mean 'max_value'?"],
        target="trn3",
    )


def k_cumulative_unset_registers(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = _load(a)
    c = _tile(a.shape)
    nisa.tensor_scalar_cumulative(c, x, nl.add, nl.add, 0.0, reduce_cmd=RC.reduce)
    nisa.dma_copy(out, c)  # ERR
    return out


def test_continuing_from_registers_no_instruction_set_is_an_uninitialised_read():
    e = expect_error(
        k_cumulative_unset_registers,
        _x(),
        cls=NKIError,
        code="err_uninitialized_read",
        jit_opts={"checks": "full"},
    )
    assert "uninitialised" in e.message
