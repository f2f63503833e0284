"""The cross-core race analysis with every meeting of the two cores of an LNC=2 launch:
nisa.core_barrier, nisa.sendrecv between the cores and the collectives that need both cores'
data order shared-HBM accesses; groups of one core, a core's sendrecv with itself and a one-way
collective_permute do not, and a race across (or within) a meeting is still reported at the
kernel's line."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.collectives as cc
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIDependencyError, NKIRuntimeError

from helpers import expect

RNG = np.random.default_rng(14)
ROWS = 64


def _sb(shape, dtype):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


def _meet(kind, t, pid):
    """One synchronisation of ``kind`` between the cores, exchanging the tile ``t``."""
    x = _sb(t.shape, t.dtype)
    if kind == "barrier":
        return None
    if kind == "sendrecv":
        nisa.sendrecv(t, x, 1 - pid, 1 - pid, 0)
    elif kind == "sendrecv_self":
        nisa.sendrecv(t, x, pid, pid, 0)
    elif kind == "all_reduce":
        cc.all_reduce([t], [x], cc.ReplicaGroup([[0, 1]]), nl.add)
    elif kind == "all_reduce_alone":
        cc.all_reduce([t], [x], cc.ReplicaGroup([[0], [1]]), nl.add)
    return x


def write_then_read_peer(a, kind):
    """Core p writes rows [64p, 64p+64) of the shared ``buf``, meets the other core, then reads
    the other core's rows: ``res`` = peer rows - own rows, plus what the meeting exchanged."""
    buf = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    res = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ex = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    mine, peer = pid * ROWS, (1 - pid) * ROWS
    t, u = _sb((ROWS, a.shape[1]), a.dtype), _sb((ROWS, a.shape[1]), a.dtype)
    nisa.dma_copy(dst=t, src=a[mine : mine + ROWS, :])
    nisa.dma_copy(dst=buf[mine : mine + ROWS, :], src=t)  # ERR
    if kind == "barrier":
        nisa.core_barrier(buf, (0, 1))
    x = _meet(kind, t, pid)
    nisa.dma_copy(dst=u, src=buf[peer : peer + ROWS, :])
    nisa.tensor_tensor(dst=u, data1=u, data2=t, op=nl.subtract)
    nisa.dma_copy(dst=res[mine : mine + ROWS, :], src=u)
    if x is not None:
        nisa.dma_copy(dst=ex[mine : mine + ROWS, :], src=x)
    return res, ex


def _swap(a):
    return np.concatenate([a[ROWS:], a[:ROWS]])


EXCHANGED = {
    "sendrecv": _swap,
    "all_reduce": lambda a: np.tile(a[:ROWS] + a[ROWS:], (2, 1)),
}


@pytest.mark.parametrize("kind", ["barrier", "sendrecv", "all_reduce"])
def test_a_meeting_of_both_cores_orders_the_write_before_the_peers_read(kind):
    a = RNG.standard_normal((2 * ROWS, 16)).astype(np.float32)
    res, ex = nki.jit(write_then_read_peer)[2](a, kind)
    np.testing.assert_array_equal(res, _swap(a) - a)
    if kind in EXCHANGED:
        np.testing.assert_allclose(ex, EXCHANGED[kind](a), rtol=1e-6)


@pytest.mark.parametrize("kind", ["none", "sendrecv_self", "all_reduce_alone"])
def test_a_synchronisation_of_one_core_does_not_order_the_cores(kind):
    a = RNG.standard_normal((2 * ROWS, 16)).astype(np.float32)
    e = expect(write_then_read_peer, a, kind, cls=NKIDependencyError, code="err_core_race",
               values=("core 0 writes", "core 1 reads", "buf"), grid=2)  # fmt: skip
    assert "core_barrier" in e.message


def write_after_meeting(a, kind):
    """After the meeting both cores write row block 0 of ``buf``: a race the meeting does not
    prevent, since both writes come after it."""
    buf = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t = _sb((ROWS, a.shape[1]), a.dtype)
    nisa.dma_copy(dst=t, src=a[pid * ROWS : pid * ROWS + ROWS, :])
    if kind == "barrier":
        nisa.core_barrier(buf, (0, 1))
    _meet(kind, t, pid)
    nisa.dma_copy(dst=buf[0:ROWS, :], src=t)  # ERR
    return buf


