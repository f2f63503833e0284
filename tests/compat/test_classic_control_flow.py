"""Classic-compiler mode: Python ``if`` on loop-iterator predicates (as in AWS's flash
attention kernels) is decided at trace time when it holds for all or no iterations, and makes
the loops involved unroll when it varies. Off by default; on under the compat aliases."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.classic import classic_mode, set_classic_mode
from nki.errors import NKIControlFlowError, NKIError, NKIRuntimeError


@pytest.fixture
def classic():
    before = classic_mode()
    set_classic_mode(True)
    yield
    set_classic_mode(before)


def lower_blocks(x):
    # keep the 32x32 blocks on or below the block diagonal, zero the others
    n = x.shape[0] // 32
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(n):
        for j in nl.affine_range(n):
            t = nl.ndarray((32, 32), dtype=x.dtype)
            if i >= j:  # varies with (i, j): both loops unroll
                t[...] = nl.load(x[i * 32 : (i + 1) * 32, j * 32 : (j + 1) * 32])
            else:
                t[...] = 0.0
            nl.store(out[i * 32 : (i + 1) * 32, j * 32 : (j + 1) * 32], t)
    return out


def test_if_on_loop_iterators_unrolls_in_classic_mode(classic):
    x = np.random.default_rng(0).random((96, 96), dtype=np.float32)
    want = x * np.kron(np.tril(np.ones((3, 3))), np.ones((32, 32)))
    k = nki.jit(lower_blocks)
    np.testing.assert_array_equal(k(x), want)
    ir = str(k.last_ir)
    assert "affine_range" not in ir  # both loops were unrolled
    assert ir.count("= memset.memset(") == 3  # the 3 blocks above the diagonal


def always_true(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 32):
        t = nl.load(x[i * 32 : (i + 1) * 32, :])
        if i < x.shape[0] // 32:  # true for every iteration: decided without unrolling
            t[...] = nl.multiply(t, 2.0)
        if i * 32 >= x.shape[0]:  # never true
            t[...] = 0.0
        nl.store(out[i * 32 : (i + 1) * 32, :], t)
    return out


def test_uniform_condition_is_decided_at_trace_time(classic):
    x = np.random.default_rng(1).random((64, 8), dtype=np.float32)
    k = nki.jit(always_true)
    np.testing.assert_allclose(k(x), 2 * x)
    ir = str(k.last_ir)
    assert "affine_range(0, 2)" in ir  # the loop stayed a loop
    assert "memset" not in ir  # the never-true branch was dropped


def test_strict_mode_rejects_if_on_loop_iterators():
    before = classic_mode()
    set_classic_mode(False)
    try:
        with pytest.raises(NKIControlFlowError):  # (a current-API kernel unrolls the loops)
            nki.jit(lower_blocks, api="classic")(np.zeros((64, 64), np.float32))
    finally:
        set_classic_mode(before)


def test_if_on_tile_indices_stays_an_error(classic):
    def bad(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(x.shape[0])[:, None]
        if i_p < 4:
            nl.store(out, nl.load(x))
        return out

    with pytest.raises(NKIControlFlowError):
        nki.jit(bad)(np.zeros((8, 8), np.float32))


def test_compat_install_turns_classic_mode_on(monkeypatch):
    import os

    import frontends.compat as compat

    monkeypatch.delenv("NKI_PRECISE_FP", raising=False)
    before = classic_mode()
    compat.install()
    try:
        assert classic_mode()
        # like the classic simulator, low-precision types are computed in fp32 precision
        assert os.environ["NKI_PRECISE_FP"] == "0"
        k = nki.jit(bf16_out)
        x = np.full((4, 4), 1.001, np.float32)  # not representable in bfloat16
        np.testing.assert_array_equal(k(x), x)
    finally:
        compat.uninstall()
    assert classic_mode() == before
    assert "NKI_PRECISE_FP" not in os.environ
    assert not np.array_equal(nki.jit(bf16_out)(x), x)  # precise again: rounded to bf16


def test_compat_install_keeps_an_explicit_precise_fp(monkeypatch):
    import os

    import frontends.compat as compat

    monkeypatch.setenv("NKI_PRECISE_FP", "1")
    compat.install()
    try:
        assert os.environ["NKI_PRECISE_FP"] == "1"
    finally:
        compat.uninstall()


def bf16_out(x):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.copy(nl.load(x), dtype=nl.bfloat16))
    return out


def psum_group(a, b):
    # accumulate straight into an allocated (uninitialised) PSUM tile, as AWS's allocated
    # kernels do; the first matmul starts the accumulation group
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(a.shape[0] // 128):
        acc += nisa.nc_matmul(
            nl.load(a[k * 128 : (k + 1) * 128, :]), nl.load(b[k * 128 : (k + 1) * 128, :])
        )
    nl.store(out, nl.copy(acc))
    return out


def psum_group_on_data(a, b):
    # a PSUM tile that holds data accumulates onto it (only untouched elements start a group)
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
    acc[...] = nl.full((a.shape[1], b.shape[1]), 1.5, dtype=nl.float32)
    acc += nl.matmul(nl.load(a), nl.load(b), transpose_x=True)
    nl.store(out, nl.copy(acc))
    return out


def test_psum_accumulation_group_in_classic_mode(classic):
    rng = np.random.default_rng(3)
    a, b = rng.random((256, 64), dtype=np.float32), rng.random((256, 96), dtype=np.float32)
    np.testing.assert_allclose(nki.jit(psum_group)(a, b), a.T @ b, rtol=1e-5)
    a2, b2 = a[:128], b[:128]
    np.testing.assert_allclose(nki.jit(psum_group_on_data)(a2, b2), a2.T @ b2 + 1.5, rtol=1e-5)


def psum_group_masked(a, b):
    # the accumulation group with a mask= on the matmul (AWS's allocated kernels pass one)
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(a.shape[0] // 128):
        acc += nisa.nc_matmul(
            nl.load(a[k * 128 : (k + 1) * 128, :]),
            nl.load(b[k * 128 : (k + 1) * 128, :]),
            mask=(k < a.shape[0] // 128),
        )
    nl.store(out, nl.copy(acc))
    return out


def test_psum_accumulation_group_with_a_mask_in_classic_mode(classic):
    rng = np.random.default_rng(5)
    a, b = rng.random((256, 64), dtype=np.float32), rng.random((256, 96), dtype=np.float32)
    np.testing.assert_allclose(nki.jit(psum_group_masked)(a, b), a.T @ b, rtol=1e-5)


def test_fresh_psum_accumulate_reads_uninitialised_memory_in_strict_mode():
    before = classic_mode()
    set_classic_mode(False)
    try:
        a = np.ones((128, 8), np.float32)
        k = nki.jit(psum_group)
        assert np.isnan(k.configure(checks="static")(a, a)).all()  # NaN sentinel of fresh PSUM
        with pytest.raises(NKIRuntimeError) as ei:  # and checks=full names the accumulation
            k.configure(checks="full")(a, a)
        assert ei.value.code == "err_uninitialized_read"
        first = psum_group.__code__.co_firstlineno
        assert ei.value.loc.line == first + 9  # reported where the sums are stored
        assert f"computed from uninitialised memory at line {first + 6}" in str(ei.value)
    finally:
        set_classic_mode(before)


def transposed_matmul(a, b):
    # nc_transpose's PSUM result fed straight to nc_matmul (AWS flash backward does this)
    out = nl.ndarray((a.shape[0], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    a_t = nisa.nc_transpose(nl.load(a))  # (K, M) in PSUM
    nl.store(out, nl.copy(nisa.nc_matmul(a_t, nl.load(b))))
    return out


def test_psum_matmul_operand_is_staged_in_classic_mode(classic):
    rng = np.random.default_rng(4)
    a, b = rng.random((64, 96), dtype=np.float32), rng.random((96, 32), dtype=np.float32)
    # a_t = a.T (96, 64) in PSUM; nc_matmul(a_t, b) = a_t.T @ b = a @ b
    np.testing.assert_allclose(nki.jit(transposed_matmul)(a, b), a @ b, rtol=1e-5)


def test_psum_matmul_operand_is_an_error_in_strict_mode():
    from nki.errors import NKIMemoryError

    before = classic_mode()
    set_classic_mode(False)
    try:
        with pytest.raises(NKIMemoryError, match="psum"):
            nki.jit(transposed_matmul)(np.ones((32, 64), np.float32), np.ones((64, 8), np.float32))
    finally:
        set_classic_mode(before)


def quadrant_matmuls(a, b):
    # each iteration places its 64x64 product in a quadrant of the PE array chosen with i % 2,
    # as AWS's nc_matmul tiling example does
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        ps = nisa.nc_matmul(
            nl.load(a[i * 64 : (i + 1) * 64, 0:64]),
            nl.load(b[i * 64 : (i + 1) * 64, 0:64]),
            tile_position=((i % 2) * 64, (i % 2) * 64),  # ERR
            tile_size=(64, 64),
        )
        nl.store(out[i * 64 : (i + 1) * 64, :], nl.copy(ps))
    return out


def test_division_of_a_loop_iterator_unrolls_the_loop_in_classic_mode(classic):
    rng = np.random.default_rng(6)
    a, b = rng.random((128, 64), dtype=np.float32), rng.random((128, 64), dtype=np.float32)
    want = np.concatenate([a[:64].T @ b[:64], a[64:].T @ b[64:]])
    np.testing.assert_allclose(nki.jit(quadrant_matmuls)(a, b), want, rtol=1e-5)


def test_division_of_a_loop_iterator_is_an_error_in_strict_mode():
    before = classic_mode()
    set_classic_mode(False)
    try:
        with pytest.raises(NKIError) as ei:
            nki.jit(quadrant_matmuls)(
                np.ones((128, 64), np.float32), np.ones((128, 64), np.float32)
            )
    finally:
        set_classic_mode(before)
    e = ei.value
    assert e.code == "err_unsupported_index_expression" and "'Scalar % 2'" in str(e)
    assert "nl.static_range" in str(e) and "NKI_CLASSIC=1" in str(e)
    lines, start = inspect.getsourcelines(quadrant_matmuls)
    assert e.loc.line == start + next(i for i, t in enumerate(lines) if "# ERR" in t)


def prefix_block_sums(x):
    # out block i = the sum of x's blocks before it: the inner loop's bound is the outer
    # loop's iterator (a triangular loop, as public causal linear-attention kernels write)
    n = x.shape[0] // 32
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(n):
        acc = nl.zeros((32, x.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.sequential_range(i):  # ERR
            acc += nl.load(x[j * 32 : (j + 1) * 32, :])
        nl.store(out[i * 32 : (i + 1) * 32, :], value=acc)
    return out


def test_a_loop_bound_from_an_outer_iterator_unrolls_that_loop_in_classic_mode(classic):
    x = np.random.default_rng(7).random((128, 16), dtype=np.float32)
    blocks = x.reshape(4, 32, 16)
    want = np.concatenate([blocks[:i].sum(axis=0) for i in range(4)])
    got = nki.jit(prefix_block_sums, api="classic")(x)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_array_equal(got[:32], 0)


def test_a_loop_bound_from_an_outer_iterator_is_an_error_in_strict_mode():
    before = classic_mode()
    set_classic_mode(False)
    try:
        with pytest.raises(NKIError) as ei:
            nki.jit(prefix_block_sums, api="classic")(np.ones((128, 16), np.float32))
    finally:
        set_classic_mode(before)
    e = ei.value
    assert e.code == "err_unsupported_index_expression"
    assert "nl.sequential_range stop must be a compile-time integer" in str(e)
    assert "nl.static_range" in str(e) and "NKI_CLASSIC=1" in str(e)
    lines, start = inspect.getsourcelines(prefix_block_sums)
    assert e.loc.line == start + next(i for i, t in enumerate(lines) if "# ERR" in t)
