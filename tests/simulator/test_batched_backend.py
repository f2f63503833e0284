"""The batched backend runs whole batches of instances / affine_range iterations per instruction
and must give the reference interpreter's results bit for bit; kernels outside its subset fall
back to the next backend and say why."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nki
import nki.isa as nisa
import nki.language as nl
from simulator.batched.plan import plan
from simulator.config import SimConfig

from backends import REFERENCE, run_backends, same

# backends of the generated kernels: compiling a Numba driver for each would take seconds
GENERATED = ("batched", REFERENCE)


@nki.jit
def grid_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    rows, cols = slice(i * 128, (i + 1) * 128), slice(j * 64, (j + 1) * 64)
    nl.store(out[rows, cols], value=nl.add(nl.load(a[rows, cols]), nl.load(b[rows, cols])))
    return out


@nki.jit
def loop_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        for j in nl.affine_range(a.shape[1] // 64):
            r, c = slice(i * 128, (i + 1) * 128), slice(j * 64, (j + 1) * 64)
            nl.store(out[r, c], value=nl.multiply(nl.load(a[r, c]), nl.load(b[r, c])))
    return out


@nki.jit
def tiled_matmul(a, b):
    k_dim, m_dim = a.shape
    n_dim = b.shape[1]
    out = nl.ndarray((m_dim, n_dim), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_dim // 128):
        for n in nl.affine_range(n_dim // 128):
            acc = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_dim // 128):
                at = nl.load(a[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                bt = nl.load(b[k * 128 : (k + 1) * 128, n * 128 : (n + 1) * 128])
                acc += nl.matmul(at, bt, transpose_x=True)
            nl.store(out[m * 128 : (m + 1) * 128, n * 128 : (n + 1) * 128], value=acc)
    return out


@nki.jit
def row_softmax(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128 : (i + 1) * 128, :])
        e = nl.exp(nl.subtract(t, nl.max(t, axis=1, keepdims=True)))
        nl.store(
            out[i * 128 : (i + 1) * 128, :], value=nl.divide(e, nl.sum(e, axis=1, keepdims=True))
        )
    return out


@nki.jit
def ragged_scale(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    n, m = a.shape
    ip, jf = nl.mgrid[0:128, 0:m]
    for i in nl.affine_range((n + 127) // 128):
        ok = i * 128 + ip < n
        t = nl.load(a[i * 128 + ip, jf], mask=ok)
        nl.store(out[i * 128 + ip, jf], value=nl.multiply(t, 3.0), mask=ok)
    return out


@nki.jit
def isa_ops(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        x = nl.load(a[i * 128 : (i + 1) * 128, :])
        y = nl.load(b[i * 128 : (i + 1) * 128, :])
        t = nisa.tensor_tensor(x, y, op=nl.subtract)
        s = nisa.tensor_scalar(t, np.multiply, 0.5, op1=np.add, operand1=1.0)
        r = nisa.activation(op=nl.tanh, data=s)
        nl.store(out[i * 128 : (i + 1) * 128, :], value=r)
    return out


def test_grid_add_is_bit_identical_and_batched():
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    got, want, info = run_backends(grid_add, (2, 4), a, b).against("batched")
    assert info.backend == "batched" and same(got, want)
    assert np.array_equal(got, a + b)


def test_affine_range_add_and_bf16():
    rng = np.random.default_rng(1)
    for dt in (np.float32, ml_dtypes.bfloat16):
        a, b = (rng.standard_normal((256, 128)).astype(dt) for _ in range(2))
        got, want, info = run_backends(loop_add, None, a, b).against("batched")
        assert info.backend == "batched" and same(got, want)
        ref = (a.astype(np.float32) * b.astype(np.float32)).astype(dt)
        assert same(got, ref)


def test_tiled_matmul_psum_accumulation():
    rng = np.random.default_rng(2)
    for dt in (np.float32, ml_dtypes.bfloat16):
        a = rng.standard_normal((384, 256)).astype(dt)
        b = rng.standard_normal((384, 256)).astype(dt)
        got, want, info = run_backends(tiled_matmul, None, a, b).against("batched")
        assert info.backend == "batched" and same(got, want)
        ref = a.astype(np.float64).T @ b.astype(np.float64)
        assert np.allclose(got, ref, rtol=1e-4, atol=1e-3)


def test_softmax_with_nan_and_inf_rows():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((256, 96)).astype(np.float32)
    x[5, 3] = np.nan
    x[130, :] = np.inf
    got, want, info = run_backends(row_softmax, None, x).against("batched")
    assert info.backend == "batched" and same(got, want)
    assert np.isnan(got[5]).all() and np.isfinite(got[6]).all()


def test_ragged_masked_tiles():
    a = np.arange(300 * 40, dtype=np.float32).reshape(300, 40)
    got, want, info = run_backends(ragged_scale, None, a).against("batched")
    assert info.backend == "batched" and same(got, want)
    assert np.array_equal(got, a * 3)


@nki.jit
def masked_broadcast_store(a):
    """A (P, 1) tile stored over a wider free range under a partition mask, per grid row."""
    out = nl.ndarray((a.shape[0], 3), dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    ip, jf = nl.arange(128)[:, None], nl.arange(3)[None, :]
    col = nl.load(a[i * 128 + ip, nl.arange(1)[None, :]])
    nl.store(out[i * 128 + ip, jf], value=col, mask=(ip < 100))
    return out


def test_a_masked_store_broadcasts_a_one_column_source():
    a = np.arange(256 * 4, dtype=np.float32).reshape(256, 4)
    got, want, info = run_backends(masked_broadcast_store, 2, a).against("batched")
    assert info.backend == "batched" and same(got, want)
    for t in range(2):
        rows = slice(t * 128, t * 128 + 100)
        assert np.array_equal(got[rows], np.repeat(a[rows, :1], 3, axis=1))
        assert np.isnan(got[t * 128 + 100 : (t + 1) * 128]).all()


def test_isa_vector_and_scalar_engine_ops():
    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal((256, 64)).astype(np.float32) for _ in range(2))
    got, want, info = run_backends(isa_ops, None, a, b).against("batched")
    assert info.backend == "batched" and same(got, want)
    assert np.allclose(got, np.tanh((a - b) * 0.5 + 1.0), rtol=1e-5, atol=1e-6)


@given(
    rows=st.integers(1, 3),
    cols=st.integers(1, 3),
    width=st.sampled_from([8, 32, 48]),
    op=st.sampled_from(["add", "maximum", "divide", "exp_sub"]),
    bf16=st.booleans(),
    ragged=st.integers(0, 127),
)
def test_generated_grid_kernels_match_the_interpreter(rows, cols, width, op, bf16, ragged):
    n = rows * 128 - ragged

    @nki.jit
    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        j = nl.program_id(0)
        ip, jf = nl.mgrid[0:128, 0:width]
        for i in nl.affine_range(rows):
            ok = i * 128 + ip < n
            x = nl.load(a[i * 128 + ip, j * width + jf], mask=ok)
            y = nl.load(b[i * 128 + ip, j * width + jf], mask=ok)
            if op == "exp_sub":
                r = nl.exp(nl.subtract(x, y))
            else:
                r = getattr(nl, op)(x, y)
            nl.store(out[i * 128 + ip, j * width + jf], value=r, mask=ok)
        return out

    dt = ml_dtypes.bfloat16 if bf16 else np.float32
    rng = np.random.default_rng(rows * 100 + cols * 10 + width)
    a = rng.standard_normal((n, cols * width)).astype(dt)
    b = rng.standard_normal((n, cols * width)).astype(dt)
    b[0, 0] = 0  # divide by zero: inf / NaN must land in the same places
    got, want, info = run_backends(kernel, (cols,), a, b, backends=GENERATED).against("batched")
    assert info.backend == "batched", info.reason
    assert same(got, want)


@nki.jit
def seeded(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.load(a), 1.0))
    return out


@nki.jit
def bitwise(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.bitwise_and(nl.load(a), 6))
    return out


def test_unsupported_kernels_fall_back_and_say_why():
    a = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    ragged = np.arange(200 * 8, dtype=np.float32).reshape(200, 8)  # (the mask leaves rows out)
    k = ragged_scale.configure(backend="batched", checks="full")
    assert np.array_equal(k(ragged), ragged * 3)
    assert k.last_run.backend == "numpy" and "checks='full'" in k.last_run.reason
    k = seeded.configure(backend="auto", shuffle_seed=3)
    assert np.array_equal(k(a), a + 1)
    assert k.last_run.backend == "numpy" and "shuffle_seed" in k.last_run.reason
    ai = np.arange(128 * 8, dtype=np.int32).reshape(128, 8)
    k = bitwise.configure(backend="batched")
    assert np.array_equal(k(ai), ai & 6)
    assert k.last_run.backend == "batched" and "hosted" in k.last_run.reason  # (bit-vector op)
    k = seeded.configure(backend="auto")
    k(a)
    assert k.last_run.backend == "batched"


def test_read_only_parameters_in_any_layout_and_fresh_outputs():
    """Parameters the kernel only reads are used in place when they already are C-ordered
    storage (else converted); returned outputs are the launch's own storage, new each call."""
    a = np.asfortranarray(np.arange(128 * 8, dtype=np.float32).reshape(128, 8))
    k = seeded.configure(backend="auto")
    out1 = k(a)
    out2 = k(np.ascontiguousarray(a))
    assert np.array_equal(out1, a + 1) and np.array_equal(out2, a + 1)
    assert not np.shares_memory(out1, out2) and not np.shares_memory(out1, a)
    assert np.array_equal(a, np.arange(128 * 8, dtype=np.float32).reshape(128, 8))


