"""The estimate report: latency, per-engine busy time and utilisation, DMA traffic per queue,
critical path and bottleneck, roofline position, top instructions and performance lints."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from nki.errors import SrcLoc
from nki.ir import Access, KernelIR
from nki.targets import get_target

from .compiler import SPILL, Lowering, lower
from .scheduler import Schedule, SiteStats, schedule
from .table import CostTable, table_for

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")
SMALL_DMA_BYTES = 2048  # per partition: below this a transfer is overhead-bound [dma-bw]


@dataclass(frozen=True)
class Lint:
    """A performance mistake found by the model, at the user's line, with its estimated cost."""

    rule: str
    loc: SrcLoc | None
    message: str
    cost_ns: float

    def __str__(self) -> str:
        where = f"{self.loc.file}:{self.loc.line}" if self.loc else "kernel"
        return f"{where}: [{self.rule}] {self.message} (~{_fmt_ns(self.cost_ns)})"


@dataclass(frozen=True)
class Doubt:
    """A part of the estimate the model is least sure of: ``ns`` of modelled time (or 0 for a
    count) resting on figures or rules that are rough, fitted or inferred."""

    what: str
    ns: float
    why: str

    def __str__(self) -> str:
        size = f"~{_fmt_ns(self.ns)}: " if self.ns else ""
        return f"{size}{self.what} ({self.why})"


@dataclass(frozen=True)
class TopInstr:
    name: str
    engine: str
    loc: SrcLoc | None
    count: float
    ns: float


class _Latency:
    """Classic ``benchmark_result.nc_latency``: percentiles of the (deterministic) estimate."""

    def __init__(self, us: float) -> None:
        self.us = us

    def get_latency_percentile(self, percentile: float) -> float:
        """The estimate in microseconds (the model has no run-to-run variation)."""
        if not 0 <= percentile <= 100:
            raise ValueError(f"percentile must be in [0, 100], got {percentile}")
        return self.us


