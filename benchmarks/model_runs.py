"""Model workloads of ``benchmarks/run.py``: ``torch.compile(backend="nki")`` against eager torch
on a tiny Llama (hidden 128, 2 layers, batch 2, seq 32: steady forward, first call, greedy
``generate()`` of 8 tokens, a training step) and a small CNN's forward, with the targets of
issue 24; and the per-launch overhead of an already-traced kernel called from the torch
backend (the simulator's share of a model run that is not math).

Each figure is the median of ``repeat`` calls (at least ``MODEL_REPEAT``) after a warm-up
(graphs compiled, kernels traced), in wall-clock time and in CPU time of this process (steadier
on a machine shared with other jobs). The compiled and the eager calls alternate, so a machine
whose speed drifts during the run slows both sides alike. A model row also says how much of a
compiled call ran inside kernel launches (the mean over its calls, from the graph reports'
``kernel_seconds``); the rest is the backend's glue between launches, the torch.compile
wrappers (guards, AOT) and the model's own Python. Run alone:
``python benchmarks/model_runs.py [--repeat 5]``."""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import frontends.torch  # noqa: E402,F401  (registers the "nki" backend)
from frontends.torch_backend import reports  # noqa: E402
from frontends.torch_tensors import launch as torch_launch  # noqa: E402
from nki.jit import Launch  # noqa: E402
from nki.kernels import BINARY_KERNELS, matmul_kernel  # noqa: E402

# (workload, target ratio to eager, or for the first call: seconds)
TARGETS = {"forward": 20.0, "first call": 2.0, "generate 8 tokens": 5.0, "training step": 3.0,
           "cnn forward": 20.0}  # fmt: skip


# the fewest calls a model row's medians are taken over (its calls take milliseconds)
MODEL_REPEAT = 15


def _median(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(median wall seconds, median CPU seconds) of ``repeat`` calls."""
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def _launch_seconds() -> float:
    """The seconds every graph of the torch backend has spent in kernel launches so far."""
    return sum(sum(r.kernel_seconds.values()) for r in reports())


def _row(name: str, nki: Callable[[], object], eager: Callable[[], object], repeat: int) -> dict:
    """A workload's row: ``nki`` (the compiled call) and ``eager`` timed alternately, ``repeat``
    times each (at least ``MODEL_REPEAT``), with the compiled calls' mean launch seconds."""
    n = max(repeat, MODEL_REPEAT)
    times: dict[str, list[tuple[float, float]]] = {"nki": [], "eager": []}
    launched = 0.0
    for _ in range(n):
        for side, fn in (("nki", nki), ("eager", eager)):
            before = _launch_seconds() if side == "nki" else 0.0
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            times[side].append((time.perf_counter() - t0, time.process_time() - c0))
            if side == "nki":
                launched += _launch_seconds() - before
    (nw, nc), (ew, ec) = ([statistics.median(t[i] for t in times[s]) for i in (0, 1)]
                          for s in ("nki", "eager"))  # fmt: skip
    return {"workload": name, "nki_s": nw, "nki_cpu_s": nc, "eager_s": ew, "eager_cpu_s": ec,
            "ratio": nw / ew, "ratio_cpu": nc / ec, "target": TARGETS[name],
            "launch_s": launched / n}  # fmt: skip


def _llama() -> nn.Module:
    import transformers as T

    cfg = T.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=128)  # fmt: skip
    return T.LlamaForCausalLM(cfg)


def _cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4 * 4, 10),
    )  # fmt: skip


def llama_rows(repeat: int) -> list[dict]:
    torch.manual_seed(0)
    model = _llama().eval()
    eager = copy.deepcopy(model)
    x = torch.randint(0, 256, (2, 32))
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="nki")
    rows = []
    with torch.no_grad():
        t0, c0 = time.perf_counter(), time.process_time()
        compiled(x)
        first = (time.perf_counter() - t0, time.process_time() - c0)
        eager(x)
        rows.append(_row("forward", lambda: compiled(x), lambda: eager(x), repeat))
    rep = reports()[-1]  # the forward graph: kernel launches per call
    rows[-1]["launches"] = sum(rep.kernel_calls.values()) / rep.runs
    rows.append({"workload": "first call", "nki_s": first[0], "nki_cpu_s": first[1],
                 "target": TARGETS["first call"], "dynamo_s": _dynamo_first_call(x)})  # fmt: skip
    # greedy generate(): the forward compiled (prefill and decode shapes), then timed warm
    gen = copy.deepcopy(eager)
    gen.forward = torch.compile(gen.forward, backend="nki")
    prompt = torch.randint(0, 256, (2, 32))

    def generate(m: nn.Module) -> torch.Tensor:
        return m.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8,
            min_new_tokens=8, do_sample=False,
        )  # fmt: skip

    with torch.no_grad():
        assert torch.equal(generate(gen), generate(eager))  # warm-up, and the same tokens
        rows.append(_row("generate 8 tokens", lambda: generate(gen), lambda: generate(eager),
                         repeat))  # fmt: skip
    # a training step: forward and backward graphs, SGD on the CPU
    train = copy.deepcopy(eager).train()
    ref = copy.deepcopy(eager).train()
    step_c = torch.compile(train, backend="nki")

    def step(m: nn.Module, fwd: Callable) -> None:
        m.zero_grad(set_to_none=True)
        fwd(x, labels=x).loss.backward()

    step(train, step_c)
    step(ref, ref)
    rows.append(_row("training step", lambda: step(train, step_c), lambda: step(ref, ref),
                     repeat))  # fmt: skip
    return rows


