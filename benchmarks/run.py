"""Benchmarks: issue 15's workloads (plus flash attention at S=4096, the 4096x8192x8192 bf16
matmul and a 200-example property-test run) on nki-sim's ``auto`` and ``numba`` backends, in
Triton's interpreter and in JAX Pallas' interpret mode when they are installed
(``pip install nki-sim[bench]``), and in NumPy doing the same math. Every contender's result is
checked against NumPy's; the table shows medians (after a warm-up call) and the ratio to NumPy;
the figures and the machine go to a JSON file. Each workload also has a current-API twin (the
same computation written with destination-first ``nisa`` calls; the grid add as ``kernel[2]``
on two cores), timed on the same backends next to its classic version.

Run: python benchmarks/run.py [--repeat 5] [--only NAME ...] [--out benchmarks/results/run.json]
     python benchmarks/run.py --quick   # tiny shapes, nki-sim and NumPy only: a smoke test

NumPy is timed twice, with one BLAS thread and with its default threads, and so is nki-sim's
``auto`` (``auto 1t``: inside one BLAS thread, as with ``OPENBLAS_NUM_THREADS=1``); the ratios
are to NumPy with its default threads (the JSON file has both). The environment is left as the
user has it (no thread variables are set). Peers that fail to build or to run a workload are
recorded (``failed``) and the run goes on. The model workloads (``benchmarks/model_runs.py``:
tiny Llama forward, generate, training step, a CNN, against eager torch) follow the kernel
table unless ``--no-models``; before them, a per-iteration loop of 10^6 instructions on the
Numba backend (a running sum over rows) is timed in a fresh process with an empty kernel
cache: its first call, the calls while the compile budget builds the rest, a warm call.

The machines here are noisy (2 cores shared with other jobs): quote medians, and compare
figures from one run only."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from threadpoolctl import threadpool_info, threadpool_limits  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import nki  # noqa: E402
import nki.language as nl  # noqa: E402
from benchmarks.long_loop import long_loop_run, loop_steps  # noqa: E402
from benchmarks.twins import (  # noqa: E402
    causal_attention_current,
    flash_attention_current,
    loop_add_current,
    row_softmax_current,
    tensor_add_lnc,
    tiled_matmul_current,
    tiny_add_current,
)


@nki.jit
def tensor_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    rows, cols = slice(i * 128, (i + 1) * 128), slice(j * 512, (j + 1) * 512)
    nl.store(out[rows, cols], value=nl.add(nl.load(a[rows, cols]), nl.load(b[rows, cols])))
    return out


@nki.jit(api="classic")
def row_loop_exp(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        t = nl.load(a[i * 128 : (i + 1) * 128, :])
        nl.store(out[i * 128 : (i + 1) * 128, :], value=nl.exp(t))
    return out


@nki.jit(api="classic")
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


@nki.jit(api="classic")
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


@nki.jit(api="classic")
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


@nki.jit(api="classic")
def flash_attention(q_t, k_t, v):
    """softmax(q k^T / sqrt(d)) v with an online softmax: an instance-free loop over blocks of
    128 queries (affine_range), each walking blocks of 128 keys (sequential_range)."""
    d, s = q_t.shape
    out = nl.ndarray((s, d), dtype=nl.float32, buffer=nl.shared_hbm)
    scale = 1.0 / math.sqrt(d)
    for i in nl.affine_range(s // 128):
        q = nl.load(q_t[:, i * 128 : (i + 1) * 128])
        m = nl.full((128, 1), -1e30, dtype=nl.float32)
        den = nl.zeros((128, 1), dtype=nl.float32)
        acc = nl.zeros((128, d), dtype=nl.float32)
        for j in nl.sequential_range(s // 128):
            k = nl.load(k_t[:, j * 128 : (j + 1) * 128])
            vv = nl.load(v[j * 128 : (j + 1) * 128, :])
            sc = nl.multiply(nl.matmul(q, k, transpose_x=True), scale)
            m_new = nl.maximum(m, nl.max(sc, axis=1, keepdims=True))
            p = nl.exp(nl.subtract(sc, m_new))
            corr = nl.exp(nl.subtract(m, m_new))
            den[...] = nl.add(nl.multiply(den, corr), nl.sum(p, axis=1, keepdims=True))
            acc[...] = nl.add(nl.multiply(acc, corr), nl.matmul(p, vv))
            m[...] = m_new
        nl.store(out[i * 128 : (i + 1) * 128, :], nl.divide(acc, den))
    return out


def _np_attention(q_t: np.ndarray, k_t: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    q, k, vv = (x.astype(np.float32) for x in (q_t, k_t, v))
    s = q.T @ k / np.float32(math.sqrt(q.shape[0]))
    if causal:
        s = np.where(np.tril(np.ones(s.shape, dtype=bool)), s, np.float32(-np.inf))
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ vv


@dataclass
class Workload:
    """One row: the nki-sim launch (a function of the kernel configured for a backend), the
    inputs, NumPy's computation of the same result, the peers' name in ``peers.py``."""

    name: str
    sim: Callable[[object], Callable[..., object]]  # kernel config -> launch
    kernel: object
    inputs: tuple
    numpy: Callable[..., np.ndarray]
    peer: str | None = None
    tol: float = 1e-4
    skip: tuple[str, ...] = ()  # nki-sim backends not timed on this workload
    note: str = ""
    extra: dict = field(default_factory=dict)
    # the same workload written with the current API, and its launch (default: ``sim``)
    twin: object | None = None
    twin_sim: Callable[[object], Callable[..., object]] | None = None


def workloads(quick: bool) -> list[Workload]:
    rng = np.random.default_rng(0)

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    n = 256 if quick else 4096
    big = (f32(n, 4 * n if quick else n), f32(n, 4 * n if quick else n))
    tiny = (f32(256, 16), f32(256, 16)) if quick else (f32(8192, 512), f32(8192, 512))
    tg = (2, 2) if quick else (64, 64)
    mk = 256 if quick else 2048
    mm32 = (f32(mk, mk), f32(mk, 2 * mk if quick else mk))
    mm16 = tuple(x.astype(ml_dtypes.bfloat16) for x in mm32)
    sm = f32(256, 512) if quick else f32(4096, 4096)
    d, s_att = 64, 128
    att = (f32(d, s_att), f32(d, s_att), f32(s_att, d))
    s_fa = 256 if quick else 4096
    fa = (f32(d, s_fa), f32(d, s_fa), f32(s_fa, d))
    gshape = (big[0].shape[0] // 128, big[0].shape[1] // 512)
    sys.path.insert(0, str(ROOT / "tutorials" / "attention"))
    from causal_attention import causal_attention_kernel

    def up(x: np.ndarray) -> np.ndarray:
        return x.astype(np.float32)

    rows = [
        Workload(f"add {big[0].shape[0]}x{big[0].shape[1]} fp32, grid {gshape} of [128, 512]",
                 lambda k: k[gshape], tensor_add, big, np.add, "grid_add",
                 twin=tensor_add_lnc, twin_sim=lambda k: k[2]),
        Workload(f"same add, one instance, affine_range over {gshape[0] * gshape[1]} tiles",
                 lambda k: k, loop_add, big, np.add, "loop_add", twin=loop_add_current),
        Workload(f"{tg[0] * tg[1]} tiny [128, 8] tile adds, grid {tg}",
                 lambda k: k[tg], tiny_add, tiny, np.add, "tiny_add",
                 twin=tiny_add_current, twin_sim=lambda k: k),
        Workload(f"tiled matmul {mk}^3 fp32", lambda k: k, tiled_matmul, mm32,
                 lambda a, b: a.T @ b, "matmul", tol=1e-3, twin=tiled_matmul_current),
        Workload(f"tiled matmul {mk}^3 bf16 inputs", lambda k: k, tiled_matmul, mm16,
                 lambda a, b: up(a).T @ up(b), "matmul", tol=1e-3, twin=tiled_matmul_current),
        Workload(f"row softmax {sm.shape[0]}x{sm.shape[1]}", lambda k: k, row_softmax, (sm,),
                 _np_softmax, "softmax", twin=row_softmax_current),
        Workload(f"causal attention tutorial, S={s_att}", lambda k: k, causal_attention_kernel,
                 att, lambda q, k, v: _np_attention(q, k, v, True), "causal_attention",
                 twin=causal_attention_current),
        Workload(f"flash attention S={s_fa}, d={d}", lambda k: k, flash_attention, fa,
                 lambda q, k, v: _np_attention(q, k, v, False), "flash_attention", tol=1e-3,
                 twin=flash_attention_current),
    ]  # fmt: skip
    if not quick:
        m_, k_, n_ = 4096, 8192, 8192
        a_t = rng.standard_normal((k_, m_), dtype=np.float32).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((k_, n_), dtype=np.float32).astype(ml_dtypes.bfloat16)
        rows.append(Workload(
            f"tiled matmul {m_}x{k_}x{n_} bf16 inputs", lambda k: k, tiled_matmul, (a_t, b),
            lambda a, b: up(a).T @ up(b), None, tol=1e-2, skip=("numba", "numpy"),
            note="one timed call; peers not run (minutes each in an interpreter)",
            twin=tiled_matmul_current))  # fmt: skip
    return rows


MIN_TIME = 0.5  # seconds of repeated calls per cell at least (fast calls: many of them)


def _timed(
    fn: Callable[[], object],
    repeat: int,
    budget: float,
    compiling: Callable[[], bool] = lambda: False,
    min_time: float = MIN_TIME,
) -> tuple[float, float, object]:
    """(first call s, median of the next calls s, result). The next calls are at least
    ``repeat`` and go on until they took ``min_time`` s together (at most 2,000 calls: a
    sub-millisecond call's median then rests on hundreds of calls, not on five), and stop
    once they took ``budget`` s (fewer repeats when a call is slow). While ``compiling()``
    says the Numba compile budget left work for later launches, the warm-up goes on (at most
    10 launches), so the median times the fully compiled kernel."""
    t0 = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t0
    for _ in range(10):
        if not compiling():
            break
        fn()
    times: list[float] = []
    spent = 0.0
    while True:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        spent += times[-1]
        if spent >= budget or (len(times) >= repeat and (spent >= min_time or len(times) >= 2000)):
            break
    return first, statistics.median(times), out


def _close(got: object, want: np.ndarray, tol: float) -> bool:
    g = np.asarray(got).astype(np.float32)
    return g.shape == want.shape and bool(np.allclose(g, want, rtol=tol, atol=tol))


def property_run(examples: int) -> float:
    """Seconds for ``check_kernel`` to test the property-testing tutorial's ragged tiled add on
    ``examples`` drawn cases (shapes, dtypes, the kernel against NumPy)."""
    from hypothesis import strategies as st

    from nki.testing import check_kernel, dtypes, hbm_shapes

    sys.path.insert(0, str(ROOT / "tutorials" / "property_testing"))
    from property_testing import MAX_F, TILE_P
    from property_testing import tensor_add as ragged_add

    shape = st.shared(hbm_shapes((TILE_P, MAX_F), max_tiles=(3, 1), multiple=None), key="ab")
    t0 = time.perf_counter()
    n = check_kernel(ragged_add, np.add, shapes=[shape, shape],
                     dtypes=dtypes(float_only=True, fp8=False), max_examples=examples)  # fmt: skip
    took = time.perf_counter() - t0
    assert n >= 1
    return took


def blas_threads() -> str:
    """The BLAS pools NumPy (and torch) loaded, with their default thread counts."""
    pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    return ", ".join(f"{p['internal_api']} {p['num_threads']} threads" for p in pools) or "none"


def _version(module: str) -> str:
    """The installed version of a peer's package (``pallas``: jax's)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jax" if module == "pallas" else module)
    except PackageNotFoundError:
        return "?"


