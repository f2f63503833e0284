"""A per-core list scheduler over the kernel IR.

Each compute engine and each DMA queue runs its instructions in program order. An instruction
starts when its engine (and any port it shares with another engine on this generation) is free
and the instructions it depends on have finished: read-after-write, write-after-read and
write-after-write on the same memory, and the producers ``NkiInstruction.depends_on`` named
(their latest runs). On-chip memory is tracked per block of a tile (the block
dimensions before the partition dimension) and per allocation: a tile allocated in a loop
rotates through as many buffers as fit (``buffers_for``), so iteration i+n only waits for
iteration i. HBM is tracked per tensor; stores to one HBM tensor are taken to write disjoint
regions. DMA transfers start a fixed latency after their dependencies are met and share the
core's DMA bandwidth (a transfer fills the gaps other queues leave). A compiler spill
(``compiler.insert_spills``) starts only when everything issued before it has finished.

Loops are not unrolled: iterations are scheduled until every rotating buffer has been reused
and the period (how far one iteration advances the schedule) repeats; the remaining
iterations are then added as that period and the last iteration's busy time, each times the
remaining trip count. The period is at least the iteration's time on the shared DMA
bandwidth, so extrapolated transfers never exceed it. Iterations have static shapes, so every
iteration costs the same, and the result equals scheduling every iteration once the pipeline
is in its steady state (tests/cost/test_model.py checks this)."""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass, field

from nki import dtypes
from nki.errors import SrcLoc
from nki.ir import Access, Alloc, Instr, KernelIR, Loop, PidSym, Sym, TensorDecl
from nki.targets import get_target

from .model import InstrCost, cost_of
from .table import SPILL, CostTable

SIMULATED_ITERATIONS = 3  # iterations scheduled per loop at least before extrapolating
MAX_SIMULATED_ITERATIONS = 24  # ... and at most, when the period has not settled by then
MIN_CAPPED_ITERATIONS = 6  # ... however deep the loop (fewer leave pipelines filling)
MAX_BUFFERS = 8  # a tile allocated in a loop rotates through at most this many buffers
MAX_EVENTS = 50_000  # slices kept for the timeline


@dataclass
class Event:
    """One slice of the timeline (``repeat`` > 0: an extrapolated block of iterations)."""

    track: str
    name: str
    start: float
    dur: float
    loc: SrcLoc | None
    pred: int = -1  # index of the event that bound its start (critical path)
    repeat: int = 0
    busy: float = 0.0


@dataclass
class SiteStats:
    """Totals of one static instruction over the whole run."""

    instr: Instr
    engine: str
    count: float = 0.0
    ns: float = 0.0
    dma_bytes: float = 0.0
    loops: tuple[Loop, ...] = ()


@dataclass
class Schedule:
    """The result of scheduling one kernel instance on one core."""

    latency_ns: float
    busy: dict[str, float]
    dma_queue_bytes: dict[str, float]
    flops: float
    dma_bytes: float
    sites: dict[int, SiteStats]
    events: list[Event]
    end_event: int
    costs: dict[int, InstrCost] = field(default_factory=dict)
    runtime_loops: list[Loop] = field(default_factory=list)  # estimated as one trip each


_NONE = (-1.0, -1)  # (time, event) of "never"


