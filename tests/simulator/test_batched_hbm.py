"""The batched backend on kernels that write HBM and read it back (in-place updates, scratch
tensors, accumulation into an output argument), accumulate into HBM or scatter into it: it runs
them when no batch position (instance x batched iteration) can see another's HBM writes, bit
for bit as the interpreter, and otherwise declines naming the tensor and the two lines."""

from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nki
import nki.isa as nisa
import nki.language as nl
import nki.typing as nt

from backends import REFERENCE, run_backends, same


def _line(kernel, marker: str) -> int:
    src, start = inspect.getsourcelines(kernel.fn)
    return start + next(i for i, s in enumerate(src) if marker in s)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ---- read after write on HBM, each position its own elements ----------------------------------


@nki.jit
def in_place_update(a):
    """Legacy output argument updated in place: each instance loads its tile and stores it back."""
    i, j = nl.program_id(0), nl.program_id(1)
    r, c = slice(i * 128, (i + 1) * 128), slice(j * 64, (j + 1) * 64)
    t = nl.load(a[r, c])
    nl.store(a[r, c], value=nl.add(nl.multiply(t, 3.0), 1.0))


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_in_place_update_over_a_grid(dtype):
    a = _rng(1).standard_normal((512, 256)).astype(dtype)
    a[5, 7] = np.nan
    r = run_backends(in_place_update, (4, 4), make_args=lambda: (a.copy(),))
    (got,), (want,), info = r.args_against("batched")
    assert info.backend == "batched", info.reason
    assert "every instruction ran once per batch" in info.reason
    assert same(got, want)
    ref = (a.astype(np.float32) * np.float32(3) + np.float32(1)).astype(dtype)
    assert same(got, ref)


@nki.jit
def scratch_round_trip(a):
    """A scratch HBM tensor written tile by tile, then read back in reverse tile order by a
    second loop of the same instance (the instance indexes its own slab)."""
    g = nl.program_id(0)
    n = a.shape[1] // 128
    tmp = nl.ndarray((2, a.shape[1], a.shape[2]), dtype=nl.float32, buffer=nl.shared_hbm)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(n):
        x = nl.load(a[g, i * 128 : (i + 1) * 128, :])
        nl.store(tmp[g, i * 128 : (i + 1) * 128, :], value=nl.exp(x))
    for i in nl.affine_range(n):
        y = nl.load(tmp[g, (n - 1 - i) * 128 : (n - i) * 128, :])
        nl.store(out[g, i * 128 : (i + 1) * 128, :], value=nl.multiply(y, 0.5))
    return out


def test_scratch_tensor_written_then_read_back():
    a = _rng(2).standard_normal((2, 512, 48)).astype(np.float32)
    r = run_backends(scratch_round_trip, (2,), make_args=lambda: (a,))
    got, want, info = r.against("batched")
    assert info.backend == "batched", info.reason
    assert same(got, want)
    t = (np.exp(a) * np.float32(0.5)).reshape(2, 4, 128, 48)[:, ::-1].reshape(a.shape)
    np.testing.assert_allclose(got, t, rtol=1e-6)


@nki.jit
def load_after_compute(a, b):
    """The stored result is computed before another load of the same elements: it must not be
    written into ``a`` before that load runs."""
    i = nl.program_id(0)
    r = slice(i * 128, (i + 1) * 128)
    e = nl.exp(nl.load(a[r, :]))
    old = nl.load(a[r, :])
    nl.store(a[r, :], value=e)
    nl.store(b[r, :], value=nl.add(old, 1.0))


def test_a_result_stored_over_its_source_waits_for_later_loads():
    a = _rng(3).standard_normal((256, 32)).astype(np.float32)

    def make():
        return a.copy(), np.zeros_like(a)

    r = run_backends(load_after_compute, (2,), make_args=make)
    (ga, gb), (wa, wb), info = r.args_against("batched")
    assert info.backend == "batched", info.reason
    assert same(ga, wa) and same(gb, wb)
    assert np.array_equal(ga, np.exp(a)) and np.array_equal(gb, a + np.float32(1))


