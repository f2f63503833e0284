"""Per-core program ids of a current-API launch on two cores (``kernel[2]``, LNC=2): Python
branches on ``nl.program_id(0)`` trace the kernel once per core; each core runs its own trace
on private SBUF / PSUM, both share HBM, and races between the cores are still found."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIControlFlowError, NKIDependencyError, NKIError
from simulator.checks.unwritten import UnwrittenOutputWarning

from helpers import expect

RNG = np.random.default_rng(11)


def _tile(shape, dtype):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


def add_or_multiply(a, b):
    """Core 0 adds the top half, core 1 multiplies the bottom half (same tile names)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    half = a.shape[0] // 2
    t, u, r = (_tile((half, a.shape[1]), a.dtype) for _ in range(3))
    if nl.program_id(0) == 0:
        nisa.dma_copy(dst=t, src=a[0:half, :])
        nisa.dma_copy(dst=u, src=b[0:half, :])
        nisa.tensor_tensor(dst=r, data1=t, data2=u, op=nl.add)
        nisa.dma_copy(dst=out[0:half, :], src=r)
    else:
        nisa.dma_copy(dst=t, src=a[half:, :])
        nisa.dma_copy(dst=u, src=b[half:, :])
        nisa.tensor_tensor(dst=r, data1=t, data2=u, op=nl.multiply)
        nisa.dma_copy(dst=out[half:, :], src=r)
    return out


def test_branch_on_program_id_runs_each_core_its_own_trace():
    a, b = RNG.random((256, 48), dtype=np.float32), RNG.random((256, 48), dtype=np.float32)
    k = nki.jit(add_or_multiply)
    got = k[2](a, b)
    np.testing.assert_array_equal(got, np.concatenate([a[:128] + b[:128], a[128:] * b[128:]]))
    assert len(k.last_ir.cores) == 2
    assert k.last_run.placement == {(0,): 0, (1,): 1}
    assert "core 1:" in str(k.last_ir)


def test_the_same_kernel_at_lnc1_takes_the_core0_branch():
    a, b = RNG.random((256, 48), dtype=np.float32), RNG.random((256, 48), dtype=np.float32)
    with pytest.warns(UnwrittenOutputWarning, match=r"'out' \[256, 48\].*\[128:256, 0:48\]"):
        got = nki.jit(add_or_multiply)(a, b)  # one core: the bottom half is never written
    np.testing.assert_array_equal(got[:128], a[:128] + b[:128])
    assert np.isnan(got[128:]).all()