class _State:
    def __init__(self, ir: KernelIR, table: CostTable) -> None:
        self.ir = ir
        self.t = table
        self.free: dict[str, tuple[float, int]] = {}
        self.busy: dict[str, float] = defaultdict(float)
        self.qbytes: dict[str, float] = defaultdict(float)
        # memory: (base, generation) -> block -> (time, event); block None = whole tensor
        self.writes: dict[tuple, dict] = defaultdict(dict)
        self.reads: dict[tuple, dict] = defaultdict(dict)
        self.gen: dict[str, int] = defaultdict(int)
        self.nbuf: dict[str, int] = {}
        self.bw: list[tuple[float, float, int]] = []  # transfers on the DMA bandwidth, sorted
        # uses of each shared port, sorted: (start, end, event)
        self.port_use: dict[str, list[tuple[float, float, int]]] = {
            port: [] for port, _, _ in table.shared_ports
        }
        self.block_src: dict[tuple, tuple[Access, dict]] = {}  # block key -> access, iterators
        self.sites: dict[int, SiteStats] = {}
        self.costs: dict[int, InstrCost] = {}
        self.queue_of: dict[int, str] = {}
        self.events: list[Event] = []
        self.runtime_loops: list[Loop] = []  # device loops estimated as one trip
        self.flops = 0.0
        self.dma_bytes = 0.0
        self.last_stationary: object = None
        self.end = _NONE
        self.touched: set[tuple] = set()  # state keys changed (for extrapolation)
        # a labelled producer's last end and last start (``NkiInstruction.depends_on``'s edges:
        # consumers whose ``after`` names the label start after its end; those whose
        # ``issued_after`` does, schedule-only edges, no earlier than its start)
        self.labels: dict[int, tuple[float, int]] = {}
        self.issued: dict[int, tuple[float, int]] = {}

    # ---- memory keys -------------------------------------------------------------------------
    def _key(self, acc: Access, env: dict[Sym, int]) -> tuple[tuple, object]:
        d = self.ir.tensor(acc.tensor)
        base = d.alias_of or d.name
        if not d.on_chip:
            return (base, 0), None
        bd = self.ir.tensor(base)
        block = None
        if bd.par_dim and len(acc.index) == len(bd.shape):
            idx = acc.index[: bd.par_dim]
            if all(not any(e.coeffs) for e in idx):
                block = tuple(e.base.evaluate(env) for e in idx)
        return (base, self.gen[base] % self._buffers(base)), block

    def _buffers(self, base: str) -> int:
        """Buffers a tile allocated in a loop rotates through: as many copies as fit in half of
        SBUF (all of PSUM), 1 to MAX_BUFFERS."""
        n = self.nbuf.get(base)
        if n is None:
            n = self.nbuf[base] = buffers_for(self.ir.tensor(base), self.ir.target)
        return n

    @staticmethod
    def _ready(table: dict, block: object) -> tuple[float, int]:
        if not table:
            return _NONE
        if block is None:
            return max(table.values())
        return max(table.get(block, _NONE), table.get(None, _NONE))

    # ---- one instruction -----------------------------------------------------------------------
    def instr(self, ins: Instr, env: dict[Sym, int], loops: tuple[Loop, ...]) -> None:
        c = self.costs.get(id(ins))
        if c is None:
            c = self.costs[id(ins)] = cost_of(ins, self.ir, self.t, loops)
            self.sites[id(ins)] = SiteStats(ins, c.engine, loops=loops)
        if c.engine == "none":
            return
        reads, writes = ins.reads(), ins.writes()
        hbm_write = {a.tensor for a in writes if not self.ir.tensor(a.tensor).on_chip}
        dep = _NONE
        rkeys = [self._key(a, env) for a in reads]
        wkeys = [self._key(a, env) for a in writes]
        for k, b in rkeys:  # read after write
            dep = max(dep, self._ready(self.writes[k], b))
        for (k, b), a in zip(wkeys, writes):
            dep = max(dep, self._ready(self.reads[k], b))  # write after read
            if a.tensor not in hbm_write:  # stores to an HBM tensor write disjoint regions
                dep = max(dep, self._ready(self.writes[k], b))  # write after write
        if ins.kind == SPILL:  # compiler spill code runs in program order: after all before it
            dep = max(dep, self.end)
        for k in ins.attr("after", ()):  # explicit edges: after the producers' last runs
            dep = max(dep, self.labels.get(k, _NONE))
        for k in ins.attr("issued_after", ()):  # schedule-only: not before they start
            dep = max(dep, self.issued.get(k, _NONE))
        dur = c.ns
        if c.engine == "dma":
            q = self.queue_of.setdefault(id(ins), f"dma.q{len(self.queue_of) % self.t.dma_queues}")
            tracks = [q, "dma.bw"]
            dep = (max(dep[0], 0.0) + self.t.dma_fixed_latency_ns, dep[1])
        else:
            tracks = [c.engine]
            ports = [p for p, engines, buf in self.t.shared_ports if c.engine in engines and (
                buf in c.buffers)]  # fmt: skip
            if c.stationary is not None:
                x = ins.srcs[0]
                assert isinstance(x, Access)
                offsets = tuple(e.base.evaluate(env) for e in x.index)
                st = (c.stationary, self._key(x, env), offsets)
                if st != self.last_stationary:
                    dur = max(dur, c.stationary_ns)
                self.last_stationary = st
        start = dep
        for tr in tracks:
            if tr != "dma.bw":
                start = max(start, self.free.get(tr, _NONE))
        t0 = max(start[0], 0.0)
        end = t0 + dur
        pieces: list = []
        if c.engine == "dma":  # the shared bandwidth: fill the gaps from t0 on
            t0, end, pieces, prev = self._bw_fill(t0, dur)
            if prev >= 0 and t0 > start[0]:
                start = (t0, prev)
        elif ports:  # a shared port: the first gap it leaves that fits, not after its last use
            t0, prev = self._port_slot(ports, t0, dur)
            end = t0 + dur
            if prev >= 0 and t0 > start[0]:
                start = (t0, prev)
            tracks += ports
        ev = self._event(tracks[0], ins, t0, end - t0, start[1])
        for a, b in pieces:
            bisect.insort(self.bw, (a, b, ev))
        for port in tracks[1:] if c.engine != "dma" else ():
            bisect.insort(self.port_use[port], (t0, end, ev))
        for tr in tracks:
            shared = tr == "dma.bw" or tr in self.port_use  # (used out of program order)
            self.free[tr] = max(self.free.get(tr, _NONE), (end, ev)) if shared else (end, ev)
            self.touched.add(("free", tr))
        self.busy[tracks[0]] += dur
        if c.engine == "dma":
            self.busy["dma"] += dur
            self.qbytes[tracks[0]] += c.dma_bytes
            self.dma_bytes += c.dma_bytes
        self.flops += c.flops
        for (k, b), a in zip(rkeys, reads):
            tab = self.reads[k]
            tab[b] = max(tab.get(b, _NONE), (end, ev))
            self.touched.add(("reads", k, b))
            if b is not None:
                self.block_src[("reads", k, b)] = (a, env)
        for (k, b), a in zip(wkeys, writes):
            self.writes[k][b] = (end, ev)
            self.touched.add(("writes", k, b))
            if b is not None:
                self.block_src[("writes", k, b)] = (a, env)
        label = ins.attr("dep_label")
        if label is not None:
            self.labels[label] = (end, ev)
            self.issued[label] = (t0, ev)
            self.touched.add(("label", label))
        s = self.sites[id(ins)]
        s.count += 1
        s.ns += dur
        s.dma_bytes += c.dma_bytes
        self.end = max(self.end, (end, ev))

    def _bw_fill(self, t0: float, dur: float) -> tuple[float, float, list, int]:
        """Place a transfer of ``dur`` on the core's DMA bandwidth from ``t0`` on, filling the
        gaps other queues' transfers left (queues share the bandwidth): its start, end, the
        pieces it occupies and the transfer that delayed its start (or -1)."""
        bw = self.bw
        j = bisect.bisect_left(bw, (t0, -math.inf, -1))
        t, prev = t0, -1
        if j > 0 and bw[j - 1][1] > t:
            t, prev = bw[j - 1][1], bw[j - 1][2]
        start, left, pieces = None, dur, []
        while left > 1e-9:
            while j < len(bw) and bw[j][1] <= t:
                j += 1
            if j < len(bw) and bw[j][0] <= t:  # inside another transfer: skip past it
                t = bw[j][1]
                if start is None:
                    prev = bw[j][2]
                j += 1
                continue
            take = min(left, (bw[j][0] if j < len(bw) else math.inf) - t)
            pieces.append((t, t + take))
            start = t if start is None else start
            left -= take
            t += take
        return (t0 if start is None else start), t, pieces, prev

    def _port_slot(self, ports: list[str], t0: float, dur: float) -> tuple[float, int]:
        """The earliest start from ``t0`` on at which ``dur`` fits on every one of ``ports``
        (trn1's SBUF / PSUM ports that two engines share: one engine at a time, in any order),
        and the use that delayed it (or -1)."""
        t, prev, moved = t0, -1, True
        while moved:
            moved = False
            for port in ports:
                uses = self.port_use[port]
                j = bisect.bisect_left(uses, (t + dur, -math.inf, -1))  # (those starting before)
                while j > 0 and uses[j - 1][1] > t + 1e-9:  # (one ending after t: in the way)
                    t, prev, moved = uses[j - 1][1], uses[j - 1][2], True
                    j = bisect.bisect_left(uses, (t + dur, -math.inf, -1))
        return t, prev

    def _event(self, track: str, ins: Instr, t0: float, dur: float, pred: int) -> int:
        if len(self.events) >= MAX_EVENTS:
            return pred
        self.events.append(Event(track, ins.api or f"{ins.kind}.{ins.op}", t0, dur, ins.loc, pred))
        return len(self.events) - 1

    # ---- loops ---------------------------------------------------------------------------------
    def nodes(self, body: tuple, env: dict[Sym, int], loops: tuple[Loop, ...]) -> None:
        for n in body:
            if isinstance(n, Instr):
                self.instr(n, env, loops)
            elif isinstance(n, Alloc):
                d = self.ir.tensor(n.tensor)
                self.gen[d.alias_of or d.name] += 1
                self.touched.add(("gen", d.alias_of or d.name))
            elif isinstance(n, Loop):
                self.loop(n, env, loops + (n,))

    def _block_varies(self, acc: Access, sym: Sym) -> bool:
        d = self.ir.tensor(self.ir.storage_of(acc.tensor))
        return any(sym in e.base.symbols() for e in acc.index[: d.par_dim])

    def _snapshot(self) -> dict:
        return {
            "free": dict(self.free),
            "busy": dict(self.busy),
            "qbytes": dict(self.qbytes),
            "gen": dict(self.gen),
            "sites": {k: (s.count, s.ns, s.dma_bytes) for k, s in self.sites.items()},
            "flops": self.flops,
            "dma_bytes": self.dma_bytes,
        }

    def _min_iterations(self, lp: Loop) -> int:
        """Iterations to schedule before extrapolating: past the point where every rotating
        buffer allocated in the loop has been reused (the first WAR stall on it). Tiles of
        inner loops rotate with the inner loop's iterations, which already reuse them."""
        need = SIMULATED_ITERATIONS
        for node in lp.body:
            if isinstance(node, Alloc):
                d = self.ir.tensor(node.tensor)
                need = max(need, self._buffers(d.alias_of or d.name) + 2)
        return need

    def _period(self, snap: dict) -> tuple[float, dict[str, float], dict[str, float]]:
        """How far the last iteration advanced the schedule, per track and overall."""
        d_free = {
            tr: v[0] - snap["free"].get(tr, (0.0, -1))[0]
            for tr, v in self.free.items()
            if ("free", tr) in self.touched
        }
        d_busy = {tr: b - snap["busy"].get(tr, 0.0) for tr, b in self.busy.items()}
        # "dma" is the iteration's time on the core's shared DMA bandwidth: an iteration
        # cannot repeat faster than its transfers fit through it
        period = max([0.0, *d_free.values(), *d_busy.values()])
        return period, d_free, d_busy

    def loop(self, lp: Loop, env: dict[Sym, int], loops: tuple[Loop, ...]) -> None:
        values = lp.static_trips
        if values is None:  # a device loop: its trips are known at run time only
            self.runtime_loops.append(lp)
            values = range(1)  # estimated as one trip (the report says so)
        n = len(values)
        # deeper loops get fewer iterations (their cost multiplies with every enclosing loop's
        # that repeats)
        depth = sum(o.static_trips is None or len(o.static_trips) > 1 for o in loops[:-1])
        cap = max(MIN_CAPPED_ITERATIONS, MAX_SIMULATED_ITERATIONS >> depth)
        need = min(n, self._min_iterations(lp), cap)
        outer, seen = self.touched, set()
        last = None
        for i in range(n):
            snap = self._snapshot() if i + 1 >= need - 1 else {}
            self.touched = set()
            self.nodes(lp.body, {**env, lp.sym: values[i]}, loops)
            seen |= self.touched
            if i + 1 < need or i + 1 == n:
                continue
            period = self._period(snap)[0]
            steady = last is not None and abs(period - last) <= 1e-6 * max(period, 1.0)
            if steady or i + 1 >= cap:
                self._extrapolate(snap, values, i + 1, lp, seen)
                break
            last = period
        self.touched = outer | seen

    def _extrapolate(self, snap: dict, values: range, sim: int, lp: Loop, seen: set) -> None:
        """Advance the state by the remaining iterations, each like the last scheduled one."""
        rest = len(values) - sim
        period, d_free, d_busy = self._period(snap)
        shift = rest * period
        bottleneck = max(d_busy, key=lambda k: d_busy[k], default=None)
        repeat_ev: dict[str, int] = {}
        for tr in d_free:
            t_end, ev = self.free[tr]
            if len(self.events) < MAX_EVENTS:
                self.events.append(
                    Event(
                        tr,
                        f"x{rest} more iterations",
                        t_end,
                        shift,
                        lp.loc,
                        ev,
                        rest,
                        rest * d_busy.get(tr, 0.0),
                    )
                )
                repeat_ev[tr] = len(self.events) - 1
            self.free[tr] = (t_end + shift, repeat_ev.get(tr, ev))
            if tr == "dma.bw":  # the extrapolated iterations' transfers fill that span
                self.bw.append((t_end, t_end + shift, repeat_ev.get(tr, ev)))
            elif tr in self.port_use:  # (and their uses of a shared port)
                bisect.insort(self.port_use[tr], (t_end, t_end + shift, repeat_ev.get(tr, ev)))
        link = repeat_ev.get(bottleneck, -1) if bottleneck else -1
        for tr, b in d_busy.items():
            self.busy[tr] += rest * b
        for q, b in self.qbytes.items():
            self.qbytes[q] += rest * (b - snap["qbytes"].get(q, 0.0))
        for k, g in list(self.gen.items()):
            self.gen[k] += rest * (g - snap["gen"].get(k, 0))
        # a block chosen by this loop's iterator: iteration j's block is ready j periods later
        per_iter: set[tuple] = set()
        for key in self.touched:
            src = self.block_src.get(key)
            if src is None or not self._block_varies(src[0], lp.sym):
                continue
            per_iter.add(key[:2])
            tab = (self.reads if key[0] == "reads" else self.writes)[key[1]]
            t, ev = tab[key[2]]
            for j in range(1, rest + 1):
                env = {**src[1], lp.sym: values[sim - 1 + j]}
                _, b = self._key(src[0], env)
                tab[b] = (t + j * period, link if link >= 0 else ev)
        # every other buffer (all rotations) the loop used moves with the loop
        for key in seen:
            if key[0] == "label":
                for tab in (self.labels, self.issued):
                    t, ev = tab[key[1]]
                    tab[key[1]] = (t + shift, link if link >= 0 else ev)
            if key[0] not in ("reads", "writes") or key[:2] in per_iter:
                continue
            tab = (self.reads if key[0] == "reads" else self.writes)[key[1]]
            t, ev = tab[key[2]]
            tab[key[2]] = (t + shift, link if link >= 0 else ev)
        for k, s in self.sites.items():
            c0, ns0, b0 = snap["sites"].get(k, (0.0, 0.0, 0.0))
            s.count += rest * (s.count - c0)
            s.ns += rest * (s.ns - ns0)
            s.dma_bytes += rest * (s.dma_bytes - b0)
        self.flops += rest * (self.flops - snap["flops"])
        self.dma_bytes += rest * (self.dma_bytes - snap["dma_bytes"])
        end_t, end_ev = self.end
        self.end = (end_t + shift, link if link >= 0 else end_ev)


def _walk(body: tuple) -> list:
    out = []
    for n in body:
        out.append(n)
        if isinstance(n, Loop):
            out.extend(_walk(n.body))
    return out


def buffers_for(d: TensorDecl, target: str) -> int:
    """How many rotating copies of an on-chip tile the compiler can keep in flight."""
    t = get_target(target)
    per_part = math.prod(d.shape) // max(1, d.shape[d.par_dim]) * dtypes.itemsize(d.dtype)
    room = t.psum_bytes_per_partition if d.buffer == "psum" else t.sbuf_usable_per_partition // 2
    return max(1, min(MAX_BUFFERS, room // max(1, per_part)))


def schedule(ir: KernelIR, table: CostTable) -> Schedule:
    """Schedule one instance of ``ir`` (program ids at 0) on one NeuronCore."""
    st = _State(ir, table)
    env: dict[Sym, int] = {PidSym(a): 0 for a in range(len(ir.grid.dims))}
    st.nodes(ir.body, env, ())
    busy = dict(st.busy)
    return Schedule(
        max(st.end[0], 0.0),
        busy,
        dict(st.qbytes),
        st.flops,
        st.dma_bytes,
        st.sites,
        st.events,
        st.end[1],
        st.costs,
        st.runtime_loops,
    )
