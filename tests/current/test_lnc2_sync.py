"""nisa.core_barrier and nisa.sendrecv between the two cores of an LNC=2 launch (ordering,
data exchange, run-time meeting checks, per-target availability) and NkiScalar
(nisa.scalar_load / scalar_store, wraparound arithmetic, fori_loop bound, .ap offset)."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIDependencyError, NKIError, NKIRuntimeError

from helpers import expect, line_of

RNG = np.random.default_rng(5)


def _sb(shape, dtype):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


def swap_halves(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    mine, theirs = _sb((128, a.shape[1]), a.dtype), _sb((128, a.shape[1]), a.dtype)
    nisa.dma_copy(dst=mine, src=a[pid * 128 : pid * 128 + 128, :])
    nisa.sendrecv(mine, theirs, 1 - pid, 1 - pid, 0)  # src first
    nisa.dma_copy(dst=out[pid * 128 : pid * 128 + 128, :], src=theirs)
    return out


def test_sendrecv_swaps_the_cores_tiles():
    a = RNG.random((256, 24), dtype=np.float32)
    k = nki.jit(swap_halves)
    np.testing.assert_array_equal(k[2](a), np.concatenate([a[128:], a[:128]]))
    assert len(k.last_ir.cores) == 2


def exchange_through_hbm(a, barrier=True):
    """Each core writes its half, then reads the other core's half: needs the barrier."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    res = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t, u = _sb((128, a.shape[1]), a.dtype), _sb((128, a.shape[1]), a.dtype)
    nisa.dma_copy(dst=t, src=a[pid * 128 : pid * 128 + 128, :])
    nisa.dma_copy(dst=out[pid * 128 : pid * 128 + 128, :], src=t)  # ERR
    if barrier:
        nisa.core_barrier(out, (0, 1))
    nisa.dma_copy(dst=u, src=out[(1 - pid) * 128 : (2 - pid) * 128, :])
    nisa.tensor_tensor(dst=u, data1=u, data2=t, op=nl.subtract)
    nisa.dma_copy(dst=res[pid * 128 : pid * 128 + 128, :], src=u)
    return res


def test_core_barrier_orders_the_cores_hbm_accesses():
    a = RNG.random((256, 16), dtype=np.float32)
    got = nki.jit(exchange_through_hbm)[2](a)
    np.testing.assert_array_equal(got, np.concatenate([a[128:] - a[:128], a[:128] - a[128:]]))


def test_reading_the_other_cores_write_without_the_barrier_is_a_race():
    a = RNG.random((256, 16), dtype=np.float32)
    with pytest.raises(NKIDependencyError) as ei:
        nki.jit(exchange_through_hbm)[2](a, barrier=False)
    e = ei.value
    assert e.code == "err_spmd_write_race" and "core_barrier" in e.message
    assert e.loc.line == line_of(exchange_through_hbm)


