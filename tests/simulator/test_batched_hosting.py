"""Hosted instructions in the batched backend: an instruction without a batched executor (a
gather, a bit-vector op, a masked reduction, an nki.isa instruction) runs per batch position
with the interpreter's executor while the rest of the kernel stays batched. The launch must
still be batched, bit-identical to the interpreter, equal to a NumPy reference, and report the
interpreter's errors (code, line, instance). An indirect load runs batched
(``simulator/batched/gather.py``), under the same rules."""

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
from simulator.batched import host as batched_host
from simulator.batched.plan import plan
from simulator.config import SimConfig

from backends import REFERENCE, run_backends, same

L = 3  # affine_range iterations per instance in these kernels


@nki.jit
def gather_then_scale(data, idx):
    """Per 128-row tile: out = 2 * data[p, idx[p, j]] (nl.gather_flattened hosted)."""
    out = nl.ndarray(idx.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    for j in nl.affine_range(L):
        r = slice((g * L + j) * 128, (g * L + j + 1) * 128)
        d = nl.load(data[r, :])
        ix = nl.load(idx[r, :])
        got = nl.gather_flattened(d, ix)
        nl.store(out[r, :], value=nl.multiply(got, 2.0))
    return out


@nki.jit
def gather_rows_add(data, idx, bias):
    """Per tile: out = data[idx[rows]] + bias[rows] (an indirect load, batched)."""
    out = nl.ndarray(bias.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    ip = nl.arange(128)[:, None]
    jf = nl.arange(data.shape[1])[None, :]
    for j in nl.affine_range(L):
        base = (g * L + j) * 128
        it = nl.load(idx[base + ip, 0])
        x = nl.load(data[it[ip, 0], jf])
        nl.store(out[base + ip, jf], value=nl.add(x, nl.load(bias[base + ip, jf])))
    return out


@nki.jit
def gather_rows_masked(data, idx, limit):
    """Per tile: the rows data[idx[r]] of the rows r below ``limit`` (a masked indirect load,
    batched), plus 1."""
    out = nl.ndarray(idx.shape[:1] + data.shape[1:], dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    ip = nl.arange(128)[:, None]
    jf = nl.arange(data.shape[1])[None, :]
    for j in nl.affine_range(L):
        base = (g * L + j) * 128
        it = nl.load(idx[base + ip, 0])
        x = nl.load(data[it[ip, 0], jf], mask=(base + ip < limit))
        nl.store(out[base + ip, jf], value=nl.add(x, 1.0), mask=(base + ip < limit))
    return out


@nki.jit
def gather_odd_columns(data, idx):
    """Per tile: the odd columns 1, 3, 5 of the rows data[idx[r]] (a strided gather, batched)."""
    out = nl.ndarray((idx.shape[0], 3), dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    ip = nl.arange(128)[:, None]
    for j in nl.affine_range(L):
        base = (g * L + j) * 128
        it = nl.load(idx[base + ip, 0])
        x = nl.load(data[it[ip, 0], 2 * nl.arange(3)[None, :] + 1])
        nl.store(out[base + ip, nl.arange(3)[None, :]], value=x)
    return out


@nki.jit
def gather_planes(data, idx):
    """out[r] = 3 * data[idx[r]] for a 3-D table: a (P, 1) index tile picks an (A, B) plane per
    partition (an access pattern's ``vector_offset``; batched)."""
    n, a, b = idx.shape[0], data.shape[1], data.shape[2]
    out = nl.ndarray((n, a, b), dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    ip = nl.arange(128)[:, None]
    for j in nl.affine_range(L):
        base = (g * L + j) * 128
        it = nl.load(idx[base + ip, 0])
        x = nl.ndarray((128, a, b), dtype=data.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=data.ap([[a * b, 128], [b, a], [1, b]], vector_offset=it))
        nl.store(out[base : base + 128, :, :], value=nl.multiply(x, 3.0))
    return out


@nki.jit
def xor_then_add(a, b):
    """Per tile: out = (a ^ b) + a (the bit-vector op hosted, the add batched)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    for j in nl.affine_range(L):
        r = slice((g * L + j) * 128, (g * L + j + 1) * 128)
        x = nl.load(a[r, :])
        y = nl.bitwise_xor(x, nl.load(b[r, :]))
        nl.store(out[r, :], value=nl.add(y, x))
    return out


@nki.jit
def masked_row_max(a, limit):
    """Per tile: the row maximum of the rows below ``limit`` (a masked reduction), + 1."""
    out = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    ip = nl.arange(128)[:, None]
    jf = nl.arange(a.shape[1])[None, :]
    for j in nl.affine_range(L):
        base = (g * L + j) * 128
        t = nl.load(a[base + ip, jf])
        m = nl.max(t, axis=1, keepdims=True, mask=(base + ip < limit))
        nl.store(out[base + ip, 0], value=nl.add(m, 1.0), mask=(base + ip < limit))
    return out


@nki.jit
def top8_rows(a):
    """Per tile: the 8 largest values of each row (nisa.max8 hosted), times 3."""
    out = nl.ndarray((a.shape[0], 8), dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    for j in nl.affine_range(L):
        r = slice((g * L + j) * 128, (g * L + j + 1) * 128)
        t = nl.load(a[r, :])
        s = nisa.max8(src=t)
        nl.store(out[r, :], value=nl.multiply(s, 3.0))
    return out


@nki.jit
def exp_row_sums(a):
    """Per tile: exp(a), then the row sums of exp(a) and of exp(a / 2) folded into the Scalar
    engine's accumulator registers by two instructions (engine state shared across
    instructions: the loop is iterated, the grid batched)."""
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    sums = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    for j in nl.affine_range(L):
        r = slice((g * L + j) * 128, (g * L + j + 1) * 128)
        t = nl.load(a[r, :])
        rs = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        e = nisa.activation(nl.exp, t, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(
            nl.exp, t, scale=0.5, reduce_op=nl.add, reduce_res=rs,
            reduce_cmd=nisa.reduce_cmd.reduce,
        )  # fmt: skip
        nl.store(out[r, :], value=nl.add(e, 0.5))
        nl.store(sums[r, :], value=rs)
    return out, sums


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_gather_hosted_between_batched_loads_and_stores():
    grid = 4
    data = _rng().standard_normal((grid * L * 128, 32)).astype(np.float32)
    idx = _rng(1).integers(0, 32, (grid * L * 128, 16)).astype(np.int32)
    r = run_backends(gather_then_scale, grid, data, idx, ran=("batched",))
    got, want, info = r.against("batched")
    assert "hosted" in info.reason, info.reason
    assert same(got, want)
    np.testing.assert_array_equal(got, 2 * np.take_along_axis(data, idx, axis=1))
    assert "1 affine_range loop(s) batched" in info.reason
    # checks="full" tracks a hosted instruction's values per instance: the interpreter runs it
    kf = gather_then_scale.configure(backend="batched", checks="full")
    assert same(kf[grid](data, idx), want)
    assert kf.last_run.backend == "numpy" and "runs hosted" in kf.last_run.reason


def test_indirect_load_runs_batched():
    grid = 3
    data = _rng().standard_normal((500, 24)).astype(np.float32)
    idx = _rng(2).integers(0, 500, (grid * L * 128, 1)).astype(np.int32)
    bias = _rng(3).standard_normal((grid * L * 128, 24)).astype(np.float32)
    r = run_backends(gather_rows_add, grid, data, idx, bias, ran=("batched",))
    got, want, info = r.against("batched")
    assert "hosted" not in info.reason and "1 affine_range loop(s) batched" in info.reason
    assert same(got, want)
    np.testing.assert_array_equal(got, data[idx[:, 0]] + bias)


@given(
    grid=st.integers(1, 3),
    seed=st.integers(0, 2**16),
    idx_dtype=st.sampled_from(["int32", "uint16", "int16"]),
    table=st.sampled_from(["float32", "bfloat16"]),
)
def test_indirect_loads_match_the_interpreter(grid, seed, idx_dtype, table):
    """Batched gathers of rows (``nl.load``, also masked) and of planes (``nisa.dma_copy``):
    bit for bit the interpreter, and NumPy's rows."""
    rng = _rng(seed)
    n = grid * L * 128
    dt = np.float32 if table == "float32" else ml_dtypes.bfloat16
    rows = rng.standard_normal((300, 6)).astype(dt)
    planes = rng.standard_normal((40, 3, 5)).astype(dt)
    idx = rng.integers(0, 40, (n, 1)).astype(idx_dtype)
    bias = rng.standard_normal((n, 6)).astype(np.float32)
    want_idx = idx[:, 0].astype(np.int64)
    limit = int(rng.integers(0, n + 1))
    for kernel, args, ref, written in (
        (gather_rows_add, (rows, idx, bias), rows[want_idx].astype(np.float32) + bias, n),
        (gather_planes, (planes, idx), 3 * planes[want_idx].astype(np.float32), n),
        (gather_odd_columns, (rows, idx), rows[want_idx][:, 1::2].astype(np.float32), n),
        (gather_rows_masked, (rows, idx, limit), rows[want_idx].astype(np.float32) + 1, limit),
    ):
        r = run_backends(kernel, grid, *args, backends=("batched", REFERENCE), ran=("batched",))
        got, want, info = r.against("batched")
        assert "hosted" not in info.reason, info.reason
        assert same(got, want)
        np.testing.assert_array_equal(got[:written], ref[:written])


def _errors(kernel, grid, *args) -> list:
    """The errors a launch raises on the interpreter and on the batched backend."""
    errors = []
    for backend in ("numpy", "batched"):
        with pytest.raises(nki.NKIError) as e:
            kernel.configure(backend=backend)[grid](*args)
        errors.append(e.value)
    return errors


def test_masked_gather_checks_only_the_selected_lanes():
    """An index out of range in a lane the mask leaves out is never read; one in a selected
    lane is the interpreter's error (code, line, instance)."""
    grid, n = 2, 2 * L * 128
    data = np.arange(100 * 6, dtype=np.float32).reshape(100, 6)
    idx = np.zeros((n, 1), np.int32)
    limit = n - 40
    idx[limit + 3] = 500  # (masked off)
    r = run_backends(gather_rows_masked, grid, data, idx, limit, ran=("batched",))
    got, want, info = r.against("batched")
    assert "hosted" not in info.reason and same(got, want)
    np.testing.assert_array_equal(got[:limit], data[idx[:limit, 0]] + 1)
    idx[L * 128 + 7] = 100  # instance 1, iteration 0, selected
    want_e, got_e = _errors(gather_rows_masked, grid, data, idx, limit)
    assert got_e.code == want_e.code == "err_tensor_access_out_of_bound"
    assert (got_e.loc.line, got_e.instance, str(got_e)) == (
        want_e.loc.line,
        want_e.instance,
        str(want_e),
    )


def test_bit_vector_op_hosted():
    grid = 2
    a = _rng().integers(-1000, 1000, (grid * L * 128, 8)).astype(np.int32)
    b = _rng(1).integers(-1000, 1000, (grid * L * 128, 8)).astype(np.int32)
    r = run_backends(xor_then_add, grid, a, b, ran=("batched",))
    got, want, info = r.against("batched")
    assert "hosted" in info.reason, info.reason
    assert same(got, want)
    np.testing.assert_array_equal(got, (a ^ b) + a)


_UNWRITTEN = "ignore::simulator.checks.unwritten.UnwrittenOutputWarning"  # (rows past the limit)


@pytest.mark.filterwarnings(_UNWRITTEN)
def test_masked_reduction_hosted():
    grid = 2
    a = _rng().standard_normal((grid * L * 128, 40)).astype(np.float32)
    limit = 5 * 128 + 17  # the last tile of the second instance is partly masked off
    r = run_backends(masked_row_max, grid, a, limit, ran=("batched",))
    got, want, info = r.against("batched")
    assert "hosted" in info.reason, info.reason
    assert same(got, want)
    np.testing.assert_array_equal(got[:limit, 0], a[:limit].max(axis=1) + 1)
    assert np.isnan(got[limit:]).all()  # never written


def test_isa_instruction_hosted():
    grid = 2
    a = _rng().standard_normal((grid * L * 128, 64)).astype(np.float32)
    r = run_backends(top8_rows, grid, a, ran=("batched",))
    got, want, info = r.against("batched")
    assert "hosted" in info.reason, info.reason
    assert same(got, want)
    np.testing.assert_array_equal(got, -np.sort(-a, axis=1)[:, :8] * np.float32(3))
    # the multiply's tile lives in the output; the tile max8 writes has its own
    p = plan(r.kernel("batched").last_ir, SimConfig())
    tiles = {i.api: i.dst.tensor for i, _ in r.kernel("batched").last_ir.instructions()}
    assert p.fused_names == {tiles["nl.multiply"]}
    assert tiles["nisa.max8"] not in p.viewed
    assert "1 affine_range loop(s) batched" in info.reason


def test_engine_state_keeps_its_loop_iterated():
    grid = 2
    a = _rng().standard_normal((grid * L * 128, 16)).astype(np.float32)
    r = run_backends(exp_row_sums, grid, a, ran=("batched",))
    (got, got_sums), (want, want_sums), info = r.against("batched")
    assert "hosted" in info.reason, info.reason
    assert same(got, want) and same(got_sums, want_sums)
    assert "0 affine_range loop(s) batched" in info.reason  # (the grid still is)
    np.testing.assert_allclose(got, np.exp(a) + 0.5, rtol=1e-6)
    want_rows = np.exp(a).sum(axis=1) + np.exp(a / 2).sum(axis=1)
    np.testing.assert_allclose(got_sums[:, 0], want_rows, rtol=1e-5)


@nki.jit
def noisy_tiles(a):
    """Per tile: a + nl.rand (each instance's generator advances once per iteration)."""
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    for j in nl.affine_range(L):
        r = slice((g * L + j) * 128, (g * L + j + 1) * 128)
        u = nl.rand((128, a.shape[1]))
        nl.store(out[r, :], value=nl.add(nl.load(a[r, :]), u))
    return out


def test_random_generators_advance_per_instance_in_order():
    grid = 3
    a = np.zeros((grid * L * 128, 8), np.float32)
    r = run_backends(noisy_tiles, grid, a, ran=("batched",))
    got, want, info = r.against("batched")
    assert "hosted" in info.reason, info.reason
    assert same(got, want)
    assert "0 affine_range loop(s) batched" in info.reason
    # instances draw from their own generators: tiles differ across instances and iterations
    tiles = got.reshape(grid * L, 128, 8)
    assert len({t.tobytes() for t in tiles}) == grid * L
    assert ((got >= 0) & (got < 1)).all()


def test_unexpected_engine_state_in_a_batched_loop_goes_to_the_next_backend(monkeypatch):
    """The safety net: a hosted instruction the plan took for stateless uses engine state
    inside a batched loop; the launch reruns on the next backend with the same results."""
    monkeypatch.setattr(batched_host, "_STATEFUL_ISA", batched_host._STATEFUL_ISA - {"activation"})
    monkeypatch.setattr(batched_host, "_STATE_ATTRS", ())
    a = _rng().standard_normal((L * 128, 16)).astype(np.float32)
    k = exp_row_sums.configure(backend="batched")
    got, sums = k[1](a)
    assert k.last_run.backend == "numpy"
    assert "engine state" in k.last_run.reason
    want, want_sums = exp_row_sums.configure(backend="numpy")[1](a)
    assert same(got, want) and same(sums, want_sums)


@nki.jit
def two_indirect_loads(data, idx_a, idx_b):
    """Two indirect loads; the first line may fail in a later instance than the second."""
    out = nl.ndarray((idx_a.shape[0], data.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.program_id(0)
    ip = nl.arange(128)[:, None]
    jf = nl.arange(data.shape[1])[None, :]
    for j in nl.affine_range(L):
        base = (g * L + j) * 128
        ia = nl.load(idx_a[base + ip, 0])
        ib = nl.load(idx_b[base + ip, 0])
        x = nl.load(data[ia[ip, 0], jf])  # FIRST
        y = nl.load(data[ib[ip, 0], jf])  # SECOND
        nl.store(out[base + ip, jf], value=nl.add(x, y))
    return out


def _line(marker: str) -> int:
    src, start = inspect.getsourcelines(two_indirect_loads.fn)
    return start + next(i for i, s in enumerate(src) if marker in s)


def test_out_of_bounds_indirect_index_reported_like_the_interpreter():
    grid = 4
    data = np.zeros((100, 8), np.float32)
    idx_a = np.zeros((grid * L * 128, 1), np.int32)
    idx_b = np.zeros((grid * L * 128, 1), np.int32)
    idx_a[(3 * L + 1) * 128 + 5] = 100  # instance 3, iteration 1: the first load fails
    idx_b[(1 * L + 2) * 128 + 7] = -1  # instance 1, iteration 2: the second load fails
    want, got = _errors(two_indirect_loads, grid, data, idx_a, idx_b)
    # the interpreter meets instance 1 (second load) before instance 3 (first load)
    assert want.instance == (1,) and want.loc.line == _line("# SECOND")
    assert (got.code, got.loc.line, got.instance) == (want.code, want.loc.line, want.instance)
    assert got.code == "err_tensor_access_out_of_bound"
    assert str(got) == str(want)
    # one bad index only: the same error, found without replaying earlier instances' errors
    idx_b[:] = 0
    for backend in ("numpy", "batched"):
        with pytest.raises(nki.NKIError) as e:
            two_indirect_loads.configure(backend=backend)[grid](data, idx_a, idx_b)
        assert e.value.instance == (3,) and e.value.loc.line == _line("# FIRST")


_KINDS = {
    "gather": gather_then_scale,
    "xor": xor_then_add,
    "masked_max": masked_row_max,
    "max8": top8_rows,
}


def _args(kind: str, grid: int, seed: int) -> tuple:
    rng = _rng(seed)
    n = grid * L * 128
    if kind == "gather":
        return (
            rng.standard_normal((n, 8)).astype(np.float32),
            rng.integers(0, 8, (n, 4)).astype(np.int32),
        )
    if kind == "xor":
        return tuple(rng.integers(-(2**20), 2**20, (n, 4)).astype(np.int32) for _ in range(2))
    if kind == "masked_max":
        return (rng.standard_normal((n, 4)).astype(np.float32), int(rng.integers(0, n + 1)))
    return (rng.standard_normal((n, 8)).astype(np.float32),)


@pytest.mark.filterwarnings(_UNWRITTEN)
@given(
    kind=st.sampled_from(sorted(_KINDS)),
    grid=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_hosted_kinds_match_the_interpreter(kind, grid, seed):
    args = _args(kind, grid, seed)
    # (compiling a Numba driver for each generated kernel would take seconds)
    r = run_backends(_KINDS[kind], grid, *args, backends=("batched", REFERENCE), ran=("batched",))
    got, want, info = r.against("batched")
    assert "hosted" in info.reason, info.reason
    assert same(got, want)


def ragged_classic_matmul(lhs_t, rhs):
    """Classic tiled matmul whose last N tile is partial: masked loads and stores, and
    ``psum += nl.matmul(...)`` (a PSUM accumulation group in classic mode)."""
    k, m = lhs_t.shape
    n = rhs.shape[1]
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    for j in nl.affine_range((n + 511) // 512):
        acc = nl.zeros((m, 512), nl.float32, buffer=nl.psum)
        for kt in nl.affine_range(k // 128):
            i_k = kt * 128 + nl.arange(128)[:, None]
            i_n = j * 512 + nl.arange(512)[None, :]
            a = nl.load(lhs_t[i_k, nl.arange(m)[None, :]])
            b = nl.load(rhs[i_k, i_n], mask=(i_n < n))
            acc += nl.matmul(a, b, transpose_x=True)
        i_o = j * 512 + nl.arange(512)[None, :]
        nl.store(out[nl.arange(m)[:, None], i_o], value=nl.copy(acc), mask=(i_o < n))
    return out


def test_classic_matmul_groups_and_ragged_masks_run_batched():
    from nki.classic import classic_mode, set_classic_mode

    rng = np.random.default_rng(7)
    lhs = rng.standard_normal((256, 64)).astype(np.float32)
    rhs = rng.standard_normal((256, 1100)).astype(np.float32)
    before = classic_mode()
    set_classic_mode(True)  # (psum += nl.matmul is then an accumulation group)
    try:
        kernel = nki.jit(ragged_classic_matmul)
        r = run_backends(kernel, None, lhs, rhs)
    finally:
        set_classic_mode(before)
    got = r.results["batched"]
    np.testing.assert_allclose(got, lhs.T @ rhs, rtol=1e-4, atol=1e-4)
    # the matmul runs with its batched executor, not per position on the interpreter
    assert plan(r.kernel("batched").last_ir, SimConfig()).hosted == frozenset()


def test_selection_boxes_cover_a_selection_exactly():
    from simulator.batched.masks import selection_boxes

    sel = np.zeros((5, 4, 6), dtype=bool)
    sel[:4] = True  # four full positions
    sel[4, :, :2] = True  # and a ragged last one
    got = selection_boxes(sel)
    assert got is not None and len(got) == 2
    cover = np.zeros_like(sel, dtype=np.int64)
    for b in got:
        cover[b] += 1
    assert np.array_equal(cover, sel.astype(np.int64))  # disjoint, and exactly the selection
    checker = np.indices((6, 6)).sum(axis=0) % 2 == 0
    assert selection_boxes(checker) is None  # too many pieces: index arrays serve
    assert selection_boxes(np.zeros((3, 3), dtype=bool)) == []
