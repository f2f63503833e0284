"""The batched backend with device loops and views: a device loop (``nl.fori_loop`` with a
register bound, ``nl.while_loop``) runs per instance with the interpreter's walker while the
rest of the kernel stays batched; reshape / dtype views of HBM tensors and tiles are views of
the batched storage. Each launch must stay batched, be bit-identical to the interpreter, equal
a NumPy reference and report the interpreter's errors (message, line, instance)."""

from __future__ import annotations

import dataclasses
import inspect

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nki
import nki.isa as nisa
import nki.language as nl
from nki.ir import Access, Alloc, Loop
from nki.isa.registers import register_alloc, register_load, register_store
from simulator.batched import host as batched_host
from simulator.batched.plan import Declined, plan
from simulator.config import SimConfig

from backends import REFERENCE, bits, run_backends

G = 4  # grid instances
L = 3  # affine_range iterations
F = 64  # free size of the tiles
BF16 = ml_dtypes.bfloat16


def classic(fn):
    """Grids are classic launches (``kernel[g]``); device loops and registers work in both."""
    return nki.jit(fn, api="classic")


def _line(fn, marker: str) -> int:
    src, start = inspect.getsourcelines(fn)
    return start + next(i for i, s in enumerate(src) if marker in s)


def _rows(g):
    return slice(g * 128, (g + 1) * 128)


# ---- device loops ----------------------------------------------------------------------------


@classic
def doubled_n_times(x, n):
    """Instance g: its tile of x doubled n[g] times (a fori_loop with a register bound)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    t = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
    t[...] = nl.load(x[_rows(g), :])
    cnt = nl.load(n[g : g + 1, :])
    ub = register_alloc()
    register_load(ub, cnt)

    def body(i):
        t[...] = nisa.tensor_scalar(t, op0=nl.multiply, operand0=2.0)

    nl.fori_loop(0, ub, body)
    nl.store(out[_rows(g), :], t)
    return out


@pytest.mark.parametrize(
    "counts, batched, per_instance",
    [([3, 3, 3, 3], 1, 0), ([3, 5, 4, 3], 0, 1), ([0, 1, 3, 2], 0, 1)],
)
def test_fori_loop_with_a_register_bound_over_a_grid(monkeypatch, counts, batched, per_instance):
    """The trips every instance shares run batched (all of them when the bounds agree), the
    others per instance."""
    x = np.random.default_rng(0).standard_normal((G * 128, F)).astype(np.float32)
    n = np.array(counts, np.int32)[:, None]
    starts = []  # where each per-instance run starts, per instance
    run_trips = batched_host.Host.run_trips

    def spy(self, loop, ctx, stateful, first, stop):
        starts.append(list(first))
        run_trips(self, loop, ctx, stateful, first, stop)

    monkeypatch.setattr(batched_host.Host, "run_trips", spy)
    r = run_backends(doubled_n_times, G, x, n, ran=("batched",))
    got, _, info = r.against("batched")
    np.testing.assert_array_equal(got, x * np.repeat(2.0 ** n[:, 0], 128)[:, None])
    runs = f"{batched} time(s) batched (the same bounds at every position) and {per_instance}"
    assert f"device loops run {runs} time(s) per instance" in info.reason
    assert starts == ([] if per_instance == 0 else [[min(counts)] * G])


@classic
def nested_device_loops(x, m, n):
    """Instance g: m[g] times (the outer loop), its tile plus 1, then halved n[g] times."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    t = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
    t[...] = nl.load(x[_rows(g), :])
    outer = register_alloc()
    register_load(outer, nl.load(m[g : g + 1, :]))
    inner = register_alloc()
    register_load(inner, nl.load(n[g : g + 1, :]))

    def halve(i):
        t[...] = nl.multiply(t, 0.5)

    def body(i):
        t[...] = nl.add(t, 1.0)
        nl.fori_loop(0, inner, halve)

    nl.fori_loop(0, outer, body)
    nl.store(out[_rows(g), :], t)
    return out


