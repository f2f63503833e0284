"""The batched backend's prepared runs (``simulator/batched/prepared.py``): every preparer runs
in a real kernel and gives the interpreter's bits; an instruction whose operand is not a whole
tile's storage at run time falls back to its batched executor with the same result; prepared
runs work inside batched loops (leading batch axes) too."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from simulator.batched import backend as batched_backend
from simulator.batched import prepared

RNG = np.random.default_rng(7)


@nki.jit
def isa_chain(x, y, col):
    """One of each ``nki.isa`` instruction that has a preparer, on whole tiles."""
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    a, b, c = nl.load(x), nl.load(y), nl.load(col)
    s = nisa.activation(nl.exp, a, scale=0.5, bias=c, dtype=nl.float32)
    rs = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    e = nisa.activation_reduce(nl.tanh, s, reduce_op=nl.add, reduce_res=rs)
    m = nisa.tensor_reduce(np.max, e, axis=(1,), keepdims=True, negate=True)
    r = nisa.reciprocal(rs)
    t = nisa.tensor_scalar(e, np.multiply, r, op1=np.add, operand1=m)
    u = nisa.tensor_tensor(t, b, op=np.subtract)
    v = nisa.scalar_tensor_tensor(data=u, op0=np.multiply, operand0=c, op1=np.maximum, operand1=a)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(128)[None, :]
    w = nisa.affine_select(i_p >= i_f, v, -3.0)
    z = nisa.tensor_copy(w, dtype=nl.float32)
    p = nisa.nc_matmul(z, b)  # z.T @ b
    nl.store(out, nisa.tensor_copy(p, dtype=nl.float32))
    return out


def _isa_chain_numpy(x, y, col):
    s = np.exp(x * np.float32(0.5) + col)
    e = np.tanh(s)
    rs = e.sum(axis=1, keepdims=True)
    m = -e.max(axis=1, keepdims=True)
    t = e * (1 / rs) + m
    u = t - y
    v = np.maximum(u * col, x)
    w = np.where(np.tril(np.ones((128, 128), bool)), v, np.float32(-3.0))
    return w.T @ y


@nki.jit
def language_chain(x, y):
    """One of each ``nki.language`` instruction that has a preparer, on whole tiles."""
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    a, b = nl.load(x), nl.load(y)
    z = nl.zeros((128, 128), dtype=nl.float32)  # (memset)
    e = nl.add(nl.exp(a), z)
    c = nl.copy(e)
    t = nl.transpose(c)
    p = nl.matmul(t, b, transpose_x=True)  # t.T @ b
    q = nl.multiply(p, 0.25)
    nl.store(out, nl.max(q, axis=1, keepdims=True))
    return out


def _language_chain_numpy(x, y):
    return ((np.exp(x).T.T @ y) * np.float32(0.25)).max(axis=1, keepdims=True)


def _runs(kernel, *args):
    """The batched run's result, the interpreter's, each prepared run's (kind, whether it ran
    the instruction) in run order, and the batched run's ``RunInfo.reason``."""
    ran: list[tuple[str, bool]] = []
    real = prepared.prepare

    def counting(instr, executor, decl):
        run = real(instr, executor, decl)
        if run is None:
            return None

        def counted(ctx):
            done = run(ctx)
            ran.append((instr.op if instr.kind == "isa" else instr.kind, done))
            return done

        return counted

    mp = pytest.MonkeyPatch()
    mp.setattr(batched_backend, "prepare", counting)
    mp.setattr(batched_backend, "_READY", {})
    try:
        on_batched = kernel.configure(backend="batched")
        got = on_batched(*args)
        assert on_batched.last_run.backend == "batched"
    finally:
        mp.undo()
    want = kernel.configure(backend="numpy")(*args)
    return got, want, ran, on_batched.last_run.reason