@dataclass
class Report:
    """A kernel's estimated performance on one target (see docs/guides/performance.md)."""

    kernel: str
    target: str
    latency_ns: float
    instance_ns: float
    instances_per_core: int
    cores: int
    busy_ns: dict[str, float]
    dma_queue_bytes: dict[str, float]
    dma_bytes: float
    flops: float
    critical_path: dict[str, float]
    top: list[TopInstr]
    lints: list[Lint]
    schedule: Schedule = field(repr=False)
    table: CostTable = field(repr=False)
    compiler: Lowering | None = field(default=None, repr=False)  # the IR as scheduled
    doubts: list[Doubt] = field(default_factory=list)  # what the estimate is least sure of

    @property
    def latency_us(self) -> float:
        return self.latency_ns / 1e3

    @property
    def latency_ms(self) -> float:
        return self.latency_ns / 1e6

    @property
    def nc_latency(self) -> _Latency:
        return _Latency(self.latency_us)

    def utilisation(self, engine: str) -> float:
        """Fraction of one instance's time ``engine`` is busy (0..1)."""
        return self.busy_ns.get(engine, 0.0) / self.instance_ns if self.instance_ns else 0.0

    @property
    def bottleneck(self) -> str:
        return max(ENGINES, key=lambda e: self.busy_ns.get(e, 0.0))

    @property
    def arithmetic_intensity(self) -> float:
        """Matmul FLOPs per DMA byte."""
        return self.flops / self.dma_bytes if self.dma_bytes else math.inf

    @property
    def ridge_point(self) -> float:
        return self.table.peak_matmul_flops_per_ns() / self.table.dma_bytes_per_ns

    @property
    def roofline_fraction(self) -> float:
        """Achieved FLOP rate over what the roofline allows at this arithmetic intensity."""
        if not self.flops or not self.instance_ns:
            return 0.0
        attainable = min(
            self.table.peak_matmul_flops_per_ns(),
            self.arithmetic_intensity * self.table.dma_bytes_per_ns,
        )
        return (self.flops / self.instance_ns) / attainable

    def summary(self) -> str:
        """A text summary of the estimate."""
        lines = [
            f"{self.kernel} on {self.target}: estimated {_fmt_ns(self.latency_ns)}"
            + (
                f" ({self.instances_per_core} instances per core x {_fmt_ns(self.instance_ns)},"
                f" {self.cores} core(s))"
                if self.instances_per_core > 1 or self.cores > 1
                else ""
            ),
            "  engine    busy         util",
        ]
        for e in ENGINES:
            if self.busy_ns.get(e):
                b = self.busy_ns[e]
                lines.append(f"  {e:<8s}  {_fmt_ns(b):>11s}  {100 * self.utilisation(e):5.1f}%")
        bw = self.dma_bytes / self.instance_ns if self.instance_ns else 0.0
        lines.append(
            f"  DMA {self.dma_bytes / 1e6:.3f} MB at {bw:.1f} GB/s "
            f"(peak {self.table.dma_bytes_per_ns:.0f} GB/s) "
            f"over {len(self.dma_queue_bytes)} queue(s)"
        )
        for q in sorted(self.dma_queue_bytes, key=lambda q: int(q.rsplit("q", 1)[1])):
            b = self.dma_queue_bytes[q]
            busy = self.busy_ns.get(q, 0.0)
            lines.append(
                f"    {q:<7s} {b / 1e6:10.3f} MB  {b / self.instance_ns:7.1f} GB/s average, "
                f"{b / busy if busy else 0.0:7.1f} GB/s while transferring"
            )
        bound = "compute" if self.arithmetic_intensity > self.ridge_point else "memory"
        lines.append(
            f"  bottleneck: {self.bottleneck}; arithmetic intensity {self.arithmetic_intensity:.1f}"
            f" FLOP/B (ridge {self.ridge_point:.0f}: {bound}-bound), "
            f"{100 * self.roofline_fraction:.0f}% of roofline"
        )
        total = sum(self.critical_path.values()) or 1.0
        cp = ", ".join(
            f"{k} {100 * v / total:.0f}%"
            for k, v in sorted(self.critical_path.items(), key=lambda kv: -kv[1])
        )
        lines.append(f"  critical path: {cp}")
        lines.append("  top instructions:")
        for t in self.top[:8]:
            where = f"{t.loc.file.rsplit('/', 1)[-1]}:{t.loc.line}" if t.loc else "?"
            lines.append(
                f"    {_fmt_ns(t.ns):>11s}  {t.engine:<7s} {t.name:<24s} x{t.count:<10.0f} {where}"
            )
        if self.doubts:
            lines.append("  least certain:")
            lines.extend(f"    {d}" for d in self.doubts)
        if self.lints:
            lines.append("  lints:")
            lines.extend(f"    {lint}" for lint in self.lints)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _fmt_ns(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.3f} us"
    return f"{ns:.0f} ns"


def _critical_path(s: Schedule) -> dict[str, float]:
    """Time on the chain of binding constraints ending at the last instruction, per track."""
    out: dict[str, float] = {}
    i, seen = s.end_event, set()
    while 0 <= i < len(s.events) and i not in seen:
        seen.add(i)
        ev = s.events[i]
        track = "dma" if ev.track.startswith("dma") else ev.track
        out[track] = out.get(track, 0.0) + ev.dur
        if ev.pred >= 0 and ev.pred < len(s.events):
            p = s.events[ev.pred]
            gap = ev.start - (p.start + p.dur)
            if gap > 0:
                out["wait"] = out.get("wait", 0.0) + gap
        i = ev.pred
    return out


def _depends_on(acc: Access, sym: object) -> bool:
    """Whether the loop ``sym`` may change what ``acc`` reads: its index names the iterator, or
    an offset read at run time (a register, an index tile) does."""
    return bool(acc.indirect) or any(sym in e.base.symbols() for e in acc.index)


