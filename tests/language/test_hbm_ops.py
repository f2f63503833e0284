"""HBM operations: nl.atomic_rmw (scatter-add with duplicates, max, scalar forms, bad op),
nl.shared_constant / nl.shared_identity_matrix (in grids and loops) and nl.store of a Python
number, against NumPy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.language as nl
import nki.typing as nt
from nki.errors import NKITypeError

from helpers import stored as _out


def test_atomic_rmw_scatter_add_keeps_every_duplicate_update():
    @nki.jit
    def scatter_add(grad, idx, table: nt.mutable_tensor):
        i_p = nl.arange(grad.shape[0])[:, None]
        i_f = nl.arange(grad.shape[1])[None, :]
        it = nl.load(idx)
        nl.atomic_rmw(table[it[i_p, 0], i_f], nl.load(grad), op=np.add)
        return table

    rng = np.random.default_rng(8)
    grad = rng.integers(-5, 5, (128, 16)).astype(np.float32)
    idx = rng.integers(0, 10, (128, 1)).astype(np.int32)  # many repeated rows
    table = np.ones((10, 16), np.float32)
    out = scatter_add(grad, idx, table)
    want = np.ones((10, 16), np.float32)
    np.add.at(want, idx[:, 0], grad)
    np.testing.assert_array_equal(out, want)


def test_atomic_rmw_max_and_bad_op():
    @nki.jit
    def rmw_max(v, dst: nt.mutable_tensor):
        nl.atomic_rmw(dst, nl.load(v), nl.maximum)
        return dst

    v = np.array([[1, 5, -2]], np.int32)
    d = np.array([[3, 3, 3]], np.int32)
    assert rmw_max(v, d).tolist() == [[3, 5, 3]]

    @nki.jit
    def bad(v, dst: nt.mutable_tensor):
        nl.atomic_rmw(dst, nl.load(v), np.divide)
        return dst

    with pytest.raises(NKITypeError) as ei:
        bad(v, d)
    assert ei.value.code == "err_unsupported_op"


def test_scalar_forms_of_static_cast_and_atomic_rmw():
    """``nl.static_cast`` of a scalar converts it (float -> int rounds to nearest even, as for
    tiles); ``nl.atomic_rmw`` takes a scalar value and applies it once per index, repeats
    included."""

    @nki.jit
    def kernel(a, idx, dst: nt.mutable_tensor):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        n = nl.static_cast(3.7, nl.int32)
        nl.store(out, nl.load(a) + n)
        i_f = nl.arange(dst.shape[1])[None, :]
        nl.atomic_rmw(dst[nl.load(idx), i_f], value=2.0, op=np.add)
        return out, dst

    a = np.zeros((4, 3), np.float32)
    idx = np.array([[1], [1], [3]], np.int32)
    dst = np.zeros((4, 2), np.float32)
    out, got = kernel(a, idx, dst)
    np.testing.assert_array_equal(out, a + 4)
    want = np.zeros((4, 2), np.float32)
    np.add.at(want, idx[:, 0], 2.0)
    np.testing.assert_array_equal(got, want)
    assert nl.static_cast(2.5, nl.int32) == 2 and nl.static_cast(-1.5, nl.int8) == -2


def test_shared_constant_and_identity_matrix():
    @nki.jit(api="classic")  # the classic identity: an HBM constant (the current one: SBUF)
    def kernel(a):
        ident = nl.shared_identity_matrix(n=64, dtype=nl.bfloat16)
        c = nl.shared_constant(np.linspace(0, 1, 8).reshape(2, 4))
        x = nl.load(a)  # (64, 32)
        r = nl.matmul(nl.load(ident), x, transpose_x=True)  # identity.T @ x = x
        return _out(r), _out(nl.load(c))

    a = np.random.default_rng(9).standard_normal((64, 32)).astype(ml_dtypes.bfloat16)
    r, c = kernel(a)
    np.testing.assert_array_equal(r, a.astype(np.float32))
    assert c.dtype == np.float32
    np.testing.assert_array_equal(c, np.linspace(0, 1, 8).reshape(2, 4).astype(np.float32))


def test_shared_constant_in_a_grid_is_not_a_race():
    """Every instance of a launch sees the same compile-time constant (no write to race on)."""

    @nki.jit(api="classic")  # the classic identity: an HBM constant; kernel[2]: a grid
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ident = nl.shared_identity_matrix(n=128, dtype=nl.float32)
        i = nl.program_id(0)
        x = nl.load(a[i * 128 : (i + 1) * 128, :])
        nl.store(out[i * 128 : (i + 1) * 128, :], nl.copy(nl.matmul(nl.load(ident), x)))
        return out

    a = np.random.default_rng(10).standard_normal((256, 32)).astype(np.float32)
    np.testing.assert_allclose(kernel[2](a), a, rtol=1e-6)


def test_shared_constant_made_inside_a_loop():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 2, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        for e in nl.affine_range(2):
            c = nl.shared_constant(np.arange(1024).reshape(128, 8), dtype=nl.float32)
            nl.store(out[:, e, :], nl.add(nl.load(x[:, e, :]), nl.load(c)))
        return out

    x = np.random.default_rng(13).standard_normal((128, 2, 8)).astype(np.float32)
    want = x + np.arange(1024, dtype=np.float32).reshape(128, 1, 8)
    np.testing.assert_allclose(kernel(x), want, rtol=1e-6)


def k_store_number(a, value):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[:, 0:4], nl.load(a[:, 0:4]))
    nl.store(out[:, 4:], value)  # ERR
    return out


@pytest.mark.parametrize(
    "dtype, value", [(np.float32, 100), (ml_dtypes.bfloat16, 2.5), (np.int32, -7)]
)
def test_storing_a_python_number_fills_the_destination(dtype, value):
    a = np.arange(64 * 12).reshape(64, 12).astype(dtype)
    want = a.copy()
    want[:, 4:] = np.asarray(value).astype(dtype)
    got = nki.jit(k_store_number)(a, value)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def k_store_number_only(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, 1.0)  # ERR
    return out


def test_storing_a_number_into_more_than_128_partitions_is_located():
    from helpers import expect

    expect(k_store_number_only, np.zeros((200, 12), np.float32),
           code="err_num_partition_exceed_arch_limit", values=["200", "nl.store"])  # fmt: skip