def test_every_isa_preparer_runs_and_gives_the_interpreters_bits():
    x, y = (RNG.standard_normal((128, 128)).astype(np.float32) for _ in range(2))
    col = RNG.standard_normal((128, 1)).astype(np.float32)
    got, want, ran, _ = _runs(isa_chain, x, y, col)
    kinds = {k for k, done in ran if done}
    assert kinds == {"activation", "tensor_reduce", "reciprocal", "tensor_scalar",
                     "tensor_tensor", "scalar_tensor_tensor", "affine_select", "tensor_copy",
                     "nc_matmul"}  # fmt: skip
    assert all(done for _, done in ran)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_allclose(got, _isa_chain_numpy(x, y, col), rtol=2e-4, atol=2e-4)


def test_every_language_preparer_runs_and_gives_the_interpreters_bits():
    x, y = (RNG.standard_normal((128, 128)).astype(np.float32) for _ in range(2))
    got, want, ran, _ = _runs(language_chain, x, y)
    assert {k for k, done in ran if done} == {"ew", "copy", "transpose", "matmul", "memset",
                                               "reduce"}  # fmt: skip
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_allclose(got, _language_chain_numpy(x, y), rtol=1e-4, atol=1e-4)


@nki.jit
def through_a_view(x):
    """``b``'s operand is a reshape view of ``a``'s tile: not a tile's own storage, so the
    prepared run of the exp hands it to its batched executor."""
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(x)  # (128, 64)
    flat = a.reshape((128, 64))  # (a view of the same storage)
    b = nl.exp(flat)
    nl.store(out, b)
    return out


def test_an_operand_that_is_not_a_tiles_storage_falls_back_to_the_executor():
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    got, want, ran, _ = _runs(through_a_view, x)
    assert ran == [("ew", False)]  # (prepared, and handed to its executor at run time)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_allclose(got, np.exp(x), rtol=1e-6)


@nki.jit
def batched_rows(x):
    """Prepared runs over a batch axis: the loop's iterations run as one batch."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128 : (i + 1) * 128, :])
        s = nisa.activation(nl.exp, t, scale=2.0, dtype=nl.float32)
        r = nisa.tensor_reduce(np.add, s, axis=(1,), keepdims=True)
        nl.store(out[i * 128 : (i + 1) * 128, :], nisa.tensor_scalar(s, np.divide, r))
    return out


def test_prepared_runs_take_the_batch_axes_of_a_batched_loop():
    x = RNG.standard_normal((512, 96)).astype(np.float32)
    got, want, ran, reason = _runs(batched_rows, x)
    assert "1 affine_range loop(s) batched" in reason
    assert ran == [("activation", True), ("tensor_reduce", True), ("tensor_scalar", True)]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    e = np.exp(x * np.float32(2))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-5)


@nki.jit
def accumulated(a, b, transpose):
    """``acc += nl.matmul(...)`` over K tiles in fp32 PSUM, for every (M, N) tile of a @ b:
    with one M and N tile the batch has one position, with more the loops batch."""
    m, k = a.shape
    n = b.shape[1]
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    i_k, i_m, i_n = nl.arange(128)[:, None], nl.arange(64)[None, :], nl.arange(128)[None, :]
    for mi in nl.affine_range(m // 64):
        for ni in nl.affine_range(n // 128):
            acc = nl.zeros((64, 128), dtype=nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(k // 128):
                bt = nl.load(b[ki * 128 + i_k, ni * 128 + i_n])
                if transpose:  # (a's K rows on the partitions: multiplied transposed)
                    at = nl.load(a[mi * 64 + i_m, ki * 128 + i_k])
                    acc += nl.matmul(at, bt, transpose_x=True)
                else:
                    at = nl.load(a[mi * 64 + nl.arange(64)[:, None], ki * 128 + i_n])
                    acc += nl.matmul(at, bt)
            nl.store(out[mi * 64 + nl.arange(64)[:, None], ni * 128 + i_n], nl.copy(acc))
    return out


@pytest.mark.parametrize("transpose", [True, False])
@pytest.mark.parametrize("m,n", [(64, 128), (128, 256)])
def test_an_accumulating_matmul_is_prepared_and_gives_the_interpreters_bits(m, n, transpose):
    a = RNG.standard_normal((m, 384)).astype(np.float32)
    b = RNG.standard_normal((384, n)).astype(np.float32)
    got, want, ran, _ = _runs(accumulated, a, b, transpose)
    assert ("matmul", True) in ran and all(done for _, done in ran)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)
