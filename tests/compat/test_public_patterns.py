"""Patterns that public current-API kernels (AWS's kernel library and SDK examples) rely on,
in small kernels of our own, checked against NumPy: configuration objects, loops that the
current API unrolls, optional tensor arguments, ``nki.isa.constants``, ``nl.dynamic_range``,
an SBUF identity matrix, allocators that rotate tensors through one ``address=``, and
``.view(dtype)`` on chip."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError
from nki.isa.constants import dge_mode, oob_mode

RNG = np.random.default_rng(2026)
P = 128


def _line(fn, mark: str) -> int:
    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, ln in enumerate(src) if mark in ln)


@dataclass
class TileCfg(nl.NKIObject):
    rows = 128  # no annotation: NKI still takes it as a keyword
    cols: int = 64
    scale: float = 1.0


@nki.jit
def scaled_copy(x, cfg: TileCfg, bias: nki.dtype = None):
    assert isinstance(x, nl.NkiTensor) and nl.is_hbm(x.buffer) and not nl.is_on_chip(x.buffer)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((cfg.rows, cfg.cols), dtype=x.dtype, buffer=nl.sbuf)
    assert nl.is_sbuf(t.buffer) and t.buffer == nl.MemoryRegion.sbuf.value
    nisa.dma_copy(dst=t, src=x, dge_mode=dge_mode.unknown, oob_mode=oob_mode.error)
    if bias != None:  # noqa: E711 - kernels test optional tensors this way
        b = nl.ndarray((cfg.rows, cfg.cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=b, src=bias)
        nisa.tensor_tensor(dst=t, data1=t, data2=b, op=nl.add)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=cfg.scale)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_config_objects_optional_tensors_and_buffer_queries():
    x, b = RNG.standard_normal((P, 32)).astype(np.float32), np.ones((P, 32), np.float32)
    cfg = TileCfg(rows=P, cols=32, scale=2.0)
    assert cfg.rows == P and cfg == TileCfg(rows=P, cols=32, scale=2.0)
    np.testing.assert_allclose(nki.simulate(scaled_copy)(x, cfg), 2 * x, rtol=1e-6)
    np.testing.assert_allclose(nki.simulate(scaled_copy)(x, cfg, b), 2 * (x + 1), rtol=1e-6)


def test_tile_size_fields_of_the_current_api(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")  # outside a kernel: the env's
    ts = nl.tile_size
    assert (ts.pmax, ts.psum_bank_fmax, ts.psum_bank_fmax_bytes, ts.psum_num_banks) == (
        128, 512, 2048, 8
    )  # fmt: skip
    assert ts.sbuf_fmax_bytes == 212984 and ts.sbuf_fmax == 212984 // 4  # trn2 usable bytes
    assert ts.sbuf_size_bytes == 224 * 1024 * 128
    assert list(nl.range(2, 8, 3)) == [2, 5]


@nki.jit
def hoisted_matmul(lhsT, rhs):
    """A list of tiles loaded in one nl.affine_range loop and indexed by the iterator of
    another, before the kernel's first destination-first-only call (nc_matmul(dst=...))."""
    K, M = lhsT.shape
    out = nl.ndarray((M, rhs.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    tiles = []
    for k in nl.affine_range(K // P):
        t = nl.ndarray((P, M), dtype=lhsT.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=lhsT[k * P : (k + 1) * P, :])
        tiles.append(t)
    acc = nl.ndarray((M, rhs.shape[1]), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // P):
        r = nl.ndarray((P, rhs.shape[1]), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=r, src=rhs[k * P : (k + 1) * P, :])
        nisa.nc_matmul(dst=acc, stationary=tiles[k], moving=r)
    res = nl.ndarray((M, rhs.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_affine_range_iterators_are_ints_in_current_kernels():
    lhsT = RNG.standard_normal((384, 64)).astype(np.float32)
    rhs = RNG.standard_normal((384, 96)).astype(np.float32)
    got = nki.simulate(hoisted_matmul)(lhsT, rhs)
    np.testing.assert_allclose(got, lhsT.T @ rhs, rtol=1e-4, atol=1e-4)


@nki.jit(api="classic")
def classic_list_index(x):
    tiles = [nl.load(x) for _ in range(2)]
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        nl.store(out, tiles[i])  # LIST_INDEX
    return out


def test_a_classic_kernel_still_may_not_index_a_list_with_an_affine_iterator():
    with pytest.raises(NKIError, match="no concrete integer value") as e:
        nki.simulate(classic_list_index)(np.zeros((P, 8), np.float32))
    assert e.value.code == "err_dynamic_control_flow_not_supported"
    assert e.value.loc.line == _line(classic_list_index.fn, "# LIST_INDEX")


@nki.jit
def running_sum(x):
    """acc += x[:, block] across nl.affine_range iterations (program order in the current
    API), with a min()-bounded last block."""
    n, f = x.shape
    out = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for b in nl.affine_range((f + 99) // 100):
        width = min(100, f - b * 100)
        t = nl.ndarray((n, 100), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[:, 0:width], src=x[:, b * 100 : b * 100 + width])
        s = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=s, op=nl.add, data=t[:, 0:width], axis=1)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=s, op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_accumulation_across_affine_range_iterations_is_program_order():
    x = RNG.standard_normal((P, 350)).astype(np.float32)
    got = nki.simulate(running_sum)(x)
    np.testing.assert_allclose(got, x.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)


@nki.jit
def dynamic_rows(x, n_tiles):
    """Doubles the first n_tiles[0, 0] row tiles of x with an nl.dynamic_range device loop;
    the row offset is an SBUF counter read by .ap(scalar_offset=)."""
    T, F = x.shape[0] // P, x.shape[1]
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    zero = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zero, value=0.0)
    for t in range(T):
        nisa.dma_copy(dst=out[t * P : (t + 1) * P, :], src=zero)
    n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n_sb, src=n_tiles)
    n_reg = nisa.register_alloc()
    nisa.register_load(n_reg, n_sb)
    row = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=row, value=0)
    for _ in nl.dynamic_range(0, n_reg, 1):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.ap([[F, P], [1, F]], offset=0, scalar_offset=row))
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out.ap([[F, P], [1, F]], offset=0, scalar_offset=row), src=t)
        nisa.tensor_scalar(dst=row, data=row, op0=nl.add, operand0=P)
    return out


@pytest.mark.parametrize("n", [0, 1, 3])
def test_dynamic_range_runs_the_register_trip_count(n):
    x = RNG.standard_normal((3 * P, 16)).astype(np.float32)
    want = np.zeros_like(x)
    want[: n * P] = 2 * x[: n * P]
    got = nki.simulate(dynamic_rows)(x, np.array([[n]], np.int32))
    np.testing.assert_array_equal(got, want)


@nki.jit
def transpose_by_identity(x):
    out = nl.ndarray((x.shape[1], P), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((P, x.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    # an SBUF tile in current kernels (the kernel is decided current by nc_matmul(dst=) below)
    ident = nl.shared_identity_matrix(P, dtype=nl.float32)
    ps = nl.ndarray((x.shape[1], P), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=t, moving=ident)  # t.T @ I
    r = nl.ndarray((x.shape[1], P), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=ps)
    nisa.dma_copy(dst=out, src=r)
    return out


def test_shared_identity_matrix_is_an_sbuf_tile_in_current_kernels():
    x = RNG.standard_normal((P, 48)).astype(np.float32)
    np.testing.assert_allclose(nki.simulate(transpose_by_identity)(x), x.T, rtol=1e-6)


@nki.jit
def rotating_buffers(x):
    """Three row tiles allocated up front on two rotating SBUF addresses (like a modular
    allocator): tile i and tile i + 2 share memory but are used one after another."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    F = x.shape[1]
    bufs = [
        nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf, address=(0, (i % 2) * F * 4))
        for i in range(3)
    ]
    for i, b in enumerate(bufs):
        nisa.dma_copy(dst=b, src=x[i * P : (i + 1) * P, :])
        nisa.tensor_scalar(dst=b, data=b, op0=nl.add, operand0=float(i))
        nisa.dma_copy(dst=out[i * P : (i + 1) * P, :], src=b)
    return out


def test_tensors_rotating_through_one_address_are_not_an_overlap():
    x = RNG.standard_normal((3 * P, 32)).astype(np.float32)
    want = x + np.repeat(np.arange(3, dtype=np.float32), P)[:, None]
    np.testing.assert_array_equal(nki.simulate(rotating_buffers)(x), want)


@nki.jit
def bad_view(x):
    t = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    out = nl.ndarray((P, 64), dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[:, 0:32], src=t[:, 0:64:2].view(nl.int32))  # STRIDED
    return out


def test_view_dtype_of_a_strided_last_dim_is_a_located_error():
    with pytest.raises(NKIError, match="must be contiguous") as e:
        nki.simulate(bad_view)(np.zeros((P, 64), np.float32))
    assert e.value.loc.line == _line(bad_view.fn, "# STRIDED")


@nki.jit
def nl_wrappers(x, y):
    """The nl convenience layer in a current-API kernel: each call makes a new SBUF tile
    (PSUM for matmul / transpose), which nisa calls then read."""
    out = nl.ndarray((P, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    a, b = nl.load(x), nl.load(y)
    s = nl.softmax(nl.add(a, b), axis=1)
    prod = nl.matmul(a[:, 0:64], b[:, 0:64], transpose_x=True)  # (64, 64) in PSUM
    pt = nl.transpose(nl.copy(prod))  # PSUM again
    r = nl.ndarray((P, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=r, value=0.0)
    nisa.tensor_tensor(dst=r[0:64], data1=s[0:64], data2=pt, op=nl.add)
    nisa.tensor_copy(dst=r[64:P], src=s[64:P])
    nl.store(out, r)
    return out


def test_nl_wrappers_in_a_current_kernel_match_numpy():
    x, y = (RNG.standard_normal((P, 64)).astype(np.float32) for _ in range(2))
    z = (x + y).astype(np.float64)
    want = np.exp(z - z.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    want[0:64] += (x.T @ y).T
    np.testing.assert_allclose(nki.simulate(nl_wrappers)(x, y), want, rtol=1e-4, atol=1e-4)


@nki.jit
def store_from_psum(x):
    out = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    ps = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_transpose(dst=ps, data=t)
    nl.store(out, ps)  # PSUM_STORE
    return out


@nki.jit
def masked_load(x):
    out = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=t, value=0.0)
    i_p = nl.arange(P)[:, None]
    t2 = nl.load(x, mask=(i_p < 100))  # MASKED
    nisa.dma_copy(dst=out, src=t2)
    return out


@pytest.mark.parametrize(
    "kernel,mark,code,msg",
    [
        (store_from_psum, "# PSUM_STORE", "err_unsupported_memory", "DMA cannot read PSUM"),
        (masked_load, "# MASKED", "err_mixed_api_generations", "has no masks"),
    ],
)
def test_nl_wrapper_restrictions_of_the_current_api(kernel, mark, code, msg):
    with pytest.raises(NKIError, match=msg) as e:
        nki.simulate(kernel)(np.zeros((P, 64 if kernel is masked_load else P), np.float32))
    assert e.value.code == code
    assert e.value.loc.line == _line(kernel.fn, mark)


@nki.jit
def bad_dtype(x):
    t = nl.ndarray((P, 4), dtype="complex64", buffer=nl.sbuf)  # BAD_DTYPE
    nisa.memset(dst=t, value=0)
    return x


def test_an_error_raised_without_a_location_gets_the_kernel_line():
    with pytest.raises(NKIError, match="unsupported data type 'complex64'") as e:
        nki.simulate(bad_dtype)(np.zeros((2, 2), np.float32))
    assert e.value.code == "err_unsupported_dtype"
    assert e.value.loc.line == _line(bad_dtype.fn, "# BAD_DTYPE")


@nki.jit
def chain_of_layers(x, weights, caches):
    # per-layer tensors passed as Python lists (AWS's transformer megakernel does): each
    # element is an HBM tensor; the caches are written in place
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    for w, c in zip(weights, caches):
        u = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=u, src=w)
        nisa.tensor_tensor(dst=t, data1=t, data2=u, op=nl.multiply)
        nisa.dma_copy(dst=c, src=t)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_lists_of_tensor_arguments():
    x = RNG.random((P, 8), dtype=np.float32)
    ws = [RNG.random((P, 8), dtype=np.float32) for _ in range(3)]
    cs = [np.zeros((P, 8), np.float32) for _ in range(3)]
    got = nki.simulate(chain_of_layers)(x, ws, cs)
    np.testing.assert_allclose(got, x * ws[0] * ws[1] * ws[2], rtol=1e-6)
    np.testing.assert_allclose(cs[1], x * ws[0] * ws[1], rtol=1e-6)
    # another list length is another trace
    got2 = nki.simulate(chain_of_layers)(x, ws[:1], cs[:1])
    np.testing.assert_allclose(got2, x * ws[0], rtol=1e-6)


@nki.jit
def pairs_of_tensors(pairs):
    # a list of (real, imaginary) tuples of tensors (a public quantum-circuit simulator passes
    # its gates so): each array at any depth is an HBM tensor
    out = nl.ndarray((len(pairs), P, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    for i, (re, im) in enumerate(pairs):
        a = nl.ndarray((P, 8), dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((P, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=re)
        nisa.dma_copy(dst=b, src=im)
        nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.subtract)
        nisa.dma_copy(dst=out[i], src=a)
    return out


def test_nested_lists_of_tensor_arguments():
    gates = [tuple(RNG.random((P, 8), dtype=np.float32) for _ in range(2)) for _ in range(3)]
    got = nki.simulate(pairs_of_tensors)(gates)
    np.testing.assert_array_equal(got, np.stack([re - im for re, im in gates]))
    swapped = [(im, re) for re, im in gates]  # the same shapes: the cached trace, new values
    got2 = nki.simulate(pairs_of_tensors)(swapped)
    np.testing.assert_array_equal(got2, -got)


def test_nki_dtype_is_a_module_of_numpy_usable_dtypes():
    """AWS's library tests ``import nki.dtype as nt`` and make host data with its names."""
    import ml_dtypes

    import nki.dtype as nt

    assert nki.dtype is nt and nt.bfloat16 is nl.bfloat16
    w = RNG.standard_normal((P, 32)).astype(np.float32)
    w8 = (w / 4).astype(nt.float8_e4m3)
    assert w8.dtype == np.dtype(ml_dtypes.float8_e4m3)
    np.testing.assert_array_equal(np.zeros((2, 3), dtype=nt.float8_e4m3fn).view(np.uint8), 0)

    @nki.jit
    def widen(x):
        out = nl.ndarray(x.shape, dtype=nt.float32, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=nt.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=t, src=nl.load(x))
        nisa.dma_copy(dst=out, src=t)
        return out

    np.testing.assert_array_equal(widen(w8), w8.astype(np.float32))


def k_ap_loop_offset(x):
    # no construct before the .ap decides the generation: its offset, computed from a loop
    # iterator, needs the iterator's integer value, which current-API loops have
    out = nl.ndarray((4 * P, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        t = nl.ndarray((P, 32), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.ap([[32, P], [1, 32]], offset=i * P * 32))
        nisa.dma_copy(dst=out[i * P : (i + 1) * P, :], src=t)
    return out


def test_ap_offset_from_a_loop_iterator_decides_the_current_api():
    from nki.classic import classic_mode, set_classic_mode

    x = RNG.standard_normal((4 * P, 32)).astype(np.float32)
    before = classic_mode()
    set_classic_mode(True)  # (as the compat runner sets it: undecided kernels start classic)
    try:
        got = nki.jit(k_ap_loop_offset)(x)
    finally:
        set_classic_mode(before)
    np.testing.assert_array_equal(got, x)
