"""Timing harness: runs each benchmark kernel in the simulator, the same computation in plain
NumPy and, when JAX is installed, the same kernel in JAX Pallas' interpret mode (a peer kernel
interpreter); prints medians and the slowdown ratio, and writes the figures to a JSON file.

Run: python benchmarks/run.py [--repeat 7] [--out benchmarks/results.json]

The simulator is an interpreter over tiles, so a ratio well above 1 is expected; the point of the
figures is to track it from change to change (quote medians; the machines here are noisy)."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import nki  # noqa: E402
import nki.language as nl  # noqa: E402


@nki.jit
def tensor_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    rows, cols = slice(i * 128, (i + 1) * 128), slice(j * 512, (j + 1) * 512)
    nl.store(out[rows, cols], value=nl.add(nl.load(a[rows, cols]), nl.load(b[rows, cols])))
    return out


@nki.jit
def row_loop_exp(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        t = nl.load(a[i * 128 : (i + 1) * 128, :])
        nl.store(out[i * 128 : (i + 1) * 128, :], value=nl.exp(t))
    return out


def _median(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm up (tracing, caches)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _pallas_peers(a: np.ndarray, b: np.ndarray) -> dict[str, Callable[[], object]]:
    """The same kernels in JAX Pallas' interpret mode (a peer kernel interpreter on CPU), if
    JAX is installed: name -> callable returning a NumPy array."""
    try:
        import jax
        import jax.numpy as jnp
        from jax.experimental import pallas as pl
    except ImportError:
        return {}

    def add_body(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]

    def exp_body(x_ref, o_ref):
        o_ref[...] = jnp.exp(x_ref[...])

    out = jax.ShapeDtypeStruct(a.shape, jnp.float32)
    tile = pl.BlockSpec((128, 512), lambda i, j: (i, j))
    rows = pl.BlockSpec((128, a.shape[1]), lambda i: (i, 0))
    add = jax.jit(pl.pallas_call(add_body, out_shape=out, grid=(8, 4), in_specs=[tile, tile],
                                 out_specs=tile, interpret=True))  # fmt: skip
    exp = jax.jit(pl.pallas_call(exp_body, out_shape=out, grid=(a.shape[0] // 128,),
                                 in_specs=[rows], out_specs=rows, interpret=True))  # fmt: skip
    return {"tensor_add": lambda: np.asarray(add(a, b)), "exp": lambda: np.asarray(exp(a))}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results.json"))
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1024, 2048)).astype(np.float32)
    b = rng.standard_normal((1024, 2048)).astype(np.float32)
    peers = _pallas_peers(a, b)
    cases = [
        ("tensor_add grid 8x4 (1024x2048 fp32)", lambda: tensor_add[8, 4](a, b), lambda: a + b,
         peers.get("tensor_add")),
        ("exp affine_range x8 (1024x2048 fp32)", lambda: row_loop_exp(a), lambda: np.exp(a),
         peers.get("exp")),
    ]  # fmt: skip
    rows = []
    for name, sim, ref, peer in cases:
        want = ref()
        assert np.allclose(sim(), want, rtol=1e-6), name  # every contender computes the same
        t_sim, t_np = _median(sim, args.repeat), _median(ref, args.repeat)
        row = {"case": name, "sim_s": t_sim, "numpy_s": t_np, "ratio": t_sim / t_np}
        ratio = t_sim / t_np
        line = f"{name:38s} sim {t_sim * 1e3:7.2f} ms  numpy {t_np * 1e3:6.2f} ms  x{ratio:5.1f}"
        if peer is not None:
            assert np.allclose(peer(), want, rtol=1e-6), name
            row["pallas_interpret_s"] = t_peer = _median(peer, args.repeat)
            line += f"  pallas(interpret) {t_peer * 1e3:7.2f} ms"
        rows.append(row)
        print(line)
    Path(args.out).write_text(
        json.dumps({"python": platform.python_version(), "results": rows}, indent=2)
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