@pytest.mark.parametrize("kind", ["barrier", "sendrecv", "all_reduce"])
def test_accesses_after_the_same_meeting_still_race(kind):
    a = RNG.standard_normal((2 * ROWS, 8)).astype(np.float32)
    expect(write_after_meeting, a, kind, cls=NKIDependencyError, code="err_core_race",
           values=("core 0 writes", "core 1 writes"), grid=2)  # fmt: skip


def rounds_of_sendrecv(a):
    """Each round: write own block, sendrecv (the only synchronisation), read the peer's block
    of the round. Without a second meeting per round, round r+1's write of core p hits no
    block core 1-p reads in round r, so the rounds need no barrier."""
    buf = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    res = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    for r in nl.sequential_range(2):
        t, u = _sb((32, a.shape[1]), a.dtype), _sb((32, a.shape[1]), a.dtype)
        x = _sb((32, a.shape[1]), a.dtype)
        mine, peer = (2 * r + pid) * 32, (2 * r + 1 - pid) * 32
        nisa.dma_copy(dst=t, src=a[mine : mine + 32, :])
        nisa.dma_copy(dst=buf[mine : mine + 32, :], src=t)
        nisa.sendrecv(t, x, 1 - pid, 1 - pid, 1)
        nisa.dma_copy(dst=u, src=buf[peer : peer + 32, :])
        nisa.tensor_tensor(dst=u, data1=u, data2=x, op=nl.subtract)  # peer rows - sent rows
        nisa.dma_copy(dst=res[mine : mine + 32, :], src=u)
    return res


def test_a_sendrecv_in_each_round_of_a_loop_orders_that_round():
    a = RNG.standard_normal((128, 8)).astype(np.float32)
    got = nki.jit(rounds_of_sendrecv)[2](a)
    np.testing.assert_array_equal(got, np.zeros_like(a))  # what was read = what was sent