def barrier_each_step(a):
    """Two rounds: write own block of the round, barrier, read the peer's block, barrier."""
    buf = nl.ndarray((4 * 64, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    res = nl.ndarray((4 * 64, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    for r in nl.sequential_range(2):
        t, u = _sb((64, a.shape[1]), a.dtype), _sb((64, a.shape[1]), a.dtype)
        mine = (2 * r + pid) * 64
        peer = (2 * r + 1 - pid) * 64
        nisa.dma_copy(dst=t, src=a[mine : mine + 64, :])
        nisa.dma_copy(dst=buf[mine : mine + 64, :], src=t)
        nisa.core_barrier(buf, (0, 1))
        nisa.dma_copy(dst=u, src=buf[peer : peer + 64, :])
        nisa.dma_copy(dst=res[mine : mine + 64, :], src=u)
        nisa.core_barrier(buf, (0, 1))
    return res


def test_barriers_inside_a_loop_order_each_round():
    a = RNG.random((256, 8), dtype=np.float32)
    got = nki.jit(barrier_each_step)[2](a)
    want = np.concatenate([a[64:128], a[0:64], a[192:256], a[128:192]])
    np.testing.assert_array_equal(got, want)


def barrier_on_one_core(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = _sb(a.shape, a.dtype)
    nisa.dma_copy(dst=t, src=a)
    if nl.program_id(0) == 0:
        nisa.core_barrier(out, (0, 1))  # ERR
        nisa.dma_copy(dst=out, src=t)
    return out


def test_a_barrier_only_one_core_reaches_is_a_located_run_time_error():
    expect(barrier_on_one_core, np.ones((4, 4), np.float32), cls=NKIRuntimeError,
           code="err_collective_mismatch", values=("without reaching it",), grid=2)  # fmt: skip


def mismatched_pipes(a):
    out = nl.ndarray((8, 4), dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t, u = _sb(a.shape, a.dtype), _sb(a.shape, a.dtype)
    nisa.dma_copy(dst=t, src=a)
    nisa.sendrecv(t, u, 1 - pid, 1 - pid, pid)  # ERR
    nisa.dma_copy(dst=out[pid * 4 : pid * 4 + 4, :], src=u)
    return out


def test_sendrecv_partners_with_different_pipe_ids_is_a_located_error():
    expect(mismatched_pipes, np.ones((4, 4), np.float32), cls=NKIRuntimeError,
           code="err_collective_mismatch", values=("pipe_id 0", "pipe_id 1"), grid=2)  # fmt: skip


def sendrecv_from_hbm(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = _sb(a.shape, a.dtype)
    nisa.sendrecv(a, t, 1 - nl.program_id(0), 1 - nl.program_id(0), 0)  # ERR
    nisa.dma_copy(dst=out, src=t)
    return out


def test_sendrecv_needs_sbuf_tiles():
    expect(sendrecv_from_hbm, np.ones((4, 4), np.float32), code="err_unsupported_memory",
           values=("sbuf",), grid=2)  # fmt: skip


def sendrecv_gpsimd_too_big(a):
    pid = nl.program_id(0)
    t, u = _sb((128, 512), nl.float32), _sb((128, 512), nl.float32)
    nisa.dma_copy(dst=t, src=a)
    nisa.sendrecv(t, u, 1 - pid, 1 - pid, 0, dma_engine=nisa.dma_engine.gpsimd_dma)  # ERR
    return a


def test_sendrecv_on_gpsimd_dma_is_capped_per_partition():
    code = "err_size_of_dimension_exceed_arch_limit"
    expect(sendrecv_gpsimd_too_big, np.ones((128, 512), np.float32), code=code,
           values=("1024", "2048"), grid=2)  # fmt: skip


def barrier_bad_cores(a):
    nisa.core_barrier(a, (0, 2))  # ERR
    return a


def test_core_barrier_supports_only_cores_0_and_1():
    expect(barrier_bad_cores, np.ones((4, 4), np.float32), code="err_invalid_argument",
           values=("(0, 1)",), grid=2)  # fmt: skip


def barrier_lnc1(a):
    nisa.core_barrier(a, (0, 1))  # ERR
    return a


def test_core_barrier_needs_an_lnc2_launch_and_a_v3_target():
    expect(barrier_lnc1, np.ones((4, 4), np.float32),
           code="err_unsupported_instruction_for_target", values=("kernel[2]",))  # fmt: skip
    expect(barrier_lnc1, np.ones((4, 4), np.float32), platform_target="trn1",
           code="err_unsupported_instruction_for_target", values=("trn1",))  # fmt: skip


# ---- NkiScalar ---------------------------------------------------------------------------------
def scalar_arith(x):
    out = nl.ndarray((1, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    s = nisa.scalar_load(x)
    r = -((s * s) + 7 - 3 * s)
    nisa.scalar_store(out, r)
    return out


@pytest.mark.parametrize("v", [3, 100000, -46341, 2**31 - 1, -(2**31)])
def test_nkiscalar_arithmetic_wraps_around_at_int32(v):
    x = np.array([[v]], dtype=np.int32)
    s = v
    want = -((s * s) + 7 - 3 * s)
    want = (want + 2**31) % 2**32 - 2**31  # two's complement at 32 bits, from Python ints
    got = nki.jit(scalar_arith)(x)
    assert got.dtype == np.int32 and int(got[0, 0]) == want


def square(x):
    out = nl.ndarray((1, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    s = nisa.scalar_load(x)
    nisa.scalar_store(out, s * s)
    return out


def test_int32_multiplication_wraps_like_the_device():
    assert nki.jit(square)(np.array([[100000]], np.int32))[0, 0] == 1410065408


def scalar_loop_bound(x, n):
    out = nl.ndarray((1, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = _sb((1, 32), nl.float32)
    nisa.memset(dst=acc, value=0.0)
    m = nisa.scalar_load(n) - 1  # an int32 NkiScalar as the loop bound

    def body(i):
        row = _sb((1, 32), nl.float32)
        nisa.dma_copy(dst=row, src=x.ap([[32, 1], [1, 32]], offset=0, scalar_offset=i))
        nisa.tensor_tensor(dst=acc, data1=acc, data2=row, op=nl.add)

    nl.fori_loop(0, m, body)
    nisa.dma_copy(dst=out, src=acc)
    return out


@pytest.mark.parametrize("n", [1, 4, 9])
def test_int32_nkiscalar_bounds_fori_loop(n):
    x = RNG.random((16, 32), dtype=np.float32)
    got = nki.jit(scalar_loop_bound)(x, np.array([[n]], np.int32))
    np.testing.assert_allclose(got, x[: n - 1].sum(axis=0, keepdims=True), rtol=1e-6)


def scalar_offset_row(x, idx):
    out = nl.ndarray((1, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    r = nisa.scalar_load(idx) * 2 + 1
    t = _sb((1, 32), x.dtype)
    nisa.dma_copy(dst=t, src=x.ap([[32, 1], [1, 32]], offset=0, scalar_offset=r))
    nisa.dma_copy(dst=out, src=t)
    return out


def test_nkiscalar_is_an_ap_scalar_offset():
    x = RNG.random((16, 32), dtype=np.float32)
    got = nki.jit(scalar_offset_row)(x, np.array([[3]], np.int32))
    np.testing.assert_array_equal(got, x[7:8])


def store_python_int(x):
    out = nl.ndarray((1, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.scalar_store(out, 5)  # ERR
    return out


def test_scalar_store_rejects_python_ints():
    expect(store_python_int, np.zeros((1, 1), np.int32), code="err_unsupported_operand",
           values=("NkiScalar",))  # fmt: skip


def branch_on_scalar(x):
    s = nisa.scalar_load(x)
    if s > 0:  # ERR
        pass
    return x


def test_nkiscalar_has_no_python_value():
    expect(branch_on_scalar, np.zeros((1, 1), np.int32),
           code="err_dynamic_control_flow_not_supported", values=("device",))  # fmt: skip


def test_scalar_load_needs_a_one_element_int_tensor():
    def k(x):
        nisa.scalar_load(x)  # ERR
        return x

    with pytest.raises(NKIError) as ei:
        nki.jit(k)(np.zeros((1, 2), np.int32))
    assert ei.value.code == "err_unsupported_operand" and "one-element" in ei.value.message


def scalar_times_float(x):
    s = nisa.scalar_load(x)
    s * 1.5  # ERR
    return x


def test_nkiscalar_arithmetic_takes_ints_only():
    expect(scalar_times_float, np.zeros((1, 1), np.int32), code="err_unsupported_operand",
           values=("float",))  # fmt: skip