@nki.jit
def overwrite_then_use_old(a, b):
    """The loaded tile is used after its elements are overwritten (and an exp is stored in
    place of its own source): the tile must keep the old values."""
    i = nl.program_id(0)
    r = slice(i * 128, (i + 1) * 128)
    t = nl.load(a[r, :])
    u = nl.load(b[r, :])
    nl.store(b[r, :], value=nl.exp(u))
    nl.store(a[r, :], value=nl.multiply(t, 0.0))
    nl.store(b[r, :], value=nl.add(t, nl.load(b[r, :])))


def test_a_loaded_tile_keeps_values_overwritten_after_the_load():
    a = _rng(17).standard_normal((256, 32)).astype(np.float32)
    b = _rng(18).standard_normal((256, 32)).astype(np.float32)
    r = run_backends(overwrite_then_use_old, (2,), make_args=lambda: (a.copy(), b.copy()))
    (ga, gb), (wa, wb), info = r.args_against("batched")
    assert info.backend == "batched", info.reason
    assert same(ga, wa) and same(gb, wb)
    assert np.array_equal(ga, a * np.float32(0)) and np.array_equal(gb, a + np.exp(b))


@nki.jit
def sequential_accumulate(x, out):
    """Each instance adds K tiles into its own rows of ``out`` through HBM, one trip at a time."""
    g = nl.program_id(0)
    r = slice(g * 128, (g + 1) * 128)
    for k in nl.sequential_range(x.shape[0]):
        acc = nl.load(out[r, :])
        nl.store(out[r, :], value=nl.add(acc, nl.load(x[k, r, :])))


def test_sequential_accumulation_through_hbm():
    x = _rng(4).standard_normal((3, 256, 16)).astype(np.float32)
    init = _rng(5).standard_normal((256, 16)).astype(np.float32)
    r = run_backends(sequential_accumulate, (2,), make_args=lambda: (x, init.copy()))
    (_, got), (_, want), info = r.args_against("batched")
    assert info.backend == "batched", info.reason
    assert same(got, want)
    assert np.array_equal(got, ((init + x[0]) + x[1]) + x[2])


