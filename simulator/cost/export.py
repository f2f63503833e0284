"""Timeline exports of an estimate: Chrome / Perfetto trace JSON (open in ui.perfetto.dev or
chrome://tracing) and, with matplotlib installed (``pip install nki-sim[plot]``), a PNG of the
timeline and per-engine utilisation."""

from __future__ import annotations

import json
import os
from typing import Any

from .report import ENGINES, Report

_HIDDEN = ("dma.bw", "sbuf_port", "psum_port")  # shared resources, not instruction streams


def _tracks(report: Report) -> list[str]:
    used = {e.track for e in report.schedule.events if e.track not in _HIDDEN}
    order = [e for e in ENGINES if e in used]
    return order + sorted(t for t in used if t not in order)


def _where(loc: Any) -> str:
    return f"{os.path.basename(loc.file)}:{loc.line}" if loc is not None else "?"


def trace_events(report: Report) -> dict[str, Any]:
    """The estimate as a Chrome trace: one thread per engine / DMA queue, one slice per
    instruction (named with the call and the kernel's file:line); extrapolated loop iterations
    are one slice each, named with their count."""
    tracks = _tracks(report)
    tid = {t: i + 1 for i, t in enumerate(tracks)}
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": f"{report.kernel}"}}
    ]
    for t in tracks:
        events.append(
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": tid[t], "args": {"name": t}}
        )
    for e in report.schedule.events:
        if e.track not in tid:
            continue
        args: dict[str, Any] = {"where": _where(e.loc)}
        if e.repeat:
            args["iterations"] = e.repeat
            args["busy_us"] = e.busy / 1e3
        events.append(
            {
                "ph": "X",
                "name": f"{e.name} @ {_where(e.loc)}",
                "cat": e.track,
                "pid": 1,
                "tid": tid[e.track],
                "ts": e.start / 1e3,  # microseconds
                "dur": max(e.dur, 1e-3) / 1e3,
                "args": args,
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_trace(report: Report, path: str) -> str:
    """Write the Chrome / Perfetto trace JSON of ``report`` to ``path``; returns the path."""
    with open(path, "w") as f:
        json.dump(trace_events(report), f)
    return path


def write_png(report: Report, path: str, max_slices: int = 5000) -> str:
    """Write a PNG with the timeline (one row per engine / queue) and a per-engine utilisation
    bar chart. Needs matplotlib (the ``plot`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("the PNG timeline needs matplotlib: pip install 'nki-sim[plot]'") from e
    tracks = _tracks(report)
    fig, (ax, bx) = plt.subplots(
        1, 2, figsize=(11, 0.45 * len(tracks) + 1.6), gridspec_kw={"width_ratios": [4, 1]}
    )
    colors = {"tensor": "tab:red", "vector": "tab:blue", "scalar": "tab:green"}
    events = report.schedule.events[:max_slices]
    for row, t in enumerate(tracks):
        color = colors.get(t, "tab:purple" if t == "gpsimd" else "tab:orange")
        for repeat, alpha in ((False, 1.0), (True, 0.35)):  # extrapolated iterations: lighter
            spans = [
                (e.start / 1e3, e.dur / 1e3)
                for e in events
                if e.track == t and bool(e.repeat) == repeat
            ]
            ax.broken_barh(spans, (row - 0.4, 0.8), facecolors=color, alpha=alpha)
    ax.set_yticks(range(len(tracks)), tracks)
    ax.invert_yaxis()
    ax.set_xlabel("time (us)")
    ax.set_title(f"{report.kernel} on {report.target}: {report.latency_us:.1f} us estimated")
    engines = [e for e in ENGINES if report.busy_ns.get(e)]
    bx.barh(engines, [100 * report.utilisation(e) for e in engines], color="gray")
    bx.set_xlim(0, 100)
    bx.invert_yaxis()
    bx.set_xlabel("busy %")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