def test_all_true_mask_is_dropped_and_partial_mask_kept():
    a = np.arange(256 * 16, dtype=np.float32).reshape(256, 16)
    # 256 rows: the mask always holds
    got, want, info = run_backends(ragged_scale, None, a).against("batched")
    assert info.backend == "batched" and same(got, want) and np.array_equal(got, a * 3)


@nki.jit
def last_writer(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        nl.store(out, value=nl.load(a[i * 128 : (i + 1) * 128, :]))
    return out


def test_iterations_writing_the_same_elements_fall_back():
    a = np.arange(384 * 8, dtype=np.float32).reshape(384, 8)
    k = last_writer.configure(backend="batched", checks="none")
    got = k(a)
    assert k.last_run.backend == "numpy" and "same elements of" in k.last_run.reason
    assert np.array_equal(got, a[256:])  # the last iteration's tile, as in program order


@nki.jit
def stored_results(a, b):
    """Tiles computed whole and stored whole: each lives in its store's destination."""
    s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    e = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    d = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        r = slice(i * 128, (i + 1) * 128)
        x, y = nl.load(a[r, :]), nl.load(b[r, :])
        nl.store(s[r, :], value=nl.subtract(nl.maximum(x, y), 0.25))
        nl.store(e[r, :], value=nl.exp(x))
        nl.store(t[r, :], value=nl.add(x, y, dtype=nl.bfloat16))
        q = nisa.tensor_tensor(x, y, op=nl.divide)
        nl.store(d[r, :], value=q)
    return s, e, t, d


@nki.jit
def stored_twice(a):
    """A tile stored to two outputs is not fused into either."""
    o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        r = slice(i * 128, (i + 1) * 128)
        y = nl.multiply(nl.load(a[r, :]), 2.0)
        nl.store(o1[r, :], value=y)
        nl.store(o2[r, :], value=nl.add(y, 1.0))
    return o1, o2


def test_results_written_straight_into_their_outputs():
    rng = np.random.default_rng(5)
    for dt in (np.float32, ml_dtypes.bfloat16):
        a, b = (rng.standard_normal((256, 64)).astype(dt) for _ in range(2))
        b[3, 4] = 0  # x / 0 and NaN lanes land in the same places
        a[7, 1] = np.nan
        gots, wants, info = run_backends(stored_results, None, a, b).against("batched")
        assert info.backend == "batched"
        for got, want in zip(gots, wants):
            assert same(got, want)
        af, bf = a.astype(np.float32), b.astype(np.float32)
        ref = (np.maximum(af, bf) - np.float32(0.25)).astype(dt)
        assert same(gots[0], ref)
        assert same(gots[2], (af + bf).astype(ml_dtypes.bfloat16))
    a = rng.standard_normal((384, 32)).astype(np.float32)
    (o1, o2), (w1, w2), info = run_backends(stored_twice, None, a).against("batched")
    assert info.backend == "batched" and same(o1, w1) and same(o2, w2)
    assert np.array_equal(o2, a * 2 + 1)
    cfg = SimConfig()
    k1, k2 = stored_results.configure(backend="batched"), stored_twice.configure(backend="batched")
    k1(a[:, :8], a[:, :8]), k2(a)
    assert len(plan(k1.last_ir, cfg).fused) == 4  # every result tile
    assert plan(k2.last_ir, cfg).fused_names == {"sb5"}  # not the tile stored twice


@nki.jit
def reads_unwritten(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nl.store(out, value=nl.add(t, nl.load(a)))
    return out


@nki.jit
def writes_half(a):
    out = nl.ndarray((256, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:128, :], value=nl.load(a))
    return out


def test_full_checks_run_batched_when_nothing_can_be_reported():
    """checks='full' runs batched when every tile is written whole before it is read and every
    output is written entirely (nothing the run-time checks look for can happen); otherwise the
    interpreter runs it and reports what it finds."""
    rng = np.random.default_rng(6)
    a, b = (rng.standard_normal((256, 128)).astype(np.float32) for _ in range(2))
    for kernel, grid, args in [(grid_add, (2, 2), (a, b)), (row_softmax, None, (a,)),
                               (tiled_matmul, None, (a, b))]:  # fmt: skip
        k = kernel.configure(checks="full")
        got = (k[grid] if grid else k)(*args)
        assert k.last_run.backend == "batched", k.last_run.reason
        want = kernel.configure(backend="numpy", checks="full")
        assert same(got, (want[grid] if grid else want)(*args))
    k = reads_unwritten.configure(checks="full")
    with pytest.raises(nki.NKIError, match="uninitialised") as e:
        k(a[:128])
    assert "err_uninitialized_read" in str(e.value) and "test_batched_backend.py" in str(e.value)
    k = writes_half.configure(checks="full")
    with pytest.raises(nki.NKIError, match="err_unwritten_output"):
        k(a[:128])


@given(
    m_tiles=st.integers(1, 3),
    n_tiles=st.integers(1, 3),
    k_tiles=st.integers(1, 3),
    width=st.sampled_from([64, 128, 192]),
    bf16=st.booleans(),
    form=st.sampled_from(["transpose_x", "plain", "nc_matmul"]),
)
def test_generated_matmuls_match_the_interpreter(m_tiles, n_tiles, k_tiles, width, bf16, form):
    """Products over (m, n) output tiles accumulated over k: operands shared by a row or column
    of output tiles are broadcast, not copied, and each product keeps the reference's shapes."""

    @nki.jit
    def kernel(a, b):
        out = nl.ndarray((m_tiles * 64, n_tiles * width), dtype=nl.float32, buffer=nl.shared_hbm)
        for m in nl.affine_range(m_tiles):
            for n in nl.affine_range(n_tiles):
                acc = nl.zeros((64, width), dtype=nl.float32, buffer=nl.psum)
                for k in nl.affine_range(k_tiles):
                    bt = nl.load(b[k * 128 : (k + 1) * 128, n * width : (n + 1) * width])
                    if form == "plain":
                        at = nl.load(a[m * 64 : (m + 1) * 64, k * 128 : (k + 1) * 128])
                        acc += nl.matmul(at, bt)
                    else:
                        at = nl.load(a[k * 128 : (k + 1) * 128, m * 64 : (m + 1) * 64])
                        if form == "nc_matmul":
                            acc += nisa.nc_matmul(at, bt)
                        else:
                            acc += nl.matmul(at, bt, transpose_x=True)
                nl.store(out[m * 64 : (m + 1) * 64, n * width : (n + 1) * width], value=acc)
        return out

    dt = ml_dtypes.bfloat16 if bf16 else np.float32
    rng = np.random.default_rng(m_tiles * 100 + n_tiles * 10 + k_tiles)
    shape_a = (m_tiles * 64, k_tiles * 128) if form == "plain" else (k_tiles * 128, m_tiles * 64)
    a = rng.standard_normal(shape_a).astype(dt)
    b = rng.standard_normal((k_tiles * 128, n_tiles * width)).astype(dt)
    got, want, info = run_backends(kernel, None, a, b, backends=GENERATED).against("batched")
    assert info.backend == "batched", info.reason
    assert same(got, want)
    af, bf = a.astype(np.float64), b.astype(np.float64)
    ref = (af if form == "plain" else af.T) @ bf
    assert np.allclose(got, ref, rtol=1e-4, atol=1e-3)


@nki.jit
def accumulated_in_sbuf(a):
    """In-place +=, -= and *= on SBUF tiles over a K loop (fp32 and bf16 accumulators)."""
    out = nl.ndarray((128, a.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    low = nl.ndarray((128, a.shape[1]), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    s = nl.zeros((128, a.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    p = nl.ones((128, a.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    b = nl.zeros((128, a.shape[1]), dtype=nl.bfloat16, buffer=nl.sbuf)
    for k in nl.affine_range(a.shape[0] // 128):
        t = nl.load(a[k * 128 : (k + 1) * 128, :])
        s += t
        s -= nl.multiply(t, 0.5)
        p *= t
        b += t
    nl.store(out, value=nl.add(s, p))
    nl.store(low, value=b)
    return out, low


def test_in_place_accumulation_matches_the_interpreter():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((512, 48)).astype(np.float32)
    a[3, 5] = np.nan
    (o, lo), (wo, wlo), info = run_backends(accumulated_in_sbuf, None, a).against("batched")
    assert info.backend == "batched", info.reason
    assert same(o, wo) and same(lo, wlo)
    t = a.reshape(4, 128, 48)
    s = np.zeros((128, 48), np.float32)
    for k in range(4):
        s = (s + t[k]) - t[k] * np.float32(0.5)
    assert np.allclose(o, s + np.prod(t, axis=0), rtol=1e-5, atol=1e-5, equal_nan=True)


@nki.jit
def current_copies(a, ai):
    """Current-API DMA copies: plain, casting to bf16, bit copies int32 -> uint32, reshaping."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    low = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    bits = nl.ndarray(ai.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
    flat = nl.ndarray((a.shape[0] // 2, a.shape[1] * 2), dtype=a.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(a.shape[0] // 128):
        lo = t * 128
        x = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((128, a.shape[1]), dtype=nl.bfloat16, buffer=nl.sbuf)
        s = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        u = nl.ndarray((128, ai.shape[1]), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a[lo : lo + 128, :])
        nisa.dma_copy(dst=y, src=a[lo : lo + 128, :])
        nisa.tensor_tensor(dst=s, data1=x, data2=x, op=nl.multiply)
        nisa.dma_copy(dst=u, src=ai[lo : lo + 128, :])
        nisa.dma_copy(dst=out[lo : lo + 128, :], src=s)
        nisa.dma_copy(dst=low[lo : lo + 128, :], src=y)
        nisa.dma_copy(dst=bits[lo : lo + 128, :], src=u)
        nisa.dma_copy(dst=flat[t * 64 : (t + 1) * 64, :], src=x)
    return out, low, bits, flat


def test_current_api_dma_copies_match_the_interpreter():
    rng = np.random.default_rng(8)
    a = rng.standard_normal((256, 32)).astype(np.float32)
    ai = rng.integers(-(2**31), 2**31 - 1, size=(256, 16), dtype=np.int32)
    gots, wants, info = run_backends(current_copies, None, a, ai).against("batched")
    assert info.backend == "batched", info.reason
    for got, want in zip(gots, wants):
        assert same(got, want) if got.dtype.kind == "f" else np.array_equal(got, want)
    out, low, bits, flat = gots
    assert np.array_equal(out, a * a) and same(low, a.astype(ml_dtypes.bfloat16))
    assert np.array_equal(bits, ai.view(np.uint32))
    assert np.array_equal(flat, a.reshape(128, 64))


@nki.jit
def isa_reductions(a, b):
    """Row reductions, reciprocals and scalar_tensor_tensor, as in norm kernels."""
    rows = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        x = nl.load(a[i * 128 : (i + 1) * 128, :])
        y = nl.load(b[i * 128 : (i + 1) * 128, :])
        s = nisa.tensor_reduce(np.add, x, axis=(1,), keepdims=True)
        m = nisa.tensor_reduce(np.max, x, axis=(1,), keepdims=True, negate=True)
        r = nisa.reciprocal(s)
        t = nisa.scalar_tensor_tensor(data=x, op0=np.multiply, operand0=r, op1=np.add, operand1=y)
        nl.store(rows[i * 128 : (i + 1) * 128, :], value=nl.add(r, m))
        nl.store(out[i * 128 : (i + 1) * 128, :], value=t)
    return rows, out


def test_isa_reductions_and_reciprocals_match_the_interpreter():
    rng = np.random.default_rng(9)
    for dt in (np.float32, ml_dtypes.bfloat16):
        a, b = (rng.standard_normal((384, 96)).astype(dt) for _ in range(2))
        a[5, 7] = np.nan
        gots, wants, info = run_backends(isa_reductions, None, a, b).against("batched")
        assert info.backend == "batched", info.reason
        for got, want in zip(gots, wants):
            assert same(got, want)
        af = a.astype(np.float64).reshape(3, 128, 96)
        want_rows = (1 / af.sum(axis=2) - af.max(axis=2)).reshape(-1, 1)
        tol = 1e-3 if dt == np.float32 else 3e-2  # (bf16 intermediate tiles)
        assert np.allclose(gots[0], want_rows, rtol=tol, atol=tol, equal_nan=True)


@nki.jit
def copy_straight_to_output(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)  # one whole HBM -> HBM copy: the output must be written
    return out


def test_a_whole_copy_into_an_output_writes_the_output():
    x = np.random.default_rng(3).standard_normal((128, 512)).astype(np.float32)
    k = copy_straight_to_output.configure(backend="batched")
    got = k(x)
    assert k.last_run.backend == "batched"
    np.testing.assert_array_equal(got, x)
    assert not np.shares_memory(got, x)


@nki.jit
def ragged_rows_scale(a):
    """A ragged last row tile (a box of rows under the mask) and a mask that is no box (a
    triangle), in one kernel."""
    n, d = a.shape
    out = nl.ndarray((n, d), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(d)[None, :]
    for t in nl.affine_range((n + 127) // 128):
        rows = t * 128 + i_p
        x = nl.zeros((128, d), dtype=a.dtype, buffer=nl.sbuf)
        x[i_p, i_f] = nl.load(a[rows, i_f], mask=rows < n)
        y = nl.multiply(x, 3.0)
        nl.store(out[rows, i_f], y, mask=(rows < n) & (i_f <= i_p))
        nl.store(out[rows, i_f], nl.negative(y), mask=(rows < n) & (i_f > i_p))
    return out


def test_masked_box_and_non_box_accesses_match_the_interpreter():
    a = np.random.default_rng(3).standard_normal((300, 96)).astype(np.float32)
    runs = run_backends(ragged_rows_scale, None, a, ran=("batched",))
    tri = np.tril(np.ones((128, 96), bool))
    want = np.where(np.tile(tri, (3, 1))[:300], a * np.float32(3), -(a * np.float32(3)))
    np.testing.assert_array_equal(runs["batched"], want)


@nki.jit
def psum_group_and_transpose(a_t, b):
    """Current-API matmuls into PSUM with accumulate=None over K (the first product into an
    element overwrites, later ones add), one of them into half the tile only (a tile that
    starts part by part), and a Tensor-engine transpose of the result."""
    k_dim, m_dim = a_t.shape
    out = nl.ndarray((m_dim, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    out_t = nl.ndarray((128, m_dim), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_dim // 128):
        acc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(k_dim // 128):
            at = nl.ndarray((128, 128), dtype=a_t.dtype, buffer=nl.sbuf)
            bt = nl.ndarray((128, 128), dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=a_t[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
            nisa.dma_copy(dst=bt, src=b[k * 128 : (k + 1) * 128, :])
            nisa.nc_matmul(dst=acc[:, 0:64], stationary=at, moving=bt[:, 0:64])
            nisa.nc_matmul(dst=acc, stationary=at, moving=bt)
        res = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out[m * 128 : (m + 1) * 128, :], src=res)
        tp = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=tp, data=res, engine=nisa.tensor_engine)
        tr = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=tr, src=tp)
        nisa.dma_copy(dst=out_t[:, m * 128 : (m + 1) * 128], src=tr)
    return out, out_t


@pytest.mark.parametrize("bf16", [False, True])
def test_current_psum_groups_and_transposes_run_batched_as_the_interpreter(bf16):
    dt = ml_dtypes.bfloat16 if bf16 else np.float32
    rng = np.random.default_rng(17)
    a_t = rng.standard_normal((384, 256)).astype(dt)
    b = rng.standard_normal((384, 128)).astype(dt)
    got, want, info = run_backends(psum_group_and_transpose, None, a_t, b).against("batched")
    assert "hosted" not in info.reason, info.reason
    af, bf = a_t.astype(np.float64), b.astype(np.float64)
    ref = af.T @ bf
    ref[:, 0:64] += af.T @ bf[:, 0:64]  # the half tile gets both products
    np.testing.assert_allclose(got[0], ref, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(got[1], got[0].T)


@nki.jit
def where_masked(a, b, n):
    """nl.where per row tile: a tile condition, a (P, 1) column and a scalar picked by it, an
    integer where, and a ragged last tile (a mask) over the rows."""
    rows, d = a.shape
    out = nl.ndarray((rows, d), dtype=a.dtype, buffer=nl.shared_hbm)
    out_i = nl.ndarray((rows, d), dtype=n.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(d)[None, :]
    for t in nl.affine_range((rows + 127) // 128):
        r = t * 128 + i_p
        x = nl.load(a[r, i_f], mask=r < rows)
        y = nl.load(b[r, nl.arange(1)[None, :]], mask=r < rows)
        k = nl.load(n[r, i_f], mask=r < rows)
        picked = nl.where(nl.greater(x, 0.0), x, y, mask=r < rows)
        nl.store(out[r, i_f], nl.where(nl.less(picked, -0.5), -1.0, picked), mask=r < rows)
        nl.store(out_i[r, i_f], nl.where(nl.greater(k, 3), k, 7, mask=r < rows), mask=r < rows)
    return out, out_i


def test_where_runs_batched_and_matches_the_interpreter():
    rng = np.random.default_rng(11)
    a = rng.standard_normal((300, 48)).astype(np.float32)
    b = rng.standard_normal((300, 1)).astype(np.float32)
    n = rng.integers(-10, 10, (300, 48)).astype(np.int32)
    runs = run_backends(where_masked, None, a, b, n, ran=("batched",))
    assert "hosted" not in runs.info("batched").reason, runs.info("batched").reason
    picked = np.where(a > 0, a, b)
    got, got_i = runs["batched"]
    np.testing.assert_array_equal(got, np.where(picked < -0.5, np.float32(-1), picked))
    np.testing.assert_array_equal(got_i, np.where(n > 3, n, 7))


@nki.jit
def iota_rows(x, row, base):
    out = nl.ndarray((16, 16), dtype=nl.int32, buffer=nl.shared_hbm)
    i_p = nl.arange(8)[:, None]
    i_f = nl.arange(16)[None, :]
    for t in nl.affine_range(2):
        nl.store(out[t * 8 + i_p, i_f], nisa.iota(i_p * row - i_f * 3 + t + base, dtype=nl.int32))
    return out


# (row step, offset): values inside int32, values from 2**30 past 2**31 - 1 (which int32
# arithmetic wraps)
@pytest.mark.parametrize("row, base", [(1000, 0), (2**28, 2**30)])
def test_batched_iota_wraps_as_int32_arithmetic(row, base):
    x = np.zeros((1, 1), np.float32)
    got, want, info = run_backends(iota_rows, None, x, row, base).against("batched")
    t, p, f = np.mgrid[0:2, 0:8, 0:16]
    wide = p * row - f * 3 + t + base
    want_bits = ((wide + 2**31) % 2**32 - 2**31).astype(np.int32).reshape(16, 16)
    np.testing.assert_array_equal(got, want_bits)
    assert (wide > 2**31 - 1).any() == (base > 0)


def test_strided_views_are_checked_against_their_storage():
    """``host.within``: the batched backend's as_strided views (which NumPy does not check) are
    refused when they reach past their storage, instead of touching memory that is not it."""
    from numpy.lib.stride_tricks import as_strided

    from simulator.host import within

    base = np.zeros((4, 8), dtype=np.float32)
    row = base[1]
    assert within(as_strided(row, shape=(3, 8), strides=(32, 4)), base)  # rows 1-3
    assert not within(as_strided(row, shape=(4, 8), strides=(32, 4)), base)  # row 4: past it
    assert within(base[::-1, ::2], base)  # negative strides, inside
    assert not within(as_strided(base[0], shape=(2, 8), strides=(-32, 4)), base)  # before it
    assert within(as_strided(row, shape=(0, 8), strides=(32, 4)), base)  # empty
