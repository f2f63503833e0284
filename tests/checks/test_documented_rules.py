"""Rules the current NKI pages (SDK 2.32 docstrings) state for instructions, views and device
loops: each broken rule is a located error naming the rule and the values, at the kernel's line
marked ``# ERR``; the valid neighbour of a rule runs and matches NumPy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl

from helpers import expect


def _sb(shape, dtype=nl.float32, buffer=nl.sbuf):
    return nl.ndarray(shape, dtype=dtype, buffer=buffer)


def transpose_into_hbm(x):
    s = _sb((16, 64), nl.bfloat16)
    nisa.dma_copy(dst=s, src=x)
    d = _sb((64, 16), nl.bfloat16, nl.shared_hbm)
    nisa.dma_transpose(dst=d, src=s)  # ERR
    return d


def transpose_converting(x):
    s = _sb((16, 64), nl.bfloat16)
    nisa.dma_copy(dst=s, src=x)
    d = _sb((64, 16), nl.float16)
    nisa.dma_transpose(dst=d, src=s)  # ERR
    return x


def iota_of_five_pairs(x):
    t = _sb((128, 64))
    nisa.iota(dst=t, pattern=[[32, 2], [16, 2], [8, 2], [4, 2], [1, 4]], offset=0)  # ERR
    return x


def max8_of_four_dims(x):
    t = _sb((128, 2, 4, 8))
    nisa.memset(dst=t, value=0.0)
    m = _sb((128, 8))
    nisa.max8(dst=m, src=t)  # ERR
    return x


def register_from_psum(x):
    p = _sb((1, 1), nl.int32, nl.psum)
    nisa.memset(dst=p, value=3)
    r = nisa.register_alloc()
    nisa.register_load(r, p)  # ERR
    return x


def gather_converting(x):
    src = _sb((128, 32))
    nisa.memset(dst=src, value=1.0)
    idx = _sb((128, 4), nl.uint16)
    nisa.memset(dst=idx, value=0)
    g = _sb((128, 64), nl.bfloat16)
    nisa.local_gather(dst=g, src_buffer=src, index=idx)  # ERR
    return x


def exponential_reset(x):
    t, d, rr = _sb((128, 64)), _sb((128, 64)), _sb((128, 1))
    nisa.memset(dst=t, value=1.0)
    nisa.exponential(dst=d, src=t, reduce_res=rr, reduce_cmd=nisa.reduce_cmd.reset)  # ERR
    return x


def scalar_reduce_idle(x):
    t, d, rr = _sb((128, 64)), _sb((128, 64)), _sb((128, 1))
    nisa.memset(dst=t, value=1.0)
    idle = nisa.reduce_cmd.idle
    nisa.tensor_scalar_reduce(dst=d, data=t, op0=nl.add, operand0=0.0, reduce_op=nl.add,  # ERR
                              reduce_res=rr, reduce_cmd=idle)  # fmt: skip
    return x


def seed_of_four(x):
    s = _sb((2, 2), nl.int32)
    nisa.memset(dst=s, value=7)
    nl.random_seed(s)  # ERR
    return x


def dropout_rates_of_four_columns(x):
    t = nl.load(x)
    r = nl.full((128, 4), 0.5, dtype=nl.float32)
    out = _sb((128, 64), nl.float32, nl.shared_hbm)
    nl.store(out, nl.dropout(t, r))  # ERR
    return out


def write_the_loop_iterator(x):
    for i in nl.dynamic_range(0, 3):
        nisa.register_move(i, 5)  # ERR
    return x


def every_other_partition(x):
    t = _sb((128, 64))
    nisa.dma_copy(dst=t, src=x)
    u = _sb((64, 64))
    nisa.tensor_copy(dst=u, src=t[0:128:2, :])  # ERR
    return x


def slice_of_a_gather(x):
    offs = _sb((128, 1), nl.int32)
    nisa.memset(dst=offs, value=0)
    v = x.vector_select(0, offs).slice(0, 0, 64)  # ERR
    return v


def two_dynamic_selects(x):
    idx = _sb((1, 1), nl.int32)
    nisa.memset(dst=idx, value=1)
    v = x.select(0, idx)
    w = v.select(0, idx)  # ERR
    return w


def bounds_of_negative_ids(ids):
    sg = _sb((1, 8))
    nisa.dma_copy(dst=sg, src=ids)
    sb = _sb((1, 2, 8))
    nisa.sequence_bounds(dst=sb, segment_ids=sg)  # ERR
    return ids


def ocp_fp8_matmul_on_trn2(x):
    a = _sb((128, 64), nl.float8_e4m3fn)
    nisa.memset(dst=a, value=0.0)
    p = _sb((64, 64), nl.float32, nl.psum)
    nisa.nc_matmul(dst=p, stationary=a, moving=a)  # ERR
    return x


def bf16_matmul_of_8193_columns(x):
    a = _sb((128, 64), nl.bfloat16)
    nisa.memset(dst=a, value=0.0)
    b = _sb((128, 8193), nl.bfloat16)
    nisa.memset(dst=b, value=0.0)
    p = _sb((64, 8193), nl.bfloat16, nl.psum)
    nisa.nc_matmul(dst=p, stationary=a, moving=b)  # ERR
    return x


F32 = np.zeros((128, 64), np.float32)
BF16 = np.zeros((16, 64), ml_dtypes.bfloat16)
CASES = [
    (transpose_into_hbm, BF16, "err_unsupported_memory", "SBUF"),
    (transpose_converting, BF16, "err_unsupported_dtype", "float16"),
    (iota_of_five_pairs, F32, "err_invalid_argument", "at most 4"),
    (max8_of_four_dims, F32, "err_invalid_shape", "at most 3"),
    (register_from_psum, F32, "err_unsupported_operand", "SBUF or HBM"),
    (gather_converting, F32, "err_unsupported_dtype", "without conversion"),
    (exponential_reset, F32, "err_invalid_argument", "reduce_cmd=reset"),
    (scalar_reduce_idle, F32, "err_invalid_argument", "reduce_cmd=idle"),
    (seed_of_four, F32, "err_invalid_shape", "(1, 1)"),
    (dropout_rates_of_four_columns, F32, "err_invalid_shape", "(128, 1)"),
    (write_the_loop_iterator, F32, "err_invalid_argument", "read-only"),
    (every_other_partition, F32, "err_unsupported_start_partition", "steps of 2"),
    (slice_of_a_gather, np.zeros((4, 64), np.float32), "err_invalid_view", "gathered axis 0"),
    (two_dynamic_selects, np.zeros((4, 128, 64), np.float32), "err_invalid_view", "one dynamic"),
    (bounds_of_negative_ids, np.array([[1, 1, -1, 2, 0, 3, 3, 2]], np.float32),
     "err_invalid_argument", "non-negative"),
    (ocp_fp8_matmul_on_trn2, F32, "err_unsupported_matmul_dtype", "float8_e4m3fn"),
    (bf16_matmul_of_8193_columns, F32, "err_size_of_dimension_exceed_arch_limit", "8192"),
]  # fmt: skip
TARGETS = {ocp_fp8_matmul_on_trn2: "trn2"}


@pytest.mark.parametrize(("fn", "x", "code", "value"), CASES, ids=[c[0].__name__ for c in CASES])
def test_a_documented_rule_broken_is_a_located_error(fn, x, code, value):
    expect(fn, x, code=code, values=(value,), target=TARGETS.get(fn))


@nki.jit
def wide_and_ocp_neighbours(a, b):
    """trn3's neighbours: a bfloat16 result of 8192 columns (its whole PSUM), float8_e4m3fn
    operands; and a hardware-DGE transpose of 16 rows (``dma_transpose.hwdge_shape``)."""
    out = nl.ndarray((64, 8192), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    out8 = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    outt = nl.ndarray((64, 16), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    sa, sb = _sb((128, 64), nl.bfloat16), _sb((128, 8192), nl.bfloat16)
    nisa.dma_copy(dst=sa, src=a)
    nisa.dma_copy(dst=sb, src=b)
    p = _sb((64, 8192), nl.bfloat16, nl.psum)
    nisa.nc_matmul(dst=p, stationary=sa, moving=sb)
    r = _sb((64, 8192), nl.bfloat16)
    nisa.tensor_copy(dst=r, src=p)
    nisa.dma_copy(dst=out, src=r)
    f8 = _sb((128, 64), nl.float8_e4m3fn)
    nisa.tensor_copy(dst=f8, src=sa)
    p8 = _sb((64, 64), nl.float32, nl.psum)
    nisa.nc_matmul(dst=p8, stationary=f8, moving=f8)
    r8 = _sb((64, 64), nl.float32)
    nisa.tensor_copy(dst=r8, src=p8)
    nisa.dma_copy(dst=out8, src=r8)
    t = _sb((64, 16), nl.bfloat16)
    nisa.dma_transpose(dst=t, src=sa[0:16, :], dge_mode=nisa.dge_mode.hwdge)
    nisa.dma_copy(dst=outt, src=t)
    return out, out8, outt


def test_trn3_neighbours_run():
    rng = np.random.default_rng(1)
    a = (rng.integers(-4, 5, (128, 64)) / 4).astype(ml_dtypes.bfloat16)
    b = (rng.integers(-4, 5, (128, 8192)) / 4).astype(ml_dtypes.bfloat16)
    out, out8, outt = wide_and_ocp_neighbours.configure(target="trn3")(a, b)
    af = a.astype(np.float32)
    want = (af.T @ b.astype(np.float32)).astype(ml_dtypes.bfloat16)  # (exact fp32, rounded)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(out8, af.T @ af)  # (quarters are exact in e4m3fn)
    np.testing.assert_array_equal(outt, a[0:16].T)


@nki.jit
def neighbours(x, rates):
    """The valid neighbours: per-partition dropout rates, every partition in order, a whole
    gathered view, one dynamic select."""
    out = nl.ndarray((3, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out[0], nl.dropout(t, nl.load(rates)))
    u = _sb((128, 64))
    nisa.tensor_copy(dst=u, src=t[0:128, :])
    nl.store(out[1], u)
    offs = _sb((128, 1), nl.int32)
    nisa.iota(dst=offs, pattern=[[0, 1]], offset=0, channel_multiplier=1)
    g = _sb((128, 64))
    nisa.dma_copy(dst=g, src=x.vector_select(0, offs)[:, :])
    nl.store(out[2], g)
    return out


def test_the_rules_neighbours_run():
    x = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
    rates = np.zeros((128, 1), np.float32)
    rates[:64] = 1.0  # (the first 64 partitions drop every element, the others keep them)
    got = neighbours(x, rates)
    np.testing.assert_array_equal(got[0], np.where(np.arange(128)[:, None] < 64, 0, x))
    np.testing.assert_array_equal(got[1], x)
    np.testing.assert_array_equal(got[2], x)
