"""The batched backend multiplies a tiled matmul's (M tile, N tile) products as one large gemm
(``simulator/batched/gemm.py``) and must still give the reference interpreter's results bit for
bit: classic and current-API matmuls, both layouts, fp32 / bf16 / fp8 inputs, tiles down to 2
rows, products over grid axes and loops, a product the same at every position, with one BLAS
thread and with two."""

from __future__ import annotations

import ctypes
import threading
import time

import ml_dtypes
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import nki
import nki.isa as nisa
import nki.language as nl
from simulator import threads
from simulator.batched import cblas, gemm
from simulator.batched.context import BCtx

from backends import REFERENCE, run_backends

BACKENDS = ("batched", REFERENCE)
DTYPES = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp8": ml_dtypes.float8_e4m3fn}

# NumPy's bundled OpenBLAS (its Linux and Windows wheels): ``cblas`` binds it, and the probes
# find that its blocks keep the tile gemms' bits, so products are stacked and added into PSUM
# by BLAS. With another BLAS (Accelerate, MKL) the backend keeps NumPy's gemm per tile: the
# checks of which route a product took expect that there, and the bit checks against the
# interpreter hold everywhere.
OPENBLAS = cblas.sgemm() is not None and gemm.agrees(False)
openblas_only = pytest.mark.skipif(
    not OPENBLAS, reason="checks a route taken only with NumPy's bundled OpenBLAS"
)


def stacked_size(seen: list[int]) -> int:
    """The largest product the kernels stacked as one gemm (0: none)."""
    return max(seen, default=0)


@pytest.fixture
def one_gemm(monkeypatch):
    """The batch sizes of the products ``gemm`` computed as one gemm for the kernels (a list
    filled per test; the probes of ``gemm.agrees``, which run when a thread count is first met,
    are not the kernels')."""
    seen: list[int] = []
    real = gemm._operands
    monkeypatch.setattr(gemm, "STACK_MIN", 0)  # (the small products of these tests too)

    def spy(x, y, nn, probed, rows=None):
        got = real(x, y, nn, probed, rows)
        if got is not None and probed:
            seen.append(got[0].shape[0] * got[1].shape[1])
        return got

    monkeypatch.setattr(gemm, "_operands", spy)
    return seen


