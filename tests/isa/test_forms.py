"""The two calling forms. Differential property test: each instruction called in its classic
form (returns a tile, with dtype= the destination's) and in its destination-first form (writes
dst) on the same random inputs gives bit-identical results. The destination-first form returns
an instruction handle, and its keyword and shape mistakes are located errors; it writes a dst
whose free dims are shaped differently from its result when the partitions and elements per
partition agree (``[128, 1, 128]`` for a ``[128, 128]`` transpose, a strided ``.ap`` view into
PSUM), in the destination's own free-dim order, broadcasts into a larger dst, and reports a dst
with other element counts. A current-API-only instruction in a classic kernel is a mixed
generation error; its misspelled keyword names the closest one."""

from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError, NKIShapeError

from helpers import expect, expect_error, line_of
from helpers import load_sbuf as _load

# name -> (classic call, current call, result buffer, result shape from the input shape); every
# family of instructions with both forms has at least one row
CASES = {
    "tensor_tensor": (
        lambda a, b, dt: nisa.tensor_tensor(a, b, op=nl.subtract, dtype=dt),
        lambda d, a, b: nisa.tensor_tensor(d, a, b, nl.subtract),
        "sbuf", lambda s: s,
    ),
    "tensor_scalar": (
        lambda a, b, dt: nisa.tensor_scalar(a, nl.multiply, 1.5, op1=nl.add, operand1=-0.25,
                                            dtype=dt),
        lambda d, a, b: nisa.tensor_scalar(d, a, nl.multiply, 1.5, op1=nl.add, operand1=-0.25),
        "sbuf", lambda s: s,
    ),
    "activation": (
        lambda a, b, dt: nisa.activation(nl.tanh, a, scale=0.75, dtype=dt),
        lambda d, a, b: nisa.activation(d, nl.tanh, a, scale=0.75),
        "sbuf", lambda s: s,
    ),
    "tensor_copy": (
        lambda a, b, dt: nisa.tensor_copy(a, dtype=dt),
        lambda d, a, b: nisa.tensor_copy(dst=d, src=a),
        "sbuf", lambda s: s,
    ),
    "tensor_reduce": (
        lambda a, b, dt: nisa.tensor_reduce(nl.maximum, a, axis=1, dtype=dt, keepdims=True),
        lambda d, a, b: nisa.tensor_reduce(d, nl.maximum, a, 1, keepdims=True),
        "sbuf", lambda s: (s[0], 1),
    ),
    "reciprocal": (
        lambda a, b, dt: nisa.reciprocal(a, dtype=dt),
        lambda d, a, b: nisa.reciprocal(d, a),
        "sbuf", lambda s: s,
    ),
    "scalar_tensor_tensor": (
        lambda a, b, dt: nisa.scalar_tensor_tensor(data=a, op0=nl.multiply, operand0=2.0,
                                                   op1=nl.add, operand1=b, dtype=dt),
        lambda d, a, b: nisa.scalar_tensor_tensor(dst=d, data=a, op0=nl.multiply, operand0=2.0,
                                                  op1=nl.add, operand1=b),
        "sbuf", lambda s: s,
    ),
    "nc_transpose": (
        lambda a, b, dt: nisa.nc_transpose(a, dtype=dt),
        lambda d, a, b: nisa.nc_transpose(d, a),
        "psum", lambda s: (s[1], s[0]),
    ),
    "nc_matmul": (
        lambda a, b, dt: nisa.nc_matmul(a, b, dtype=dt),
        lambda d, a, b: nisa.nc_matmul(d, a, b, accumulate=False),
        "psum", lambda s: (s[1], s[1]),
    ),
    "tensor_tensor_scan": (
        lambda a, b, dt: nisa.tensor_tensor_scan(a, b, 0.5, nl.multiply, nl.add, dtype=dt),
        lambda d, a, b: nisa.tensor_tensor_scan(d, a, b, 0.5, nl.multiply, nl.add),
        "sbuf", lambda s: s,
    ),
    "tensor_partition_reduce": (
        lambda a, b, dt: nisa.tensor_partition_reduce(nl.maximum, a, dtype=dt),
        lambda d, a, b: nisa.tensor_partition_reduce(d, nl.maximum, a),
        "sbuf", lambda s: (1, s[1]),
    ),
    "max8": (
        lambda a, b, dt: nisa.max8(src=a, dtype=dt),
        lambda d, a, b: nisa.max8(d, a),
        "sbuf", lambda s: (s[0], 8),
    ),
    "bn_stats": (
        lambda a, b, dt: nisa.bn_stats(a, dtype=dt),
        lambda d, a, b: nisa.bn_stats(dst=d, data=a),
        "sbuf", lambda s: (s[0], 6),
    ),
    "dma_transpose": (
        lambda a, b, dt: nisa.dma_transpose(a, dtype=dt),
        lambda d, a, b: nisa.dma_transpose(d, a),
        "sbuf", lambda s: (s[1], s[0]),
    ),
    "memset": (
        lambda a, b, dt: nisa.memset(a.shape, 0.375, dt),
        lambda d, a, b: nisa.memset(d, 0.375),
        "sbuf", lambda s: s,
    ),
    "bn_aggr": (
        lambda a, b, dt: nisa.bn_aggr(a[:, 0:3], dtype=dt),
        lambda d, a, b: nisa.bn_aggr(d, a[:, 0:3]),
        "sbuf", lambda s: (s[0], 2),
    ),
    "dropout": (
        lambda a, b, dt: nisa.dropout(a, 0.5, dtype=dt),
        lambda d, a, b: nisa.dropout(d, a, 0.5),
        "sbuf", lambda s: s,
    ),
    "nc_match_replace8": (
        lambda a, b, dt: nisa.nc_match_replace8(data=a, vals=a[:, 0:8], imm=-1.0, dtype=dt),
        lambda d, a, b: nisa.nc_match_replace8(d, a, a[:, 0:8], -1.0),
        "sbuf", lambda s: s,
    ),
}  # fmt: skip


