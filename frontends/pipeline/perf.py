"""The pipeline's performance trace: every stage call of every device (forward, loss,
backward, optimizer step, per microbatch) as a Perfetto / Chrome trace JSON.

Two timelines: "estimated device time" schedules the calls by the cost model's estimate of
each NeuronCore call (CPU devices: their measured time), each call starting when its device
is free and its inputs exist (the previous device's forward of that microbatch, the next
device's backward of it), which shows the pipeline's fill and drain; "host (simulation)
time" shows when the simulator actually ran them."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from .config import CONFIG
from .devices import DEVICES, Device, Event

__all__ = ["schedule", "write_trace"]


def _duration_us(e: Event) -> float:
    return e.device_us if e.device_us is not None else e.seconds * 1e6


def schedule(devices: list[Device]) -> list[tuple[Event, float]]:
    """Each call with its start (us) on the estimated-device-time timeline."""
    done: dict[tuple[int, str, int], float] = {}
    free = [0.0] * len(devices)
    cursor = [0] * len(devices)
    events = [d.events for d in devices]
    out: list[tuple[Event, float]] = []
    progress = True
    while progress:  # place the calls whose dependencies are placed, device by device
        progress = False
        for i, evs in enumerate(events):
            while cursor[i] < len(evs):
                e = evs[cursor[i]]
                deps = []
                if e.kind == "fwd" and i > 0:
                    deps.append((i - 1, "fwd", e.microbatch))
                if e.kind == "bwd" and i + 1 < len(devices):
                    deps.append((i + 1, "bwd", e.microbatch))
                if any(d not in done for d in deps):
                    break
                start = max([free[i], *(done[d] for d in deps)])
                end = start + _duration_us(e)
                done[(i, e.kind, e.microbatch)] = end
                free[i] = end
                out.append((e, start))
                cursor[i] += 1
                progress = True
    return out


def trace_events(devices: list[Device]) -> list[dict[str, Any]]:
    t0 = min((e.start for d in devices for e in d.events), default=0.0)
    evs: list[dict[str, Any]] = []
    for pid, label in ((0, "estimated device time (cost model)"), (1, "host (simulation) time")):
        evs.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": label}})
        for i, d in enumerate(devices):
            evs.append(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": pid,
                    "tid": i,
                    "args": {"name": f"{d.name} ({d.kind})"},
                }
            )
    for e, start in schedule(devices):
        name = f"{e.kind} mb{e.microbatch}" if e.microbatch >= 0 else e.kind
        args = {
            "host_ms": round(e.seconds * 1e3, 3),
            "estimated_device_us": None if e.device_us is None else round(e.device_us, 3),
        }
        evs.append(
            {
                "ph": "X",
                "name": name,
                "pid": 0,
                "tid": e.device,
                "ts": start,
                "dur": _duration_us(e),
                "args": args,
            }
        )
        evs.append(
            {
                "ph": "X",
                "name": name,
                "pid": 1,
                "tid": e.device,
                "ts": (e.start - t0) * 1e6,
                "dur": e.seconds * 1e6,
                "args": args,
            }
        )
    return evs


def write_trace(path: str | os.PathLike, devices: list[Device] | None = None) -> str:
    """Write the trace of every call so far (default: the current devices); open it in
    https://ui.perfetto.dev. Returns the path."""
    devs = list(DEVICES) if devices is None else devices
    with open(path, "w") as fh:
        json.dump({"traceEvents": trace_events(devs), "displayTimeUnit": "ms"}, fh)
    return os.fspath(path)


def write_if_asked(devices: list[Device], explicit: bool) -> str | None:
    """After a run with ``_perf_trace=True`` or ``performance_trace`` set: write the trace to
    ``backend_output_dir`` (default: the temporary directory) and print where."""
    if not (explicit or CONFIG.performance_trace):
        return None
    out = CONFIG.backend_output_dir or tempfile.gettempdir()
    os.makedirs(out, exist_ok=True)
    path = write_trace(os.path.join(out, "pipeline_perf_trace.json"), devices)
    print(f"pipeline performance trace: {path}")
    return path
