"""The ring collectives of nki.collectives between the two cores of an LNC=2 launch:
collective_permute_implicit (per channel), collective_permute_implicit_reduce and
collective_permute_implicit_current_processing_rank_id, against NumPy; they order the cores'
shared-HBM accesses; the _v collectives (documented for more ranks than two cores) and malformed
channel lists are located errors."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.collectives as cc
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError

from helpers import expect

RNG = np.random.default_rng(31)
R = 32


def _sb(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


def ring_permute(a, b):
    """Two channels: core r sends rows [32r, 32r+32) of a and of b to the next rank."""
    out = nl.ndarray((2, 2 * R, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    r = cc.rank_id(name="me")
    x, y, gx, gy = (_sb((R, a.shape[1])) for _ in range(4))
    nisa.dma_copy(dst=x, src=a[r * R : r * R + R, :])
    nisa.dma_copy(dst=y, src=b[r * R : r * R + R, :])
    group = cc.ReplicaGroup([[0, 1]])
    cc.collective_permute_implicit([[x], [y]], [[gx], [gy]], group, channel_ids=[0, 1])
    nisa.dma_copy(dst=out[0, r * R : r * R + R, :], src=gx)
    nisa.dma_copy(dst=out[1, r * R : r * R + R, :], src=gy)
    return out


def _swap(a):
    return np.concatenate([a[R:], a[:R]])


def test_ring_permute_swaps_the_cores_chunks_on_every_channel():
    a = RNG.standard_normal((2 * R, 8)).astype(np.float32)
    b = RNG.standard_normal((2 * R, 8)).astype(np.float32)
    out = nki.jit(ring_permute)[2](a, b)
    np.testing.assert_array_equal(out[0], _swap(a))
    np.testing.assert_array_equal(out[1], _swap(b))


def ring_reduce(a, b, op):
    out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    r = cc.rank_id()
    x, y = _sb((R, a.shape[1])), _sb((R, a.shape[1]))
    g = _sb((R, a.shape[1]), nl.bfloat16)
    nisa.dma_copy(dst=x, src=a[r * R : r * R + R, :])
    nisa.dma_copy(dst=y, src=b[r * R : r * R + R, :])
    cc.collective_permute_implicit_reduce([[x]], [[y]], [[g]], cc.ReplicaGroup([[0, 1]]), op)
    nisa.dma_copy(dst=out[r * R : r * R + R, :], src=g)
    return out


@pytest.mark.parametrize("op, ref", [(nl.add, np.add), (nl.maximum, np.maximum)])
def test_ring_reduce_receives_the_previous_ranks_reduction(op, ref):
    a = RNG.standard_normal((2 * R, 8)).astype(np.float32)
    b = RNG.standard_normal((2 * R, 8)).astype(np.float32)
    got = nki.jit(ring_reduce)[2](a, b, op)
    want = _swap(ref(a, b)).astype(got.dtype)
    np.testing.assert_array_equal(got, want)


def processing_ranks(a):
    """Row r of ``ids`` holds, for steps 0 and 1 (ints) and 0 and 1 (a loop iterator), the rank
    whose data core r works on; ``gathered`` is a ring all-gather built on it."""
    ids = nl.ndarray((2, 4), dtype=nl.int32, buffer=nl.shared_hbm)
    f = a.shape[1]
    gathered = nl.ndarray((2, 2, R, f), dtype=a.dtype, buffer=nl.shared_hbm)
    r = cc.rank_id()
    group = cc.ReplicaGroup([[0, 1]])
    for k in range(2):
        reg = cc.collective_permute_implicit_current_processing_rank_id(k, group)
        nisa.register_store(ids[r : r + 1, k : k + 1], reg)
    cur = _sb((R, a.shape[1]))
    nisa.dma_copy(dst=cur, src=a[r * R : r * R + R, :])
    for i in nl.sequential_range(2):
        reg = cc.collective_permute_implicit_current_processing_rank_id(i, group)
        nisa.register_store(ids[r : r + 1, 2 + i : 3 + i], reg)
        # .ap addresses the base: core r's block, chunk ``reg`` (indirect_dim 1 steps R*f)
        dst = gathered.ap([[f, R], [1, f]], offset=r * 2 * R * f, scalar_offset=reg, indirect_dim=1)
        nisa.dma_copy(dst=dst, src=cur)
        nxt = _sb((R, a.shape[1]))
        cc.collective_permute_implicit([[cur]], [[nxt]], group)
        cur = nxt
    return ids, gathered


def test_the_processing_rank_walks_the_ring_backwards_from_the_own_rank():
    a = RNG.standard_normal((2 * R, 8)).astype(np.float32)
    ids, gathered = nki.jit(processing_ranks)[2](a)
    np.testing.assert_array_equal(ids, [[0, 1, 0, 1], [1, 0, 1, 0]])
    np.testing.assert_array_equal(gathered[0].reshape(a.shape), a)
    np.testing.assert_array_equal(gathered[1].reshape(a.shape), a)


def ordered_by_ring(a, group):
    """Core p writes its rows of ``buf``, runs a ring permute, then reads the other core's
    rows: ordered when the ring holds both cores, a race for rings of one core."""
    buf = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    res = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    p = nl.program_id(0)
    t, u, g = _sb((R, a.shape[1])), _sb((R, a.shape[1])), _sb((R, a.shape[1]))
    nisa.dma_copy(dst=t, src=a[p * R : p * R + R, :])
    nisa.dma_copy(dst=buf[p * R : p * R + R, :], src=t)  # ERR
    cc.collective_permute_implicit([[t]], [[g]], cc.ReplicaGroup(group))
    nisa.dma_copy(dst=u, src=buf[(1 - p) * R : (2 - p) * R, :])
    nisa.tensor_tensor(dst=u, data1=u, data2=g, op=nl.subtract)  # what was read - what was sent
    nisa.dma_copy(dst=res[p * R : p * R + R, :], src=u)
    return res


def test_a_ring_of_both_cores_orders_their_hbm_accesses():
    a = RNG.standard_normal((2 * R, 8)).astype(np.float32)
    got = nki.jit(ordered_by_ring)[2](a, [[0, 1]])
    np.testing.assert_array_equal(got, np.zeros_like(a))


def test_rings_of_one_core_do_not_order_them():
    a = RNG.standard_normal((2 * R, 8)).astype(np.float32)
    expect(ordered_by_ring, a, [[0], [1]], cls=NKIError, code="err_core_race",
           values=("core 0 writes", "core 1 reads"), grid=2)  # fmt: skip


def bad_channels(a, how):
    t, g, h = _sb((R, 8)), _sb((R, 8)), _sb((R, 8))
    nisa.dma_copy(dst=t, src=a[0:R, :])
    group = cc.ReplicaGroup([[0, 1]])
    srcs, dsts, ids = ([[t]], [[g]], [1]) if how == "ids" else ([[t, t]], [[g, h]], [0])
    cc.collective_permute_implicit(srcs, dsts, group, channel_ids=ids)  # ERR
    return a


@pytest.mark.parametrize("how, value", [("ids", "consecutive ids from 0"), ("two", "exactly one")])
def test_malformed_channels_are_located_errors(how, value):
    a = np.zeros((2 * R, 8), np.float32)
    expect(bad_channels, a, how, cls=NKIError, code="err_invalid_argument", values=(value,),
           grid=2)  # fmt: skip


def variable_length(a, which):
    meta = nl.ndarray((3, 2), dtype=nl.uint32, buffer=nl.shared_hbm)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    fn = cc.all_to_all_v if which == "a2a" else cc.all_gather_v
    fn([a], [out], cc.ReplicaGroup([[0, 1]]), meta)  # ERR
    return out


@pytest.mark.parametrize("which, need", [("a2a", "more than one device"), ("ag", "four ranks")])
def test_variable_length_collectives_need_more_ranks_than_two_cores(which, need):
    a = np.zeros((2 * R, 8), np.float32)
    expect(variable_length, a, which, cls=NKIError, code="err_unsupported_instruction_for_target",
           values=(need, "two cores"), grid=2)  # fmt: skip


def coalesced_sbuf(a):
    r = cc.rank_id()
    t, u, x, y = (_sb((R, 8)) for _ in range(4))
    nisa.dma_copy(dst=t, src=a[r * R : r * R + R, :])
    nisa.dma_copy(dst=u, src=a[r * R : r * R + R, :])
    cc.all_reduce([t, u], [x, y], cc.ReplicaGroup([[0, 1]]), nl.add)  # ERR
    return a


def test_coalesced_collectives_take_hbm_tensors_only():
    expect(coalesced_sbuf, np.zeros((2 * R, 8), np.float32), cls=NKIError,
           code="err_unsupported_memory", values=("coalesced", "HBM"), grid=2)  # fmt: skip