def _lints(ir: KernelIR, s: Schedule, t: CostTable, latency: float) -> list[Lint]:
    out: list[Lint] = [
        Lint(
            "runtime-trip-count",
            lp.loc,
            "device loop (nl.fori_loop with a register bound / nl.while_loop): its trip count "
            "is known at run time only, so the estimate counts ONE trip; multiply its cost by "
            "the expected trips",
            0.0,
        )
        for lp in dict.fromkeys(s.runtime_loops)  # once per loop, in program order
    ]
    peak_bw = t.dma_bytes_per_ns
    for site in s.sites.values():
        c = s.costs[id(site.instr)]
        if not site.count:
            continue
        ins = site.instr
        if c.engine == "dma" and 0 < c.bytes_per_partition < SMALL_DMA_BYTES:
            waste = site.ns - site.dma_bytes / peak_bw
            out.append(
                Lint(
                    "small-dma",
                    ins.loc,
                    f"{ins.api or ins.op} moves {c.bytes_per_partition} B per partition "
                    f"(< {SMALL_DMA_BYTES} B): per-transfer overhead dominates; move bigger "
                    "tiles per transfer",
                    waste,
                )
            )
        if c.stride_penalty:
            out.append(
                Lint(
                    "strided-access",
                    ins.loc,
                    f"{ins.api or ins.op} reads with an innermost stride above "
                    f"{t.stride_penalty_bytes} B, which halves SBUF bandwidth",
                    site.ns / 2,
                )
            )
        if c.engine == "tensor" and c.moving_free and c.moving_free < 128:
            ideal = c.flops * site.count / t.peak_matmul_flops_per_ns()
            out.append(
                Lint(
                    "small-matmul",
                    ins.loc,
                    f"matmul moving free size {c.moving_free} < 128: the Tensor engine is "
                    "overhead-bound; use up to 512 columns per matmul",
                    max(0.0, site.ns - ideal),
                )
            )
        if c.engine == "dma" and site.loops and ins.op in ("load", "load_transpose2d", "dma_copy"):
            inner = site.loops[-1]
            src = next((a for a in ins.srcs if isinstance(a, Access)), None)
            if src is not None and inner.trip_count > 1 and not _depends_on(src, inner.sym):
                out.append(
                    Lint(
                        "invariant-load",
                        ins.loc,
                        f"{ins.api or ins.op} loads the same data in each of the {inner.trip_count}"
                        f" iterations of the loop at line {inner.loc.line if inner.loc else '?'}; "
                        "hoist it out of the loop",
                        site.ns * (1 - 1 / inner.trip_count),
                    )
                )
    busiest = max((s.busy.get(e, 0.0) for e in ENGINES), default=0.0)
    if s.latency_ns > 1.5 * busiest and s.latency_ns > 10_000:
        top = max(s.sites.values(), key=lambda x: x.ns, default=None)
        out.append(
            Lint(
                "serial-chain",
                top.instr.loc if top else ir.loc,
                f"the busiest engine works only {100 * busiest / s.latency_ns:.0f}% of the time: "
                "a dependency chain serialises the engines (overlap loads with compute, use more "
                "independent tiles per iteration)",
                s.latency_ns - busiest,
            )
        )
    out.extend(_spill_lints(s, t))
    return sorted(out, key=lambda lint: -lint.cost_ns)


