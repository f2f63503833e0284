"""Fuzz nki-sim with generated invalid kernels (issue 13): every run must end in an NKIError
naming this file and a line (or, for a mistake only ``checks="full"`` can see, run under the
other level), never in an internal exception or a hang.

    PYTHONPATH=$PWD python benchmarks/fuzz_invalid.py --kernels 2000 --seed 0

Each generated kernel runs under checks "static" and "full" and on backends "numpy" and
"numba"; the figures are printed at the end (exit status 1 if any run went wrong)."""

from __future__ import annotations

import argparse
import collections
import random
import signal
import sys
import time
import warnings

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError

# mistakes only checks="full" can see: under "static" they may run (NaN in the result)
FULL_ONLY = {"unwritten", "uninit", "reduce_res_idle"}
MUTATIONS = (
    "nomask",
    "tp_big",
    "bad_kwarg",
    "bad_shape",
    "iter_escape",
    "unwritten",
    "bad_op",
    "ds_tile",
    "full_str",
    "recursion",
    "neg_index",
    "col_oob",
    "load_sbuf",
    "compute_hbm",
    "uninit",
    "reduce_res_idle",
    "readonly_out",
    "store_small",
)
TYPOS = {"mask": ("msk", "maks", "masks"), "dtype": ("dtyp", "dype", "type_")}


def build(p: dict):
    m, tp, rows, n, cg, extra = p["mut"], p["tp"], p["rows"], p["n"], p["cg"], p["extra"]
    op = getattr(nl, p["op"])

    def kern(a, b, out_param):
        if m == "recursion":
            return kernel(a, b, out_param)
        if m == "bad_shape":
            nl.ndarray(p["bad"], dtype=nl.float32, buffer=nl.sbuf)
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ip, jf = nl.mgrid[0:tp, 0:cg]
        col = jf + (extra + cg if m == "col_oob" else 0)
        loops = list(nl.affine_range(n)) if m == "iter_escape" else nl.affine_range(n)
        for i in loops:
            row = i * tp + ip - (extra if m == "neg_index" else 0)
            mask = None if m == "nomask" or rows % tp == 0 else (row < rows)
            if m == "bad_kwarg":
                kw = {p["typo"]: mask if p["typo"] in TYPOS["mask"] else nl.float32}
                x = nl.load(a[row, col], **kw) if p["where"] else nl.load(a[row, col], mask=mask)
                y = nl.load(b[row, col], mask=mask)
                z = op(x, y) if p["where"] else op(x, y, **kw)
            else:
                x = nl.load(a[row, col], mask=mask)
                if m == "load_sbuf":
                    x = nl.load(x)
                y = nl.load(b[row, col], mask=mask)
                z = op(a, y) if m == "compute_hbm" else op(x, y)
            if m == "bad_op":
                z = nisa.tensor_scalar(z, p["bad"], 2.0)
            if m == "ds_tile":
                z = nl.load(a[row, nl.ds(nl.load(a[0:1, 0:1]), cg)])
            if m == "full_str":
                z = nl.add(z, nl.full((tp, cg), "x", nl.float32))
            if m == "uninit":
                t = nl.ndarray((tp, cg), dtype=nl.float32, buffer=nl.sbuf)
                t[:, 0 : cg - 1] = z[:, 0 : cg - 1]
                z = nl.exp(t)
            if m == "reduce_res_idle":
                s = nl.ndarray((tp, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(op=nl.exp, data=z, reduce_op=nl.add, reduce_res=s)
                z = nl.add(z, s)
            if m == "unwritten":
                mask = row < rows - 1
            if m == "store_small":
                nl.store(out[i * tp : i * tp + max(1, tp // 2), 0:cg], value=z)
            elif m == "readonly_out":
                nl.store(out_param[row, col], value=z, mask=mask)
            else:
                nl.store(out[row, col], value=z, mask=mask)
        return out

    kernel = nki.jit(kern)
    return kernel


def draw(r: random.Random) -> dict:
    m = r.choice(MUTATIONS)
    tp = r.randint(129, 256) if m == "tp_big" else r.randint(2, 128)
    rows = r.randint(tp if m in ("store_small", "unwritten") else 1, 300)
    if m == "nomask" and rows % tp == 0:
        rows += 1
    if m == "tp_big":
        rows = max(rows, tp)
    p = dict(mut=m, tp=tp, rows=rows, n=-(-rows // tp), cg=r.randint(2, 16), extra=r.randint(1, 3))
    p["op"] = r.choice(["add", "subtract", "multiply", "maximum"])
    p["typo"] = r.choice(TYPOS["mask"] + TYPOS["dtype"])
    p["where"] = r.random() < 0.5
    p["bad"] = r.choice([None, float("nan"), "x", [1.5, 2], {"a": 1}])
    if m == "bad_op":
        p["bad"] = r.choice([[1, 2], "nope", 3.5, None])
    return p


class Hang(Exception):
    pass


def _alarm(*_):
    raise Hang()


def run_one(p: dict, checks: str, backend: str, timeout: int) -> str:
    """The outcome of one run: 'located', 'clean', 'unlocated', 'err_runtime', 'internal:<T>'
    or 'hang'."""
    rng = np.random.default_rng(p["rows"])
    a = rng.standard_normal((p["rows"], p["cg"])).astype(np.float32)
    b = rng.standard_normal(a.shape).astype(np.float32)
    out_param = np.zeros(a.shape, np.float32)
    if p["mut"] == "readonly_out":
        out_param.flags.writeable = False
    k = build(p).configure(checks=checks, backend=backend)
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            k(a, b, out_param)
        return "clean"
    except Hang:
        return "hang"
    except NKIError as e:
        if e.loc is None or e.loc.file != __file__ or e.loc.line <= 0:
            return "unlocated"
        return "err_runtime" if e.code == "err_runtime" else "located"
    except Exception as e:  # noqa: BLE001 - what the fuzzer counts
        return f"internal:{type(e).__name__}:{str(e)[:80]}"
    finally:
        signal.alarm(0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=120)
    args = ap.parse_args()
    r = random.Random(args.seed)
    sys.setrecursionlimit(600)  # the recursion mutation ends quickly
    counts: collections.Counter[str] = collections.Counter()
    bad: list[str] = []
    t0 = time.time()
    for _ in range(args.kernels):
        p = draw(r)
        for checks in ("static", "full"):
            for backend in ("numpy", "numba"):
                got = run_one(p, checks, backend, args.timeout)
                if got == "clean" and (p["mut"] in FULL_ONLY and checks != "full"):
                    got = "clean (full-only mistake)"
                counts[got] += 1
                if got not in ("located", "clean (full-only mistake)"):
                    bad.append(f"{got} {checks} {backend} {p}")
    runs = sum(counts.values())
    print(f"{args.kernels} kernels, {runs} runs, {time.time() - t0:.0f} s")
    for k, v in sorted(counts.items()):
        print(f"  {v:6d}  {k}")
    for line in bad[:20]:
        print("BAD", line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
