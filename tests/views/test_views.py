"""Tensor views of the current API (slice / select / permute / broadcast / expand_dim /
squeeze_dim / reshape / ap) as operands and destinations, checked against NumPy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError
from simulator.compiled.backend import BackendFallbackWarning

from helpers import line_of

RNG = np.random.default_rng(14)


def _run(kernel, *args):
    return np.asarray(nki.simulate_kernel(kernel, *args))


@nki.jit
def k_hbm_views(x):
    # x: (8, 16, 32) in HBM; read a transposed, strided, selected view
    out = nl.ndarray((32, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    v = x.select(1, 3).permute((1, 0))  # (32, 8): x[:, 3, :].T
    t = nl.load(v)
    nl.store(out, t)
    return out


def test_select_permute_on_hbm_matches_numpy():
    x = RNG.standard_normal((8, 16, 32)).astype(np.float32)
    np.testing.assert_array_equal(_run(k_hbm_views, x), x[:, 3, :].T)


@nki.jit
def k_slice_step(x):
    out = nl.ndarray((64, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    v = x.slice(0, 0, 128, 2).slice(1, 1, 64, 4)  # x[0:128:2, 1:64:4]
    nl.store(out, nl.load(v))
    return out


def test_slice_with_steps_matches_numpy():
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_array_equal(_run(k_slice_step, x), x[0:128:2, 1:64:4])


@nki.jit
def k_broadcast(x):
    # x: (128, 1) -> broadcast along free dim, expand_dim, squeeze again
    out = nl.ndarray((128, 4, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    b = t.expand_dim(1).broadcast(1, 4).broadcast(2, 8)  # (128, 4, 8) from (128, 1, 1)
    r = nl.ndarray((128, 4, 8), dtype=x.dtype, buffer=nl.sbuf)
    r[...] = nisa.tensor_copy(b)
    nl.store(out, r)
    return out


def test_broadcast_and_expand_dim_match_numpy():
    x = RNG.standard_normal((128, 1)).astype(np.float32)
    np.testing.assert_array_equal(_run(k_broadcast, x), np.broadcast_to(x[:, :, None], (128, 4, 8)))


@nki.jit
def k_sbuf_permute_dst(x):
    # write through a permuted view of an SBUF tile: buf[p, a, b] = x[p, b, a]
    out = nl.ndarray((128, 4, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((128, 4, 8), dtype=x.dtype, buffer=nl.sbuf)
    src = nl.load(x)  # (128, 8, 4)
    buf.permute((0, 2, 1))[...] = nl.copy(src)
    nl.store(out, buf)
    return out


def test_permuted_view_as_destination_matches_numpy():
    x = RNG.standard_normal((128, 8, 4)).astype(np.float32)
    np.testing.assert_array_equal(_run(k_sbuf_permute_dst, x), x.transpose(0, 2, 1))


@nki.jit
def k_reshape_view(x):
    out = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    buf[...] = nl.load(x)
    v = buf.slice(1, 0, 64, 2)  # (128, 32), stride 2
    r = v.reshape((128, 4, 8))  # split the strided axis: still a view
    r2 = r.reshape((128, 32))
    nl.store(out, nl.copy(r2))
    return out


def test_reshape_of_strided_view_matches_numpy():
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_array_equal(_run(k_reshape_view, x), x[:, 0:64:2])


@nki.jit
def k_avgpool(x):
    # average pooling 2x2 on (C=128, H=8, W=8) with a 5-D .ap view [P, Ho, Wo, k, k]
    out = nl.ndarray((128, 4, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 8, 8), dtype=x.dtype, buffer=nl.sbuf)
    t[...] = nl.load(x)
    win = t.ap([[64, 128], [16, 4], [2, 4], [8, 2], [1, 2]])
    s = nl.sum(win, axis=(3, 4))
    nl.store(out, nl.multiply(s, 0.25))
    return out


def test_average_pooling_with_ap_matches_numpy():
    x = RNG.standard_normal((128, 8, 8)).astype(np.float32)
    want = x.reshape(128, 4, 2, 4, 2).mean(axis=(2, 4))
    np.testing.assert_allclose(_run(k_avgpool, x), want, rtol=1e-5, atol=1e-6)


@nki.jit
def k_hbm_ap(x):
    # (16, 32) HBM: transposed read through a raw pattern, offset one row
    out = nl.ndarray((32, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(x.ap([[1, 32], [32, 8]], offset=32)))
    return out


def test_hbm_ap_pattern_matches_numpy():
    x = RNG.standard_normal((16, 32)).astype(np.float32)
    np.testing.assert_array_equal(_run(k_hbm_ap, x), x[1:9, :].T)


@nki.jit
def k_ap_base(x):
    # .ap addresses the base allocation, not the calling view
    out = nl.ndarray((4, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(x[8:16, :].ap([[32, 4], [1, 32]], offset=0)))
    return out


def test_ap_addresses_the_base_allocation():
    x = RNG.standard_normal((16, 32)).astype(np.float32)
    np.testing.assert_array_equal(_run(k_ap_base, x), x[0:4, :])


@nki.jit
def k_scalar_offset(x, idx):
    out = nl.ndarray((2, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    r = nl.load(idx)  # (1, 1) int32
    nl.store(out, nl.load(x.ap([[32, 2], [1, 32]], offset=0, scalar_offset=r)))
    return out


def test_scalar_offset_moves_rows_at_run_time():
    x = RNG.standard_normal((16, 32)).astype(np.float32)
    got = _run(k_scalar_offset, x, np.array([[5]], dtype=np.int32))
    np.testing.assert_array_equal(got, x[5:7])


@nki.jit
def k_vector_offset(x, idx):
    out = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    rows = nl.load(idx)  # (128, 1) int32
    nl.store(out, nl.load(x.ap([[32, 128], [1, 32]], offset=0, vector_offset=rows)))
    return out


def test_vector_offset_gathers_rows():
    x = RNG.standard_normal((300, 32)).astype(np.float32)
    idx = RNG.integers(0, 300, size=(128, 1)).astype(np.int32)
    np.testing.assert_array_equal(_run(k_vector_offset, x, idx), x[idx[:, 0]])


def gather_transpose_columns(x, idx, rows):
    """``dma_transpose`` of ``rows`` rows of ``x`` gathered by a (128, n) index tile, read
    column after column (the dma_transpose page's 2-D index form)."""
    out = nl.ndarray((x.shape[1], rows), dtype=x.dtype, buffer=nl.shared_hbm)
    ids = nl.ndarray(idx.shape, dtype=idx.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=idx)
    t = nl.ndarray((x.shape[1], rows), dtype=x.dtype, buffer=nl.sbuf)
    src = x.ap(pattern=[[x.shape[1], rows], [1, x.shape[1]]], vector_offset=ids, indirect_dim=0)
    nisa.dma_transpose(dst=t, src=src, axes=(1, 0))
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.mark.parametrize("backend", ["numpy", "batched", "numba"])
@pytest.mark.parametrize(("cols", "rows"), [(2, 256), (3, 300), (2, 129)])
def test_a_two_dimensional_vector_offset_is_read_column_after_column(backend, cols, rows):
    # the dma_transpose page: with indices of shape (128, n), n > 1, the rows gathered are
    # indices.T.flatten()[:rows] (the first column's 128, then the next column's, ...)
    x = RNG.standard_normal((600, 64)).astype(ml_dtypes.bfloat16)
    idx = RNG.integers(0, 600, size=(128, cols)).astype(np.int32)
    kernel = nki.jit(gather_transpose_columns).configure(backend=backend, checks="full")
    got = kernel(x, idx, rows)
    np.testing.assert_array_equal(got, x[idx.T.flatten()[:rows]].T)


@pytest.mark.parametrize(
    ("shape", "rows"), [((64, 4), 256), ((128, 2), 257), ((128, 1), 256), ((128, 2), 128)]
)
def test_a_vector_offset_of_another_shape_is_a_located_error(shape, rows):
    x = np.zeros((600, 64), ml_dtypes.bfloat16)
    with pytest.raises(NKIError) as ei:
        nki.jit(gather_transpose_columns)(x, np.zeros(shape, np.int32), rows)
    assert ei.value.code == "err_invalid_view" and "one after another" in str(ei.value)
    assert ei.value.loc.line == line_of(gather_transpose_columns, "src = x.ap(")


@nki.jit
def k_scalar_offset_oob(x, idx):
    out = nl.ndarray((2, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    r = nl.load(idx)
    nl.store(out, nl.load(x.ap([[32, 2], [1, 32]], offset=0, scalar_offset=r)))  # OOB_LINE
    return out


def test_scalar_offset_out_of_bounds_is_reported_at_run_time():
    x = RNG.standard_normal((16, 32)).astype(np.float32)
    with pytest.raises(NKIError, match="out-of-bound") as e:
        _run(k_scalar_offset_oob, x, np.array([[15]], dtype=np.int32))
    assert e.value.loc.line == line_of(k_scalar_offset_oob.fn, "OOB_LINE")


@nki.jit
def k_sbuf_column_offset(x, idx):
    # x (128, 4, 8) in SBUF; a run-time offset along the row: by single elements with
    # indirect_dim=2 (a window of 8 columns of the flat row), by rows of 8 with indirect_dim=1
    out = nl.ndarray((2, 128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    sb = nl.ndarray((128, 4, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=x)
    r = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=r, src=idx)
    for k in range(2):
        y = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.sbuf)
        window = sb.ap([[32, 128], [1, 8]], offset=0, scalar_offset=r, indirect_dim=2 - k)
        nisa.tensor_copy(dst=y, src=window)  # OOB_ROW
        nisa.dma_copy(dst=out[k], src=y)
    return out


def k_offset_across_steps(x, idx):
    """Patterns whose run of elements crosses the steps a scalar offset moves by: 16 elements
    from 8 * idx of (128, 4, 8) rows (indirect_dim=1), and 16 bf16 halves from 2 * idx of the
    fp32 (128, 32) rows viewed as bf16 (the NkiTensor.ap docstring's example)."""
    out = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    halves = nl.ndarray((128, 16), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    sb = nl.ndarray((128, 4, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=x)
    flat = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=flat, src=x.reshape((128, 32)))
    r = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=r, src=idx)
    y = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.sbuf)
    window = sb.ap([[32, 128], [1, 16]], scalar_offset=r, indirect_dim=1)
    nisa.tensor_copy(dst=y, src=window)  # OOB_WINDOW
    nisa.dma_copy(dst=out, src=y)
    h = nl.ndarray((128, 16), dtype=nl.bfloat16, buffer=nl.sbuf)
    src = flat.ap([[64, 128], [1, 16]], dtype=nl.bfloat16, scalar_offset=r, indirect_dim=1)
    nisa.tensor_copy(dst=h, src=src)
    nisa.dma_copy(dst=halves, src=h)
    return out, halves


@pytest.mark.parametrize("backend", ["numpy", "batched", "numba"])
def test_a_scalar_offset_pattern_may_cross_the_offsets_steps(backend):
    # the start moves by value * prod(shape[indirect_dim + 1:]) elements, then the pattern
    # runs on, across those steps (nki-aps: "the location to start the access")
    x = RNG.standard_normal((128, 4, 8)).astype(np.float32)
    kernel = nki.jit(k_offset_across_steps).configure(backend=backend, checks="full")
    got, halves = kernel(x, np.array([[1]], dtype=np.int32))
    rows = x.reshape(128, 32)
    np.testing.assert_array_equal(got, rows[:, 8:24])
    np.testing.assert_array_equal(halves.view(np.uint16), rows.view(np.uint16)[:, 2:18])
    with pytest.raises(NKIError, match="out-of-bound") as e:  # (8 * 3 + 16 > 32 elements)
        kernel(x, np.array([[3]], dtype=np.int32))
    assert e.value.loc.line == line_of(k_offset_across_steps, "OOB_WINDOW")


@pytest.mark.parametrize("backend", ["numpy", "batched", "numba"])
def test_sbuf_scalar_offset_moves_along_the_row(backend):
    x = RNG.standard_normal((128, 4, 8)).astype(np.float32)
    run = k_sbuf_column_offset.configure(backend=backend)
    if backend == "numba":  # (Numba compiles no views of on-chip tiles: the interpreter runs)
        with pytest.warns(BackendFallbackWarning, match="views of per-instance tensors"):
            got = run(x, np.array([[3]], dtype=np.int32))
    else:
        got = run(x, np.array([[3]], dtype=np.int32))
        assert run.last_run.backend == backend
    np.testing.assert_array_equal(got[0], x.reshape(128, 32)[:, 3:11])
    np.testing.assert_array_equal(got[1], x[:, 3])
    with pytest.raises(NKIError, match="out-of-bound") as e:  # (column 25 + 8 > 32)
        run(x, np.array([[25]], dtype=np.int32))
    assert e.value.loc.line == line_of(k_sbuf_column_offset.fn, "OOB_ROW")


@nki.jit
def k_ap_wider_dtype(x):
    # (4, 3) int8 storage read as three float32 values: one row is less than one of them
    out = nl.ndarray((1, 3), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((1, 3), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap([[3, 1], [1, 3]], offset=0, dtype=nl.int32))
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def k_ap_wider_dtype_offset(x, idx):
    out = nl.ndarray((1, 3), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((1, 3), dtype=nl.int32, buffer=nl.sbuf)
    r = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=r, src=idx)
    src = x.ap([[3, 1], [1, 3]], offset=0, dtype=nl.int32, scalar_offset=r)  # ERR
    nisa.dma_copy(dst=t, src=src)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_ap_with_a_wider_dtype_than_a_row():
    x = RNG.integers(-100, 100, size=(4, 3)).astype(np.int8)
    np.testing.assert_array_equal(_run(k_ap_wider_dtype, x), x.reshape(-1).view(np.int32)[None])
    # a dynamic offset counts in rows of 3 bytes: no whole number of int32 elements
    with pytest.raises(NKIError, match="not a whole number of int32 elements") as e:
        _run(k_ap_wider_dtype_offset, x, np.zeros((1, 1), np.int32))
    assert e.value.code == "err_invalid_view"
    assert e.value.loc.line == line_of(k_ap_wider_dtype_offset.fn, "# ERR")


def _bad(body):
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
        body(t, x)
        nl.store(out, t)
        return out

    return k


RULES = [
    (lambda t, x: t.permute((1, 0)), "partition dimension first"),
    (lambda t, x: t.slice(1, 10, 80), "0 <= start < end <= 64"),
    (lambda t, x: t.slice(1, 10, 5), "0 <= start < end"),
    (lambda t, x: t.broadcast(1, 4), "is not 1"),
    (lambda t, x: t.slice(0, 0, 1).broadcast(0, 4), "partition dimension"),
    (lambda t, x: t.expand_dim(0), "partition dimension"),
    (lambda t, x: t.squeeze_dim(1), "has size 64"),
    (lambda t, x: t.select(1, 64), "int in \\[0, 64\\)"),
    (lambda t, x: t.ap([[32, 128], [1, 64]]), "stride must be the free-element count 64"),
    (lambda t, x: t.reshape((64, 128)), "partition dimension must stay"),
    (lambda t, x: x.ap([[1, 2]], scalar_offset=t, vector_offset=t), "mutually exclusive"),
    (lambda t, x: x.ap([[1, 2]], vector_offset=t, indirect_dim=1), "dimension 0 only"),
    (
        lambda t, x: t.ap([[64, 128], [1, 4]], scalar_offset=t[0:1, 0:1], indirect_dim=2),
        "indirect_dim must be a dimension",
    ),
]


@pytest.mark.parametrize("body,msg", RULES)
def test_view_rule_violations_are_located_errors(body, msg):
    x = np.zeros((128, 64), np.float32)
    with pytest.raises(NKIError, match=msg) as e:
        _run(_bad(body), x)
    assert e.value.loc is not None and e.value.loc.line == line_of(body, "lambda")
    assert e.value.loc.file.endswith("test_views.py")


@nki.jit
def k_props(x):
    v = x.slice(0, 2, 10, 2).permute((1, 0))
    assert v.shape == (32, 4) and v.strides == (1, 64) and v.offset == 64
    assert v.size == 128 and v.ndim == 2 and v.name == x.name
    out = nl.ndarray((32, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(v))
    return out


def test_view_properties():
    x = RNG.standard_normal((16, 32)).astype(np.float32)
    np.testing.assert_array_equal(_run(k_props, x), x[2:10:2].T)


@nki.jit
def k_address(x):
    # two SBUF tiles placed side by side and a PSUM tile on bank 2 (current-API address=)
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf, name="a", address=(0, 0))
    b = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf, name="b", address=(0, 256))
    p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum, address=(0, 2 * 2048))
    a[...] = nl.load(x)
    b[...] = nl.multiply(a, 2.0)
    p[...] = nl.add(a, b)
    nl.store(out, nl.copy(p))
    return out


def test_address_placements_run():
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_allclose(_run(k_address, x), 3 * x, rtol=1e-6)


@nki.jit
def k_address_overlap(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf, name="a", address=(0, 0))
    b = nl.ndarray((64, 64), dtype=x.dtype, buffer=nl.sbuf, name="b", address=(64, 128))  # B
    a[...] = nl.load(x)
    b[...] = nl.load(x[0:64])
    nl.store(out, a)
    nl.store(out[0:64], b)
    return out


def test_overlapping_address_placements_are_reported():
    x = np.zeros((128, 64), np.float32)
    msg = r"overlaps the live tensor 'a'.*SBUF bytes \[128, 256\)"
    with pytest.raises(NKIError, match=msg) as e:
        _run(k_address_overlap, x)
    assert e.value.code == "err_address_overlap"
    assert e.value.loc.line == line_of(k_address_overlap.fn, "# B")


@pytest.mark.parametrize(
    "address,buffer,msg",
    [
        ((100, 0), "sbuf", "exceed the 128 partitions"),
        ((0, 100), "psum", "bank boundary"),
        ((0, 0), "shared_hbm", "SBUF or PSUM"),
    ],
)
def test_invalid_addresses_are_located_errors(address, buffer, msg):
    @nki.jit
    def k(x):
        t = nl.ndarray((64, 64), dtype=nl.float32, buffer=getattr(nl, buffer), address=address)
        return t

    with pytest.raises(NKIError, match=msg) as e:
        _run(k, np.zeros((1, 1), np.float32))
    assert e.value.loc.line == line_of(k, "address=address")


@nki.jit
def k_rmsnorm(x, gamma):
    # current style: views for the row tiles, the broadcast of gamma over partitions (HBM
    # stride-0 view) and of the per-row scale over the free dim
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.load(gamma.expand_dim(0).broadcast(0, 128))  # (128, d)
    for i in range(n // 128):
        rows = x.slice(0, i * 128, (i + 1) * 128)
        t = nl.load(rows)
        ss = nl.sum(nl.multiply(t, t), axis=1, keepdims=True)  # (128, 1)
        rstd = nl.rsqrt(nl.add(nl.multiply(ss, 1.0 / d), 1e-6))
        y = nl.multiply(nl.multiply(t, rstd.broadcast(1, d)), g)
        nl.store(out.slice(0, i * 128, (i + 1) * 128), y)
    return out


def test_rmsnorm_with_views_matches_numpy():
    x = RNG.standard_normal((256, 64)).astype(np.float32)
    gamma = RNG.standard_normal((64,)).astype(np.float32)
    want = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * gamma
    np.testing.assert_allclose(_run(k_rmsnorm, x, gamma), want, rtol=2e-5, atol=2e-5)


@nki.jit
def k_dynamic_select(x, idx):
    # x: (4, 128, 32) HBM; pick the block named by a run-time index
    out = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    r = nl.load(idx)  # (1, 1) int32
    nl.store(out, nl.load(x.select(0, r)))
    return out


@pytest.mark.parametrize("k", [0, 3])
def test_dynamic_select_reads_the_run_time_index(k):
    x = RNG.standard_normal((4, 128, 32)).astype(np.float32)
    got = _run(k_dynamic_select, x, np.array([[k]], dtype=np.int32))
    np.testing.assert_array_equal(got, x[k])


@nki.jit
def k_rows_by_iterator(x):
    # x: (8, 16) HBM; each trip of a device loop copies the row its iterator names, through
    # a dynamic select that leaves a 1-D view (a one-element register indexes any rank)
    out = nl.ndarray((16, 8), dtype=x.dtype, buffer=nl.shared_hbm)

    def body(i):
        row = nl.ndarray((1, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=row, src=x.select(0, i))
        col = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=col, src=row)
        nisa.dma_copy(dst=out.select(1, i), src=col)

    nl.fori_loop(0, 8, body)
    return out


@pytest.mark.parametrize("backend", ["numpy", "batched", "numba"])
def test_dynamic_select_of_a_row_by_a_loop_iterator(backend):
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    run = k_rows_by_iterator.configure(backend=backend)
    np.testing.assert_array_equal(run(x), x.T)
    assert run.last_run.backend == backend


def _row_by_iterator(form):
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)

        def body(i):
            row = nl.ndarray((1, 16), dtype=nl.float32, buffer=nl.sbuf)
            if form == "ds":
                src = x[nl.ds(i, 1), :]  # ERR ds
            elif form == "slice":
                src = x[i : i + 1, :]  # ERR slice
            else:
                src = x[i, :]  # ERR int
            nisa.dma_copy(dst=row, src=src)
            nisa.dma_copy(dst=out.select(0, i), src=row)

        nl.fori_loop(0, 8, body)
        return out

    return kernel


@pytest.mark.parametrize(
    "form, code",
    [("ds", "err_unsupported_index_expression"), ("slice", "err_unsupported_index_expression"),
     ("int", "err_unsupported_mixing_basic_advanced_tensor_indexing")],
)  # fmt: skip
def test_a_register_subscript_points_at_dynamic_offsets(form, code):
    kernel = _row_by_iterator(form)
    with pytest.raises(NKIError) as e:
        nki.jit(kernel)(np.zeros((8, 16), np.float32))
    assert e.value.code == code
    assert "is a register, known only at run time" in str(e.value)
    assert "scalar_offset=reg" in str(e.value) and "select(dim, reg)" in str(e.value)
    assert e.value.loc is not None and e.value.loc.line == line_of(kernel, f"# ERR {form}")


@nki.jit
def k_ap_dtype(x):
    # reinterpret float32 storage as int32 bits through .ap(dtype=)
    out = nl.ndarray((8, 16), dtype=nl.int32, buffer=nl.shared_hbm)
    nl.store(out, nl.load(x.ap([[16, 8], [1, 16]], offset=0, dtype=nl.int32)))
    return out


def test_ap_dtype_reinterprets_bits():
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    np.testing.assert_array_equal(_run(k_ap_dtype, x), x.view(np.int32))


@nki.jit
def k_vector_select(x, idx):
    out = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    rows = nl.load(idx)  # (128, 1)
    nl.store(out, nl.load(x.slice(1, 8, 24).vector_select(dim=0, vector_offset=rows)))
    return out


def test_vector_select_gathers_rows_of_a_view():
    x = RNG.standard_normal((200, 32)).astype(np.float32)
    idx = RNG.integers(0, 200, size=(128, 1)).astype(np.int32)
    np.testing.assert_array_equal(_run(k_vector_select, x, idx), x[idx[:, 0], 8:24])


@nki.jit
def k_isa_on_views(a, b):
    # nisa compute on a permuted SBUF view and a stride-2 view, result into a permuted dst
    out = nl.ndarray((128, 8, 4), dtype=a.dtype, buffer=nl.shared_hbm)
    ta = nl.load(a)  # (128, 4, 8)
    tb = nl.load(b)  # (128, 8, 8)
    res = nl.ndarray((128, 4, 8), dtype=a.dtype, buffer=nl.sbuf)
    res.permute((0, 2, 1))[...] = nisa.tensor_tensor(
        ta.permute((0, 2, 1)), tb.slice(2, 0, 8, 2), op=nl.add
    )
    nl.store(out, res.permute((0, 2, 1)))
    return out


def test_nisa_operands_and_destination_as_views():
    a = RNG.standard_normal((128, 4, 8)).astype(np.float32)
    b = RNG.standard_normal((128, 8, 8)).astype(np.float32)
    want = a.transpose(0, 2, 1) + b[:, :, 0:8:2]
    np.testing.assert_allclose(_run(k_isa_on_views, a, b), want, rtol=1e-6)


@nki.jit
def k_reshape_flatten(x):
    # (128, 64) SBUF -> reshape_dim 1 into (4, 16) -> permute -> flatten back: a free-dim shuffle
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    v = t.reshape_dim(1, (4, -1)).permute((0, 2, 1))  # (128, 16, 4)
    r = nl.ndarray((128, 16, 4), dtype=x.dtype, buffer=nl.sbuf)
    r[...] = nl.copy(v)
    nl.store(out, r.flatten_dims(start_dim=1, end_dim=2))  # (NKI 0.7's parameter names)
    return out


def test_reshape_dim_and_flatten_dims_match_numpy():
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    want = x.reshape(128, 4, 16).transpose(0, 2, 1).reshape(128, 64)
    np.testing.assert_array_equal(_run(k_reshape_flatten, x), want)


def test_flatten_of_non_contiguous_axes_is_a_located_error():
    @nki.jit
    def k(x):
        t = nl.load(x)
        t.reshape_dim(1, (4, 16)).permute((0, 2, 1)).flatten_dims(1, 2)  # FLAT
        return x

    with pytest.raises(NKIError, match="not contiguous") as e:
        _run(k, np.zeros((128, 64), np.float32))
    assert e.value.loc.line == line_of(k, "# FLAT")


@nki.jit
def k_ap_oob(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    t[...] = nl.load(x)
    nl.store(out, t.ap([[64, 128], [1, 64]], offset=8))  # OOB_AP
    return out


def test_out_of_bounds_ap_view_reports_the_kernel_line():
    with pytest.raises(NKIError, match="out-of-bound") as e:
        _run(k_ap_oob, np.zeros((128, 64), np.float32))
    assert e.value.loc.line == line_of(k_ap_oob.fn, "# OOB_AP")


@nki.jit
def k_int_index(x):
    # on chip an int on dim 0 keeps a size-1 partition dim; on a free dim it drops it unless
    # the result would be < 2-D; on HBM indexed dims drop
    t = nl.load(x)  # (64, 8, 16)
    assert t[3].shape == (1, 8, 16)
    assert t[:, 2, 5].shape == (64, 1)
    assert t[0, 0, 5].shape == (1, 1)
    assert t[:, 2].shape == (64, 16)
    assert x[3].shape == (8, 16) and x[3, 2].shape == (16,)
    out = nl.ndarray((1, 8, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, t[-1])  # (a compute copy of partition 63 would break the quadrant rule)
    return out


def test_current_integer_indexing_rules():
    x = RNG.standard_normal((64, 8, 16)).astype(np.float32)
    np.testing.assert_array_equal(_run(k_int_index, x), x[-1:])
