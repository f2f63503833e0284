"""What the ``"nki"`` torch.compile backend did with each compiled graph: for every ATen op, how
many calls ran as NKI kernels (and which kernels, with their counts), on the CPU (and why) or
as views; per kernel the launches, the host time spent simulating them and the cost model's
estimated device time; per graph its inputs (symbolic sizes show a dynamic graph)."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["GraphReport", "OpStats", "reports"]

# launches whose device-time estimate may wait for a reader: beyond this many, they are
# estimated (a report nobody reads keeps a bounded list)
PENDING_LAUNCHES = 4096

# one launch's estimated device microseconds: a number, None (no estimate) or a function
# computing one of those
DeviceUs = float | None | Callable[[], float | None]


@dataclass
class OpStats:
    """What happened to the calls of one ATen op of a graph that share a status and reason.

    ``status``: ``"nki"`` (ran as kernels), ``"cpu"`` (ran eagerly; ``reason`` says why) or
    ``"view"`` (metadata only, or an allocation without values). For ``"nki"`` rows,
    ``reason`` records a user kernel that refused or failed before the built-in kernel ran.
    ``kernels`` counts the launches of each kernel over all these calls."""

    op: str
    status: str
    reason: str = ""
    kernels: Counter = field(default_factory=Counter)
    count: int = 0
    seconds: float = 0.0


@dataclass
class GraphReport:
    """Per compiled graph: for every ATen op, whether it ran as NKI kernels (which, how often,
    simulated seconds) or on the CPU (and why: ``no kernel``, ``guard failed: ...``, a user
    kernel's refusal or failure), with counts."""

    name: str
    inputs: str = ""
    rank: int | None = None
    ops: dict[tuple[str, str, str], OpStats] = field(default_factory=dict)
    kernel_seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    kernel_calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    runs: int = 0
    # estimated device time (nki.estimate, the cost model), summed over launches in launch
    # order (read through kernel_device_us), and the launches not summed yet
    _device_sums: dict[str, float] = field(
        default_factory=lambda: defaultdict(float), repr=False, compare=False
    )
    _device_pending: list[tuple[str, DeviceUs]] = field(
        default_factory=list, repr=False, compare=False
    )
    _device_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def kernel_device_us(self) -> dict[str, float]:
        """Per kernel, the cost model's estimated device microseconds summed over its launches
        (kernels the cost model cannot estimate are left out)."""
        self._settle()
        return self._device_sums

    def add_device_us(self, name: str, us: DeviceUs) -> None:
        """Count one launch of kernel ``name`` into :attr:`kernel_device_us`. ``us`` may be a
        function computing the estimate: it runs when the sums are read (or when
        :data:`PENDING_LAUNCHES` launches wait), so a run whose report is never read does not
        pay for the cost model."""
        if us is None:
            return
        with self._device_lock:
            if not callable(us) and not self._device_pending:
                self._device_sums[name] += us
                return
            self._device_pending.append((name, us))
            full = len(self._device_pending) >= PENDING_LAUNCHES
        if full:
            self._settle()

    def _settle(self) -> None:
        """Sum the pending launches, estimating those that wait for it."""
        with self._device_lock:  # (one reader estimates; the others wait for its sums)
            for name, us in self._device_pending:
                got = us() if callable(us) else us
                if got is not None:
                    self._device_sums[name] += got
            self._device_pending.clear()

    def record(
        self,
        op: str,
        status: str,
        kernels: list[str] | tuple = (),
        reason: str = "",
        s: float = 0.0,
        count: int = 1,
    ) -> None:
        """Count ``count`` calls of ``op`` with this status and reason, each of which launched
        ``kernels``, taking ``s`` seconds in all."""
        key = (op, status, reason)
        st = self.ops.get(key)
        if st is None:
            st = self.ops[key] = OpStats(op, status, reason)
        counted = st.kernels
        for k in kernels:  # (Counter.update's Mapping check costs more than the counting)
            counted[k] += count
        st.count += count
        st.seconds += s

    def ran_as_nki(self, op: str) -> bool:
        """True if every call of ``op`` (``"aten::mm"``) in this graph ran as NKI kernels."""
        sts = [s for s in self.ops.values() if s.op == op]
        return bool(sts) and all(s.status == "nki" for s in sts)

    @property
    def nki_ops(self) -> set[str]:
        return {s.op for s in self.ops.values() if s.status == "nki"}

    @property
    def fallbacks(self) -> dict[str, str]:
        """op -> reason, for ops that ran on the CPU."""
        return {s.op: s.reason for s in self.ops.values() if s.status == "cpu"}

    def kernels_of(self, op: str) -> dict[str, int]:
        """Every kernel ``op`` launched in this graph, with its launch count."""
        out: Counter = Counter()
        for s in self.ops.values():
            if s.op == op:
                out.update(s.kernels)
        return dict(out)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for s in self.ops.values():
            out[s.status] += s.count
        return dict(out)

    @property
    def coverage(self) -> float:
        """The fraction of op calls (views excluded) that ran as NKI kernels."""
        c = self.counts()
        done = c.get("nki", 0) + c.get("cpu", 0)
        return c.get("nki", 0) / done if done else 1.0

    def __str__(self) -> str:
        c = self.counts()
        who = f" rank {self.rank}" if self.rank is not None else ""
        lines = [
            f"nki backend report{who}: {self.name} ({self.runs} run(s)): "
            f"{c.get('nki', 0)} op call(s) as NKI kernels, {c.get('cpu', 0)} on the CPU, "
            f"{c.get('view', 0)} views ({self.coverage:.1%} on kernels)",
        ]
        if self.inputs:
            lines.append(f"  inputs: {self.inputs}")
        rows = sorted(self.ops.values(), key=lambda s: (s.status, s.op))
        width = max((len(s.op) for s in rows), default=0)
        for s in rows:
            ks = ", ".join(f"{k} x{n}" for k, n in sorted(s.kernels.items()))
            what = {"nki": ks, "cpu": s.reason, "view": ""}[s.status]
            if s.status == "nki" and s.reason:
                what += f" ({s.reason})"
            t = f"{s.seconds * 1e3:8.1f} ms  " if s.status == "nki" else " " * 13
            lines.append(f"  {s.status:4s} {s.op:{width}s} x{s.count:<4d} {t}{what}".rstrip())
        for k in sorted(self.kernel_seconds):
            dev = self.kernel_device_us.get(k)
            est = f", {dev:.1f} us estimated on device" if dev is not None else ""
            lines.append(
                f"  kernel {k}: {self.kernel_calls[k]} launch(es), "
                f"{self.kernel_seconds[k] * 1e3:.1f} ms simulated{est}"
            )
        return "\n".join(lines)


REPORTS: list[GraphReport] = []


def reports() -> list[GraphReport]:
    """The reports of every graph compiled by the backend in this process (oldest first)."""
    return list(REPORTS)
