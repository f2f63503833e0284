"""How fast kernels are traced: a current-API kernel of ``--blocks`` unrolled blocks (each an
``affine_range`` loop, traced once, of two DMA loads with loop-dependent slices, a matmul, a
scaling, an inner loop of column-block activations and a store: 6 instructions) traced
``--repeat`` times; prints the median time per traced instruction and the share of it the
cyclic garbage collector took.

    python benchmarks/trace_speed.py [--blocks 300] [--repeat 5]

A large kernel spends much of its first call here: in a profile of AWS's MoE backward test
(``test_bwmm_bwd``, hidden size 6144), tracing took about a minute before its first
instruction ran."""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402


def make_kernel(blocks: int) -> nki.Kernel:
    @nki.jit
    def blocks_kernel(a, w):
        out = nl.ndarray((512, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        for j in nl.static_range(blocks):
            for i in nl.affine_range(4):
                x = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=x, src=a[i * 128 : (i + 1) * 128, 0:512])
                ws = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
                rows = w[j % 4 * 128 : (j % 4 + 1) * 128, i * 128 : (i + 1) * 128]
                nisa.dma_copy(dst=ws, src=rows)
                ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=ps, stationary=ws, moving=x)
                y = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=y, data=ps, op0=nl.multiply, operand0=0.5)
                for k in nl.affine_range(4):
                    cols = y[:, k * 128 : (k + 1) * 128]
                    nisa.activation(dst=cols, op=nl.exp, data=cols)
                nisa.dma_copy(dst=out[i * 128 : (i + 1) * 128, 0:512], src=y)
        return out

    return blocks_kernel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    kernel = make_kernel(args.blocks)
    a = np.zeros((512, 512), dtype=np.float32)
    collecting = [0.0]
    started = [0.0]

    def timer(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            collecting[0] += time.perf_counter() - started[0]

    gc.callbacks.append(timer)
    times, shares, count = [], [], 0
    for _ in range(args.repeat + 1):  # (the first trace also imports and warms the caches)
        kernel._cache.clear()
        bound = kernel.bind((a, a), {})
        collecting[0] = 0.0
        t0 = time.perf_counter()
        ir = kernel.trace(kernel.default_grid, bound, kernel.config().target)
        dt = time.perf_counter() - t0
        count = sum(1 for _ in ir.instructions())
        times.append(dt)
        shares.append(collecting[0] / dt)
    gc.callbacks.remove(timer)
    med = statistics.median(times[1:])
    print(
        f"{count} instructions traced in {med * 1e3:.0f} ms (median of {args.repeat}): "
        f"{med / count * 1e6:.0f} us per instruction, "
        f"{statistics.median(shares[1:]) * 100:.0f}% in garbage collection"
    )


if __name__ == "__main__":
    main()
