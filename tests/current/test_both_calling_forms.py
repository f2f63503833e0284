"""Differential property test: each instruction called in its classic form (returns a tile, with
dtype= the destination's) and in its destination-first form (writes dst) on the same random
inputs gives bit-identical results. Also: the destination-first form returns an instruction
handle, and its keyword and shape mistakes are located errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nki
import nki.isa as nisa
import nki.language as nl

from helpers import expect

# name -> (classic call, current call, result buffer, result shape from the input shape)
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
    if name == "max8":
        f = max(f, 8)
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((p, f)) + 2.0).astype(np.float32)
    b = rng.standard_normal((p, f)).astype(np.float32)
    if name in ("nc_transpose", "nc_matmul", "dma_transpose"):
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
    from helpers import line_of

    e = expect(
        k_mixed,
        np.ones((8, 4), np.float32),
        code="err_mixed_api_generations",
        values=["destination-first", "classic call nisa.tensor_scalar"],
    )
    assert f":{line_of(k_mixed, '# FIRST')}" in str(e)