def reuse_one_block(a):
    """Every round both cores use the same block: the write of round r+1 by core p and the read
    of round r by core 1-p are in one epoch (one sendrecv per round): a race."""
    buf = nl.ndarray((64, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    res = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    for r in nl.sequential_range(2):
        t, u, x = (_sb((32, a.shape[1]), a.dtype) for _ in range(3))
        nisa.dma_copy(dst=t, src=a[(2 * r + pid) * 32 : (2 * r + pid) * 32 + 32, :])
        nisa.dma_copy(dst=buf[pid * 32 : pid * 32 + 32, :], src=t)  # ERR
        nisa.sendrecv(t, x, 1 - pid, 1 - pid, 1)
        nisa.dma_copy(dst=u, src=buf[(1 - pid) * 32 : (2 - pid) * 32, :])
        nisa.dma_copy(dst=res[(2 * r + pid) * 32 : (2 * r + pid) * 32 + 32, :], src=u)
    return res


def test_a_block_reused_across_rounds_with_one_meeting_per_round_races():
    a = RNG.standard_normal((128, 8)).astype(np.float32)
    expect(reuse_one_block, a, cls=NKIDependencyError, code="err_core_race",
           values=("buf",), grid=2)  # fmt: skip


def one_way_permute(a):
    """Core 0 sends to core 1 only: core 0 does not wait, so its read after the permute races
    with core 1's write before it."""
    buf = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    src = nl.ndarray((2, ROWS, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray((2, ROWS, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t, u = _sb((ROWS, a.shape[1]), a.dtype), _sb((ROWS, a.shape[1]), a.dtype)
    nisa.dma_copy(dst=t, src=a[pid * ROWS : pid * ROWS + ROWS, :])
    nisa.dma_copy(dst=src[pid], src=t)
    if pid == 1:
        nisa.dma_copy(dst=buf[0:ROWS, :], src=t)  # ERR
    cc.collective_permute([src[pid]], [dst[pid]], [(0, 1)])
    if pid == 0:
        nisa.dma_copy(dst=u, src=buf[0:ROWS, :])
    return dst


def test_a_one_way_collective_permute_does_not_order_the_sender():
    a = RNG.standard_normal((2 * ROWS, 8)).astype(np.float32)
    expect(one_way_permute, a, cls=NKIDependencyError, code="err_core_race",
           values=("core 1 writes", "core 0 reads"), grid=2)  # fmt: skip


def two_way_permute(a):
    """Pairs in both directions: both cores wait, so the write before and the read after are
    ordered; the permuted blocks are swapped."""
    buf = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    src = nl.ndarray((2, ROWS, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray((2, ROWS, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    res = nl.ndarray((ROWS, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t, u = _sb((ROWS, a.shape[1]), a.dtype), _sb((ROWS, a.shape[1]), a.dtype)
    nisa.dma_copy(dst=t, src=a[pid * ROWS : pid * ROWS + ROWS, :])
    nisa.dma_copy(dst=src[pid], src=t)
    if pid == 1:
        nisa.dma_copy(dst=buf[0:ROWS, :], src=t)
    cc.collective_permute([src[pid]], [dst[pid]], [(0, 1), (1, 0)])
    if pid == 0:
        nisa.dma_copy(dst=u, src=buf[0:ROWS, :])
        nisa.dma_copy(dst=res, src=u)
    return dst, res


def test_a_two_way_collective_permute_orders_both_cores():
    a = RNG.standard_normal((2 * ROWS, 8)).astype(np.float32)
    dst, res = nki.jit(two_way_permute)[2](a)
    np.testing.assert_array_equal(dst, np.stack([a[ROWS:], a[:ROWS]]))
    np.testing.assert_array_equal(res, a[ROWS:])


def all_to_all_reads_peer_write(a):
    """The HBM all_to_all reads both cores' sources, each written by its core before the
    meeting; after it, core p overwrites its own source (the collective has read it)."""
    src = nl.ndarray((2, ROWS, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray((2, ROWS, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t = _sb((ROWS, a.shape[1]), a.dtype)
    nisa.dma_copy(dst=t, src=a[pid * ROWS : pid * ROWS + ROWS, :])
    nisa.dma_copy(dst=src[pid], src=t)
    cc.all_to_all([src[pid]], [out[pid]], cc.ReplicaGroup([[0, 1]]), 0)
    nisa.dma_copy(dst=src[1 - pid], src=t)  # the peer's source, after the meeting
    return out, src


def test_a_collectives_own_hbm_accesses_sit_between_before_and_after():
    a = RNG.standard_normal((2 * ROWS, 8)).astype(np.float32)
    out, src = nki.jit(all_to_all_reads_peer_write)[2](a)
    h = ROWS // 2
    x0, x1 = a[:ROWS], a[ROWS:]
    np.testing.assert_array_equal(out[0], np.concatenate([x0[:h], x1[:h]]))
    np.testing.assert_array_equal(out[1], np.concatenate([x0[h:], x1[h:]]))
    np.testing.assert_array_equal(src, np.stack([x1, x0]))


def meeting_on_one_core(a):
    buf = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t, x = _sb((ROWS, a.shape[1]), a.dtype), _sb((ROWS, a.shape[1]), a.dtype)
    nisa.dma_copy(dst=t, src=a[pid * ROWS : pid * ROWS + ROWS, :])
    nisa.dma_copy(dst=buf[0:ROWS, :], src=t)
    if pid == 0:
        nisa.sendrecv(t, x, 1, 1, 0)  # ERR
    return buf


def test_cores_that_cannot_pair_their_meetings_get_the_run_time_error_not_a_race():
    a = RNG.standard_normal((2 * ROWS, 8)).astype(np.float32)
    expect(meeting_on_one_core, a, cls=NKIRuntimeError, code="err_collective_mismatch",
           values=("without reaching it",), grid=2)  # fmt: skip


def replicated_with_fence(a, shift):
    """Both cores copy all of ``a`` (the kernel does not shard), then run AWS's HBM fence idiom
    ``dma_copy(dst=out, src=out)``; with ``shift``, the last copy moves rows instead."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = _sb(a.shape, a.dtype)
    nisa.dma_copy(dst=t, src=a)
    nisa.dma_copy(dst=out, src=t)  # ERR (core 0's store; the shifted copy reads it)
    if shift:
        nisa.dma_copy(dst=out[0:ROWS, :], src=out[ROWS : 2 * ROWS, :])
    else:
        nisa.dma_copy(dst=out, src=out)
    return out


def test_an_identity_copy_on_both_cores_is_not_a_race():
    # what it reads from the other core is what it writes: both cores store the same bytes
    a = RNG.standard_normal((2 * ROWS, 32)).astype(np.float32)
    np.testing.assert_array_equal(nki.jit(replicated_with_fence)[2](a, False), a)
    expect(
        replicated_with_fence, a, True, cls=NKIDependencyError, code="err_core_race",
        values=["core 0 writes", "core 1 reads 'hbm0[i0 + 64, i1]'", "'out'"], grid=2,
    )  # fmt: skip