def tiled(form: str, tm: int, tn: int, tk: int):
    """out = a.T @ b (``plain``: a @ b) in [tm, tn] output tiles accumulated over K steps of
    ``tk``, in the classic (``transpose_x``, ``plain``) or current (``nc_matmul``) API."""

    @nki.jit
    def kernel(a, b):
        k_dim, n_dim = b.shape
        m_dim = a.shape[0] if form == "plain" else a.shape[1]
        out = nl.ndarray((m_dim, n_dim), dtype=nl.float32, buffer=nl.shared_hbm)
        for m in nl.affine_range(m_dim // tm):
            for n in nl.affine_range(n_dim // tn):
                acc = nl.zeros((tm, tn), dtype=nl.float32, buffer=nl.psum)
                for k in nl.affine_range(k_dim // tk):
                    bt = nl.load(b[k * tk : (k + 1) * tk, n * tn : (n + 1) * tn])
                    if form == "plain":
                        at = nl.load(a[m * tm : (m + 1) * tm, k * tk : (k + 1) * tk])
                        acc += nl.matmul(at, bt)
                    elif form == "nc_matmul":
                        at = nl.load(a[k * tk : (k + 1) * tk, m * tm : (m + 1) * tm])
                        acc += nisa.nc_matmul(at, bt)
                    else:
                        at = nl.load(a[k * tk : (k + 1) * tk, m * tm : (m + 1) * tm])
                        acc += nl.matmul(at, bt, transpose_x=True)
                nl.store(out[m * tm : (m + 1) * tm, n * tn : (n + 1) * tn], value=acc)
        return out

    return kernel


def _operands(form: str, shape: tuple[int, int, int], dtype: str, seed: int = 0):
    m, k, n = shape
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k) if form == "plain" else (k, m)) * 4
    b = rng.standard_normal((k, n)) * 4
    return a.astype(DTYPES[dtype]), b.astype(DTYPES[dtype])


CASES = [  # (form, (M, K, N), tile (M, N, K), dtype)
    ("transpose_x", (512, 256, 1024), (128, 512, 128), "fp32"),
    ("transpose_x", (512, 256, 1024), (128, 512, 128), "bf16"),
    ("transpose_x", (256, 384, 512), (128, 128, 128), "fp8"),
    ("transpose_x", (192, 96, 160), (64, 32, 48), "fp32"),  # (OpenBLAS's small-matrix kernel)
    ("transpose_x", (48, 32, 48), (8, 8, 32), "bf16"),
    ("transpose_x", (99, 94, 200), (33, 100, 47), "fp32"),  # (ragged tiles)
    ("nc_matmul", (128, 256, 256), (64, 64, 128), "fp32"),
    ("transpose_x", (12, 8, 18), (2, 3, 1), "fp32"),  # (2-row tiles, K of 1)
    ("nc_matmul", (512, 256, 1024), (128, 512, 128), "bf16"),
    ("nc_matmul", (192, 256, 192), (64, 64, 128), "fp8"),
    ("plain", (512, 256, 1024), (128, 512, 128), "bf16"),
    ("plain", (256, 256, 512), (128, 128, 128), "fp32"),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("form", "shape", "tile", "dtype"), CASES)
def test_tiled_matmuls_as_one_gemm_match_the_interpreter(
    form, shape, tile, dtype, threads, one_gemm
):
    tm, tn, tk = tile
    kernel = tiled(form, tm, tn, tk)
    a, b = _operands(form, shape, dtype)
    with threadpool_limits(threads, user_api="blas"):
        got, want, info = run_backends(kernel, None, a, b, backends=BACKENDS).against("batched")
    assert info.backend == "batched", info.reason
    positions = (shape[0] // tm) * (shape[2] // tn)
    # (the plain layout's small products keep one gemm per tile: OpenBLAS sums them otherwise)
    if form != "plain" or tm * tn * tk > 100**3:
        assert stacked_size(one_gemm) == (positions * tm * tn if OPENBLAS else 0)
    af, bf = a.astype(np.float64), b.astype(np.float64)
    ref = (af if form == "plain" else af.T) @ bf
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3 * np.abs(ref).max())


@nki.jit
def grid_matmul(a_t, b):
    """One (M tile, N tile) product per instance of a 2-D grid, K accumulated in PSUM, plus the
    product of the first tiles, the same at every instance (neither operand varies)."""
    out = nl.ndarray((a_t.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    same = nl.ndarray(out.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    acc = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(a_t.shape[0] // 128):
        at = nl.load(a_t[k * 128 : (k + 1) * 128, i * 128 : (i + 1) * 128])
        bt = nl.load(b[k * 128 : (k + 1) * 128, j * 128 : (j + 1) * 128])
        acc += nl.matmul(at, bt, transpose_x=True)
    nl.store(out[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128], value=acc)
    first = nl.matmul(nl.load(a_t[0:128, 0:128]), nl.load(b[0:128, 0:128]), transpose_x=True)
    nl.store(same[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128], value=first)
    return out, same


def test_products_over_grid_axes_match_the_interpreter(one_gemm):
    rng = np.random.default_rng(3)
    a_t = rng.standard_normal((256, 384)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((256, 512)).astype(ml_dtypes.bfloat16)
    runs = run_backends(grid_matmul, (3, 4), a_t, b, backends=BACKENDS)
    (out, same), _, info = runs.against("batched")
    assert info.backend == "batched", info.reason
    assert stacked_size(one_gemm) == (384 * 512 if OPENBLAS else 0)
    af, bf = a_t.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(out, af.T @ bf, rtol=1e-4, atol=1e-3)
    first = af[:128, :128].T @ bf[:128, :128]
    np.testing.assert_allclose(same, np.tile(first, (3, 4)), rtol=1e-4, atol=1e-3)


@nki.jit
def current_psum_group(a_t, b):
    """Current-API nc_matmul into PSUM with accumulate=None over K: the first product into an
    element overwrites it, later ones add (after it, a product is simply added)."""
    k_dim, m_dim = a_t.shape
    n_dim = b.shape[1]
    out = nl.ndarray((m_dim, n_dim), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_dim // 128):
        for n in nl.affine_range(n_dim // 256):
            acc = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_dim // 128):
                at = nl.ndarray((128, 128), dtype=a_t.dtype, buffer=nl.sbuf)
                bt = nl.ndarray((128, 256), dtype=b.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=at, src=a_t[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                nisa.dma_copy(dst=bt, src=b[k * 128 : (k + 1) * 128, n * 256 : (n + 1) * 256])
                nisa.nc_matmul(dst=acc, stationary=at, moving=bt)
            res = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * 128 : (m + 1) * 128, n * 256 : (n + 1) * 256], src=res)
    return out


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_current_api_psum_groups_as_one_gemm_match_the_interpreter(dtype, one_gemm):
    a_t, b = _operands("nc_matmul", (384, 384, 512), dtype, seed=5)
    got, want, info = run_backends(current_psum_group, None, a_t, b, backends=BACKENDS).against(
        "batched"
    )
    assert info.backend == "batched" and "hosted" not in info.reason, info.reason
    assert stacked_size(one_gemm) == (384 * 512 if OPENBLAS else 0)
    ref = a_t.astype(np.float64).T @ b.astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3 * np.abs(ref).max())


def test_a_blas_whose_blocks_differ_keeps_one_gemm_per_tile(monkeypatch, one_gemm):
    """Where the probe finds a large product's blocks summed otherwise than a tile's own gemm,
    every tile gets its own gemm (and the same bits as the interpreter)."""
    monkeypatch.setattr(gemm, "_probe", lambda m, k, n, nn, fused, rows, per_tile: False)
    monkeypatch.setattr(gemm, "_AGREES", {})
    assert not gemm.agrees(False) and not gemm.agrees(True)
    assert not gemm.agrees(False, fused=True)
    kernel = tiled("transpose_x", 128, 256, 128)
    a, b = _operands("transpose_x", (256, 256, 512), "bf16")
    got, want, info = run_backends(kernel, None, a, b, backends=BACKENDS).against("batched")
    assert info.backend == "batched" and not one_gemm


@pytest.mark.parametrize("tiles_agree", [True, False])
@pytest.mark.parametrize("form", ["transpose_x", "plain", "nc_matmul"])
def test_tiles_are_added_by_blas_one_call_each_where_blocks_differ(monkeypatch, form, tiles_agree):
    """A BLAS whose large product's blocks differ from a tile's own gemm (this repository's
    development machine's OpenBLAS 0.3.31) still adds each large tile into PSUM by one BLAS call
    (``C += A @ B``, no product array), where such a call gives the tile's gemm plus an fp32
    add (``agrees(per_tile=True)``); else the tiles' gemms are added by NumPy. Both routes give
    the interpreter's bits."""
    probe = gemm._probe
    monkeypatch.setattr(
        gemm,
        "_probe",
        lambda m, k, n, nn, fused, rows, per_tile: (
            per_tile and tiles_agree and probe(m, k, n, nn, fused, rows, per_tile)
        ),
    )
    monkeypatch.setattr(gemm, "_AGREES", {})
    nn = form == "plain"
    with threadpool_limits(1, user_api="blas"):  # (the probe before the spy: not its calls)
        added = cblas.sgemm() is not None and gemm.agrees(nn, fused=True, per_tile=True)
    calls: list[bool] = []
    real = gemm._into_tiles

    def spy(dst, x, y, nn, ops, probed, per_tile=False):
        done = real(dst, x, y, nn, ops, probed, per_tile)
        calls.append(done and per_tile)
        return done

    monkeypatch.setattr(gemm, "_into_tiles", spy)
    kernel = tiled(form, 128, 512, 128)
    a, b = _operands(form, (256, 256, 1024), "bf16", seed=6)
    with threadpool_limits(1, user_api="blas"):
        got, want, info = run_backends(kernel, None, a, b, backends=BACKENDS).against("batched")
    assert info.backend == "batched", info.reason
    assert not gemm.agrees(nn)  # (no blocks of one product here)
    assert (calls and all(calls)) if added else calls == [], calls
    ref = (a if form == "plain" else a.T).astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3 * np.abs(ref).max())


def test_small_batches_keep_one_gemm_per_position():
    """A batch of products under ``STACK_MIN`` multiply-adds in all is one gemm per position
    (cheaper there than gathering one product), with the interpreter's bits; a batch above it
    is one gemm."""
    kernel = tiled("transpose_x", 32, 64, 32)
    a, b = _operands("transpose_x", (64, 64, 128), "fp32")
    with threadpool_limits(1, user_api="blas"):
        got, want, info = run_backends(kernel, None, a, b, backends=BACKENDS).against("batched")
    assert info.backend == "batched", info.reason
    rng = np.random.default_rng(5)
    small = (
        rng.standard_normal((2, 1, 32, 32)).astype(np.float32),
        rng.standard_normal((1, 2, 32, 64)).astype(np.float32),
    )
    assert gemm.stacked(*small, nn=False) is None
    assert gemm.stacked(*small, nn=False, probed=False) is not None
    k, m, n = 128, 128, 512
    big = (
        rng.standard_normal((4, 1, k, m)).astype(np.float32),
        rng.standard_normal((1, 2, k, n)).astype(np.float32),
    )
    assert 8 * k * m * n >= gemm.STACK_MIN
    assert (gemm.stacked(*big, nn=False) is not None) == OPENBLAS


@openblas_only
@pytest.mark.parametrize("nn", [False, True])
def test_this_blas_gives_blocks_the_tile_gemms_bits(nn):
    """The probe on this machine's BLAS (the differential tests above rely on it): blocks of
    one product, and each tile's gemm added into PSUM by BLAS."""
    assert cblas.sgemm() is not None  # (NumPy's wheels bundle OpenBLAS on Linux)
    for m, k, n in gemm._PROBES:
        if not nn or m * k * n >= gemm._NN_MIN:
            assert gemm._probe(m, k, n, nn, fused=False), (m, k, n)
        if m * k * n >= gemm.TILE_MIN:
            assert gemm._probe(m, k, n, nn, fused=True), (m, k, n)
        if not nn and m * k * n >= gemm._NN_MIN:  # (rows stacked for a transposed view)
            assert gemm._probe(m, k, n, nn, fused=False, rows=True), (m, k, n)
            if m * k * n >= gemm.TILE_MIN:
                assert gemm._probe(m, k, n, nn, fused=True, rows=True), (m, k, n)


@openblas_only
@pytest.mark.parametrize("trans_a", [False, True])
def test_cblas_sgemm_adds_a_product_into_a_strided_tile(trans_a):
    """``cblas.sgemm`` adds op(A) @ B into a tile of a larger fp32 array in place (the rest
    untouched), against NumPy's float64 product plus the tile's old values."""
    rng = np.random.default_rng(3)
    m, k, n = 24, 40, 56
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((k, 2 * n)).astype(np.float32)[:, n:]  # (columns of a wider array)
    c = rng.standard_normal((3, m, 3 * n)).astype(np.float32)
    was = c.copy()
    fn = cblas.sgemm()
    assert fn is not None
    fn(trans_a, m, n, k, a.ctypes.data, a.shape[1], b.ctypes.data, 2 * n,
       c[1, :, n:].ctypes.data, 3 * n)  # fmt: skip
    want = was.astype(np.float64)
    want[1, :, n : 2 * n] += (a.T if trans_a else a).astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)
    c[1, :, n : 2 * n] = was[1, :, n : 2 * n]
    np.testing.assert_array_equal(c, was)


@nki.jit
def transposed_stationary(a, v):
    """out[i tile] = a[i tile] @ v, the stationary operand the PE transpose of a's tile copied
    back to SBUF (a transposed view of it in the batched backend)."""
    rows, k = a.shape
    out = nl.ndarray((rows, v.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(rows // 128):
        t = nl.ndarray((128, k), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[i * 128 : (i + 1) * 128, :])
        t_ps = nl.ndarray((k, 128), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=t_ps, data=t, engine=nisa.tensor_engine)
        t_t = nl.ndarray((k, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=t_t, src=t_ps)
        vv = nl.ndarray(v.shape, dtype=v.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=vv, src=v)
        acc = nl.ndarray((128, v.shape[1]), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=t_t, moving=vv)
        res = nl.ndarray((128, v.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out[i * 128 : (i + 1) * 128, :], src=res)
    return out


@pytest.mark.parametrize("k", [128, 32])
def test_a_transposed_view_is_stacked_as_rows_with_the_interpreters_bits(monkeypatch, k):
    """A stationary operand that is a transposed view (a transpose copied back from PSUM) is
    stacked as C-ordered rows, a copy in memory order, when its products are large enough
    that both layouts sum alike (128 x 128 x 64); a smaller one keeps the reference's layout.
    The interpreter's bits either way."""
    layouts: list[bool] = []
    real = gemm._operands

    def spy(x, y, nn, probed, rows=None):
        got = real(x, y, nn, probed, rows)
        if got is not None and probed:
            layouts.append(got[4])
        return got

    monkeypatch.setattr(gemm, "_operands", spy)
    monkeypatch.setattr(gemm, "STACK_MIN", 0)
    _transposed_product_on_batched(512, k, seed=9)
    assert set(layouts) == ({k * 128 * 64 >= gemm._NN_MIN} if OPENBLAS else set())


def _transposed_product_on_batched(rows: int, k: int, seed: int) -> None:
    """``transposed_stationary`` of a (rows, k) and a (k, 64) input runs on the batched backend
    with the interpreter's bits (``run_backends``) and NumPy's product."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((rows, k)).astype(np.float32)
    v = rng.standard_normal((k, 64)).astype(np.float32)
    runs = run_backends(transposed_stationary, None, a, v, backends=BACKENDS)
    got, _, info = runs.against("batched")
    assert info.backend == "batched", info.reason
    np.testing.assert_allclose(got, a.astype(np.float64) @ v, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k", [128, 32])
def test_one_transposed_view_is_multiplied_as_rows_with_the_interpreters_bits(monkeypatch, k):
    """One position (nothing to stack): the transposed view is multiplied as the C-ordered rows
    it already is when the product is large enough that both layouts sum alike, without the
    copy into (K, M) storage; the interpreter's bits either way."""
    asked: list[bool] = []
    real = gemm.as_rows

    def spy(x, n):
        asked.append(real(x, n))
        return asked[-1]

    monkeypatch.setattr(gemm, "as_rows", spy)
    _transposed_product_on_batched(128, k, seed=10)
    assert asked == [k * 128 * 64 >= gemm._NN_MIN and OPENBLAS]


@openblas_only
def test_cblas_is_called_only_with_its_builds_integer_width(monkeypatch):
    """``cblas.sgemm`` binds NumPy's OpenBLAS only when the build's configuration string gives
    the integer width the binding passes (``USE64BITINT``): with every width swapped, nothing
    is bound (None; the callers keep NumPy's path)."""
    real = cblas._SYMBOLS
    assert cblas._load() is not None
    swapped = tuple(
        (name, config, ctypes.c_int32 if idx is ctypes.c_int64 else ctypes.c_int64)
        for name, config, idx in real
    )
    monkeypatch.setattr(cblas, "_SYMBOLS", swapped)
    assert cblas._load() is None


@openblas_only
@pytest.mark.parametrize("form", ["classic", "current"])
@pytest.mark.parametrize("route", ["matrix", "tiles", "no blas", "blocks differ"])
def test_psum_accumulation_routes_keep_the_interpreters_bits(monkeypatch, route, form, one_gemm):
    """Large tiles are added into PSUM by BLAS: PSUM laid out with its N tiles as columns of
    one matrix (``BCtx.as_matrix``) takes one call per few M tiles, other PSUM one call per
    tile; without a callable BLAS, or with one whose added tiles differ from a tile gemm plus
    an fp32 add, the product's blocks are added by NumPy instead. Every route gives the
    interpreter's bits, in the classic form (``acc += matmul``) and the current one (the first
    product into a fresh tile overwrites it)."""
    modes: list[str] = []
    real, one = gemm._into_tiles, gemm._one_matrix
    monkeypatch.setattr(gemm, "_AGREES", {})
    if route == "no blas":
        monkeypatch.setattr(cblas, "sgemm", lambda: None)
    elif route == "blocks differ":
        probe = gemm._probe
        monkeypatch.setattr(
            gemm,
            "_probe",
            lambda m, k, n, nn, fused, rows, per_tile: (
                not fused and probe(m, k, n, nn, False, rows)
            ),
        )
    elif route == "tiles":
        monkeypatch.setattr(BCtx, "as_matrix", lambda self, acc, inner: None)

    def spy(dst, x, y, nn, ops, probed):
        done = real(dst, x, y, nn, ops, probed)
        if probed:
            modes.append(("matrix" if one(dst, ops[2], ops[3], ops[1].shape[1]) else "tiles")
                         if done else "blocks")  # fmt: skip
        return done

    monkeypatch.setattr(gemm, "_into_tiles", spy)
    kernel = tiled("transpose_x", 128, 512, 128) if form == "classic" else current_psum_group
    a, b = _operands("transpose_x", (512, 384, 1024), "bf16")
    got, want, info = run_backends(kernel, None, a, b, backends=BACKENDS).against("batched")
    assert info.backend == "batched" and one_gemm, info.reason
    want_mode = route if route in ("matrix", "tiles") else "blocks"
    assert modes and set(modes) == {want_mode}, modes
    ref = a.astype(np.float64).T @ b.astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3 * np.abs(ref).max())


def test_a_batch_under_stack_min_keeps_its_psum_layout(monkeypatch):
    """Products of a batch too small to stack (one gemm per position) leave PSUM laid out as it
    is: a new layout would only cost a copy."""
    laid: list[object] = []
    real = BCtx.as_matrix
    monkeypatch.setattr(
        BCtx, "as_matrix", lambda self, acc, inner: laid.append(inner) or real(self, acc, inner)
    )
    a, b = _operands("transpose_x", (128, 256, 512), "fp32", seed=4)  # (2 N tiles, 2^23 in all)
    assert 2 * 128 * 256 * 128 < gemm.STACK_MIN
    got, want, info = run_backends(tiled("transpose_x", 128, 256, 128), None, a, b,
                                   backends=BACKENDS).against("batched")  # fmt: skip
    assert info.backend == "batched" and not laid, info.reason
    np.testing.assert_allclose(got, a.astype(np.float64).T @ b, rtol=1e-4, atol=1e-3)


@nki.jit
def psum_with_a_view(a_t, b):
    """A tiled matmul whose PSUM tile is read through a reshape view: the sum of each [128, 512]
    product's two column halves."""
    out = nl.ndarray((a_t.shape[1], b.shape[1] // 2), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(a_t.shape[1] // 128):
        for n in nl.affine_range(b.shape[1] // 512):
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(a_t.shape[0] // 128):
                at = nl.load(a_t[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                bt = nl.load(b[k * 128 : (k + 1) * 128, n * 512 : (n + 1) * 512])
                acc += nl.matmul(at, bt, transpose_x=True)
            v = acc.reshape((128, 2, 256))
            nl.store(out[m * 128 : (m + 1) * 128, n * 256 : (n + 1) * 256],
                     value=nl.add(v[:, 0, :], v[:, 1, :]))  # fmt: skip
    return out


def test_psum_with_a_reshape_view_keeps_its_layout(monkeypatch):
    """A PSUM tile with a reshape view keeps its C-ordered storage (a view is of contiguous
    storage), its tiles added by BLAS one call each; the interpreter's bits."""
    laid: list[bool] = []
    real = BCtx.as_matrix

    def spy(self, acc, inner):
        got = real(self, acc, inner)
        laid.append(got is not None)
        return got

    monkeypatch.setattr(BCtx, "as_matrix", spy)
    a, b = _operands("transpose_x", (256, 256, 1024), "fp32", seed=2)
    got, want, info = run_backends(psum_with_a_view, None, a, b, backends=BACKENDS).against(
        "batched"
    )
    assert info.backend == "batched" and not any(laid), info.reason
    assert laid or not OPENBLAS  # (asked only for products it adds into PSUM)
    full = a.astype(np.float64).T @ b.astype(np.float64)
    halves = full.reshape(256, 2, 2, 256)
    np.testing.assert_allclose(got, (halves[:, :, 0] + halves[:, :, 1]).reshape(256, 512),
                               rtol=1e-4, atol=1e-3)  # fmt: skip


def per_head(m: int, n: int):
    """One product per head: both operands vary along the batch axis (one gemm per position)."""

    @nki.jit
    def kernel(q, k):
        out = nl.ndarray((q.shape[0], m, n), dtype=nl.float32, buffer=nl.shared_hbm)
        for h in nl.affine_range(q.shape[0]):
            nl.store(out[h], value=nl.matmul(nl.load(q[h]), nl.load(k[h]), transpose_x=True))
        return out

    return kernel


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize(("heads", "shape"), [(4, (33, 47, 100)), (300, (8, 128, 8))])
def test_products_per_position_keep_the_interpreters_layout(dtype, heads, shape, one_gemm):
    """Each position's gemm multiplies the transposed view of (K, M) storage, as the
    interpreter does (a C-ordered copy gets other sums from OpenBLAS's small-matrix kernels)."""
    m, k, n = shape
    rng = np.random.default_rng(11)
    q = rng.standard_normal((heads, k, m)).astype(DTYPES[dtype])
    kk = rng.standard_normal((heads, k, n)).astype(DTYPES[dtype])
    got, want, info = run_backends(per_head(m, n), None, q, kk, backends=BACKENDS).against(
        "batched"
    )
    assert info.backend == "batched" and not one_gemm, info.reason
    ref = np.einsum("hkm,hkn->hmn", q.astype(np.float64), kk.astype(np.float64))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)


def test_product_blocks_reuse_a_buffer_per_thread_with_the_same_bits(monkeypatch):
    """``accumulate`` multiplies into one reused buffer per thread: a larger product, then a
    smaller one in part of the same memory, give the bits of fresh products."""
    rng = np.random.default_rng(5)

    def sums() -> list[np.ndarray]:
        out = []
        for tiles, k, m, n in ((6, 128, 64, 96), (3, 32, 16, 8)):
            x = rng.standard_normal((tiles, 1, k, m)).astype(np.float32)
            y = rng.standard_normal((1, 2, k, n)).astype(np.float32)
            dst = rng.standard_normal((tiles, 2, m, n)).astype(np.float32)
            assert gemm.accumulate(dst, x, y, nn=False, probed=False)
            out.append(dst)
        return out

    state = rng.bit_generator.state
    reused = sums()
    rng.bit_generator.state = state
    monkeypatch.setattr(gemm, "_scratch", lambda shape: np.empty(shape, dtype=np.float32))
    fresh = sums()
    for a, b in zip(reused, fresh):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("nn", [False, True])
def test_positions_gemms_split_among_threads_keep_their_bits(monkeypatch, nn):
    """A batch that does not stack (here: every position's own operands) multiplies its
    positions' gemms on the launch's threads, split by the leading batch axes; each position
    gets the bits of its own gemm on one thread, with operands broadcast along batch axes."""
    monkeypatch.setattr(gemm, "cores", lambda: 4)
    rng = np.random.default_rng(8)
    k, m, n = 128, 96, 160
    x = rng.standard_normal((3, 5, k, m)).astype(np.float32)
    y = rng.standard_normal((1, 5, k, n)).astype(np.float32)  # (the same for every row of x)
    names: set[str] = set()
    real = gemm.run_blocks

    def spy(fn, blocks, work):
        def named(b):
            names.add(threading.current_thread().name)
            fn(b)
            time.sleep(0.005)  # (long enough for the worker to take some)

        assert len(blocks) == 15 and work == 15 * k * m * n  # (16 blocks asked: both axes)
        real(named, blocks, work)

    monkeypatch.setattr(gemm, "run_blocks", spy)
    for module in (gemm, threads):
        monkeypatch.setattr(module, "WORK_PER_THREAD", 1 << 10)
    with threadpool_limits(2, user_api="blas"):
        got = gemm.per_item(x, y, nn)
    assert len(names) == 2  # (this thread and a worker)
    with threadpool_limits(1, user_api="blas"):
        for i, j in np.ndindex(3, 5):
            lhs = np.ascontiguousarray(x[i, j].T) if nn else x[i, j].T
            one = np.matmul(lhs, y[0, j])
            np.testing.assert_array_equal(got[i, j].view(np.uint32), one.view(np.uint32))
    np.testing.assert_allclose(got, np.einsum("abkm,bkn->abmn", x, y[0]), rtol=1e-4, atol=1e-3)
