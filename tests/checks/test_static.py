"""Whole-kernel static checks: out-of-bounds over loop/grid ranges, SBUF/PSUM capacity with
liveness, PSUM banks, affine_range loop-carried HBM writes and SPMD races."""

import numpy as np
import pytest

import nki
import nki.language as nl
from nki.errors import NKIDependencyError, NKIIndexError, NKIMemoryError, SpillWarning

from helpers import expect, line_of
from helpers import randn as rand


def k_oob_static(a):
    out = nl.ndarray((128, 4096), dtype=a.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:4096]
    t = nl.load(a[ip, jf])  # ERR
    nl.store(out, t)
    return out


def test_static_oob():
    expect(
        k_oob_static,
        rand((128, 4000)),
        cls=NKIIndexError,
        code="err_tensor_access_out_of_bound",
        values=["dimension 1", "[0, 4095]", "4000"],
    )


def k_oob_loop(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:8]
    for i in nl.affine_range(4):
        t = nl.load(a[i * 128 + ip, jf])  # ERR
        nl.store(out[i * 128 + ip, jf], t)
    return out


def k_masked_loop(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:8]
    for i in nl.affine_range(4):
        t = nl.load(a[i * 128 + ip, jf], mask=(i * 128 + ip < a.shape[0]))
        nl.store(out[i * 128 + ip, jf], t, mask=(i * 128 + ip < a.shape[0]))
    return out


def test_oob_over_loop_range_and_masked_access_is_legal():
    a = rand((500, 8))
    expect(
        k_oob_loop,
        a,
        cls=NKIIndexError,
        code="err_tensor_access_out_of_bound",
        values=["[0, 511]", "500"],
    )
    np.testing.assert_array_equal(nki.jit(k_masked_loop)(a), a)


