"""Sanity of the cost model and scheduler: table costs, DMA bandwidth, engine overlap versus
dependent chains, monotonicity, loop extrapolation, SPMD placement and the lints."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import nki.typing as nt
from simulator.cost import scheduler
from simulator.cost.table import table_for

from .matmul_kernels import matmul_hoisted, matmul_optimised


@nki.jit
def one_matmul(lhsT, rhs):
    out = nl.ndarray((lhsT.shape[1], rhs.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(lhsT)
    b = nl.load(rhs)
    acc = nl.matmul(a, b, transpose_x=True)
    nl.store(out, value=nl.copy(acc))
    return out


def _site(report, api):
    (site,) = [s for s in report.schedule.sites.values() if s.instr.api == api]
    return site


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_single_matmul_costs_the_table_row(target):
    r = nki.estimate(one_matmul, target=target)(
        nt.tensor[[128, 128], nl.bfloat16], nt.tensor[[128, 512], nl.bfloat16]
    )
    tensor = table_for(target).engines["tensor"]
    # max(min(64, N_stationary), N_moving) cycles plus the fixed 64-cycle matmul cost, at the
    # Tensor-engine clock
    expected = (max(min(64, 128), 512) + 64) / tensor.clock_ghz
    assert _site(r, "nl.matmul").ns == pytest.approx(expected)
    assert r.busy_ns["tensor"] == pytest.approx(expected)
    assert r.flops == 2 * 128 * 128 * 512


def test_fp32_matmul_is_four_times_slower():
    bf = nki.estimate(one_matmul, target="trn1")(
        nt.tensor[[128, 128], nl.bfloat16], nt.tensor[[128, 512], nl.bfloat16]
    )
    f32 = nki.estimate(one_matmul, target="trn1")(
        nt.tensor[[128, 128], nl.float32], nt.tensor[[128, 512], nl.float32]
    )
    assert f32.busy_ns["tensor"] == pytest.approx(4 * bf.busy_ns["tensor"])


@nki.jit
def copy_rows(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        nl.store(out[i * 128 : (i + 1) * 128, :], value=nl.load(a[i * 128 : (i + 1) * 128, :]))
    return out


def test_dma_bound_copy_scales_with_bytes_and_approaches_core_bandwidth():
    est = nki.estimate(copy_rows, target="trn1")
    sizes = [128 * 16, 128 * 64, 128 * 256]
    reports = [est(nt.tensor[[rows, 4096], nl.float32]) for rows in sizes]
    for small, big in zip(reports, reports[1:]):
        assert big.dma_bytes == 4 * small.dma_bytes
        assert 3.5 < big.latency_ns / small.latency_ns <= 4.0
    big = reports[-1]
    peak = table_for("trn1").dma_bytes_per_ns  # 272 B/ns = 272 GB/s per core
    achieved = big.dma_bytes / big.latency_ns
    assert 0.85 * peak < achieved <= peak
    assert big.bottleneck == "dma"


def _two_chains(dependent: bool):
    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.load(a)
        v = x
        s = x
        for _ in range(8):
            v = nl.multiply(v, 1.5) if not dependent else nl.multiply(s, 1.5)  # Vector
            # Scalar: its own chain (eight equal nl.exp(x) would be one common subexpression)
            s = nl.exp(s) if not dependent else nl.exp(v)
        nl.store(out, value=nl.add(v, s))
        return out

    return nki.estimate(kernel, target="trn2")(nt.tensor[[128, 4096], nl.float32])


def test_independent_engines_overlap_and_a_dependent_chain_serialises():
    ind = _two_chains(dependent=False)
    dep = _two_chains(dependent=True)
    assert ind.busy_ns["vector"] == pytest.approx(dep.busy_ns["vector"])
    assert ind.busy_ns["scalar"] == pytest.approx(dep.busy_ns["scalar"])
    both = dep.busy_ns["vector"] + dep.busy_ns["scalar"]
    assert dep.latency_ns >= both  # each op waits for the other engine's result
    assert ind.latency_ns < 0.75 * both + dep.busy_ns["dma"] + 2 * 1300  # the chains overlap


def test_estimates_grow_monotonically_with_size():
    est = nki.estimate(matmul_optimised, target="trn2")
    lat = [
        est(nt.tensor[[k, 512], nl.bfloat16], nt.tensor[[k, n], nl.bfloat16]).latency_ns
        for k, n in [(128, 1024), (256, 1024), (256, 2048), (1024, 2048), (1024, 8192)]
    ]
    assert all(a < b for a, b in zip(lat, lat[1:])), lat


@pytest.mark.parametrize("kernel", [matmul_hoisted, matmul_optimised])
def test_loop_extrapolation_matches_full_schedule(kernel, monkeypatch):
    args = (nt.tensor[[1024, 1024], nl.bfloat16], nt.tensor[[1024, 4096], nl.bfloat16])
    fast = nki.estimate(kernel, target="trn1")(*args)
    monkeypatch.setattr(scheduler, "SIMULATED_ITERATIONS", 10**6)  # schedule every iteration
    full = nki.estimate(kernel, target="trn1")(*args)
    assert fast.busy_ns["tensor"] == pytest.approx(full.busy_ns["tensor"])
    assert fast.dma_bytes == full.dma_bytes
    assert fast.latency_ns == pytest.approx(full.latency_ns, rel=0.05)
    assert len(fast.schedule.events) < len(full.schedule.events)


@nki.jit
def scale_rows(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    x = nl.load(a[i * 128 : (i + 1) * 128, :])
    nl.store(out[i * 128 : (i + 1) * 128, :], value=nl.multiply(x, 2.0))
    return out


def test_spmd_instances_share_a_core_unless_placed_on_cores():
    arg = nt.tensor[[512, 1024], nl.float32]
    one = nki.estimate(scale_rows, target="trn2")(arg)
    four = nki.estimate(scale_rows[4], target="trn2")(arg)
    split = nki.estimate(scale_rows[nl.nc(2), 2], target="trn2")(arg)
    assert four.instances_per_core == 4 and four.latency_ns == pytest.approx(4 * one.latency_ns)
    assert split.cores == 2 and split.latency_ns == pytest.approx(2 * one.latency_ns)


@nki.jit
def reload_in_loop(a, w):
    out = nl.ndarray((a.shape[0], w.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[1] // 128):
        wt = nl.load(w)  # the same tile every iteration
        x = nl.load(a[:, i * 128 : (i + 1) * 128])
        acc = nl.matmul(x, wt, transpose_x=True)
        nl.store(out[i * 128 : (i + 1) * 128, :], value=nl.copy(acc))
    return out


def test_lints_name_the_line_and_cost():
    r = nki.estimate(reload_in_loop, target="trn1")(
        nt.tensor[[128, 1024], nl.bfloat16], nt.tensor[[128, 64], nl.bfloat16]
    )
    by_rule = {}
    for lint in r.lints:
        by_rule.setdefault(lint.rule, []).append(lint)
        assert lint.cost_ns > 0
    load_line = reload_in_loop.fn.__code__.co_firstlineno + 4  # (firstlineno: the decorator)
    (inv,) = by_rule["invariant-load"]
    assert inv.loc.line == load_line and inv.loc.file == __file__
    assert "8 iterations" in inv.message
    (mm,) = by_rule["small-matmul"]
    assert mm.loc.line == load_line + 2 and "64 < 128" in mm.message
    small = {lint.loc.line for lint in by_rule["small-dma"]}
    assert load_line in small  # 64 bf16 = 128 B per partition
    assert "reload_in_loop on trn1: estimated" in r.summary()
    assert "[invariant-load]" in r.summary()


@nki.jit
def sum_row_tiles(a):
    """Each trip of the device loop loads another row tile (through its register offset)."""
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 8), dtype=nl.float32, buffer=nl.sbuf)

    def body(i):
        acc[...] = nl.add(acc, nl.load(a.ap([[8, 128], [1, 8]], scalar_offset=i)))

    nl.fori_loop(0, a.shape[0], body, step=128)
    nl.store(out, acc)
    return out


def test_a_load_through_a_loop_register_is_not_loop_invariant():
    x = np.random.default_rng(0).random((1024, 8), dtype=np.float32)
    np.testing.assert_allclose(sum_row_tiles(x), x.reshape(8, 128, 8).sum(axis=0), rtol=1e-6)
    r = nki.estimate(sum_row_tiles, target="trn2")(x)
    assert not [lint for lint in r.lints if lint.rule == "invariant-load"]
    assert r.latency_ns > 0


@nki.jit
def exp_only(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.exp(nl.load(a)))
    return out


@nki.jit
def softmax_rows(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.softmax(nl.load(a), axis=1))
    return out


def test_a_softmax_costs_the_passes_of_its_lowering_not_one_exp():
    arg = nt.tensor[[128, 4096], nl.float32]
    exp = nki.estimate(exp_only, target="trn1")(arg).busy_ns["scalar"]
    soft = nki.estimate(softmax_rows, target="trn1")(arg).busy_ns["scalar"]
    assert 2.5 * exp < soft < 3.5 * exp


def _broadcast_rows(width):
    @nki.jit
    def kernel(a):
        out = nl.ndarray((128, width), dtype=nl.float32, buffer=nl.shared_hbm)
        row = nl.load(a)
        nl.store(out, nl.add(row.broadcast_to((128, width)), 1.0))
        return out

    return kernel


def test_a_partition_broadcast_costs_more_as_it_widens_past_one_psum_bank():
    ns = []
    for width in (512, 1024, 2048):
        r = nki.estimate(_broadcast_rows(width), target="trn1")(nt.tensor[[1, width], nl.float32])
        ns.append(r.busy_ns.get("tensor", 0.0) + r.busy_ns.get("scalar", 0.0))
    assert ns[0] < ns[1] < ns[2], ns


@nki.jit(api="classic")
def add_reduce_zero(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    t = nisa.tensor_tensor(x, y, op=nl.add)
    r = nisa.tensor_reduce(op=nl.add, data=t, axis=(1,))
    z = nisa.memset(shape=a.shape, value=0.0, dtype=a.dtype)
    nl.store(out, nl.add(nl.add(z, r), t))
    return out


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_bf16_cost_rules_of_the_instruction_notes_hold_on_every_generation(target):
    """All-bf16 SBUF add: N (not 2N); bf16 add reduction: N/2; bf16 zero memset: N/2 - at
    most those, on trn1 too (trn2's general 2-byte speed-up does not compound with them)."""
    n = 2048
    cycles = {}
    for dt in ("float32", "bfloat16"):
        arg = nt.tensor[[128, n], getattr(nl, dt)]
        r = nki.estimate(add_reduce_zero, target=target)(arg, arg)
        for site in r.schedule.sites.values():
            if site.instr.api in ("nisa.tensor_tensor", "nisa.tensor_reduce", "nisa.memset"):
                cycles[dt, site.instr.api] = site.ns / site.count
    for api in ("nisa.tensor_tensor", "nisa.tensor_reduce", "nisa.memset"):
        assert cycles["bfloat16", api] <= cycles["float32", api] / 2 * 1.1, (api, cycles)
        if target == "trn1":  # (no other 2-byte speed-up there: exactly the notes' rules)
            assert cycles["bfloat16", api] >= cycles["float32", api] / 2 / 1.1, (api, cycles)


@nki.jit
def big_sbuf(a):
    out = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((64, nl.par_dim(128), 1024), dtype=nl.float32, buffer=nl.sbuf)
    for k in nl.affine_range(64):
        t[k] = nl.load(a[:, k * 1024 : (k + 1) * 1024])
    nl.store(out, value=nl.copy(t[0, :, 0:512]))
    return out


def test_capacity_spill_lint():
    r = nki.estimate(big_sbuf, target="trn1")(nt.tensor[[128, 65536], nl.float32])
    (spill,) = [lint for lint in r.lints if lint.rule == "capacity-spill"]
    # 64 x 1024 fp32 per partition, plus the 512-column fp32 copy tile
    assert f"need {64 * 1024 * 4 + 512 * 4} B per partition" in spill.message
    assert "180224 B are usable" in spill.message and spill.cost_ns > 0


def test_estimate_accepts_arrays_and_reports_bad_arguments(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    a = np.zeros((256, 1024), np.float32)
    r1 = nki.estimate(copy_rows)(a)
    r2 = nki.estimate(copy_rows)(nt.tensor[[256, 1024], nl.float32])

    class ShapeDtype:  # e.g. jax.ShapeDtypeStruct: shape and dtype, no data
        shape, dtype = (256, 1024), np.dtype("float32")

    r3 = nki.estimate(copy_rows)(ShapeDtype())
    assert r1.latency_ns == r2.latency_ns == r3.latency_ns and r1.target == "trn2"
    with pytest.raises(nki.NKIError, match="bad arguments for kernel 'copy_rows'") as e:
        nki.estimate(copy_rows)(a, a)
    assert e.value.loc is not None and e.value.loc.file == __file__


@nki.jit
def vector_and_gpsimd(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    for _ in range(4):
        v = nl.multiply(x, 3.0)  # Vector engine, reads SBUF
        g = nisa.memset((128, 4096), 0.0, nl.float32, engine=nisa.gpsimd_engine)  # GpSimd
    nl.store(out, value=nl.add(v, g))
    return out


def _overlap_ns(r: object, a: str, b: str) -> float:
    """How long instructions of engines ``a`` and ``b`` run at the same time in the schedule."""
    spans = {t: [(e.start, e.start + e.dur) for e in r.schedule.events if e.track == t and not
                 e.repeat] for t in (a, b)}  # fmt: skip
    return sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in spans[a] for s2, e2 in spans[b])


@nki.jit
def vector_chain_and_iotas(a):
    out = nl.ndarray((128, 4096), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nisa.memset((128, 4096), 1.0, nl.float32)  # Vector engine
    i_p, i_f = nl.mgrid[0:128, 0:4096]
    for i in range(4):
        acc = nl.multiply(acc, 3.0)  # Vector engine, a chain
        g = nisa.iota(i_p * 4096 + i_f + i, dtype=nl.float32)  # GpSimd, independent of it
        acc = nl.add(acc, 0.0) if i < 3 else nl.add(acc, g)
    nl.store(out, value=acc)
    return out


def test_trn1_vector_and_gpsimd_share_the_sbuf_port_trn2_does_not():
    arg = nt.tensor[[128, 4096], nl.float32]
    reports = {t: nki.estimate(vector_chain_and_iotas, target=t)(arg) for t in ("trn1", "trn2")}
    assert reports["trn1"].busy_ns["gpsimd"] > 0 and reports["trn1"].busy_ns["vector"] > 0
    # trn1: one SBUF port, the two engines take turns (never at the same time); trn2 overlaps
    assert _overlap_ns(reports["trn1"], "vector", "gpsimd") == 0.0
    assert _overlap_ns(reports["trn2"], "vector", "gpsimd") > 0.0
    # memsets that need nothing from a load use the port on trn1 too while the load runs
    r = nki.estimate(vector_and_gpsimd, target="trn1")(arg)
    first = min(e.start for e in r.schedule.events if e.track == "gpsimd")
    load = min(e.start + e.dur for e in r.schedule.events if e.track.startswith("dma"))
    assert first < load


@nki.jit
def strided_read(a):
    out = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(512)[None, :]
    y = nl.exp(x[i_p, 8 * i_f])  # every 8th fp32 element: a 32-byte innermost stride
    nl.store(out, value=y)
    return out


def test_innermost_stride_lint_and_cost():
    r = nki.estimate(strided_read, target="trn2")(nt.tensor[[128, 4096], nl.float32])
    (lint,) = [x for x in r.lints if x.rule == "strided-access"]
    assert lint.loc.line == strided_read.fn.__code__.co_firstlineno + 6
    site = _site(r, "nl.exp")
    row = table_for("trn2").engines["scalar"]
    # 512 elements per partition, doubled for the 32-byte stride, plus the access overhead
    assert site.ns == pytest.approx((2 * 512 + row.access_overhead_cycles) / row.clock_ghz)


def _four_matmuls(same_stationary: bool):
    @nki.jit
    def kernel(s, m):
        out = nl.ndarray((128, 4 * 32), dtype=nl.float32, buffer=nl.shared_hbm)
        st = nl.load(s)  # [128, 4 * 128]
        mv = nl.load(m)  # [128, 4 * 32]
        for j in nl.static_range(4):
            k = 0 if same_stationary else j
            acc = nl.matmul(
                st[:, k * 128 : (k + 1) * 128], mv[:, j * 32 : (j + 1) * 32], transpose_x=True
            )
            nl.store(out[:, j * 32 : (j + 1) * 32], value=nl.copy(acc))
        return out

    return nki.estimate(kernel, target="trn1")(
        nt.tensor[[128, 512], nl.bfloat16], nt.tensor[[128, 128], nl.bfloat16]
    )


def test_stationary_load_is_skipped_when_consecutive_matmuls_share_it():
    clock = table_for("trn1").engines["tensor"].clock_ghz
    # moving free size 32: a new stationary costs max(min(64, 128), 32) + 64 cycles, a reused
    # one only the moving pass 32 + 64
    same = _four_matmuls(same_stationary=True).busy_ns["tensor"]
    other = _four_matmuls(same_stationary=False).busy_ns["tensor"]
    assert same == pytest.approx((128 + 3 * 96) / clock)
    assert other == pytest.approx(4 * 128 / clock)


@nki.jit
def copy_tile(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.copy(nl.load(a)))
    return out


@pytest.mark.parametrize(
    "target,dtype,per_cycle",
    [("trn1", nl.bfloat16, 1), ("trn2", nl.float32, 1), ("trn2", nl.bfloat16, 4)],
)
def test_vector_copy_cost_per_generation_and_dtype(target, dtype, per_cycle):
    r = nki.estimate(copy_tile, target=target)(nt.tensor[[128, 2048], dtype])
    row = table_for(target).engines["vector"]
    # elements per partition / elements per lane per cycle, plus the access overhead
    expected = (2048 / per_cycle + row.access_overhead_cycles) / row.clock_ghz
    assert _site(r, "nl.copy").ns == pytest.approx(expected)


def test_estimate_rejects_an_unknown_target():
    with pytest.raises(nki.NKIError, match="unknown platform target 'trn9'"):
        nki.estimate(copy_rows, target="trn9")(nt.tensor[[128, 128], nl.float32])


@nki.jit
def masked_rows(a, keep, ragged):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(a.shape[1])[None, :]
    n = a.shape[0] // 128
    for i in nl.affine_range(n):
        rows = i * 128 + i_p
        # ragged: every tile but the last whole, the last one keeps `keep` rows
        keep_rows = rows < (n - 1) * 128 + keep if ragged else i_p < keep
        t = nl.load(a[rows, i_f], mask=keep_rows)
        nl.store(out[rows, i_f], value=t, mask=keep_rows)
    return out


@pytest.mark.parametrize("ragged", [False, True])
def test_a_masked_dma_moves_and_describes_only_its_masked_in_elements(ragged):
    arg = nt.tensor[[512, 1024], nl.float32]
    full = nki.estimate(masked_rows, target="trn1")(arg, 128, ragged)
    part = nki.estimate(masked_rows, target="trn1")(arg, 16, ragged)
    assert full.dma_bytes == 2 * 512 * 1024 * 4
    rows = 3 * 128 + 16 if ragged else 4 * 16  # rows kept over the four tiles
    assert part.dma_bytes == pytest.approx(2 * rows * 1024 * 4)
    load_full, load_part = _site(full, "nl.load"), _site(part, "nl.load")
    assert load_part.ns == pytest.approx(load_full.ns * rows / 512, rel=0.02)


@nki.jit
def masked_corner(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(512)[None, :]
    t = nl.load(a[i_p, i_f], mask=(i_p < 100) & (i_f < 300))  # conditions on different axes
    nl.store(out[i_p, i_f], value=t)
    return out


def test_a_mask_over_both_axes_keeps_their_product():
    r = nki.estimate(masked_corner, target="trn2")(nt.tensor[[128, 512], nl.float32])
    assert _site(r, "nl.load").dma_bytes == 100 * 300 * 4
    assert _site(r, "nl.store").dma_bytes == 128 * 512 * 4


@nki.jit
def tiny_ops(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    for _ in range(16):
        x = nl.multiply(x, 1.5)  # 8 elements per partition: MIN_II and access overhead dominate
    nl.store(out, value=x)
    return out


def test_report_says_which_parts_it_is_least_sure_of():
    r = nki.estimate(tiny_ops, target="trn1")(nt.tensor[[128, 8], nl.float32])
    (small,) = [d for d in r.doubts if "of vector time is overhead" in d.what]
    row = table_for("trn1").engines["vector"]
    # per instruction: max(64, 8) + 60 cycles, of which 8 stream elements
    assert small.ns == pytest.approx(16 * (64 + 60 - 8) / row.clock_ghz)
    assert "fixed costs of small instructions" in small.why
    assert "least certain:" in r.summary()
    spilled = nki.estimate(big_sbuf, target="trn1")(nt.tensor[[128, 65536], nl.float32])
    (spill,) = [d for d in spilled.doubts if d.what == "compiler spills"]
    (lint,) = [x for x in spilled.lints if x.rule == "capacity-spill"]
    assert spill.ns == pytest.approx(lint.cost_ns) and spill.ns > 0


def _sections(unrolled: bool):
    @nki.jit
    def kernel(p_in, c):
        out = nl.ndarray(c.shape, dtype=c.dtype, buffer=nl.shared_hbm)
        p = nl.load(p_in)  # 64 KiB per partition, used by every section
        for i in nl.static_range(4) if unrolled else nl.affine_range(4):
            ci = nl.load(c[i])  # 64 KiB
            t = nl.multiply(p, ci)  # 64 KiB more: 192 KiB live, over trn1's 176 KiB usable
            nl.store(out[i], value=t)
        return out

    return nki.estimate(kernel, target="trn1")(
        nt.tensor[[128, 16384], nl.float32], nt.tensor[[4, 128, 16384], nl.float32]
    )


def test_spills_repeat_per_iteration_of_a_loop_and_per_section_of_unrolled_code():
    spilled = {}
    for unrolled in (False, True):
        r = _sections(unrolled)
        sites = [s for s in r.schedule.sites.values() if s.instr.kind == "spill"]
        assert sum(s.count for s in sites) == 4  # one save + reload per section
        spilled[unrolled] = sum(s.dma_bytes for s in sites)
    over = 3 * 64 * 1024 - 180224  # bytes per partition over capacity in each section
    assert spilled[False] == spilled[True] == 4 * 2 * over * 128