def per_core_offsets(a):
    """The program id as a Python int: a list index and arithmetic that is not affine."""
    out = nl.ndarray((2, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    rows = [3, 17][pid]  # a Python list indexed by the program id
    t = _tile((1, a.shape[1]), a.dtype)
    nisa.dma_copy(dst=t, src=a[rows * (pid + 1) % 40 : rows * (pid + 1) % 40 + 1, :])
    nisa.dma_copy(dst=out[pid : pid + 1, :], src=t)
    return out


def test_program_id_is_a_python_int_per_core():
    a = RNG.random((64, 32), dtype=np.float32)
    got = nki.jit(per_core_offsets)[2](a)
    np.testing.assert_array_equal(got, a[[3, 34 % 40]])


def private_sbuf_per_core(a):
    """Both cores write the same SBUF tile with different values and read it back: private."""
    out = nl.ndarray((256, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t = _tile((128, a.shape[1]), a.dtype)
    if pid == 1:
        nisa.memset(dst=t, value=5.0)
    else:
        nisa.dma_copy(dst=t, src=a[0:128, :])
    nisa.dma_copy(dst=out[pid * 128 : pid * 128 + 128, :], src=t)
    return out


def test_each_core_has_private_sbuf_and_shares_hbm():
    a = RNG.random((128, 16), dtype=np.float32)
    got = nki.jit(private_sbuf_per_core)[2](a)
    np.testing.assert_array_equal(got[:128], a)
    np.testing.assert_array_equal(got[128:], np.full_like(a, 5.0))


def write_race(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = _tile((128, a.shape[1]), a.dtype)
    nisa.dma_copy(dst=t, src=a[0:128, :])
    if nl.program_id(0) == 0:
        nisa.dma_copy(dst=out[0:128, :], src=t)  # ERR
    else:
        nisa.dma_copy(dst=out[64:192, :], src=t)
    return out


def test_two_cores_writing_the_same_elements_is_a_race_at_the_kernel_line():
    a = RNG.random((256, 8), dtype=np.float32)
    e = expect(write_race, a, cls=NKIDependencyError, code="err_core_race",
               values=("core 0", "core 1", "core_barrier"), grid=2)  # fmt: skip
    assert e.related and e.related[0][1].line == e.loc.line + 2


def read_write_race(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = _tile((128, a.shape[1]), a.dtype)
    if nl.program_id(0) == 0:
        nisa.dma_copy(dst=t, src=a[0:128, :])
        nisa.dma_copy(dst=out[0:128, :], src=t)  # ERR
    else:
        nisa.dma_copy(dst=t, src=out[0:128, :])  # reads what core 0 writes: no barrier
        nisa.dma_copy(dst=out[128:256, :], src=t)
    return out


def test_one_core_reading_what_the_other_writes_without_a_barrier_is_a_race():
    a = RNG.random((256, 8), dtype=np.float32)
    expect(read_write_race, a, cls=NKIDependencyError, code="err_core_race",
           values=("core 1 reads", "out"), grid=2)  # fmt: skip


def diverging_returns(a):
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    if nl.program_id(0) == 1:
        y = nl.ndarray((4, 4), dtype=a.dtype, buffer=nl.shared_hbm)  # ERR
        return y
    return x


def test_cores_returning_different_tensors_is_a_located_error():
    expect(diverging_returns, np.ones((4, 8), np.float32), code="err_collective_mismatch",
           values=("core 0", "core 1"), grid=2)  # fmt: skip


def classic_branch(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    if nl.program_id(0) == 0:  # ERR
        nl.store(out, nl.load(a))
    return out


def test_classic_kernels_keep_symbolic_program_ids():
    with pytest.raises(NKIControlFlowError) as ei:
        nki.jit(classic_branch, api="classic")[2](np.ones((4, 8), np.float32))
    assert ei.value.loc.line == classic_branch.__code__.co_firstlineno + 2


def test_every_current_lnc2_kernel_is_traced_per_core():
    a, b = RNG.random((256, 8), dtype=np.float32), RNG.random((256, 8), dtype=np.float32)

    def add(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        lo = nl.program_id(0) * 128
        t, u = _tile((128, 8), a.dtype), _tile((128, 8), a.dtype)
        nisa.dma_copy(dst=t, src=a[lo : lo + 128, :])
        nisa.dma_copy(dst=u, src=b[lo : lo + 128, :])
        nisa.tensor_tensor(dst=t, data1=t, data2=u, op=nl.add)
        nisa.dma_copy(dst=out[lo : lo + 128, :], src=t)
        return out

    k = nki.jit(add)
    np.testing.assert_array_equal(k[2](a, b), a + b)
    assert [c.grid.shape for c in k.last_ir.cores] == [(), ()]


def test_per_core_trace_needs_a_target_with_two_cores():
    with pytest.raises(NKIError) as ei:
        nki.jit(add_or_multiply, platform_target="trn1")[2](
            np.ones((256, 8), np.float32), np.ones((256, 8), np.float32)
        )
    assert ei.value.code == "err_invalid_grid"


def uninitialised_on_core1(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t = _tile((128, a.shape[1]), a.dtype)
    if pid == 0:
        nisa.dma_copy(dst=t, src=a[0:128, :])
    nisa.dma_copy(dst=out[pid * 128 : pid * 128 + 128, :], src=t)  # ERR
    return out


def test_full_checks_find_an_uninitialised_read_on_one_core():
    e = expect(uninitialised_on_core1, np.ones((256, 8), np.float32), checks="full", grid=2,
               code="err_uninitialized_read", values=("uninitialised",))  # fmt: skip
    assert e.core == 1


def longer_on_core1(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t = _tile((128, a.shape[1]), a.dtype)
    nisa.dma_copy(dst=t, src=a[pid * 128 : pid * 128 + 128, :])
    for _ in range(20 if pid == 1 else 0):
        nisa.tensor_tensor(dst=t, data1=t, data2=t, op=nl.add)
    nisa.dma_copy(dst=out[pid * 128 : pid * 128 + 128, :], src=t)
    return out


def test_each_core_runs_on_the_compiled_backend_and_the_estimate_takes_the_slower_core():
    a = RNG.random((256, 8), dtype=np.float32)
    k = nki.jit(longer_on_core1, backend="numba")
    got = k[2](a)
    np.testing.assert_array_equal(got, np.concatenate([a[:128], a[128:] * 2.0**20]))
    assert k.last_run.backend == "numba" and k.last_run.order == [(0,), (1,)]
    slow = nki.estimate(nki.jit(longer_on_core1)[2])(a).latency_ns
    fast = nki.estimate(nki.jit(add_or_multiply)[2])(a, a).latency_ns
    assert slow > fast


def non_affine_program_id(a):
    out = nl.ndarray((2, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    row = (pid * pid + 3) % 4 + pid // 1  # not affine in a symbolic id; ints per core
    t = _tile((1, a.shape[1]), a.dtype)
    nisa.dma_copy(dst=t, src=a[row : row + 1, :])
    nisa.dma_copy(dst=out[pid : pid + 1, :], src=t)
    return out


def test_non_affine_arithmetic_on_the_program_id_is_legal_per_core():
    a = RNG.random((8, 16), dtype=np.float32)
    got = nki.jit(non_affine_program_id)[2](a)
    np.testing.assert_array_equal(got, a[[3, 1]])


def _spmd_query(query, arg):
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, a)
        getattr(nl, query)(arg)  # ERR
        nisa.dma_copy(out, t)
        return out

    return k


@pytest.mark.parametrize("query", ["num_programs", "program_id"])
@pytest.mark.parametrize(
    "arg,code,text",
    [
        (float("nan"), "err_invalid_program_axis", "compile-time integer, got nan"),
        (1.0, "err_invalid_program_axis", "compile-time integer, got 1.0"),
        (True, "err_invalid_program_axis", "compile-time integer, got True"),
        (np.array([0, 1]), "err_invalid_argument", "must be an integer, got array([0, 1])"),
        ("0", "err_invalid_argument", "must be an integer, got '0'"),
        (3, "err_invalid_program_axis", "3"),
        (-1, "err_invalid_program_axis", "-1"),
    ],
)
def test_spmd_query_arguments_are_checked(query, arg, code, text):
    """NaN, floats, bools, arrays, strings and axes outside the launch grid are located errors
    (never a raw TypeError / ValueError)."""
    x = np.ones((4, 4), np.float32)
    expect(_spmd_query(query, arg), x, code=code, values=[f"nl.{query}", text], grid=2)


def test_num_programs_takes_an_axis_tuple_once_each():
    x = np.ones((4, 4), np.float32)
    expect(_spmd_query("num_programs", (0, 0)), x, code="err_invalid_program_axis",
           values=["names an axis twice"], grid=2)  # fmt: skip
    seen = []

    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        seen.append((nl.num_programs(), nl.num_programs([0]), nl.num_programs(np.int64(0))))
        seen.append(nl.program_id())  # axis 0 by default, as in the current API
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, a)
        nisa.dma_copy(out, t)
        return out

    np.testing.assert_array_equal(k(x), x)
    assert seen == [(1, 1, 1), 0]
