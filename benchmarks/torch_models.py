"""The torch.compile(backend="nki") backend on Hugging Face model families (tiny configs,
random weights), a CNN and an MLP: the share of op calls that ran as NKI kernels in the forward
graph and in a training step's forward + backward graphs, and the steady forward time (median
of repeated calls after a warm-up, graphs and kernels already traced) against eager torch.

Run: python benchmarks/torch_models.py [--repeat 5] [--only llama gpt2 ...]

The machines here are noisy (2 cores shared with other jobs): quote medians."""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "frontends"))

from test_torch_models import FAMILIES, _cnn, _mlp  # noqa: E402

import frontends.torch  # noqa: E402,F401  (registers the "nki" backend)
from frontends import torch_backend as tb  # noqa: E402


def _median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(name: str, repeat: int) -> dict:
    torch.manual_seed(0)
    if name in FAMILIES:
        model = FAMILIES[name]()
        x = torch.randint(0, 64, (2, 8))

        def loss_of(m):
            return m(x, labels=x).loss

        def forward(m):
            return m(x).logits
    else:
        model = {"cnn": _cnn, "mlp": _mlp}[name]()
        x = torch.randn(4, 3, 8, 8) if name == "cnn" else torch.randn(16, 32)
        y = torch.randint(0, 10, (x.shape[0],))

        def loss_of(m):
            return F.cross_entropy(m(x), y)

        def forward(m):
            return m(x)

    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="nki")
    before = len(tb.reports())
    loss_of(compiled).backward()  # a training step (forward + backward graphs)
    train = tb.reports()[before:]
    model.eval(), eager.eval()
    before = len(tb.reports())
    with torch.no_grad():
        forward(compiled)  # warm-up: compiles the eval graph, traces its kernels
        fwd = tb.reports()[before:]
        forward(eager)  # warm-up of eager torch too
        t_nki = _median_s(lambda: forward(compiled), repeat)
        t_eager = _median_s(lambda: forward(eager), repeat)
    cov = lambda reps: min(r.coverage for r in reps)  # noqa: E731
    return {
        "model": name,
        "forward_coverage": cov(fwd),
        "training_coverage": cov(train),
        "forward_ms": t_nki * 1e3,
        "eager_ms": t_eager * 1e3,
    }


def main() -> int:
    torch.set_num_threads(1)  # tiny models: threads only add contention on a shared machine
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    names = args.only or [*FAMILIES, "cnn", "mlp"]
    print(
        f"{'model':8s} {'fwd cov':>8s} {'train cov':>9s} {'nki fwd ms':>11s} "
        f"{'eager ms':>9s} {'ratio':>7s}"
    )
    for name in names:
        r = measure(name, args.repeat)
        print(
            f"{name:8s} {r['forward_coverage']:8.1%} {r['training_coverage']:9.1%} "
            f"{r['forward_ms']:11.0f} {r['eager_ms']:9.2f} {r['forward_ms'] / r['eager_ms']:7.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