def _kernel(name: str, form: str, out_dtype):
    classic, cur, buffer, shape_of = CASES[name]

    def kernel(a, b):
        rs = shape_of(a.shape)
        out = nl.ndarray(rs, dtype=nl.float32, buffer=nl.shared_hbm)
        at = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        bt = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a)
        nisa.dma_copy(dst=bt, src=b)
        if form == "classic":
            r = classic(at, bt, out_dtype)
        else:
            r = nl.ndarray(rs, dtype=out_dtype, buffer=nl.psum if buffer == "psum" else nl.sbuf)
            cur(r, at, bt)
        if form == "classic":
            res = nisa.tensor_copy(r, dtype=nl.float32)
        else:
            res = nl.ndarray(rs, dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=r)
        nisa.dma_copy(dst=out, src=res)
        return out

    kernel.__name__ = f"{name}_{form}"
    return nki.jit(kernel, api=form)


@pytest.mark.parametrize("name", sorted(CASES))
@given(p=st.integers(1, 32), f=st.integers(1, 48), seed=st.integers(0, 2**16), bf16=st.booleans())
def test_classic_and_destination_first_forms_agree(name, p, f, seed, bf16):
    if name == "nc_matmul":
        f = min(f, 32)
    if name in ("max8", "nc_match_replace8"):
        f = max(f, 8)
    if name == "bn_aggr":
        f = max(f, 3)
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((p, f)) + 2.0).astype(np.float32)
    b = rng.standard_normal((p, f)).astype(np.float32)
    if name == "dma_transpose" or (name == "dropout" and bf16):
        # a direct DMA transpose moves 2-byte dtypes; dropout's dst has data's dtype (current API)
        a, b = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
        dt = nl.bfloat16
    elif name in ("nc_transpose", "nc_matmul"):
        dt = nl.float32  # transpose passes data through; matmul writes fp32 PSUM on trn2
    else:
        dt = nl.bfloat16 if bf16 else nl.float32
    want = _kernel(name, "classic", dt)(a, b)
    got = _kernel(name, "current", dt)(a, b)
    np.testing.assert_array_equal(got, want)
    assert np.isfinite(got).all()


def test_destination_first_call_returns_an_instruction_handle():
    seen = []

    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, a)
        seen.append(nisa.tensor_scalar(t, t, nl.add, 1.0))
        nisa.dma_copy(out, t)
        return out

    a = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    np.testing.assert_array_equal(k(a), a + 1)
    h = seen[0]
    assert h.name == "tensor_scalar" and h.instr.op == "tensor_scalar"
    assert h.instr.dst.tensor != "" and not hasattr(h, "shape")