def _dynamo_first_call(x: torch.Tensor) -> float:
    """Seconds of the first call of the same model through ``torch.compile`` with torch's own
    ``eager`` backend (no kernels at all), after the ``nki`` one in this process (so without
    torch's one-time start-up): the part of a first call that is torch's own tracing, which
    the machine's speed sets."""
    torch.manual_seed(0)
    model = _llama().eval()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="eager")
    with torch.no_grad():
        t0 = time.perf_counter()
        compiled(x)
        return time.perf_counter() - t0


def cnn_row(repeat: int) -> dict:
    torch.manual_seed(0)
    model = _cnn().eval()
    eager = copy.deepcopy(model)
    x = torch.randn(4, 3, 8, 8)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="nki")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), eager(x), rtol=1e-4, atol=1e-5)
        return _row("cnn forward", lambda: compiled(x), lambda: eager(x), repeat)


def launch_overhead(repeat: int = 200) -> list[dict]:
    """Per-launch time of already-traced kernels called from the torch backend's launcher on
    tiny tensors (the math is microseconds: the rest is the per-launch overhead)."""
    out = []
    x, y = torch.randn(64, 128), torch.randn(64, 128)
    a, b = torch.randn(64, 128), torch.randn(128, 256)
    mul = BINARY_KERNELS["mul"]
    for name, k, args, math_fn in (
        ("mul 64x128", mul, (x, y), lambda: x * y),
        ("matmul 64x128 @ 128x256", matmul_kernel, (a, b), lambda: a @ b),
    ):
        lk = Launch(k, k.default_grid)
        torch_launch(lk, args, {})  # traced and planned
        t = _median(lambda lk=lk, args=args: torch_launch(lk, args, {}), repeat)
        e = _median(math_fn, repeat)
        out.append({"launch": name, "us": t[0] * 1e6, "cpu_us": t[1] * 1e6,
                    "eager_us": e[0] * 1e6})  # fmt: skip
    return out


def report(repeat: int) -> list[dict]:
    """Print and return the model rows and the launch overhead."""
    torch.set_num_threads(1)  # tiny models: threads only add contention on a shared machine
    over = launch_overhead()
    print("per-launch overhead (already-traced kernel from the torch backend, median of 200):")
    for r in over:
        print(f"  {r['launch']:28s} {r['us']:8.0f} us wall {r['cpu_us']:8.0f} us CPU "
              f"(eager torch {r['eager_us']:.0f} us)")  # fmt: skip
    rows = [*llama_rows(repeat), cnn_row(repeat)]
    print(f"{'model workload':22s} {'nki-sim':>10s} {'(CPU)':>10s} {'eager':>9s} "
          f"{'ratio':>7s} {'(CPU)':>7s} {'target':>8s}")  # fmt: skip
    for r in rows:
        if "eager_s" not in r:
            print(
                f"{r['workload']:22s} {r['nki_s']:9.2f}s {r['nki_cpu_s']:9.2f}s "
                f"{'':>9s} {'':>7s} {'':>7s} {'<' + format(r['target'], 'g') + ' s':>8s}"
                f"  (torch.compile's own eager backend, next in this process: "
                f"{r['dynamo_s']:.2f} s)"
            )
            continue
        count = f"{r['launches']:.0f} kernel launches, " if "launches" in r else ""
        launches = f"  ({count}{r['launch_s'] * 1e3:.1f} ms in launches)"
        print(f"{r['workload']:22s} {r['nki_s'] * 1e3:8.1f}ms {r['nki_cpu_s'] * 1e3:8.1f}ms "
              f"{r['eager_s'] * 1e3:7.2f}ms {r['ratio']:6.1f}x {r['ratio_cpu']:6.1f}x "
              f"{'<' + format(r['target'], 'g') + 'x':>8s}{launches}")  # fmt: skip
    return [*({"overhead": o} for o in over), *rows]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    np.random.seed(0)
    report(args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