def k_oob_grid(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    nl.store(out[i * 64 : i * 64 + 64, :], nl.load(a[i * 64 : i * 64 + 64, :]))  # ERR
    return out


def test_oob_over_grid_range():
    # 3 instances x 64 rows = 192 > 128: only the last instance is out of bounds, found statically
    expect(
        k_oob_grid,
        rand((128, 4)),
        grid=3,
        cls=NKIIndexError,
        code="err_tensor_access_out_of_bound",
        values=["[0, 191]", "128"],
    )


# ---- capacity -------------------------------------------------------------------------------


def k_sbuf_200k(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    big = nl.ndarray((128, 40960), dtype=nl.float32, buffer=nl.sbuf)  # ERR
    small = nl.ndarray((128, 10240), dtype=nl.float32, buffer=nl.sbuf)
    big[:, 0:8] = nl.load(a)
    small[:, 0:8] = nl.load(a)
    nl.store(out, nl.add(big[:, 0:8], small[:, 0:8]))
    return out


def test_sbuf_200k_fits_trn2_not_trn1():
    a = rand((128, 8))
    # 40960*4 + 10240*4 = 204800 B = 200 KiB per partition
    np.testing.assert_allclose(nki.jit(k_sbuf_200k).configure(target="trn2")(a), 2 * a)
    e = expect(
        k_sbuf_200k,
        a,
        target="trn1",
        cls=NKIMemoryError,
        code="err_sbuf_capacity_exceeded",
        marker="small = nl.ndarray",
        values=[
            "204800 bytes per partition requested",
            "180224",
            "trn1",
            "[128, 40960]: 163840 B",
            "[128, 10240]: 40960 B",
            f"line {line_of(k_sbuf_200k)}",
        ],
    )
    assert "live allocations" in str(e)


def k_sbuf_liveness(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    first = nl.ndarray((128, 40960), dtype=nl.float32, buffer=nl.sbuf)
    first[:, 0:8] = nl.load(a)
    nl.store(out, first[:, 0:8])
    second = nl.ndarray((128, 40960), dtype=nl.float32, buffer=nl.sbuf)  # first is dead here
    second[:, 0:8] = nl.load(a)
    nl.store(out, second[:, 0:8])
    return out


def test_dead_tiles_do_not_count():
    a = rand((128, 8))
    np.testing.assert_array_equal(nki.jit(k_sbuf_liveness).configure(target="trn1")(a), a)


def k_sbuf_loop_live(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 30000), dtype=nl.float32, buffer=nl.sbuf)
    for _i in nl.affine_range(2):
        tmp = nl.ndarray((128, 20000), dtype=nl.float32, buffer=nl.sbuf)  # ERR
        tmp[:, 0:8] = nl.load(a)
        acc[:, 0:8] = nl.add(acc[:, 0:8], tmp[:, 0:8])
    nl.store(out, acc[:, 0:8])
    return out


def test_tile_used_in_loop_is_live_through_the_loop():
    expect(
        k_sbuf_loop_live,
        rand((128, 8)),
        target="trn1",
        cls=NKIMemoryError,
        code="err_sbuf_capacity_exceeded",
        values=["200000", "180224", "[128, 30000]: 120000 B", "[128, 20000]: 80000 B"],
    )


def k_blocks_per_iteration(a):
    # 64 logical blocks of 4 KiB (256 KiB per partition) but each is used only in its own
    # iteration: the compiler needs one block at a time
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((64, nl.par_dim(128), 1024), dtype=a.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(64):
        buf[i] = nl.load(a[:, i * 1024 : (i + 1) * 1024])
        nl.store(out[:, i * 1024 : (i + 1) * 1024], value=nl.multiply(buf[i], 2.0))
    return out


def k_blocks_across_loops(a):
    # the same blocks written in one loop and read in another: all of them live in between,
    # 256 KiB per partition, so the compiler spills the blocks that do not fit
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((64, nl.par_dim(128), 1024), dtype=a.dtype, buffer=nl.sbuf)  # SPILL
    for i in nl.affine_range(64):
        buf[i] = nl.load(a[:, i * 1024 : (i + 1) * 1024])
    for i in nl.affine_range(64):
        nl.store(out[:, i * 1024 : (i + 1) * 1024], value=nl.multiply(buf[i], 2.0))
    return out


def k_blocks_beside_a_big_tile(a):
    # one 4 KiB block of buf must stay resident beside the 204 KiB tile: over trn2's SBUF
    out = nl.ndarray((128, 1024), dtype=a.dtype, buffer=nl.shared_hbm)
    big = nl.ndarray((128, 52224), dtype=nl.float32, buffer=nl.sbuf)
    big[:, 0:1024] = nl.load(a[:, 0:1024])
    buf = nl.ndarray((4, nl.par_dim(128), 1024), dtype=a.dtype, buffer=nl.sbuf)  # ERR
    for i in nl.affine_range(4):
        buf[i] = nl.add(big[:, 0:1024], 1.0)
    for i in nl.affine_range(4):
        nl.store(out, value=nl.multiply(buf[i], big[:, 0:1024]))
    return out


def test_blocks_live_at_once_spill_with_a_warning():
    a = rand((128, 64 * 1024))
    np.testing.assert_allclose(nki.jit(k_blocks_per_iteration)(a), 2 * a, rtol=1e-6)
    with pytest.warns(SpillWarning) as rec:
        got = nki.jit(k_blocks_across_loops).configure(target="trn2")(a)
    np.testing.assert_allclose(got, 2 * a, rtol=1e-6)
    (w,) = [r for r in rec if r.category is SpillWarning]
    assert w.lineno == line_of(k_blocks_across_loops, "# SPILL"), str(w.message)
    for v in ("262144 bytes per partition", "212984", "[64, 128, 1024]: 262144 B", "spills"):
        assert v in str(w.message), (v, str(w.message))


def test_one_block_of_each_blocked_tensor_stays_resident():
    expect(
        k_blocks_beside_a_big_tile,
        rand((128, 1024)),
        cls=NKIMemoryError,
        code="err_sbuf_capacity_exceeded",
        values=["212992 bytes per partition requested", "counting one block", "212984"],
        target="trn2",
    )


def k_psum_blocks_across_loops(a, b):
    # 16 PSUM blocks of one bank each (32 KiB per partition) written in one loop and read in
    # another: the compiler spills the blocks that do not fit PSUM's 16 KiB to SBUF
    out = nl.ndarray((16, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    acc = nl.ndarray((16, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)  # SPILL
    for i in nl.affine_range(16):
        acc[i] = nl.matmul(x, y, transpose_x=True)
    for i in nl.affine_range(16):
        nl.store(out[i], value=nl.multiply(acc[i], 1.0))
    return out


def test_psum_blocks_live_at_once_spill_with_a_warning():
    a, b = rand((128, 128)), rand((128, 512))
    with pytest.warns(SpillWarning) as rec:
        got = nki.jit(k_psum_blocks_across_loops)(a, b)
    np.testing.assert_allclose(got, np.broadcast_to(a.T @ b, (16, 128, 512)), rtol=1e-5, atol=1e-4)
    (w,) = [r for r in rec if r.category is SpillWarning]
    assert w.lineno == line_of(k_psum_blocks_across_loops, "# SPILL"), str(w.message)
    for v in ("PSUM over capacity", "32768 bytes per partition", "16384", "to SBUF"):
        assert v in str(w.message), (v, str(w.message))


def k_psum_nine(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    accs = []
    for _ in range(9):
        acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)  # ERR
        acc += nl.matmul(x, y, transpose_x=True)
        accs.append(acc)
    total = nl.copy(accs[0])
    for acc in accs[1:]:
        total = nl.add(total, acc)
    nl.store(out, total)
    return out


def test_nine_live_full_bank_psum_accumulators_fail():
    e = expect(
        k_psum_nine,
        rand((128, 128)),
        rand((128, 512)),
        cls=NKIMemoryError,
        code="err_psum_capacity_exceeded",
        values=["18432", "16384", "8 banks"],
    )
    # the nine accumulators are one entry with their count
    assert str(e).count("float32[128, 512]: 2048 B") == 1
    assert f"2048 B (allocated at line {line_of(k_psum_nine)}) x9 (18432 B)" in str(e)


def k_psum_eight(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    accs = []
    for _ in range(8):
        acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
        acc += nl.matmul(x, y, transpose_x=True)
        accs.append(acc)
    total = nl.copy(accs[0])
    for acc in accs[1:]:
        total = nl.add(total, acc)
    nl.store(out, total)
    return out


def test_eight_live_psum_accumulators_fit():
    a, b = rand((128, 128)), rand((128, 512), 1)
    got = nki.jit(k_psum_eight)(a, b)
    np.testing.assert_allclose(got, 8 * (a.T @ b), rtol=1e-4, atol=1e-3)


def k_psum_wide_matmul(a, b):
    out = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.shared_hbm)
    res = nl.zeros((128, 1024), dtype=nl.float32, buffer=nl.psum)  # ERR
    x = nl.load(a)
    res[:, 0:512] += nl.matmul(x, nl.load(b[:, 0:512]), transpose_x=True)
    res[:, 512:1024] += nl.matmul(x, nl.load(b[:, 512:1024]), transpose_x=True)
    nl.store(out, nl.copy(res))
    return out


def test_psum_tile_wider_than_a_bank_fails():
    e = expect(
        k_psum_wide_matmul,
        rand((128, 128)),
        rand((128, 1024)),
        cls=Exception,
        code="err_psum_tile_exceeds_bank",
        values=["4096", "2048", "512 fp32"],
        target="trn2",
    )
    assert isinstance(e, NKIMemoryError)


def k_psum_wide_alloc(a):
    out = nl.ndarray((128, 600), dtype=nl.float32, buffer=nl.shared_hbm)
    res = nl.zeros((128, 600), dtype=nl.float32, buffer=nl.psum)  # ERR
    nl.store(out, nl.copy(res))
    return out


def test_psum_tile_bank_rule_on_allocation():
    expect(
        k_psum_wide_alloc,
        rand((128, 8)),
        cls=NKIMemoryError,
        code="err_psum_tile_exceeds_bank",
        values=["2400", "2048"],
        target="trn2",
    )


# ---- loop-carried dependencies and races -----------------------------------------------------


def k_loop_carried(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):  # LOOP
        t = nl.load(a[i * 128 : (i + 1) * 128, :])
        nl.store(out, t)  # ERR
    return out


def k_loop_sequential(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.sequential_range(4):
        t = nl.load(a[i * 128 : (i + 1) * 128, :])
        nl.store(out, t)
    return out


def test_loop_carried_hbm_write_in_affine_range():
    a = rand((512, 8))
    e = expect(
        k_loop_carried,
        a,
        cls=NKIDependencyError,
        code="err_unexpected_output_dependencies",
        values=["iterations 0 and 1", "range(0, 4, 1)", "affine_range", "sequential_range"],
    )
    assert [r.line for _, r in e.related] == [line_of(k_loop_carried, "# LOOP")]
    assert f":{line_of(k_loop_carried, '# LOOP')}:" in str(e)
    np.testing.assert_array_equal(nki.jit(k_loop_sequential)(a), a[384:])


def k_hbm_scratch_in_loop(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        rows = slice(i * 128, (i + 1) * 128)
        scratch = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.private_hbm)
        nl.store(scratch, value=nl.load(a[rows, :]))
        nl.store(out[rows, :], value=nl.multiply(nl.load(scratch), 2.0))
    return out


def k_hbm_scratch_outside_loop(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    scratch = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.private_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        rows = slice(i * 128, (i + 1) * 128)
        nl.store(scratch, value=nl.load(a[rows, :]))  # ERR
        nl.store(out[rows, :], value=nl.multiply(nl.load(scratch), 2.0))
    return out


@pytest.mark.parametrize("backend", ["batched", "numpy", "numba"])
def test_an_hbm_tensor_allocated_in_the_loop_body_is_each_iterations_own(backend):
    a = rand((512, 8))
    got = nki.jit(k_hbm_scratch_in_loop, backend=backend)(a)
    np.testing.assert_array_equal(got, a * np.float32(2))
    expect(
        k_hbm_scratch_outside_loop,
        a,
        cls=NKIDependencyError,
        code="err_unexpected_output_dependencies",
        values=["iterations 0 and 1", "HBM tensor"],
    )


def k_loop_overlap_two_writes(a):
    out = nl.ndarray((256, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):  # LOOP
        t = nl.load(a[i * 128 : (i + 1) * 128, :])
        nl.store(out[i * 128 : (i + 1) * 128, :], t)  # ERR
        nl.store(out[128:256, :], t)  # OTHER
    return out


def test_loop_carried_between_two_statements_names_both():
    e = expect(
        k_loop_overlap_two_writes,
        rand((256, 8)),
        cls=NKIDependencyError,
        code="err_unexpected_output_dependencies",
    )
    lines = [r.line for _, r in e.related]
    assert lines == [
        line_of(k_loop_overlap_two_writes, "# OTHER"),
        line_of(k_loop_overlap_two_writes, "# LOOP"),
    ]


def k_loop_interleaved(a):
    # iteration i writes columns i, i+2, i+4, ...: disjoint, legal
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:4]
    for i in nl.affine_range(2):
        nl.store(out[ip, 2 * jf + i], nl.load(a[ip, 2 * jf + i]))
    return out


def test_disjoint_strided_iterations_are_legal():
    a = rand((128, 8))
    np.testing.assert_array_equal(nki.jit(k_loop_interleaved)(a), a)


def k_race(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    nl.store(out, nl.load(a[i * 128 : (i + 1) * 128, :]))  # ERR
    return out


def k_no_race(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    nl.store(out[i * 128 : (i + 1) * 128, :], nl.load(a[i * 128 : (i + 1) * 128, :]))
    return out


def test_spmd_race_reports_both_instances():
    a = rand((256, 8))
    e = expect(
        k_race,
        a,
        grid=2,
        api="classic",  # kernel[2] of a current-API kernel is two cores, not two instances
        cls=NKIDependencyError,
        code="err_spmd_write_race",
        values=["(0,) and (1,)", "'out'"],
    )
    assert [r.line for _, r in e.related] == [line_of(k_race)]
    np.testing.assert_array_equal(nki.jit(k_no_race)[2](a), a)


def k_race_2d(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    nl.program_id(1)  # the second axis is not used: instances (i, 0) and (i, 1) collide
    nl.store(out[i * 64 : i * 64 + 64, :], nl.load(a[i * 64 : i * 64 + 64, :]))  # ERR
    return out


def test_spmd_race_on_second_grid_axis():
    expect(
        k_race_2d,
        rand((128, 8)),
        grid=(2, 2),
        cls=NKIDependencyError,
        code="err_spmd_write_race",
        values=["(0, 0) and (0, 1)"],
    )


@pytest.mark.parametrize("checks", ["none"])
def test_checks_none_skips_static_analyses(checks):
    a = rand((512, 8))
    np.testing.assert_array_equal(nki.jit(k_loop_carried, checks=checks)(a), a[384:])


def k_slice_past_end(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a[0:128, :]))  # ERR
    return out


def test_constant_slice_past_the_end_is_not_clipped():
    expect(
        k_slice_past_end,
        rand((100, 8)),
        cls=NKIIndexError,
        code="err_tensor_access_out_of_bound",
        values=["[0, 127]", "100", "dimension 0"],
    )


def k_expr_below_zero_on_unit_dim(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:1, 0:8]
    t = nl.load(a[ip - 1, jf])  # ERR
    nl.store(out[ip, jf], t)
    return out


def k_literal_negative_index(a):
    out = nl.ndarray((1, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a[-1:, :]))
    out2 = nl.ndarray((1, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    i_f = nl.arange(8)[None, :]
    nl.store(out2, nl.load(a[-2, i_f]))
    return out, out2


def test_index_expression_on_a_size_one_dimension_is_not_wrapped_or_dropped():
    # `ip - 1` folds to the constant -1 on a 1-row tensor: out of bounds, not Python's a[-1]
    expect(
        k_expr_below_zero_on_unit_dim,
        rand((1, 8)),
        cls=NKIIndexError,
        code="err_tensor_access_out_of_bound",
        values=["[-1, -1]", "dimension 0", "size of 1"],
    )
    a = rand((5, 8))
    got, got2 = nki.jit(k_literal_negative_index)(a)  # literal negative ints keep Python meaning
    np.testing.assert_array_equal(got, a[-1:])
    np.testing.assert_array_equal(got2, a[-2:-1])


def k_nested_view_unit_axis(a):
    out = nl.ndarray((1, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    v = a[2:3, 0:8]
    w = v[:, 0:8]
    t = nl.load(w[3:4, 0:8])  # ERR
    nl.store(out, t)
    return out


def k_nested_view_unit_axis_int(a):
    out = nl.ndarray((1, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    w = a[2:3, 0:8][:, 0:8]
    i_f = nl.arange(8)[None, :]
    t = nl.load(w[1, i_f])  # ERR
    nl.store(out, t)
    return out


def test_index_into_a_size_one_view_axis_is_out_of_bounds():
    expect(
        k_nested_view_unit_axis,
        rand((8, 8)),
        cls=NKIIndexError,
        code="err_tensor_access_out_of_bound",
        values=["[3, 3]", "size of 1"],
    )
    expect(
        k_nested_view_unit_axis_int,
        rand((8, 8)),
        cls=NKIIndexError,
        code="err_tensor_access_out_of_bound",
        values=["index 1 on a view axis of size 1", "(1, 8)"],
    )


def k_huge_hbm(a):
    out = nl.ndarray((1 << 20, 1 << 20), dtype=nl.float32, buffer=nl.shared_hbm)  # ERR
    nl.store(out[0:128, 0:8], nl.load(a))
    return out


@pytest.mark.parametrize("checks", ["static", "none"])
def test_hbm_capacity_of_the_device(checks):
    # 4 TiB of HBM on a 96 GiB trn2 device: a located error, never a host MemoryError / OOM kill
    expect(
        k_huge_hbm,
        rand((128, 8)),
        cls=NKIMemoryError,
        code="err_hbm_capacity_exceeded",
        values=["4398046511104 bytes", str(96 << 30), "'out'"],  # the user's variable
        checks=checks,
        target="trn2",
    )


def _fill_blocks(view, x, h, n_blocks, trips):
    """A helper kernel function writes block (t, j) of its view of the accumulator: the view
    drops the head axis, so axis 1 of ``view`` is the (size-1) inner-block axis."""
    for t in nl.affine_range(n_blocks):
        for j in nl.affine_range(trips):
            view[t, j, :, :] = nl.loop_reduce(  # ERR
                nl.load(x[h, t * 128 : (t + 1) * 128, :]) * 2.0,
                op=np.add,
                loop_indices=(h,),
                dtype=nl.float32,
            )


def k_loop_index_on_unit_view_axis(x, inner, trips):
    heads, rows, cols = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((heads, rows // 128, inner, nl.par_dim(128), cols), dtype=nl.float32)
    for h in nl.affine_range(heads):
        _fill_blocks(acc[h], x, h, rows // 128, trips)
    for h in nl.affine_range(heads):
        for t in nl.affine_range(rows // 128):
            nl.store(out[h, t * 128 : (t + 1) * 128, :], value=acc[h, t, 0, :, :])
    return out


def test_one_trip_loop_iterator_indexes_a_size_one_view_axis():
    # the iterator of a loop with one trip is 0: an index on a view axis of size 1 (here the
    # inner-block axis of a 5-D accumulator seen through a per-head view) is in bounds
    x = rand((2, 384, 48))
    got = nki.jit(k_loop_index_on_unit_view_axis)(x, 1, 1)
    np.testing.assert_array_equal(got, x * np.float32(2.0))


def test_loop_iterator_with_more_trips_on_a_size_one_view_axis_is_out_of_bounds():
    with pytest.raises(NKIIndexError) as ei:
        nki.jit(k_loop_index_on_unit_view_axis)(rand((2, 256, 48)), 1, 2)
    e = ei.value
    assert e.code == "err_tensor_access_out_of_bound", str(e)
    for v in (
        "on a view axis of size 1",
        "(2, 1, 128, 48), axis 1",
        "loop iterator j)",
        "takes values 0..1",
    ):
        assert v in str(e), (v, str(e))
    assert e.loc is not None and e.loc.line == line_of(_fill_blocks), str(e)


def k_sbuf_tiles_in_a_list(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    kept = []
    for _ in range(60):  # 60 live tiles of 4 KiB: 240 KiB per partition, over trn2's SBUF
        t = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.sbuf)  # ERR
        t[:, 0:8] = nl.load(a)
        kept.append(t)
    for t in kept:
        nl.store(out, t[:, 0:8])
    return out


def test_sbuf_capacity_error_counts_identical_live_tiles_once():
    e = expect(
        k_sbuf_tiles_in_a_list, rand((128, 8)), target="trn2", cls=NKIMemoryError,
        code="err_sbuf_capacity_exceeded",
        values=["float32[128, 1024]: 4096 B", "x52 (212992 B)", "212984"],
    )  # fmt: skip
    assert str(e).count("float32[128, 1024]") == 1  # the 52 tiles (the failing one included)


def k_psum_tiles(a, b, n_big, n_small):
    # n_big accumulators of 384 fp32 columns (1536 B, over half a 2 KiB bank) and n_small of
    # 128 columns (512 B), all live until the end
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    accs = []
    for cols in [384] * n_big + [128] * n_small:
        acc = nl.zeros((128, cols), dtype=nl.float32, buffer=nl.psum)  # ERR
        acc += nl.matmul(x, y[:, 0:cols], transpose_x=True)
        accs.append(acc)
    total = nl.copy(accs[0][:, 0:128])
    for acc in accs[1:]:
        total = nl.add(total, acc[:, 0:128])
    nl.store(out, total)
    return out


@pytest.mark.parametrize(("n_big", "n_small"), [(8, 8), (9, 0)])
def test_psum_tiles_over_half_a_bank_need_a_bank_each(n_big, n_small):
    # nine 1536-byte tiles (13.5 KiB) fit PSUM's 16 KiB by bytes, but no two share a bank;
    # eight of them leave 512 bytes of each bank, where the eight small ones fit
    a, b = rand((128, 128)), rand((128, 384), 1)
    k = nki.jit(k_psum_tiles).configure(target="trn2")
    if n_big == 9:
        e = expect(
            k_psum_tiles, a, b, 9, 0, cls=NKIMemoryError, target="trn2",
            code="err_psum_capacity_exceeded", values=["to 9", "8 banks", "1536 B"],
        )  # fmt: skip
        assert "no two of them share one" in str(e)
        return
    got = k(a, b, n_big, n_small)
    np.testing.assert_allclose(got, 16 * (a.T @ b[:, 0:128]), rtol=1e-4, atol=1e-3)