def _spill_lints(s: Schedule, t: CostTable) -> list[Lint]:
    """One lint for the compiler spills the schedule charged (``compiler.insert_spills``)."""
    spills = [x for x in s.sites.values() if x.instr.kind == SPILL and x.count]
    if not spills:
        return []
    worst = max(spills, key=lambda x: x.ns)
    peak = max(int(x.instr.attr("live_bytes")) for x in spills)
    per_run = sum(int(x.instr.attr("bytes_per_partition")) for x in spills)
    name = worst.instr.dst.tensor if worst.instr.dst is not None else "?"
    return [
        Lint(
            "capacity-spill",
            worst.instr.loc,
            f"live SBUF tiles need {peak} B per partition (spilling first at '{name}') but "
            f"{get_target(t.target).sbuf_usable_per_partition} B are usable: the compiler "
            f"saves and reloads {per_run} B per partition each time, "
            f"{sum(x.count for x in spills):.0f} time(s) in all",
            sum(x.ns for x in spills),
        )
    ]


def _doubts(s: Schedule, lowering: Lowering) -> list[Doubt]:
    """Which parts of this estimate rest on rough, fitted or inferred figures."""
    out: list[Doubt] = []
    overhead: dict[str, float] = {}
    for site in s.sites.values():
        c = s.costs[id(site.instr)]
        if c.overhead_ns and site.count:
            overhead[c.engine] = overhead.get(c.engine, 0.0) + c.overhead_ns * site.count
    for engine, ns in sorted(overhead.items(), key=lambda kv: -kv[1]):
        busy = s.busy.get(engine, 0.0)
        if busy and ns > 0.25 * busy:
            why = (
                "per-chunk cost of small DMA chunks, a fitted parameter"
                if engine == "dma"
                else "fixed costs of small instructions: MIN_II, access and matmul overheads"
            )
            out.append(Doubt(f"{100 * ns / busy:.0f}% of {engine} time is overhead", ns, why))
    spill = sum(x.ns for x in s.sites.values() if x.instr.kind == SPILL)
    if spill:
        out.append(Doubt("compiler spills", spill, "bytes over capacity; the allocator may differ"))
    moved = len(lowering.hoisted) + lowering.common_subexpressions
    if moved:
        out.append(
            Doubt(
                f"{moved} instruction(s) hoisted or merged",
                0.0,
                "inferred compiler rules: loop-invariant hoisting, common subexpressions",
            )
        )
    span = max(
        (sum(e.dur for e in s.events if e.repeat and e.track == tr) for tr in s.busy), default=0
    )
    if s.latency_ns and span > 0.5 * s.latency_ns:
        out.append(
            Doubt(
                f"{100 * span / s.latency_ns:.0f}% of the timeline extrapolated from loop periods",
                0.0,
                "iterations past the first few are taken to repeat the last one scheduled",
            )
        )
    return out


def estimate_ir(ir: KernelIR, target: str | None = None) -> Report:
    """Estimate a traced kernel's performance on ``target`` (default: the IR's target), from
    shapes alone."""
    tname = target or ir.target
    table = table_for(get_target(tname).name)
    # one trace per core (current API, LNC=2): the slower core decides
    traces = ir.cores or (ir,)
    lowered = [lower(replace(c, target=table.target, _by_name={}), table) for c in traces]
    s, lowering = max(((schedule(c.ir, table), c) for c in lowered), key=lambda x: x[0].latency_ns)
    ir = lowering.ir
    cores = max(1, ir.grid.num_cores)
    per_core = max(1, math.prod(ir.grid.shape) // cores)
    top = sorted(s.sites.values(), key=lambda x: -x.ns)
    top_list = [
        TopInstr(
            x.instr.api or f"{x.instr.kind}.{x.instr.op}", x.engine, x.instr.loc, x.count, x.ns
        )
        for x in top
        if x.ns > 0
    ][:20]
    return Report(
        ir.name,
        table.target,
        s.latency_ns * per_core,
        s.latency_ns,
        per_core,
        cores,
        dict(s.busy),
        s.dma_queue_bytes,
        s.dma_bytes,
        s.flops,
        _critical_path(s),
        top_list,
        _lints(ir, s, table, s.latency_ns),
        s,
        table,
        lowering,
        _doubts(s, lowering),
    )


__all__ = ["Report", "Lint", "Doubt", "estimate_ir", "SiteStats"]