def _guarded(fn: Callable[[], object]) -> tuple[object, str | None]:
    """(``fn()``, None), or (None, the error) when a peer fails: recorded, the run goes on."""
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - a peer's failure is a result, not a crash
        text = str(e).strip().splitlines()
        return None, f"{type(e).__name__}: {text[0][:160] if text else ''}"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--budget", type=float, default=10.0, help="seconds of repeats per cell")
    ap.add_argument("--min-time", type=float, default=MIN_TIME,
                    help="seconds of repeats per cell at least (0 with --quick)")  # fmt: skip
    ap.add_argument("--quick", action="store_true", help="tiny shapes, no peers: a smoke test")
    ap.add_argument("--only", nargs="*", default=None, help="workloads whose name contains any")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--peers", action="store_true", help="time the peers in --quick mode too")
    ap.add_argument("--backends", default="auto,numba", help="nki-sim backends to time")
    ap.add_argument("--examples", type=int, default=200, help="property-test examples")
    ap.add_argument("--no-twins", action="store_true", help="skip the current-API twins")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "run.json"))
    ap.add_argument("--no-models", action="store_true", help="skip the model workloads")
    args = ap.parse_args(argv)
    repeat = 1 if args.quick else args.repeat
    min_time = 0.0 if args.quick else args.min_time
    from benchmarks.peers import pallas_peers, triton_peers

    peers: dict[str, dict] = {}
    peer_errors: dict[str, str] = {}
    if (args.peers or not args.quick) and not args.no_peers:
        for pname, build in (("triton", triton_peers), ("pallas", pallas_peers)):
            got, err = _guarded(build)
            if err is not None:
                peer_errors[pname] = err
                print(f"peer {pname} failed to build: {err}")
            elif got is not None:
                peers[pname] = got
    backends = args.backends.split(",")
    one = "auto 1t"  # auto inside one BLAS thread (as with OPENBLAS_NUM_THREADS=1)
    twins = [f"{c} current" for c in backends] if not args.no_twins else []
    cols = [*backends, *twins, *([one] if "auto" in backends else []), *peers]
    print(f"machine: {machine()}; Python {platform.python_version()}; load average "
          f"{os.getloadavg()[0]:.1f}; BLAS: {blas_threads()}; peers: "
          f"{', '.join(f'{p} {_version(p)}' for p in peers) or 'none'}")  # fmt: skip
    print(f"{'workload':58s} {'numpy 1t':>9s} {'numpy':>9s}  "
          + "  ".join(f"{c:>21s}" for c in cols))  # fmt: skip
    rows = []
    for w in workloads(args.quick):
        if args.only and not any(o in w.name for o in args.only):
            continue
        want = np.asarray(w.numpy(*w.inputs), dtype=np.float32)
        _, t_np, _ = _timed(lambda w=w: w.numpy(*w.inputs), repeat, args.budget, min_time=min_time)
        with threadpool_limits(1, user_api="blas"):
            _, t_np1, _ = _timed(
                lambda w=w: w.numpy(*w.inputs), repeat, args.budget, min_time=min_time
            )
        row: dict = {"workload": w.name, "numpy_s": t_np, "numpy_1t_s": t_np1, "note": w.note}
        cells = []
        for c in cols:
            backend, _, api = c.partition(" ")
            api = "" if c == one else api  # ("auto 1t": the classic kernel in one thread)
            if c not in peers:
                kernel, sim = (w.twin, w.twin_sim or w.sim) if api else (w.kernel, w.sim)
                if backend in w.skip or kernel is None:
                    cells.append("-")
                    continue
                kern = kernel.configure(backend=backend)
                launch = sim(kern)
                with threadpool_limits(1 if c == one else None, user_api="blas"):
                    first, t, out = _timed(
                        lambda f=launch, w=w: f(*w.inputs),
                        repeat,
                        args.budget,
                        lambda k=kern: "left to compile" in (k.last_run.reason or ""),
                        min_time,
                    )
                row[f"{c}_ran"] = kern.last_run.backend
                row[f"{c}_threads"] = kern.last_run.threads
            else:
                make = peers[c].get(w.peer) if w.peer else None
                if make is None:
                    cells.append("-")
                    continue

                def peer(m=make, w=w):  # noqa: ANN001, ANN202 - (bound per workload)
                    fn = m()
                    return _timed(lambda: fn(*w.inputs), repeat, args.budget, min_time=min_time)

                got, err = _guarded(peer)
                if err is not None:
                    row[f"{c}_error"] = err
                    cells.append("failed")
                    print(f"  {c} failed on {w.name[:40]}: {err}", flush=True)
                    continue
                first, t, out = got  # type: ignore[misc]
            if isinstance(out, tuple):
                out = out[0]
            ok = _close(out, want, w.tol)
            row[f"{c}_s"], row[f"{c}_first_s"], row[f"{c}_ratio"] = t, first, t / t_np
            row[f"{c}_ratio_1t"] = t / t_np1
            row[f"{c}_matches_numpy"] = ok
            threads = f"{row[f'{c}_threads']}t " if f"{c}_threads" in row else ""
            cell = f"{threads}{t * 1e3:9.1f}ms {t / t_np:5.1f}x" + ("" if ok else "!")
            if api and f"{backend}_s" in row:  # the twin against its classic version
                warm, cold = t / row[f"{backend}_s"], first / row[f"{backend}_first_s"]
                row[f"{c}_vs_classic"], row[f"{c}_first_vs_classic"] = warm, cold
                cell += f" ({warm:.2f}/{cold:.2f})"
            cells.append(cell)
        rows.append(row)
        print(f"{w.name[:58]:58s} {t_np1 * 1e3:7.1f}ms {t_np * 1e3:7.1f}ms  "
              + "  ".join(f"{c:>21s}" for c in cells), flush=True)  # fmt: skip
    if not args.only or any("property" in o for o in args.only):
        examples = 5 if args.quick else args.examples
        took = property_run(examples)
        rows.append({"workload": f"property test, {examples} examples of a ragged tiled add",
                     "auto_s": took})  # fmt: skip
        print(f"property test: {examples} examples of a ragged tiled add in {took:.2f} s")
    if not args.only or any("loop" in o for o in args.only):
        steps = 1000 if args.quick else 10**6
        got = loop_steps(steps) if args.quick else long_loop_run(steps)
        rows.append({"workload": f"sequential_range of {steps:,} instructions, numba", **got})
        cold = "" if args.quick else " (empty cache)"
        more = ", ".join(f"{t:.2f}" for t in got["compiling_s"][1:])
        print(f"per-iteration loop: {steps:,} loads and adds of [1, 8] rows on {got['ran']}: "
              f"{got['first_s']:.2f} s first call{cold}"
              + (f" (then {more} s while the compile budget builds the rest)" if more else "")
              + f", {got['warm_s']:.3f} s warm")  # fmt: skip
    print("(ratio = median / NumPy's median with its default threads on the same math; Nt = "
          "the BLAS threads nki-sim chose; ! = result differs from NumPy; (a/b) after a "
          "current-API twin: its warm / first-call time over its classic version's)")  # fmt: skip
    models: list[dict] = []
    if not args.quick and not args.no_models:
        from benchmarks.model_runs import report

        models = report(args.repeat)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine(), "python": platform.python_version(),
                               "blas": blas_threads(), "load": os.getloadavg()[0],
                               "quick": args.quick, "peer_errors": peer_errors,
                               "results": rows, "models": models}, indent=2))  # fmt: skip
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