def test_nested_device_loops_batched_outside_per_instance_inside():
    x = np.random.default_rng(10).standard_normal((G * 128, F)).astype(np.float32)
    m = np.full((G, 1), 3, np.int32)
    n = np.array([[0], [2], [1], [4]], np.int32)
    r = run_backends(nested_device_loops, G, x, m, n, ran=("batched",))
    got, _, info = r.against("batched")
    want = x.reshape(G, 128, F).copy()
    for g in range(G):
        for _ in range(3):
            want[g] = (want[g] + np.float32(1)) * np.float32(0.5) ** n[g, 0]
    np.testing.assert_array_equal(got, want.reshape(G * 128, F))
    assert "run 1 time(s) batched" in info.reason
    assert "and 3 time(s) per instance" in info.reason


@classic
def halved_while_positive(x, n):
    """Instance g: its tile halved while a countdown register starting at n[g] is non-zero."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    t = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
    t[...] = nl.load(x[_rows(g), :])
    cnt = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    cnt[...] = nl.load(n[g : g + 1, :])
    r = register_alloc()
    register_load(r, cnt)

    def body(c):
        t[...] = nl.multiply(t, 0.5)
        register_store(cnt, c)
        cnt[...] = nl.subtract(cnt, 1, dtype=nl.int32)
        nxt = register_alloc()
        register_load(nxt, cnt)
        return nxt

    nl.while_loop(r, body)  # WHILE
    nl.store(out[_rows(g), :], nl.add(t, 1.0))
    return out


@pytest.mark.parametrize(
    "counts, runs",
    [
        ([3, 3, 3, 3], "1 time(s) batched (the same bounds at every position) and 0"),
        (
            [3, 5, 4, 3],
            "0 time(s) batched (the same bounds at every position) and 1",
        ),  # (3 trips first)
        ([2, 0, 5, 1], "0 time(s) batched (the same bounds at every position) and 1"),
    ],
)
def test_while_loop_over_a_grid(counts, runs):
    """Batched while every position's condition holds, per instance from the first trip
    where they differ."""
    x = np.random.default_rng(1).standard_normal((G * 128, F)).astype(np.float32)
    n = np.array(counts, np.int32)[:, None]
    r = run_backends(halved_while_positive, G, x, n, ran=("batched",))
    got, _, info = r.against("batched")
    scale = np.repeat(np.float32(0.5) ** n[:, 0], 128)[:, None].astype(np.float32)
    np.testing.assert_array_equal(got, x * scale + np.float32(1))
    assert f"device loops run {runs} time(s) per instance" in info.reason


@classic
def fori_in_affine_range(x, n):
    """Instance g, iteration j: tile (g, j) plus 1.0 n[g, j] times, then squared."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    for j in nl.affine_range(L):
        r = slice((g * L + j) * 128, (g * L + j + 1) * 128)
        t = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        t[...] = nl.load(x[r, :])
        cnt = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        cnt[...] = nl.load(n[g * L + j : g * L + j + 1, :])
        ub = register_alloc()
        register_load(ub, cnt)

        def body(i, t=t):
            t[...] = nl.add(t, 1.0)

        nl.fori_loop(0, ub, body)
        nl.store(out[r, :], nl.multiply(t, t))
    return out


def test_device_loop_inside_a_batched_affine_range():
    x = np.random.default_rng(2).standard_normal((G * L * 128, F)).astype(np.float32)
    n = np.random.default_rng(3).integers(0, 4, (G * L, 1)).astype(np.int32)
    r = run_backends(fori_in_affine_range, G, x, n, ran=("batched",))
    got, _, info = r.against("batched")
    t = x.copy()
    for _ in range(3):
        t = np.where(np.repeat(n[:, 0], 128)[:, None] > _, t + np.float32(1), t)
    np.testing.assert_array_equal(got, t * t)
    assert "1 affine_range loop(s) batched" in info.reason  # (no engine state inside)


