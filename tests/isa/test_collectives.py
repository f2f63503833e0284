"""nisa.core_barrier and nisa.sendrecv between the two cores of an LNC=2 launch: ordering,
data exchange, run-time meeting checks and per-target availability."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIDependencyError, NKIRuntimeError

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


def exchange_through_hbm(a, barrier=True, token_in_sbuf=False):
    """Each core writes its half, then reads the other core's half: needs the barrier (whose
    token may be an SBUF tensor, as AWS's NKI library passes it)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    res = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t, u = _sb((128, a.shape[1]), a.dtype), _sb((128, a.shape[1]), a.dtype)
    nisa.dma_copy(dst=t, src=a[pid * 128 : pid * 128 + 128, :])
    nisa.dma_copy(dst=out[pid * 128 : pid * 128 + 128, :], src=t)  # ERR
    if barrier:
        nisa.core_barrier(_sb((1, 1), nl.int32) if token_in_sbuf else out, (0, 1))
    nisa.dma_copy(dst=u, src=out[(1 - pid) * 128 : (2 - pid) * 128, :])
    nisa.tensor_tensor(dst=u, data1=u, data2=t, op=nl.subtract)
    nisa.dma_copy(dst=res[pid * 128 : pid * 128 + 128, :], src=u)
    return res


@pytest.mark.parametrize("token_in_sbuf", [False, True])
def test_core_barrier_orders_the_cores_hbm_accesses(token_in_sbuf):
    a = RNG.random((256, 16), dtype=np.float32)
    got = nki.jit(exchange_through_hbm)[2](a, token_in_sbuf=token_in_sbuf)
    np.testing.assert_array_equal(got, np.concatenate([a[128:] - a[:128], a[:128] - a[128:]]))


def test_reading_the_other_cores_write_without_the_barrier_is_a_race():
    a = RNG.random((256, 16), dtype=np.float32)
    with pytest.raises(NKIDependencyError) as ei:
        nki.jit(exchange_through_hbm)[2](a, barrier=False)
    e = ei.value
    assert e.code == "err_core_race" and "core_barrier" in e.message
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


def barrier_psum_token(a):
    p = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.psum)
    nisa.core_barrier(p, (0, 1))  # ERR
    return a


def test_core_barrier_token_is_in_shared_hbm_or_sbuf():
    expect(barrier_psum_token, np.ones((4, 4), np.float32), code="err_unsupported_memory",
           values=("shared HBM", "SBUF", "in psum"), grid=2)  # fmt: skip
