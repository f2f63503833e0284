"""How a kernel's API generation is decided, as AWS's packages do: ``import nki`` kernels are
current-API unless they use a classic-only construct, run in classic mode or say
``nki.jit(api=...)``; ``neuronxcc.nki`` kernels are always classic. Then one test per row of
the generations table of docs/guides/writing-kernels.md (loops, inputs, ``kernel[n]``) in each
generation, and the issue's kernels: a ragged copy, a KV-cache scatter into an input, and a
core reading the other core's half without a barrier."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from frontends import compat
from nki.classic import classic_mode, set_classic_mode
from nki.errors import NKIControlFlowError, NKIDependencyError, NKIError
from nki.ir import Loop


def add_one(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.tensor_scalar(t, t, nl.add, 1.0)
    nisa.dma_copy(dst=out, src=t)
    return out


def spmd_classic(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    t = nl.load(a[i * 4 : (i + 1) * 4, :])
    nl.store(out[i * 4 : (i + 1) * 4, :], nisa.tensor_scalar(t, nl.add, 1.0))
    return out


def test_first_destination_first_call_makes_kernel_current_and_bracket_an_lnc():
    a = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    k = nki.jit(add_one)
    np.testing.assert_array_equal(k(a), a + 1)
    assert k.generation(k.last_ir) == "current"
    np.testing.assert_array_equal(k[1](a), a + 1)
    assert str(k.last_ir.grid) == "(nc(1))"


def test_classic_kernel_bracket_stays_an_spmd_grid():
    a = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    k = nki.jit(spmd_classic)
    np.testing.assert_array_equal(k[2](a), a + 1)
    assert k.generation(k.last_ir) == "classic"
    assert str(k.last_ir.grid) == "(2)"


def test_unknown_api_value_is_rejected():
    with pytest.raises(NKIError, match="unknown nki.jit api"):
        nki.jit(add_one, api="newest")


def test_neuronxcc_alias_kernels_are_classic():
    compat.install()
    try:
        import neuronxcc.nki as cnki

        k = cnki.jit(add_one)
        with pytest.raises(NKIError) as ei:
            k(np.ones((8, 4), np.float32))
        assert ei.value.code == "err_mixed_api_generations"
        assert "nki.jit(api='classic')" in str(ei.value)
    finally:
        compat.uninstall()


def test_every_instruction_with_both_forms_takes_the_destination_first_form():
    import nki.isa_spec as spec

    both = [n for n in spec.names(spec.CURRENT) if spec.get(n).classic is not None]
    missing = [n for n in both if "Current API (destination first)" not in getattr(nisa, n).__doc__]
    assert not missing, missing
    assert len(both) >= 30


# ---- resolution: current unless classic-only ---------------------------------------------------
def data_movement(x):
    """nl.ndarray, nisa.dma_copy, .ap and nl.affine_range only: decides nothing."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    f = x.shape[1]
    head = nl.ndarray((128, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=head, src=x.ap([[f, 128], [1, f]], offset=0))
    nisa.dma_copy(dst=out[0:128, :], src=head)
    for i in nl.affine_range(1, x.shape[0] // 128):
        t = nl.ndarray((128, f), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128 : (i + 1) * 128, :])
        nisa.dma_copy(dst=out[i * 128 : (i + 1) * 128, :], src=t)
    return out


def wrappers(x):
    """nl.load / nl.add / nl.store on this program's rows: nothing classic-only."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n = x.shape[0] // nl.num_programs()
    rows = nl.ds(nl.program_id(0) * n, n)
    nl.store(out[rows, :], nl.add(nl.load(x[rows, :]), 1.0))
    return out


def masked(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0 : x.shape[1]]
    nl.store(out[i_p, i_f], nl.add(nl.load(x[i_p, i_f], mask=(i_p < 128)), 1.0))
    return out


@pytest.mark.parametrize(
    "kernel,grid,want",
    [
        (data_movement, None, "current"),
        (wrappers, None, "current"),
        (wrappers, 2, "current"),  # two cores
        (masked, None, "classic"),  # nl.mgrid / mask=
        (wrappers, 4, "classic"),  # a grid of 4 instances
        (wrappers, (2, 1), "classic"),  # a two-dimensional grid
    ],
)
def test_a_kernel_is_current_unless_it_uses_a_classic_only_construct(kernel, grid, want):
    programs = {None: 1, 2: 2, 4: 4, (2, 1): 2}[grid]
    rows = 256 if kernel is data_movement else 128 * programs
    x = np.arange(rows * 8, dtype=np.float32).reshape(rows, 8)
    k = nki.jit(kernel)
    launch = k if grid is None else k[grid]
    got = launch(x)
    np.testing.assert_array_equal(got, x if kernel is data_movement else x + 1)
    assert k.last_ir.generation == want


def test_classic_mode_and_api_classic_keep_the_classic_default():
    x = np.ones((128, 8), np.float32)
    k = nki.jit(wrappers, api="classic")
    assert k(x).sum() == 2 * x.size and k.last_ir.generation == "classic"
    before = classic_mode()
    set_classic_mode(True)
    try:
        k = nki.jit(wrappers)
        k(x)
        assert k.last_ir.generation == "classic"
    finally:
        set_classic_mode(before)


def test_a_classic_construct_after_a_current_only_choice_retraces_as_classic():
    def unrolled_then_masked(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            rows = min(128, x.shape[0] - i * 128)  # current: the loop is unrolled
            nl.store(out[i * 128 : i * 128 + rows, :], nl.load(x[i * 128 : i * 128 + rows, :]))
        i_p = nl.arange(128)[:, None]  # classic only: the trace restarts as classic
        nl.store(out[i_p, 0:8], nl.load(x[i_p, 0:8]))
        return out

    with pytest.raises(NKIControlFlowError) as e:  # classic: min() on a symbolic iterator
        nki.jit(unrolled_then_masked)(np.ones((200, 8), np.float32))
    assert e.value.loc.line == _line(unrolled_then_masked, "rows = min")


def tile_list(x):
    """Row blocks loaded into a list of tiles, stored back through the list indexed by a loop
    iterator (the way AWS's current matmul examples keep their operand tiles)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tiles = []
    for k in nl.affine_range(x.shape[0] // 128):
        t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[k * 128 : (k + 1) * 128, :])
        tiles.append(t)
    for k in nl.affine_range(x.shape[0] // 128):
        nisa.dma_copy(dst=out[k * 128 : (k + 1) * 128, :], src=tiles[k])  # LIST
    return out


def tile_list_then_mask(x):
    out = tile_list(x)
    i_p = nl.arange(128)[:, None]
    nl.store(out[0:128, 0:8], value=nl.load(x[0:128, 0:8]), mask=(i_p < 64))  # MASK
    return out


def test_classic_mode_a_loop_iterator_used_as_an_int_makes_the_kernel_current():
    """In classic mode an ``import nki`` kernel that nothing has decided yet restarts as
    current when Python needs a loop iterator's int (a list index): the classic API rejects
    that use, so the kernel is a current one. A classic construct after it (``mask=``) is then
    the mixed-generations error; a kernel forced classic keeps the classic error."""
    x = np.random.default_rng(0).random((384, 16), dtype=np.float32)
    before = classic_mode()
    set_classic_mode(True)
    try:
        k = nki.jit(tile_list)
        np.testing.assert_array_equal(k(x), x)
        assert k.last_ir.generation == "current"
        with pytest.raises(NKIError) as e:
            nki.jit(tile_list_then_mask)(x)
        assert e.value.code == "err_mixed_api_generations"
        assert e.value.loc.line == _line(tile_list_then_mask, "# MASK")
        assert f"test_generation.py:{_line(tile_list, '# LIST')}" in str(e.value)  # the decider
        with pytest.raises(NKIControlFlowError) as e:
            nki.jit(tile_list, api="classic")(x)
        assert e.value.code == "err_dynamic_control_flow_not_supported"
        assert e.value.loc.line == _line(tile_list, "# LIST")
    finally:
        set_classic_mode(before)


def _line(fn, mark: str) -> int:
    import inspect

    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, ln in enumerate(src) if mark in ln)


# ---- the generations table: loops ---------------------------------------------------------------
def shifted_rows(x):
    """Row block i of the output is row block i of x times i: `float(i)` needs the int."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128 : (i + 1) * 128, :])
        nl.store(out[i * 128 : (i + 1) * 128, :], nl.multiply(t, float(i)))  # FLOAT
    return out


def test_loops_current_iterators_are_ints_where_python_needs_them():
    x = np.ones((384, 8), np.float32)
    k = nki.jit(shifted_rows)
    np.testing.assert_array_equal(k(x), np.repeat([0.0, 1.0, 2.0], 128)[:, None] * x)
    assert k.last_ir.generation == "current"
    assert not [n for n, _ in k.last_ir.walk() if isinstance(n, Loop)]  # unrolled for float()


def test_loops_classic_iterators_are_symbolic():
    with pytest.raises(NKIControlFlowError) as e:
        nki.jit(shifted_rows, api="classic")(np.ones((384, 8), np.float32))
    assert e.value.loc.line == _line(shifted_rows, "# FLOAT")


# ---- the generations table: inputs --------------------------------------------------------------
def kv_cache_scatter(cache, new, idx):
    """cache[idx[p], :] = new[p, :]: the scatter of AWS's nisa.dma_copy docstring, into an
    input, which the kernel returns."""
    p, d = new.shape
    t = nl.ndarray((p, d), dtype=new.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=new)
    it = nl.ndarray((p, 1), dtype=idx.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=it, src=idx)
    nisa.dma_copy(dst=cache.ap([[d, p], [1, d]], offset=0, vector_offset=it, indirect_dim=0), src=t)
    return cache


def test_inputs_current_kernels_write_them_kv_cache_scatter():
    rng = np.random.default_rng(3)
    cache = rng.standard_normal((64, 16)).astype(np.float32)
    new = rng.standard_normal((8, 16)).astype(np.float32)
    idx = np.array([[3], [10], [0], [63], [7], [20], [33], [41]], np.int32)
    want = cache.copy()
    want[idx[:, 0]] = new
    k = nki.jit(kv_cache_scatter)
    got = k(cache, new, idx)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(cache, want)  # the caller's array is updated
    assert k.last_ir.generation == "current"


def test_inputs_classic_kernels_may_not_write_them():
    x = np.ones((128, 8), np.float32)
    cache = np.zeros((64, 16), np.float32)
    with pytest.raises(NKIError) as e:
        nki.jit(kv_cache_scatter, api="classic")(cache, x[:8, :16], np.zeros((8, 1), np.int32))
    assert e.value.code == "err_cannot_update_immutable_parameter"


# ---- the generations table: kernel[n] -----------------------------------------------------------
def other_half_without_barrier(x):
    """Each core copies its half of x to out, then reads the other core's half of out."""
    n = x.shape[0] // 2
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    back = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t = nl.ndarray((n, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[pid * n : (pid + 1) * n, :])
    nisa.dma_copy(dst=out[pid * n : (pid + 1) * n, :], src=t)  # WRITE
    u = nl.ndarray((n, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=out[(1 - pid) * n : (2 - pid) * n, :])  # READ
    nisa.dma_copy(dst=back[pid * n : (pid + 1) * n, :], src=u)
    return out, back


def test_kernel_n_current_is_two_cores_and_the_unordered_read_is_a_core_race():
    x = np.arange(256 * 8, dtype=np.float32).reshape(256, 8)
    with pytest.raises(NKIDependencyError) as e:
        nki.jit(other_half_without_barrier)[2](x)
    assert e.value.code == "err_core_race"
    assert e.value.loc.line == _line(other_half_without_barrier, "# WRITE")
    assert f"line {_line(other_half_without_barrier, '# READ')}" in str(e.value)


def test_kernel_n_classic_is_an_spmd_grid():
    x = np.arange(256 * 8, dtype=np.float32).reshape(256, 8)
    k = nki.jit(other_half_without_barrier, api="classic")
    k[2](x)  # instances: no race analysis between a write and a read of another instance
    assert str(k.last_ir.grid) == "(2)" and not k.last_ir.cores
    k = nki.jit(wrappers, api="classic")
    np.testing.assert_array_equal(k[2](x), x + 1)
    assert str(k.last_ir.grid) == "(2)"


def test_kernel_n_beyond_two_cores_of_a_current_kernel_says_how_current_kernels_launch():
    x = np.ones((128, 8), dtype=np.float32)
    with pytest.raises(NKIError) as e:
        nki.jit(add_one)[3](x)
    assert e.value.code == "err_mixed_api_generations"
    msg = str(e.value)
    assert "kernel[3] (an SPMD grid" in msg and "kernel[1] or kernel[2]" in msg
    assert e.value.loc.line == _line(add_one, "nisa.tensor_scalar")


# ---- the ragged copy ---------------------------------------------------------------
def ragged_copy(x):
    n, f = x.shape
    out = nl.ndarray((n, f), dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range((n + 127) // 128):
        r0 = t * 128
        rows = min(128, n - r0)
        buf = nl.ndarray((128, f), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=buf[0:rows, :], src=x[r0 : r0 + rows, :])
        nisa.dma_copy(dst=out[r0 : r0 + rows, :], src=buf[0:rows, :])
    return out


@pytest.mark.parametrize("n", [1, 127, 300, 512])
def test_ragged_copy_with_min_inside_affine_range_matches_numpy(n):
    x = np.random.default_rng(n).standard_normal((n, 24)).astype(np.float32)
    k = nki.jit(ragged_copy)
    np.testing.assert_array_equal(k(x), x)
    assert k.last_ir.generation == "current"