@classic
def noise_in_device_loop(x, n):
    """Instance g, iteration j: tile + n[g] draws of nl.rand (each instance's generator
    advances in its own order: the affine_range loop is iterated, not batched)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    for j in nl.affine_range(L):
        r = slice((g * L + j) * 128, (g * L + j + 1) * 128)
        t = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        t[...] = nl.load(x[r, :])
        cnt = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        cnt[...] = nl.load(n[g : g + 1, :])
        ub = register_alloc()
        register_load(ub, cnt)

        def body(i, t=t):
            t[...] = nl.add(t, nl.rand((128, F)))

        nl.fori_loop(0, ub, body)
        nl.store(out[r, :], t)
    return out


def test_engine_state_in_a_device_loop_keeps_the_loops_around_it_iterated():
    x = np.zeros((G * L * 128, F), np.float32)
    n = np.array([[1], [2], [0], [3]], np.int32)
    r = run_backends(noise_in_device_loop, G, x, n, ran=("batched",))
    got, _, info = r.against("batched")
    assert "0 affine_range loop(s) batched" in info.reason
    tiles = got.reshape(G, L, 128, F)
    assert (tiles[2] == 0).all()  # no draw
    assert ((tiles[3] >= 0) & (tiles[3] < 3)).all() and tiles[3].mean() > 1.2
    assert len({t.tobytes() for t in tiles[[0, 1, 3]].reshape(-1, 128, F)}) == 3 * L


@classic
def prefix_rows(x, n):
    """Instance g: the sum of the first n[g] rows of x (rows read at the register's value)."""
    out = nl.ndarray((G, F), dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    acc = nl.zeros((1, F), dtype=nl.float32, buffer=nl.sbuf)
    ub = register_alloc()
    register_load(ub, nl.load(n[g : g + 1, :]))
    ip, jf = nl.mgrid[0:1, 0:F]

    def body(i):
        row = nl.load(x[i[0, 0] + ip, jf])  # ROW
        acc[...] = nl.add(acc, row)

    nl.fori_loop(0, ub, body)
    nl.store(out[g : g + 1, :], acc)
    return out


def test_register_offsets_inside_a_device_loop():
    x = np.random.default_rng(4).standard_normal((16, F)).astype(np.float32)
    n = np.array([[5], [0], [16], [1]], np.int32)
    r = run_backends(prefix_rows, G, x, n, ran=("batched",))
    got, _, _ = r.against("batched")
    want = np.stack([x[: k[0]].sum(axis=0) for k in n])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_an_error_inside_a_device_loop_is_the_interpreters():
    """Instances 1 and 3 read past x; the interpreter meets instance 1 first."""
    x = np.zeros((16, F), np.float32)
    n = np.array([[2], [17], [3], [20]], np.int32)
    errors = []
    for backend in ("numpy", "batched"):
        with pytest.raises(nki.NKIError) as e:
            prefix_rows.configure(backend=backend)[G](x, n)
        errors.append(e.value)
    want, got = errors
    assert want.instance == (1,) and want.loc.line == _line(prefix_rows.fn, "# ROW")
    assert (got.code, got.loc.line, got.instance) == (want.code, want.loc.line, want.instance)
    assert str(got) == str(want) and "out-of-bound" in str(got)


def test_an_error_inside_a_batched_device_loop_is_the_interpreters():
    """The same bound everywhere (the loop runs batched), past the end of x: instance 0 meets
    it first."""
    x = np.zeros((16, F), np.float32)
    n = np.full((G, 1), 18, np.int32)
    errors = []
    for backend in ("numpy", "batched"):
        with pytest.raises(nki.NKIError) as e:
            prefix_rows.configure(backend=backend)[G](x, n)
        errors.append(e.value)
    want, got = errors
    assert want.instance == (0,) and want.loc.line == _line(prefix_rows.fn, "# ROW")
    assert str(got) == str(want) and got.instance == want.instance


@classic
def float_bound(x, n):
    """Instance g: its tile doubled int(n[g]) times, the bound a float32 one-element tile."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    t = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
    t[...] = nl.load(x[_rows(g), :])
    c = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    c[...] = nl.load(n[g : g + 1, :])

    def body(i):
        t[...] = nl.multiply(t, 2.0)

    nl.fori_loop(0, c, body)  # FLOAT
    nl.store(out[_rows(g), :], t)
    return out


def test_a_float_bound_register_reads_as_int_and_nan_is_reported():
    x = np.ones((G * 128, F), np.float32)
    n = np.array([[2.7], [2.2], [-0.5], [3.9]], np.float32)
    r = run_backends(float_bound, G, x, n, ran=("batched",))
    got, _, _ = r.against("batched")
    np.testing.assert_array_equal(got[::128, 0], [4, 4, 1, 8])
    n[2] = np.nan
    errors = []
    for backend in ("numpy", "batched"):
        with pytest.raises(nki.NKIError, match="holds nan, which is not an integer") as e:
            float_bound.configure(backend=backend)[G](x, n)
        errors.append(e.value)
    want, got = errors
    assert want.instance == (2,) and want.loc.line == _line(float_bound.fn, "# FLOAT")
    assert str(got) == str(want) and got.instance == want.instance


@pytest.mark.parametrize("counts, first", [([1, -1, 2, 0], 1), ([-1, -1, -1, -1], 0)])
def test_a_non_terminating_while_loop_is_reported_for_its_instance(monkeypatch, counts, first):
    """A countdown from -1 never ends: in one instance (the loop runs per instance), or in
    all (it runs batched up to the limit, then the interpreter reports the first)."""
    import nki.language.loops as loops

    monkeypatch.setattr(loops, "MAX_WHILE_ITERATIONS", 40)
    x = np.zeros((G * 128, F), np.float32)
    n = np.array(counts, np.int32)[:, None]
    kernel = classic(halved_while_positive.fn)  # (traced again with the smaller limit)
    errors = []
    for backend in ("numpy", "batched"):
        with pytest.raises(nki.NKIError, match="does not terminate") as e:
            kernel.configure(backend=backend)[G](x, n)
        errors.append(e.value)
    want, got = errors
    line = _line(halved_while_positive.fn, "# WHILE")
    assert want.instance == (first,) and want.loc.line == line
    assert str(got) == str(want) and got.instance == want.instance


# ---- views ----------------------------------------------------------------------------------


@classic
def reshaped_input(x):
    """x (G, 128 * F) read as (G * 128, F) rows, plus 1."""
    out = nl.ndarray((x.shape[0] * 128, F), dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    xr = x.reshape((x.shape[0] * 128, F))
    nl.store(out[_rows(g), :], nl.add(nl.load(xr[_rows(g), :]), 1.0))
    return out


def test_reshape_of_an_hbm_input():
    x = np.random.default_rng(5).standard_normal((G, 128 * F)).astype(np.float32)
    r = run_backends(reshaped_input, G, x, ran=("batched",))
    got, _, _ = r.against("batched")
    np.testing.assert_array_equal(got, x.reshape(G * 128, F) + np.float32(1))


@classic
def abs_by_bits(x):
    """|x| by clearing the sign bit of x's bits (float32 viewed as int32), then the bits as
    float32 again through a view of the output."""
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    t = nl.load(x.view(nl.int32)[_rows(g), :])
    nl.store(out.view(nl.int32)[_rows(g), :], nl.bitwise_and(t, 0x7FFFFFFF))
    return out


def test_float32_int32_bit_views_of_hbm():
    x = np.random.default_rng(6).standard_normal((G * 128, F)).astype(np.float32)
    x[0, :4] = [-0.0, -np.inf, np.nan, -1e-40]
    r = run_backends(abs_by_bits, G, x, ran=("batched",))
    got, _, _ = r.against("batched")
    np.testing.assert_array_equal(bits(got), bits(x) & 0x7FFFFFFF)


@classic
def bf16_bits(x):
    """bf16 tiles stored as their uint16 bits, and the bits + 1 stored as bf16 (the next
    representable magnitude) through a view of the second output."""
    bits = nl.ndarray(x.shape, dtype=nl.uint16, buffer=nl.shared_hbm)
    nxt = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    t = nl.ndarray((128, F), dtype=nl.bfloat16, buffer=nl.sbuf)
    t[...] = nl.load(x[_rows(g), :])
    nl.store(bits[_rows(g), :], value=t.view(nl.uint16))
    u = nl.add(t.view(nl.uint16), 1, dtype=nl.uint16)
    nl.store(nxt.view(nl.uint16)[_rows(g), :], value=u)
    return bits, nxt


@pytest.mark.parametrize("precise_fp", [True, False])
def test_bf16_uint16_views_keep_the_bytes(precise_fp):
    x = np.random.default_rng(7).standard_normal((G * 128, F)).astype(BF16)
    r = run_backends(bf16_bits, G, x, precise_fp=precise_fp, ran=("batched",))
    (bits, nxt), _, _ = r.against("batched")
    np.testing.assert_array_equal(bits, x.view(np.uint16))
    np.testing.assert_array_equal(nxt.view(np.uint16), x.view(np.uint16) + 1)


@classic
def tile_reshape(x):
    """Per (instance, iteration): four column blocks loaded into a (128, 4, 16) tile, read
    back as (128, 64) through a reshape, times 3; a loaded tile reshaped, plus 1."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    for j in nl.affine_range(L):
        r = slice((g * L + j) * 128, (g * L + j + 1) * 128)
        t = nl.ndarray((128, 4, 16), dtype=x.dtype, buffer=nl.sbuf)
        for b in nl.affine_range(4):
            t[:, b, :] = nl.load(x[r, b * 16 : (b + 1) * 16])
        nl.store(out[r, :], nl.multiply(t.reshape((128, F)), 3.0))
        s = nl.load(x[r, :])  # (a load that would otherwise be a view of x)
        nl.store(out2[r, :], nl.add(s.reshape((128, 4, 16)), 1.0).reshape((128, F)))
    return out, out2


def test_tile_reshapes_in_a_batched_loop():
    x = np.random.default_rng(8).standard_normal((G * L * 128, F)).astype(np.float32)
    r = run_backends(tile_reshape, G, x, ran=("batched",))
    (got, got2), _, info = r.against("batched")
    np.testing.assert_array_equal(got, x * np.float32(3))
    np.testing.assert_array_equal(got2, x + np.float32(1))
    assert "1 affine_range loop(s) batched" in info.reason


@classic
def halved_then_abs_by_tile_bits(x, n):
    """Instance g: its tile halved n[g] times, then its sign bits cleared through an int32
    view of the tile (a hosted bit-vector op on the view) into an int32 view of the output."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    t = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
    t[...] = nl.load(x[_rows(g), :])
    count = register_alloc()
    register_load(count, nl.load(n[g : g + 1, :]))

    def body(i):
        t[...] = nl.multiply(t, 0.5)

    nl.fori_loop(0, count, body)
    nl.store(out.view(nl.int32)[_rows(g), :], nl.bitwise_and(t.view(nl.int32), 0x7FFFFFFF))
    return out


@pytest.mark.parametrize("counts", [[3, 3, 3, 3], [0, 1, 2, 3]])
def test_device_loop_then_a_hosted_op_on_a_tile_view(counts):
    x = np.random.default_rng(13).standard_normal((G * 128, F)).astype(np.float32)
    n = np.array(counts, np.int32)[:, None]
    r = run_backends(halved_then_abs_by_tile_bits, G, x, n, ran=("batched",))
    got, _, info = r.against("batched")
    np.testing.assert_array_equal(got, np.abs(x * np.repeat(0.5 ** n[:, 0], 128)[:, None]))
    assert "1 instruction(s) hosted" in info.reason


@classic
def masked_through_a_view(x, limit):
    """Per (instance, iteration): a (128, 4, 16) tile filled and scaled (columns below
    ``limit``) through its (128, 64) view, stored masked (rows below 5 * 128 + 7)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    ip, jf = nl.mgrid[0:128, 0:F]
    for j in nl.affine_range(L):
        r = (g * L + j) * 128
        t = nl.ndarray((128, 4, 16), dtype=x.dtype, buffer=nl.sbuf)
        f = t.reshape((128, F))
        f[ip, jf] = nl.load(x[r + ip, jf])
        f[ip, jf] = nl.multiply(f[ip, jf], 2.0, mask=(jf < limit))
        nl.store(out[r + ip, jf], t.reshape((128, F))[ip, jf], mask=(r + ip < 5 * 128 + 7))
    return out


@pytest.mark.filterwarnings("ignore::simulator.checks.unwritten.UnwrittenOutputWarning")
def test_masked_writes_and_reads_through_a_tile_view():
    x = np.random.default_rng(11).standard_normal((G * L * 128, F)).astype(np.float32)
    r = run_backends(masked_through_a_view, G, x, 37, ran=("batched",))
    got, _, _ = r.against("batched")
    want = x.copy()
    want[:, :37] *= np.float32(2)
    np.testing.assert_array_equal(got[: 5 * 128 + 7], want[: 5 * 128 + 7])
    assert np.isnan(got[5 * 128 + 7 :]).all()  # never written


@classic
def matmul_into_a_psum_view(a, b):
    """Instance g: a[:, g-th 128 columns].T @ b into a (128, 2, 64) PSUM tile through its
    (128, 128) view, plus 1."""
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    ps = nl.ndarray((128, 2, 64), dtype=nl.float32, buffer=nl.psum)
    pv = ps.reshape((128, 128))
    pv[...] = nl.matmul(nl.load(a[:, g * 128 : (g + 1) * 128]), nl.load(b), transpose_x=True)
    nl.store(out[g * 128 : (g + 1) * 128, :], nl.add(pv, 1.0))
    return out


def test_psum_tile_view():
    rng = np.random.default_rng(12)
    a = rng.standard_normal((128, 2 * 128)).astype(np.float32)
    b = rng.standard_normal((128, 128)).astype(np.float32)
    r = run_backends(matmul_into_a_psum_view, 2, a, b, ran=("batched",))
    got, _, _ = r.against("batched")
    np.testing.assert_allclose(got, a.T @ b + 1, rtol=1e-5, atol=1e-4)


# ---- still declined --------------------------------------------------------------------------


@classic
def written_then_read_through_a_view(x):
    buf = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray((F, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(buf, nl.load(x))
    nl.store(out, nl.load(buf.reshape((F, 128))))
    return out


def test_still_declined_kernels_say_why():
    x = np.random.default_rng(9).standard_normal((128, F)).astype(np.float32)
    k = written_then_read_through_a_view.configure(backend="batched")
    np.testing.assert_array_equal(k(x), x.reshape(F, 128))
    assert k.last_run.backend == "numpy"
    assert "written and read through a reshape / dtype view" in k.last_run.reason


def test_a_tile_of_a_device_loop_read_after_it_is_declined():
    """The front end reports such a kernel (a scope error); the plan refuses its IR too: the
    tile lives in each position's own storage only while the loop runs."""
    x = np.ones((G * 128, F), np.float32)
    k = doubled_n_times.configure(backend="batched")
    k[G](x, np.ones((G, 1), np.int32))
    ir = k.last_ir
    loop = next(n for n in ir.body if isinstance(n, Loop) and n.is_runtime)
    reg = next(n.tensor for n in loop.body if isinstance(n, Alloc))  # (the induction register)
    store = ir.body[-1]  # the last store, made to read the register after the loop
    after = dataclasses.replace(store, srcs=(Access(reg, (1, 1), loop.body[1].dst.index),))
    bad = dataclasses.replace(ir, body=(*ir.body, after), _by_name={})
    with pytest.raises(
        Declined, match=f"allocated inside the device loop at line {loop.loc.line} is used after it"
    ):
        plan(bad, SimConfig())


# ---- differential property test ----------------------------------------------------------------


_LOOPS = {"fori": doubled_n_times, "while": halved_while_positive}


@given(
    kind=st.sampled_from(sorted(_LOOPS)),
    grid=st.integers(1, 5),
    same=st.booleans(),
    bf16=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_device_loops_match_the_interpreter(kind, grid, same, bf16, seed):
    """Random grids, trip counts (the same everywhere or per instance) and dtypes: the batched
    run is the interpreter's, bit for bit."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((grid * 128, F)).astype(BF16 if bf16 else np.float32)
    counts = rng.integers(0, 5, grid)
    n = np.full((grid, 1), counts[0], np.int32) if same else counts.astype(np.int32)[:, None]
    # (compiling a Numba driver for each generated kernel would take seconds)
    r = run_backends(_LOOPS[kind], grid, x, n, backends=("batched", REFERENCE), ran=("batched",))
    got, _, info = r.against("batched")
    if not bf16:
        scale = (2.0 if kind == "fori" else 0.5) ** n[:, 0].astype(np.float64)
        want = x * np.repeat(scale, 128)[:, None].astype(np.float32)
        np.testing.assert_array_equal(got, want if kind == "fori" else want + np.float32(1))
    if same or grid == 1 or len(set(counts)) == 1:
        assert "device loops run 1 time(s) batched" in info.reason