def k_misspelt(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.tensor_tensor(dst=t, data1=t, data2=t, opp=nl.add)  # ERR
    nisa.dma_copy(dst=out, src=t)
    return out


def test_misspelt_keyword_of_the_destination_first_form_is_located():
    expect(
        k_misspelt,
        np.ones((8, 4), np.float32),
        code="err_unexpected_keyword_argument",
        values=["'opp'", "did you mean 'op'"],
    )


def k_oob_dst(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((8, 4), dtype=a.dtype, buffer=nl.sbuf)
    w = nl.ndarray((8, 8), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.tensor_copy(dst=w[:, 6:10], src=t)  # ERR
    nisa.dma_copy(dst=out, src=t)
    return out


def test_out_of_bounds_destination_is_located():
    expect(
        k_oob_dst,
        np.ones((8, 4), np.float32),
        code="err_tensor_access_out_of_bound",
        values=["[6, 9]", "size of 8"],
    )


def k_mixed(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    u = nisa.tensor_scalar(t, nl.add, 1.0)  # FIRST
    v = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(v, t, u, nl.add)  # ERR
    nl.store(out, v)
    return out


def test_mixing_generations_names_both_lines():
    e = expect(
        k_mixed,
        np.ones((8, 4), np.float32),
        code="err_mixed_api_generations",
        values=["destination-first", "classic call nisa.tensor_scalar"],
    )
    assert f":{line_of(k_mixed, '# FIRST')}" in str(e)


RNG = np.random.default_rng(7)


def _x(shape=(64, 32), lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def k_classic_then_current(a):
    x = nl.load(a)
    y = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_cumulative(y, x, nl.multiply, nl.add, imm0=1.0)
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, y)
    return out


def test_a_classic_kernel_may_call_an_instruction_of_the_current_api_only():
    # (it has no classic form, so nothing is ambiguous: AWS's neuronxcc.nki examples of the
    # newer instructions load with nl.load and call them destination-first)
    x = _x()
    k = nki.jit(k_classic_then_current, api="classic")
    np.testing.assert_array_equal(k(x), np.cumsum(x, axis=1, dtype=np.float32))
    assert k.last_ir.generation == "classic"


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


@nki.jit
def transpose_into_3d(x):
    out = nl.ndarray((128, 1, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    ps = nl.ndarray((128, 1, 64), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_transpose(dst=ps, data=t)
    sb = nl.ndarray((128, 1, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=sb, src=ps)
    nisa.dma_copy(dst=out, src=sb)
    return out


@nki.jit
def copy_into_strided_view(x):
    # dst: a [32, 4, 8] walk with stride 16 over the outer free dim of a [32, 64] tile
    out = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((32, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    big = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=big, value=0.0)
    nisa.tensor_scalar(
        dst=big.ap([[64, 32], [16, 4], [1, 8]]), data=t, op0=nl.multiply, operand0=2.0
    )
    nisa.dma_copy(dst=out, src=big)
    return out


def test_transpose_into_a_destination_with_a_unit_free_dim():
    x = RNG.standard_normal((64, 128)).astype(np.float32)
    got = nki.simulate(transpose_into_3d)(x)
    np.testing.assert_array_equal(got, x.T.reshape(128, 1, 64))


def test_result_lands_in_the_destination_views_free_dim_order():
    x = RNG.standard_normal((32, 32)).astype(np.float32)
    want = np.zeros((32, 64), np.float32)
    want.reshape(32, 4, 16)[:, :, :8] = 2 * x.reshape(32, 4, 8)
    np.testing.assert_array_equal(nki.simulate(copy_into_strided_view)(x), want)


@pytest.mark.parametrize("src_shape", [(128, 1), (1, 16)])
def test_a_result_is_not_broadcast_into_a_wider_destination(src_shape):
    # the tensor_copy / activation pages: dst has the result's partitions and elements per
    # partition; an engine does not broadcast along or across partitions (a stride-0 view does)
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        col = nl.ndarray(src_shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=col, src=x)
        wide = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=wide, src=col)  # ERR
        nisa.dma_copy(dst=out, src=wide)
        return out

    with pytest.raises(NKIShapeError) as ei:
        nki.simulate(k)(RNG.standard_normal(src_shape).astype(np.float32))
    assert ei.value.loc.line == line_of(k, "# ERR")
    assert f"{list(src_shape)}" in str(ei.value) and "[128, 16]" in str(ei.value)


def test_destination_with_other_elements_per_partition_is_an_error():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        small = nl.ndarray((128, 2, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=small, src=t)  # ERR
        nisa.dma_copy(dst=out[:, 0:32], src=small)
        return out

    with pytest.raises(NKIShapeError) as ei:
        nki.simulate(k)(RNG.standard_normal((128, 64)).astype(np.float32))
    src, first = inspect.getsourcelines(k.fn)
    line = first + next(i for i, s in enumerate(src) if "# ERR" in s)
    assert ei.value.loc.line == line and "[128, 2, 16]" in str(ei.value)
