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

import ml_dtypes
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


@nki.jit
def loop_add(a, b):
    """The grid add as one instance: affine_range over every [128, 512] tile."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        for j in nl.affine_range(a.shape[1] // 512):
            r, c = slice(i * 128, (i + 1) * 128), slice(j * 512, (j + 1) * 512)
            nl.store(out[r, c], value=nl.add(nl.load(a[r, c]), nl.load(b[r, c])))
    return out


@nki.jit
def tiny_add(a, b):
    """4096 tiny [128, 8] tiles: one per instance of a 64 x 64 grid."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    r, c = slice(i * 128, (i + 1) * 128), slice(j * 8, (j + 1) * 8)
    nl.store(out[r, c], value=nl.add(nl.load(a[r, c]), nl.load(b[r, c])))
    return out


@nki.jit
def tiled_matmul(a_t, b):
    """out = a_t.T @ b in [128, 512] PSUM tiles accumulated over K in steps of 128."""
    k_dim, m_dim = a_t.shape
    n_dim = b.shape[1]
    out = nl.ndarray((m_dim, n_dim), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_dim // 128):
        for n in nl.affine_range(n_dim // 512):
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_dim // 128):
                at = nl.load(a_t[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                bt = nl.load(b[k * 128 : (k + 1) * 128, n * 512 : (n + 1) * 512])
                acc += nl.matmul(at, bt, transpose_x=True)
            nl.store(out[m * 128 : (m + 1) * 128, n * 512 : (n + 1) * 512], value=acc)
    return out


@nki.jit
def row_softmax(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128 : (i + 1) * 128, :])
        e = nl.exp(nl.subtract(t, nl.max(t, axis=1, keepdims=True)))
        s = nl.sum(e, axis=1, keepdims=True)
        nl.store(out[i * 128 : (i + 1) * 128, :], value=nl.divide(e, s))
    return out


def _np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def issue_cases(rng: np.random.Generator) -> list[tuple[str, Callable, Callable]]:
    """The workloads of issue 15 on the batched backend, each with its NumPy peer."""
    big = [rng.standard_normal((4096, 4096)).astype(np.float32) for _ in range(2)]
    tiny = [rng.standard_normal((8192, 512)).astype(np.float32) for _ in range(2)]
    mm32 = [rng.standard_normal((2048, 2048)).astype(np.float32) for _ in range(2)]
    mm16 = [m.astype(ml_dtypes.bfloat16) for m in mm32]
    up16 = [m.astype(np.float32) for m in mm16]
    b = {k: k.configure(backend="batched") for k in (tensor_add, loop_add, tiny_add)}
    mmb, smb = tiled_matmul.configure(backend="batched"), row_softmax.configure(backend="batched")
    return [
        ("add 4096^2 grid (32, 8) [128, 512]", lambda: b[tensor_add][32, 8](*big),
         lambda: big[0] + big[1]),
        ("add 4096^2 affine_range 256 tiles", lambda: b[loop_add](*big), lambda: big[0] + big[1]),
        ("4096 tiny [128, 8] adds, grid 64x64", lambda: b[tiny_add][64, 64](*tiny),
         lambda: tiny[0] + tiny[1]),
        ("matmul 2048^3 fp32", lambda: mmb(*mm32), lambda: mm32[0].T @ mm32[1]),
        ("matmul 2048^3 bf16 inputs", lambda: mmb(*mm16), lambda: up16[0].T @ up16[1]),
        ("row softmax 4096x4096", lambda: smb(big[0]), lambda: _np_softmax(big[0])),
    ]  # fmt: skip


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
    what = "basic: the small kernels vs Pallas; issue: issue 15's workloads"
    ap.add_argument("--only", choices=("all", "basic", "issue"), default="all", help=what)
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
    if args.only == "issue":
        cases = []
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
    if args.only != "basic":
        print("issue 15 workloads, batched backend (medians; ratio to NumPy):")
        for name, sim, ref in issue_cases(rng):
            want = ref()
            assert np.allclose(sim(), want, rtol=1e-3, atol=1e-3), name
            t_sim, t_np = _median(sim, args.repeat), _median(ref, args.repeat)
            rows.append({"case": name, "backend": "batched", "sim_s": t_sim, "numpy_s": t_np,
                         "ratio": t_sim / t_np})  # fmt: skip
            print(f"{name:38s} sim {t_sim * 1e3:8.2f} ms  numpy {t_np * 1e3:7.2f} ms  "
                  f"x{t_sim / t_np:5.2f}")  # fmt: skip
    Path(args.out).write_text(
        json.dumps({"python": platform.python_version(), "results": rows}, indent=2)
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
