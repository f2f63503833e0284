"""The engines' accumulator registers, shared by the instructions of one engine: initial
values in the current API (nisa.tensor_scalar_reduce's reduce_cmd reset_reduce / reduce /
load_reduce, load_reduce's reduce_init as an fp32 scalar or a (P, 1) float32 tile, chaining
with reduce_res=None and reduce_res_negate, which negates the written value only;
exponential's reduce_init and tensor_scalar_cumulative's imm1 as float32 tiles), registers
shared across instructions, destination-first reductions into reduce_res, and a read of
registers no instruction set; against NumPy, invalid uses as located errors."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError
from nki.isa import reduce_cmd as RC

from helpers import expect, expect_error, run
from helpers import load_sbuf as _load
from helpers import sbuf_tile as _tile

RNG = np.random.default_rng(77)


P, F = 128, 48


REDUCE = {
    "add": (nl.add, np.sum),
    "multiply": (nl.multiply, np.prod),
    "maximum": (nl.maximum, np.max),
    "minimum": (nl.minimum, np.min),
}


FOLD = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum}


def _sb(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


def load_then_reduce(x, x2, init, rop, tile_init, negate):
    """Call 1: load_reduce from reduce_init (scalar 0.75, or the tile ``init``), no read-out;
    call 2: reduce on top, reading the registers out (negated if ``negate``); call 3: reduce
    again (the registers kept their sign), read out."""
    r1 = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    r2 = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    y = nl.ndarray((P, F), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    a, b, i, s = _sb((P, F)), _sb((P, F)), _sb((P, 1)), _sb((P, 1))
    d = _sb((P, F), nl.bfloat16)
    nisa.dma_copy(dst=a, src=x)
    nisa.dma_copy(dst=b, src=x2)
    nisa.dma_copy(dst=i, src=init)
    start = i if tile_init else 0.75
    load = nisa.reduce_cmd.load_reduce
    nisa.tensor_scalar_reduce(d, a, nl.multiply, 0.5, rop, None, reduce_cmd=load, reduce_init=start)
    nisa.dma_copy(dst=y, src=d)
    t = _sb((P, F))
    nisa.tensor_scalar_reduce(dst=t, data=b, op0=nl.add, operand0=i, reduce_op=rop,
                              reduce_res=s, reduce_cmd=nisa.reduce_cmd.reduce,
                              reduce_res_negate=negate)  # fmt: skip
    nisa.dma_copy(dst=r1, src=s)
    s2 = _sb((P, 1))
    nisa.tensor_scalar_reduce(t, b, nl.add, i, rop, s2, reduce_cmd=nisa.reduce_cmd.reduce)
    nisa.dma_copy(dst=r2, src=s2)
    return r1, r2, y


@pytest.mark.parametrize("rop", sorted(REDUCE))
@pytest.mark.parametrize("tile_init", [False, True])
def test_load_reduce_starts_from_reduce_init_then_reduce_chains(rop, tile_init):
    x = RNG.uniform(0.5, 1.5, (P, F)).astype(np.float32)
    x2 = RNG.uniform(0.5, 1.5, (P, F)).astype(np.float32)
    init = RNG.uniform(-2, 2, (P, 1)).astype(np.float32)
    negate = rop == "add"
    r1, r2, y = nki.jit(load_then_reduce)(x, x2, init, REDUCE[rop][0], tile_init, negate)
    fold, red = FOLD[rop], REDUCE[rop][1]
    start = init[:, 0] if tile_init else np.float32(0.75)
    regs = fold(start, red(x * np.float32(0.5), axis=1))
    regs = fold(regs, red(x2 + init, axis=1))
    sign = -1 if negate else 1
    np.testing.assert_allclose(r1[:, 0], sign * regs, rtol=2e-5)
    regs = fold(regs, red(x2 + init, axis=1))
    np.testing.assert_allclose(r2[:, 0], regs, rtol=2e-5)
    np.testing.assert_array_equal(
        y.astype(np.float32), (x * 0.5).astype(y.dtype).astype(np.float32)
    )


def reset_reduce_default(x):
    """The default reduce_cmd (reset_reduce) starts from the identity whatever the registers
    held: a previous load_reduce from 100 does not leak in."""
    out = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    a, t, s = _sb((P, F)), _sb((P, F)), _sb((P, 1))
    nisa.dma_copy(dst=a, src=x)
    load = nisa.reduce_cmd.load_reduce
    nisa.tensor_scalar_reduce(t, a, nl.multiply, 1.0, nl.add, reduce_cmd=load, reduce_init=100.0)
    nisa.tensor_scalar_reduce(t, a, nl.subtract, 1.0, nl.maximum, s)
    nisa.dma_copy(dst=out, src=s)
    return out


def test_reset_reduce_default_ignores_earlier_register_contents():
    x = RNG.standard_normal((P, F)).astype(np.float32)
    got = nki.jit(reset_reduce_default)(x)
    np.testing.assert_array_equal(got[:, 0], (x - np.float32(1)).max(axis=1))


def _init_kernel(x, init, cmd, start):
    out = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    a, t, s = _sb((P, F)), _sb((P, F)), _sb((P, 1))
    i = _sb(init.shape, init.dtype)
    nisa.dma_copy(dst=a, src=x)
    nisa.dma_copy(dst=i, src=init)
    v = i if start == "tile" else start
    nisa.tensor_scalar_reduce(t, a, nl.add, 1.0, nl.add, s, reduce_cmd=cmd, reduce_init=v)  # ERR
    nisa.dma_copy(dst=out, src=s)
    return out


X = RNG.standard_normal((P, F)).astype(np.float32)


I32 = np.zeros((P, 1), np.float32)


@pytest.mark.parametrize(
    "cmd, start, init, code, values",
    [
        (nisa.reduce_cmd.load_reduce, None, I32, "err_invalid_argument", ("needs one",)),
        (nisa.reduce_cmd.reset_reduce, 1.0, I32, "err_invalid_argument", ("reset_reduce",)),
        (nisa.reduce_cmd.load_reduce, "tile", np.zeros((P, 2), np.float32),
         "err_scalar_or_vector_operand_shape", ("reduce_init", "(128, 1)")),
        (nisa.reduce_cmd.load_reduce, "tile", np.zeros((P, 1), np.int32),
         "err_invalid_operand_dtype", ("reduce_init", "float32", "int32")),
    ],
)  # fmt: skip
def test_invalid_reduce_init_is_a_located_error(cmd, start, init, code, values):
    expect(_init_kernel, X, init, cmd, start, cls=NKIError, code=code, values=values)


def exp_and_cumulative(x, init):
    """exponential: load_reduce from the tile ``init``; tensor_scalar_cumulative: a running
    sum from the tile ``init`` (load_reduce, imm1)."""
    s_out = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    c_out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    a, e, c, i, s = _sb((P, F)), _sb((P, F)), _sb((P, F)), _sb((P, 1)), _sb((P, 1))
    nisa.dma_copy(dst=a, src=x)
    nisa.dma_copy(dst=i, src=init)
    load = nisa.reduce_cmd.load_reduce
    nisa.exponential(e, a, max_value=1.0, reduce_res=s, reduce_cmd=load, reduce_init=i)
    nisa.tensor_scalar_cumulative(c, a, nl.multiply, nl.add, 2.0, imm1=i, reduce_cmd=load)
    nisa.dma_copy(dst=s_out, src=s)
    nisa.dma_copy(dst=c_out, src=c)
    return s_out, c_out


def test_exponential_and_cumulative_start_from_a_tile():
    x = RNG.uniform(-1, 1, (P, F)).astype(np.float32)
    init = RNG.uniform(-2, 2, (P, 1)).astype(np.float32)
    s, c = run(exp_and_cumulative, x, init, target="trn3")
    want_s = init[:, 0] + np.exp(x - np.float32(1)).sum(axis=1)
    np.testing.assert_allclose(s[:, 0], want_s, rtol=1e-5)
    np.testing.assert_allclose(c, init + np.cumsum(2 * x, axis=1), rtol=1e-5, atol=1e-5)


def bf16_start(x, which):
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    a, e, i = _sb((P, F)), _sb((P, F)), _sb((P, 1), nl.bfloat16)
    nisa.dma_copy(dst=a, src=x)
    nisa.memset(i, 1.0)
    load = nisa.reduce_cmd.load_reduce
    if which == "exponential":
        nisa.exponential(e, a, reduce_cmd=load, reduce_init=i)  # E:exponential
    else:
        nisa.tensor_scalar_cumulative(e, a, nl.multiply, nl.add, 1.0, i, load)  # E:cumulative
    nisa.dma_copy(dst=out, src=e)
    return out


@pytest.mark.parametrize("which, role", [("exponential", "reduce_init"), ("cumulative", "imm1")])
def test_a_non_fp32_initial_tile_is_a_located_error(which, role):
    expect_error(bf16_start, X, which, cls=NKIError, code="err_invalid_operand_dtype",
                 fragments=[role, "float32", "bfloat16"], target="trn3",
                 marker=f"# E:{which}")  # fmt: skip


REGS_RNG = np.random.default_rng(7)


def _x(shape=(64, 32), lo=-2.0, hi=2.0):
    return REGS_RNG.uniform(lo, hi, size=shape).astype(np.float32)


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
    pred = (REGS_RNG.random((64, 32)) > 0.5).astype(np.uint8)
    res = run(k_vector_registers, a, pred, target="trn3")
    s = np.exp(a).sum(axis=1)
    np.testing.assert_allclose(res[:, 0], s, rtol=1e-5)  # idle reads what exponential left
    np.testing.assert_allclose(res[:, 1], s + a.sum(axis=1), rtol=1e-5, atol=1e-5)


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


def reduce_and_select(x, pred):
    P, F = x.shape
    out = nl.ndarray((5, P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    xt = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    pt = nl.ndarray((P, F), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.dma_copy(xt, x)
    nisa.dma_copy(pt, pred)
    # 0: x * 2, with the row sums of x * 2 into r (broadcast back over the row in 1)
    y = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(
        dst=y, data=xt, op0=nl.multiply, operand0=2.0, reduce_op=nl.add, reduce_res=r
    )
    nisa.dma_copy(out[0], y)
    rb = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(rb, 0.0)
    nisa.tensor_scalar(rb, rb, nl.add, r)
    nisa.dma_copy(out[1], rb)
    # 2: exp(x) with the row max into m (broadcast in 3)
    e = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    m = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation_reduce(e, nl.exp, xt, nl.maximum, m)
    nisa.dma_copy(out[2], e)
    mb = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(mb, 0.0)
    nisa.tensor_scalar(mb, mb, nl.add, m)
    nisa.dma_copy(out[3], mb)
    # 4: x where pred else -1 (copy_predicated onto a -1 fill)
    c = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(c, -1.0)
    nisa.tensor_copy_predicated(c, xt, pt)
    nisa.dma_copy(out[4], c)
    return out  # fmt: skip


def test_reductions_and_predicated_copy_match_numpy():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((32, 24)).astype(np.float32)
    pred = (rng.random((32, 24)) > 0.5).astype(np.uint8)
    got = nki.jit(reduce_and_select)(x, pred)
    np.testing.assert_allclose(got[0], 2 * x, rtol=0, atol=0)
    np.testing.assert_allclose(
        got[1], np.broadcast_to((2 * x).sum(1, keepdims=True), x.shape), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(got[2], np.exp(x), rtol=1e-5)
    np.testing.assert_allclose(
        got[3], np.broadcast_to(np.exp(x).max(1, keepdims=True), x.shape), rtol=1e-5
    )
    np.testing.assert_array_equal(got[4], np.where(pred != 0, x, np.float32(-1)))


@nki.jit
def k_masked_reductions(a):
    # classic masks on reducing instructions: i=1's activation_reduce is masked off entirely,
    # the second one selects columns < 40 of partitions < 100, range_select columns < 10 of
    # partitions < 64, tensor_scalar_reduce columns < 20 of every partition
    out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:64]
    res = [nl.full((128, 1), 7.0, dtype=nl.float32, buffer=nl.sbuf) for _ in range(4)]
    act = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(2):
        act[...] = nisa.activation_reduce(
            op=nl.square, data=nl.load(a[i]), reduce_op=np.add, reduce_res=res[0],
            mask=(i * 128 < 100),
        )  # fmt: skip
    x = nl.load(a[2])
    act[...] = nisa.activation_reduce(
        op=nl.copy, data=x, reduce_op=np.add, reduce_res=res[1], mask=(jf < 40) & (ip < 100)
    )
    lo, hi = nl.full((128, 1), 0.0, dtype=nl.float32), nl.full((128, 1), 64.0, dtype=nl.float32)
    act[...] = nisa.range_select(
        on_true_tile=x, comp_op0=np.greater_equal, comp_op1=np.less, bound0=lo, bound1=hi,
        reduce_cmd=RC.reset_reduce, reduce_res=res[2], reduce_op=np.max,
        mask=(jf < 10) & (ip < 64),
    )  # fmt: skip
    act[...] = nisa.tensor_scalar_reduce(
        data=x, op0=np.multiply, operand0=2.0, reduce_op=np.add, reduce_res=res[3],
        mask=(jf < 20),
    )  # fmt: skip
    for c in range(4):
        nl.store(out[nl.arange(128)[:, None], c + nl.arange(1)[None, :]], res[c])
    return out


@pytest.mark.parametrize("backend", ["numpy", "batched", "numba"])
def test_a_masked_reduction_folds_in_only_what_its_mask_selects(backend):
    a = RNG.standard_normal((3, 128, 64)).astype(np.float32)
    a[1] *= 2  # (what the masked-off instruction would have summed)
    want = np.full((128, 4), 7.0, dtype=np.float32)
    want[:, 0] = (a[0] ** 2).sum(1)
    want[:100, 1] = a[2, :100, :40].sum(1)
    want[:64, 2] = a[2, :64, :10].max(1)
    want[:, 3] = (2 * a[2, :, :20]).sum(1)
    got = k_masked_reductions.configure(backend=backend)(a)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