@nki.jit
def current_accumulate_into(x, out: nt.mutable_tensor):
    """Current API: the output is an argument; each tile is read, added to and written back."""
    for i in nl.affine_range(x.shape[0] // 128):
        for j in nl.affine_range(x.shape[1] // 32):
            r, c = slice(i * 128, (i + 1) * 128), slice(j * 32, (j + 1) * 32)
            t = nl.ndarray((128, 32), dtype=out.dtype, buffer=nl.sbuf)
            u = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=out[r, c])
            nisa.dma_copy(dst=u, src=x[r, c])
            nisa.tensor_tensor(dst=t, data1=t, data2=u, op=nl.add)
            nisa.dma_copy(dst=out[r, c], src=t)
    return out


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_current_api_accumulates_into_its_output_argument(dtype):
    x = _rng(6).standard_normal((256, 96)).astype(np.float32)
    init = _rng(7).standard_normal((256, 96)).astype(dtype)
    r = run_backends(current_accumulate_into, None, make_args=lambda: (x, init.copy()))
    got, want, info = r.against("batched")
    assert info.backend == "batched", info.reason
    assert same(got, want)
    ref = (init.astype(np.float32) + x).astype(dtype)
    assert same(got, ref)


@nki.jit
def private_scratch(x):
    """Private HBM (nl.private_hbm, nl.hbm): one scratch per instance, written and read back;
    a running sum kept in private HBM over a sequential loop."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    sums = nl.ndarray((x.shape[0] // 2, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    keep = nl.ndarray((128, x.shape[1]), dtype=nl.float32, buffer=nl.private_hbm)
    nl.store(keep, value=nl.zeros((128, x.shape[1]), nl.float32))
    tmp = nl.ndarray((2, 128, x.shape[1]), dtype=nl.bfloat16, buffer=nl.hbm)
    for i in nl.affine_range(2):
        r = slice((g * 2 + i) * 128, (g * 2 + i + 1) * 128)
        nl.store(tmp[i], value=nl.exp(nl.load(x[r, :])))
        nl.store(out[r, :], value=nl.load(tmp[i]))
    for i in nl.sequential_range(2):
        r = slice((g * 2 + i) * 128, (g * 2 + i + 1) * 128)
        nl.store(keep, value=nl.add(nl.load(keep), nl.load(x[r, :])))
    nl.store(sums[g * 128 : (g + 1) * 128, :], value=nl.load(keep))
    return out, sums


def test_private_hbm_is_storage_of_each_instance():
    x = _rng(19).standard_normal((1024, 16)).astype(np.float32)
    r = run_backends(private_scratch, (4,), make_args=lambda: (x,))
    (out, sums), (w_out, w_sums), info = r.against("batched")
    assert info.backend == "batched", info.reason
    assert same(out, w_out) and same(sums, w_sums)
    bf = np.exp(x).astype(ml_dtypes.bfloat16).astype(np.float32)
    assert same(out, bf)
    pairs = x.reshape(4, 2, 128, 16)
    assert np.array_equal(sums, ((np.float32(0) + pairs[:, 0]) + pairs[:, 1]).reshape(512, 16))


# ---- accumulating writes ---------------------------------------------------------------------


@nki.jit
def rmw_per_tile(x, out):
    """Accumulating DMAs (dst_rmw_op): each instance / iteration accumulates its own tile."""
    g = nl.program_id(0)
    for i in nl.affine_range(2):
        rows = slice((g * 2 + i) * 128, (g * 2 + i + 1) * 128)
        nisa.dma_copy(dst=out[rows, :], src=nl.load(x[rows, :]), dst_rmw_op=nl.add)
        nisa.dma_copy(dst=out[rows, :], src=nl.load(x[rows, :]), dst_rmw_op=nl.add)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_accumulating_dma_into_distinct_tiles(dtype):
    x = _rng(8).standard_normal((1024, 24)).astype(np.float32)
    init = _rng(9).standard_normal((1024, 24)).astype(dtype)
    r = run_backends(rmw_per_tile, (4,), make_args=lambda: (x, init.copy()))
    (_, got), (_, want), info = r.args_against("batched")
    assert info.backend == "batched", info.reason
    assert same(got, want)
    once = (init.astype(np.float32) + x).astype(dtype)  # rounded to bf16 after each add
    assert same(got, (once.astype(np.float32) + x).astype(dtype))


@nki.jit
def augmented_into_hbm(x, out):
    """Classic ``+=`` / ``-=`` / ``*=`` on HBM (batched accumulating copies): each instance
    its own rows."""
    g = nl.program_id(0)
    ip, jf = nl.mgrid[0:128, 0:8]
    t = nl.load(x[g * 128 + ip, jf])
    out[g * 128 + ip, jf] += t
    out[g * 128 + ip, jf] -= nl.multiply(t, 0.25)
    out[g * 128 + ip, 8 + jf] *= t


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.int32])
def test_augmented_assignment_into_hbm_rounds_like_the_interpreter(dtype):
    rows = 384
    x = (_rng(21).standard_normal((rows, 8)) * 5).astype(dtype)
    init = (_rng(22).standard_normal((rows, 16)) * 5).astype(dtype)
    r = run_backends(augmented_into_hbm, (3,), make_args=lambda: (x, init.copy()))
    (_, got), (_, want), info = r.args_against("batched")
    assert info.backend == "batched", info.reason
    assert same(got, want) if dtype != np.int32 else np.array_equal(got, want)
    f = np.float32 if dtype != np.int32 else np.int64

    def rnd(v):  # the stored dtype after each step
        return v.astype(dtype).astype(f)

    xf, ref = x.astype(f), init.astype(f)
    if dtype == np.int32:  # (int32 x 0.25 is an fp32 tile: int - fp32 rounds to nearest even)
        q = x.astype(np.float32) * np.float32(0.25)
        ref[:, :8] = np.rint((ref[:, :8] + xf).astype(np.float32) - q).astype(f)
    else:
        ref[:, :8] = rnd(rnd(ref[:, :8] + xf) - rnd(xf * f(0.25)))
    ref[:, 8:] = rnd(ref[:, 8:] * xf)
    assert np.array_equal(got.astype(f), ref)


@nki.jit
def rmw_sum_over_grid(x, out):
    """Every instance accumulates into the same tile: one hosted instruction alone touches
    ``out``, so positions run in the interpreter's order and the sums round alike."""
    g = nl.program_id(0)
    nisa.dma_copy(dst=out, src=nl.load(x[g]), dst_rmw_op=nl.add)


@nki.jit
def rmw_sum_over_2d_grid(x, out):
    g, h = nl.program_id(0), nl.program_id(1)
    nisa.dma_copy(dst=out, src=nl.load(x[g * 2 + h]), dst_rmw_op=nl.add)  # SUM2D


def test_accumulation_by_every_instance_into_one_tile():
    x = _rng(10).standard_normal((8, 128, 8)).astype(ml_dtypes.bfloat16)
    make = lambda: (x, np.zeros((128, 8), ml_dtypes.bfloat16))  # noqa: E731
    r = run_backends(rmw_sum_over_grid, (8,), make_args=make)
    (_, got), (_, want), info = r.args_against("batched")
    assert info.backend == "batched", info.reason
    assert same(got, want)
    ref = np.zeros((128, 8), ml_dtypes.bfloat16)
    for g in range(8):  # instance order, bf16 rounding after each add
        ref = (ref.astype(np.float32) + x[g].astype(np.float32)).astype(ml_dtypes.bfloat16)
    assert same(got, ref)
    # two grid axes: positions are not run in the interpreter's order along one axis
    r = run_backends(rmw_sum_over_2d_grid, (4, 2), make_args=make)
    (_, got), (_, want), info = r.args_against("batched")
    assert info.backend == "numpy"
    line = _line(rmw_sum_over_2d_grid, "# SUM2D")
    assert f"several instances / iterations write the same elements of 'out' (line {line}" in (
        info.reason
    )
    assert same(got, want)


@nki.jit
def rmw_over_iterations(a):
    """A store, then an accumulating DMA by every loop iteration into the same tile."""
    out = nl.ndarray((128, a.shape[2]), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.zeros((128, a.shape[2]), nl.float32))
    for i in nl.affine_range(a.shape[0]):
        nisa.dma_copy(dst=out, src=nl.load(a[i]), dst_rmw_op=nl.add)
    return out


def test_accumulation_by_every_iteration_after_a_store():
    a = _rng(23).standard_normal((6, 128, 4)).astype(np.float32)
    r = run_backends(rmw_over_iterations, None, make_args=lambda: (a,))
    got, want, info = r.against("batched")
    assert info.backend == "batched", info.reason
    ref = np.zeros((128, 4), np.float32)
    for i in range(6):  # iteration order, fp32 rounding after each add
        ref = ref + a[i]
    assert same(got, want) and same(got, ref)


# ---- indirect writes -------------------------------------------------------------------------


@nki.jit
def scatter_rows(idx, vals, out):
    """Each instance scatters its 128 rows into ``out`` by index; indices collide across
    instances, and the interpreter's last writer wins."""
    g = nl.program_id(0)
    ip = nl.arange(128)[:, None]
    jf = nl.arange(vals.shape[1])[None, :]
    ix = nl.load(idx[g * 128 + ip, 0])
    nisa.dma_copy(dst=out[ix[ip, 0], jf], src=nl.load(vals[g * 128 + ip, jf]))


@nki.jit
def scatter_then_read(idx, vals, out, back):
    g = nl.program_id(0)
    ip = nl.arange(128)[:, None]
    jf = nl.arange(vals.shape[1])[None, :]
    ix = nl.load(idx[g * 128 + ip, 0])
    nisa.dma_copy(dst=out[ix[ip, 0], jf], src=nl.load(vals[g * 128 + ip, jf]))  # SCATTER
    nl.store(back[g * 128 + ip, jf], value=nl.load(out[g * 128 + ip, jf]))  # READ


@nki.jit
def two_scatters(idx, vals, out):
    ip = nl.arange(128)[:, None]
    jf = nl.arange(vals.shape[1])[None, :]
    for t in nl.affine_range(2):
        ix = nl.load(idx[t * 128 + ip, 0])
        nisa.dma_copy(dst=out[ix[ip, 0], jf], src=nl.load(vals[t * 128 + ip, jf]))  # FIRST
        nisa.dma_copy(dst=out[ix[ip, 0], jf], src=nl.load(vals[t * 128 + ip, jf]))  # SECOND


def test_scatter_with_colliding_indices():
    grid = 4
    idx = _rng(11).integers(0, 64, size=(grid * 128, 1)).astype(np.int32)
    vals = _rng(12).standard_normal((grid * 128, 8)).astype(np.float32)
    make = lambda: (idx, vals, np.zeros((64, 8), np.float32))  # noqa: E731
    r = run_backends(scatter_rows, (grid,), make_args=make)
    (_, _, got), (_, _, want), info = r.args_against("batched")
    assert info.backend == "batched", info.reason
    assert "hosted" in info.reason
    ref = np.zeros((64, 8), np.float32)
    for g in range(grid):
        ref[idx[g * 128 : (g + 1) * 128, 0]] = vals[g * 128 : (g + 1) * 128]
    assert same(got, want) and same(got, ref)


def test_scatters_others_may_see_are_declined():
    idx = _rng(13).integers(0, 256, size=(256, 1)).astype(np.int32)
    vals = _rng(14).standard_normal((256, 8)).astype(np.float32)

    def make():
        return idx, vals, np.zeros((256, 8), np.float32), np.zeros((256, 8), np.float32)

    r = run_backends(scatter_then_read, (2,), make_args=make)
    (*_, got_back), (*_, want_back), info = r.args_against("batched")
    assert info.backend == "numpy"
    lines = [_line(scatter_then_read, m) for m in ("# SCATTER", "# READ")]
    assert info.reason == (
        "batched: an indirect (data-dependent) access to 'out': line {} and the read at line {} "
        "may touch the same elements at different instances / iterations".format(*lines)
    )
    assert same(got_back, want_back)
    r = run_backends(two_scatters, None, make_args=lambda: make()[:3])
    (*_, got), (*_, want), info = r.args_against("batched")
    assert info.backend == "numpy"
    first, second = (_line(two_scatters, m) for m in ("# FIRST", "# SECOND"))
    assert f"'out': line {first} and the write at line {second}" in info.reason
    assert same(got, want)


# ---- what other positions can see is declined ----------------------------------------------


@nki.jit
def shift_down(a):
    """Instance i reads the rows instance i - 1 writes: a real cross-instance dependence."""
    i = nl.program_id(0)
    t = nl.load(a[i * 128 : (i + 1) * 128, :])  # LOAD
    nl.store(a[(i + 1) * 128 : (i + 2) * 128, :], value=nl.add(t, 1.0))  # STORE


@nki.jit(api="classic")  # (current API: the loop keeps program order and runs batched in order)
def neighbour_sum(a):
    """Each iteration reads its neighbour's tile after writing its own: overlapping windows."""
    for i in nl.affine_range(a.shape[1] // 8 - 1):
        t = nl.load(a[:, i * 8 : (i + 2) * 8])  # WINDOW
        nl.store(a[:, i * 8 : (i + 1) * 8], value=nl.add(t[:, 0:8], t[:, 8:16]))  # OWN


@nki.jit(api="classic")  # (current API: the loop keeps program order)
def next_tile_of_scratch(a):
    """Iteration i reads back the scratch rows iteration i + 1 writes."""
    scratch = nl.ndarray((a.shape[0] + 256, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        nl.store(
            scratch[(i + 1) * 128 : (i + 2) * 128, :], value=nl.load(a[i * 128 : (i + 1) * 128, :])
        )
        nl.store(
            out[i * 128 : (i + 1) * 128, :],
            value=nl.load(scratch[(i + 2) * 128 : (i + 3) * 128, :]),
        )


def test_cross_position_read_after_write_is_declined():
    a = np.arange(512 * 8, dtype=np.float32).reshape(512, 8)
    r = run_backends(shift_down, (3,), make_args=lambda: (a.copy(),))
    (got,), (want,), info = r.args_against("batched")
    assert info.backend == "numpy"
    store, load = _line(shift_down, "# STORE"), _line(shift_down, "# LOAD")
    assert info.reason == (
        f"batched: HBM tensor 'a' is written and read: line {store} and the read at line "
        f"{load} touch the same elements at different instances / iterations"
    )
    ref = a.copy()
    for i in range(3):
        ref[(i + 1) * 128 : (i + 2) * 128] = ref[i * 128 : (i + 1) * 128] + 1
    assert same(got, want) and same(got, ref)
    b = a.reshape(128, 32)
    # (an affine_range iteration reading another's write is a static error: checks="none" runs
    # it, for the batched backend's own test)
    r = run_backends(neighbour_sum, None, make_args=lambda: (b.copy(),), checks="none")
    (got,), (want,), info = r.args_against("batched")
    assert info.backend == "numpy"
    own, window = _line(neighbour_sum, "# OWN"), _line(neighbour_sum, "# WINDOW")
    assert f"line {own} and the read at line {window}" in info.reason
    assert same(got, want)
    # a tensor the kernel creates is named as the user named it
    c = np.arange(384 * 8, dtype=np.float32).reshape(384, 8)
    r = run_backends(next_tile_of_scratch, None, make_args=lambda: (c,), checks="none")
    info = r.info("batched")
    assert info.backend == "numpy"
    assert info.reason.startswith("batched: HBM tensor 'scratch' is written and read: line")


# ---- errors after HBM writes: reported as the interpreter reports them ------------------------


@nki.jit
def bump_then_gather(idx, data, out):
    """Each instance bumps its own index rows in place, reloads them and gathers with them; an
    index bumped out of range fails in a later instance than the first (the replay must start
    from the indices as they were, or it would fail at instance 0)."""
    g = nl.program_id(0)
    ip = nl.arange(128)[:, None]
    jf = nl.arange(data.shape[1])[None, :]
    nl.store(idx[g * 128 + ip, 0], value=nl.add(nl.load(idx[g * 128 + ip, 0]), 100))
    ix = nl.load(idx[g * 128 + ip, 0])
    x = nl.load(data[ix[ip, 0], jf])  # GATHER
    nl.store(out[g * 128 + ip, jf], value=x)


def test_an_error_after_in_place_writes_is_the_interpreters():
    grid = 4
    data = _rng(15).standard_normal((200, 8)).astype(np.float32)
    idx = _rng(16).integers(0, 100, size=(grid * 128, 1)).astype(np.int32)
    idx[2 * 128 + 9] = 150  # instance 2: 250 after the bump, out of range
    errors = []
    for backend in ("numpy", "batched"):
        k = bump_then_gather.configure(backend=backend)
        with pytest.raises(nki.NKIError) as e:
            k[grid](idx.copy(), data, np.zeros((grid * 128, 8), np.float32))
        errors.append(e.value)
    want, got = errors
    assert want.instance == (2,) and want.loc.line == _line(bump_then_gather, "# GATHER")
    assert (got.code, got.loc.line, got.instance) == (want.code, want.loc.line, want.instance)
    assert str(got) == str(want)
    fine = idx.copy()
    fine[2 * 128 + 9] = 50

    def make():
        return fine.copy(), data, np.zeros((grid * 128, 8), np.float32)

    r = run_backends(bump_then_gather, (grid,), make_args=make)
    (gi, _, got), (wi, _, want), info = r.args_against("batched")
    assert info.backend == "batched", info.reason
    assert same(got, want) and same(got, data[fine[:, 0] + 100])
    assert np.array_equal(gi, wi) and np.array_equal(gi, fine + 100)


@nki.jit
def bump_then_row_sums(a, sums):
    """In place: a += 1, then exp of the new a, and the row sums of exp(a) and a folded into the
    Scalar engine's accumulator registers by two instructions (engine state)."""
    g = nl.program_id(0)
    for j in nl.affine_range(3):
        r = slice((g * 3 + j) * 128, (g * 3 + j + 1) * 128)
        nl.store(a[r, :], value=nl.add(nl.load(a[r, :]), 1.0))
        rs = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        x = nl.load(a[r, :])
        e = nisa.activation(nl.exp, x, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(
            nl.copy, x, reduce_op=nl.add, reduce_res=rs, reduce_cmd=nisa.reduce_cmd.reduce
        )
        nl.store(sums[r, :], value=rs)
        nl.store(a[r, :], value=e)


def test_a_late_decline_hands_the_next_backend_the_launchs_data(monkeypatch):
    """A hosted instruction the plan took for stateless uses engine state inside a batched loop
    after the batched run updated ``a`` in place: the next backend starts from the original."""
    from simulator.batched import host as batched_host

    monkeypatch.setattr(batched_host, "_STATEFUL_ISA", batched_host._STATEFUL_ISA - {"activation"})
    monkeypatch.setattr(batched_host, "_STATE_ATTRS", ())
    a = _rng(20).standard_normal((768, 16)).astype(np.float32)

    def make():
        return a.copy(), np.zeros((768, 1), np.float32)

    r = run_backends(bump_then_row_sums, (2,), make_args=make)
    (ga, gs), (wa, ws), info = r.args_against("batched")
    assert info.backend == "numpy" and "engine state" in info.reason
    assert same(ga, wa) and same(gs, ws)
    np.testing.assert_allclose(ga, np.exp(a + 1), rtol=1e-6)
    want_sums = np.exp(a + 1).sum(axis=1) + (a + 1).sum(axis=1)
    np.testing.assert_allclose(gs[:, 0], want_sums, rtol=1e-5)


# ---- a differential property test --------------------------------------------------------------


@given(
    grid=st.integers(1, 3),
    tiles=st.integers(1, 3),
    width=st.sampled_from([8, 40]),
    shift=st.sampled_from([0, 0, 1, 64]),
    bf16=st.booleans(),
    current=st.booleans(),
)
def test_generated_in_place_kernels_match_the_interpreter(grid, tiles, width, shift, bf16, current):
    """Instance g, iteration t update their tile in place (classic API, or the current API's
    destination-first calls); with a shift they read rows another position writes (then the
    kernel is declined, and still computed as the interpreter does)."""

    @nki.jit(api="classic")
    def classic(a):
        g = nl.program_id(0)
        for t in nl.affine_range(tiles):
            base = (g * tiles + t) * 128
            x = nl.load(a[base + shift : base + shift + 128, :])
            nl.store(a[base : base + 128, :], value=nl.subtract(nl.multiply(x, x), 0.5))

    @nki.jit
    def destination_first(a):
        g = nl.program_id(0)
        for t in nl.affine_range(tiles):
            base = (g * tiles + t) * 128
            x = nl.ndarray((128, width), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a[base + shift : base + shift + 128, :])
            nisa.tensor_tensor(dst=x, data1=x, data2=x, op=nl.multiply)
            y = nl.ndarray((128, width), dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=y, data=x, op0=nl.subtract, operand0=0.5)
            nisa.dma_copy(dst=a[base : base + 128, :], src=y)

    kernel = destination_first if current else classic
    grid = 1 if current else grid  # (a current-API grid is the LNC: one core here)

    dt = ml_dtypes.bfloat16 if bf16 else np.float32
    a = _rng(grid * 100 + tiles * 10 + width).standard_normal((grid * tiles * 128 + 64, width))
    a = a.astype(dt)
    # (compiling a Numba driver for each generated kernel would take seconds)
    # (classic: a shifted read of another iteration's rows is a static error; checks="none"
    # runs it for the batched backend's decline)
    r = run_backends(
        kernel, (grid,), make_args=lambda: (a.copy(),), backends=("batched", REFERENCE),
        checks="none",
    )  # fmt: skip
    (got,), (want,), info = r.args_against("batched")
    # (a current-API loop whose iterations read each other's rows keeps program order)
    apart = shift == 0 or grid * tiles == 1 or current
    assert (info.backend == "batched") == apart, info.reason
    if not apart:
        assert "'a' is written and read" in info.reason
    assert same(got, want)
    ref = a.copy()  # instances, then iterations, in order
    for p in range(grid * tiles):
        x = ref[p * 128 + shift : p * 128 + shift + 128].astype(np.float32)
        sq = (x * x).astype(dt).astype(np.float32)  # (a bf16 tile after the multiply)
        ref[p * 128 : p * 128 + 128] = (sq - np.float32(0.5)).astype(dt)
    assert same(got, ref)


@given(
    extents=st.lists(st.integers(2, 5), min_size=1, max_size=3),
    data=st.data(),
)
def test_position_differences_agree_with_the_race_analysis(extents, data):
    """The planner's grouped enumeration of position differences decides the same overlaps as
    ``races.pairwise_conflict``'s enumeration of every pair of positions, and the race
    check's witness is a real meeting."""
    from simulator.batched.hbm import first_meeting
    from simulator.checks import races

    coeff = st.sampled_from([0, 0, 1, -1, 2, 64, 128])
    fa, fb = [], []
    for _ in range(data.draw(st.integers(1, 3))):
        coeffs = tuple(data.draw(coeff) for _ in extents)
        lo, hi = sorted(data.draw(st.integers(-130, 130)) for _ in range(2))
        g = data.draw(st.sampled_from([0, 1, 2, 64]))
        lo, hi = (0, 0) if g == 0 else (lo, hi)
        ca, cb = data.draw(st.integers(-200, 200)), data.draw(st.integers(-200, 200))
        fa.append(races._DimForm(ca, coeffs, (), lo, hi, g))
        fb.append(races._DimForm(cb, coeffs, (), lo, hi, g))
    want = races.pairwise_conflict(fa, fb, extents)
    assert (first_meeting(fa, fb, extents) is True) == (want is not None)
    got = races.first_conflict(fa, fb, extents)
    assert (got is None) == (want is None)
    if got is not None:  # the witness is two distinct positions where the accesses meet
        a, b = got
        assert a != b and all(0 <= v < e for p in (a, b) for v, e in zip(p, extents))
        for x, y in zip(fa, fb):
            va = x.const + sum(c * v for c, v in zip(x.coeffs, a))
            vb = y.const + sum(c * v for c, v in zip(y.coeffs, b))
            assert races.holds(x, y, va - vb)
