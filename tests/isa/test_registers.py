"""Virtual registers and device scalars: nisa.register_alloc / register_move /
register_load / register_store (through SBUF and one-element HBM views) and NkiScalar
(nisa.scalar_load / scalar_store, wraparound arithmetic, fori_loop bound, .ap offset)."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError
from nki.isa.registers import register_alloc, register_load, register_move, register_store

from helpers import expect

RNG = np.random.default_rng(5)


def _sb(shape, dtype):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


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


def branch_on_register(x):
    r = nisa.register_alloc(0)
    if r:  # ERR
        pass
    return x


def range_of_register(x):
    r = nisa.register_alloc(3)
    for _ in range(r):  # ERR
        pass
    return x


@pytest.mark.parametrize("fn", [branch_on_register, range_of_register])
def test_a_register_cannot_drive_python_control_flow(fn):
    # the VirtualRegister docstring: a register in `if` or `range()` is a TypeError (its value
    # exists only on the device); `while r:` is NKI 0.4-0.6's device loop (test_runtime_loops)
    expect(fn, np.zeros((1, 1), np.int32), code="err_dynamic_control_flow_not_supported",
           values=("register",))  # fmt: skip


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


def _run(kernel, *args):
    return np.asarray(nki.simulate_kernel(kernel, *args))


@nki.jit
def k_registers(n):
    out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    a = register_alloc(5)
    b = register_alloc()
    register_move(b, a)
    register_load(a, n)
    register_store(out, b)
    return out


def test_register_move_load_store():
    got = _run(k_registers, np.array([[9]], dtype=np.int32))
    assert got.reshape(-1)[0] == 5


@pytest.mark.filterwarnings("ignore::nki.errors.NKIWarning")  # out's other elements stay unset
def test_register_load_and_store_through_one_element_hbm_views_of_any_rank():
    def kernel(a):
        out = nl.ndarray((4,), dtype=nl.int32, buffer=nl.shared_hbm)
        r = register_alloc(0)
        register_load(r, a[3:4])  # a rank-1 view; the register is [1, 1]
        register_store(out[2:3], r)
        return out

    got = nki.jit(kernel, api="current")(np.arange(8, dtype=np.int32))
    assert got[2] == 3
