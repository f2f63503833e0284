"""nki.collectives between the two cores of an LNC=2 launch: all_reduce, all_gather,
reduce_scatter, all_to_all, collective_permute, rank_id and ReplicaGroup against NumPy, and
their constraints as located errors."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.collectives as cc
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIRuntimeError

from helpers import expect

RNG = np.random.default_rng(21)


def _sb(shape, dtype):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


def sbuf_collectives(a, op):
    """Core r holds rows [64 r, 64 r + 64) of a; each collective's result goes to its rows."""
    r = cc.rank_id()
    red = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    gat = nl.ndarray((2, 128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    sca = nl.ndarray((64, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    t = _sb((64, 8), a.dtype)
    nisa.dma_copy(dst=t, src=a[r * 64 : r * 64 + 64, :])
    x = _sb((64, 8), a.dtype)
    cc.all_reduce([t], [x], cc.ReplicaGroup([[0, 1]]), op)
    nisa.dma_copy(dst=red[r * 64 : r * 64 + 64, :], src=x)
    g = _sb((128, 8), a.dtype)
    cc.all_gather([t], [g], cc.ReplicaGroup([[0, 1]]), 0)
    nisa.dma_copy(dst=gat[r], src=g)
    s = _sb((32, 8), a.dtype)
    cc.reduce_scatter([t], [s], cc.ReplicaGroup([[0, 1]]), 0, op)
    nisa.dma_copy(dst=sca[r * 32 : r * 32 + 32, :], src=s)
    return red, gat, sca


@pytest.mark.parametrize("op, ref", [(nl.add, np.add), (nl.maximum, np.maximum),
                                     (nl.minimum, np.minimum)])  # fmt: skip
def test_sbuf_all_reduce_all_gather_reduce_scatter_match_numpy(op, ref):
    a = RNG.standard_normal((128, 8)).astype(np.float32)
    red, gat, sca = nki.jit(sbuf_collectives)[2](a, op)
    want = ref(a[:64], a[64:])
    np.testing.assert_array_equal(red, np.concatenate([want, want]))
    np.testing.assert_array_equal(gat, np.stack([a, a]))
    np.testing.assert_array_equal(sca, want)


def hbm_all_to_all_and_permute(a):
    r = cc.rank_id()
    src = nl.ndarray((2, 64, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    t = _sb((64, 8), a.dtype)
    nisa.dma_copy(dst=t, src=a[r * 64 : r * 64 + 64, :])
    nisa.dma_copy(dst=src[r], src=t)
    nisa.core_barrier(src, (0, 1))
    a2a = nl.ndarray((2, 64, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    perm = nl.ndarray((2, 64, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    cc.all_to_all([src[r]], [a2a[r]], cc.ReplicaGroup([[0, 1]]), 0)
    cc.collective_permute([src[r]], [perm[r]], [(0, 1), (1, 0)])
    return a2a, perm


def test_hbm_all_to_all_and_collective_permute_match_numpy():
    a = RNG.standard_normal((128, 8)).astype(np.float32)
    a2a, perm = nki.jit(hbm_all_to_all_and_permute)[2](a)
    x0, x1 = a[:64], a[64:]
    # rank j receives chunk j of every rank, in rank order
    np.testing.assert_array_equal(a2a[0], np.concatenate([x0[:32], x1[:32]]))
    np.testing.assert_array_equal(a2a[1], np.concatenate([x0[32:], x1[32:]]))
    np.testing.assert_array_equal(perm, np.stack([x1, x0]))


def groups_of_one(a):
    r = nl.program_id(0)
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    t, x = _sb((64, 8), a.dtype), _sb((64, 8), a.dtype)
    nisa.dma_copy(dst=t, src=a[r * 64 : r * 64 + 64, :])
    cc.all_reduce([t], [x], cc.ReplicaGroup([[0], [1]]), nl.add)  # each core alone
    nisa.dma_copy(dst=out[r * 64 : r * 64 + 64, :], src=x)
    return out


def test_replica_groups_of_one_core_reduce_alone():
    a = RNG.standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_array_equal(nki.jit(groups_of_one)[2](a), a)


def mixed_memories(a):
    t = _sb((64, 8), a.dtype)
    cc.all_reduce([t], [a[0:64, :]], [[0, 1]], nl.add)  # ERR
    return a


def test_collective_tensors_must_share_a_memory():
    expect(mixed_memories, np.ones((64, 8), np.float32), code="err_unsupported_memory",
           values=("all in HBM or all in SBUF",), grid=2)  # fmt: skip


def all_to_all_in_sbuf(a):
    t, u = _sb((64, 8), a.dtype), _sb((64, 8), a.dtype)
    cc.all_to_all([t], [u], [[0, 1]], 0)  # ERR
    return a


def test_all_to_all_is_hbm_only():
    expect(all_to_all_in_sbuf, np.ones((64, 8), np.float32), code="err_unsupported_memory",
           values=("all in HBM",), grid=2)  # fmt: skip


def bad_op(a):
    t, u = _sb((64, 8), a.dtype), _sb((64, 8), a.dtype)
    cc.all_reduce([t], [u], [[0, 1]], nl.multiply)  # ERR
    return a


def test_all_reduce_takes_add_minimum_maximum():
    expect(bad_op, np.ones((64, 8), np.float32), code="err_unsupported_op",
           values=("multiply",), grid=2)  # fmt: skip


def gather_wrong_shape(a):
    t, u = _sb((64, 8), a.dtype), _sb((64, 8), a.dtype)
    cc.all_gather([t], [u], [[0, 1]], 0)  # ERR
    return a


def test_all_gather_destination_holds_every_rank():
    expect(gather_wrong_shape, np.ones((64, 8), np.float32), code="err_free_size_mismatch",
           values=("[128, 8]",), grid=2)  # fmt: skip


def overlapping_groups(a):
    t, u = _sb((64, 8), a.dtype), _sb((64, 8), a.dtype)
    cc.all_reduce([t], [u], [[0, 1], [1]], nl.add)  # ERR
    return a


def test_replica_groups_must_be_disjoint():
    expect(overlapping_groups, np.ones((64, 8), np.float32), code="err_invalid_argument",
           values=("disjoint",), grid=2)  # fmt: skip


def diverging_groups(a):
    r = nl.program_id(0)
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    t, u = _sb((64, 8), a.dtype), _sb((64, 8), a.dtype)
    nisa.dma_copy(dst=t, src=a)
    group = [[0, 1]] if r == 0 else [[0], [1]]
    cc.all_reduce([t], [u], group, nl.add)  # ERR
    nisa.dma_copy(dst=out[r * 64 : r * 64 + 64, :], src=u)
    return out


def test_cores_calling_a_collective_with_different_groups_is_a_run_time_error():
    expect(diverging_groups, np.ones((64, 8), np.float32), cls=NKIRuntimeError,
           code="err_collective_mismatch", values=("different groups",), grid=2)  # fmt: skip


def lnc1_collective(a):
    t, u = _sb((64, 8), a.dtype), _sb((64, 8), a.dtype)
    cc.all_reduce([t], [u], [[0]], nl.add)  # ERR
    return a


def test_collectives_need_an_lnc2_launch():
    expect(lnc1_collective, np.ones((64, 8), np.float32),
           code="err_unsupported_instruction_for_target", values=("kernel[2]",))  # fmt: skip
