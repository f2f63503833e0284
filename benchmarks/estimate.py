"""How fast the cost model estimates, and what it estimates, for the matmul tutorial sequence on
trn1 (4096 x 8192 @ 8192 x 8192 bf16) against the published figures.

Run: python benchmarks/estimate.py [--png docs/estimate_timeline.png]
Prints, per kernel, the published latency, the estimate, their ratio, Tensor-engine and DMA
utilisation, and the wall time of tracing + estimating (no numerics run)."""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import nki  # noqa: E402
import nki.language as nl  # noqa: E402
import nki.typing as nt  # noqa: E402
from tests.cost.matmul_kernels import SEQUENCE  # noqa: E402

M, K, N = 4096, 8192, 8192


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--png", help="write the timeline of a small basic-tiling matmul here")
    args = ap.parse_args()
    print(f"matmul {M}x{K} @ {K}x{N} bf16 on trn1")
    print(
        f"{'kernel':<20s} {'published':>10s} {'estimate':>10s} {'ratio':>6s} "
        f"{'TE util':>8s} {'DMA util':>9s} {'wall':>8s}"
    )
    for name, kernel, published in SEQUENCE:
        t0 = time.perf_counter()
        r = nki.estimate(kernel, target="trn1")(
            nt.tensor[[K, M], nl.bfloat16], nt.tensor[[K, N], nl.bfloat16]
        )
        wall = time.perf_counter() - t0
        print(
            f"{name:<20s} {published:>8.2f}ms {r.latency_ms:>8.2f}ms "
            f"{r.latency_ms / published:>6.2f} {100 * r.utilisation('tensor'):>7.0f}% "
            f"{100 * r.utilisation('dma'):>8.0f}% {wall * 1e3:>6.0f}ms"
        )
    if args.png:
        from simulator.cost.export import write_png

        r = nki.estimate(SEQUENCE[0][1], target="trn1")(
            nt.tensor[[512, 256], nl.bfloat16], nt.tensor[[512, 1024], nl.bfloat16]
        )
        print(f"timeline: {write_png(r, args.png)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
