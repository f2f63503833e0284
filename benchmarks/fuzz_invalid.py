"""Fuzz nki-sim with generated invalid kernels (issue 13): every run must end in an NKIError
naming this file and a line (or, for a mistake only ``checks="full"`` can see, run under the
other level), never in an internal exception or a hang.

    PYTHONPATH=$PWD python benchmarks/fuzz_invalid.py --kernels 2000 --seed 0

Five families of kernels, drawn in turn:

* ``classic``: a tiled ``nl.load`` / ``nl.store`` kernel with one planted mistake;
* ``current``: a destination-first kernel (``nisa.tensor_tensor(dst=...)``, ``nl.ndarray(...,
  buffer=nl.sbuf)``, views ``.ap()`` / ``.slice()``, ``nl.fori_loop``, ``kernel[2]``) with one;
* ``loops``: a current-API kernel whose ``nl.affine_range`` / ``sequential_range`` / ``range``
  loop is traced once and unrolled where Python needs the int (``min()``, an ``if``, a Python
  counter, a list of tiles, an SBUF accumulator), with one;
* ``args``: one call of any ``nki.isa`` instruction of the spec, in either calling form, with
  one argument-checking mistake (an unknown or misspelt keyword, one positional too many, a
  required argument left out, a value of the wrong kind for one parameter);
* ``launch``: a valid kernel launched or configured wrongly (grid, settings, arguments).

Each generated kernel runs under checks "static" (the default) and "full" and on backends
"numpy" (the interpreter), "batched" (what "auto" runs most kernels on) and "numba"; the
figures are printed at the end (exit status 1 if any run went wrong). A run of an ``args``
mutant that the instruction accepts is "clean (accepted)": the value was legal after all (a
negative axis, an int where a float is taken)."""

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
import nki.isa_spec as spec
import nki.language as nl
from nki.errors import NKIError

# mistakes only checks="full" can see: under "static" they may run (NaN in the result)
FULL_ONLY = {"unwritten", "uninit", "reduce_res_idle", "cur_uninit", "loop_uninit"}
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
    "nl_positional",
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
            elif m == "nl_positional":  # a keyword-only argument passed by position
                x = nl.load(a[row, col], mask) if p["where"] else nl.load(a[row, col], mask=mask)
                y = nl.load(b[row, col], mask=mask)
                z = op(x, y) if p["where"] else op(x, y, nl.float32)
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


def draw_classic(r: random.Random) -> dict:
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


# ---- current API (destination first) ----------------------------------------------------------
CURRENT_MUTATIONS = (
    "cur_bad_kwarg",
    "cur_extra_pos",
    "cur_missing_arg",
    "cur_dst_hbm",
    "cur_dst_shape",
    "cur_op_str",
    "cur_buffer",
    "cur_dtype",
    "cur_ap_oob",
    "cur_ap_pattern",
    "cur_slice",
    "cur_fori_bounds",
    "cur_fori_body",
    "cur_classic_form",
    "cur_ds_tile",
    "cur_uninit",
)


def build_current(p: dict):
    m, tp, cg, n = p["mut"], p["tp"], p["cg"], p["n"]

    def kern(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        rows = a.shape[0] // nl.num_programs(0)
        first = nl.program_id(0) * rows
        buf = nl.sbuf
        if m == "cur_buffer":
            buf = p["bad"]
        dt = p["bad"] if m == "cur_dtype" else nl.float32

        def body(i):
            lo = first + i * tp
            x = nl.ndarray((tp, cg), dtype=dt, buffer=buf)
            y = nl.ndarray((tp, cg), dtype=nl.float32, buffer=nl.sbuf)
            z = nl.ndarray((tp, cg + (1 if m == "cur_dst_shape" else 0)), dtype=nl.float32,
                           buffer=nl.sbuf)  # fmt: skip
            src = a[lo : lo + tp, 0:cg]
            if m == "cur_ap_oob":
                src = a.ap([[cg, tp], [1, cg]], offset=(p["rows"] - tp + p["extra"]) * cg)
            elif m == "cur_ap_pattern":
                src = a.ap(p["bad"])
            elif m == "cur_slice":
                src = a.slice(*p["bad"])
            elif m == "cur_ds_tile":
                src = a[lo : lo + tp, nl.ds(x, cg)]
            nisa.dma_copy(dst=x, src=src)
            if m != "cur_uninit":
                nisa.dma_copy(dst=y, src=b[lo : lo + tp, 0:cg])
            kw = dict(dst=z, data1=x, data2=y, op=getattr(nl, p["op"]))
            if m == "cur_bad_kwarg":
                kw[p["typo"]] = kw.pop(p["typo_of"])
            elif m == "cur_missing_arg":
                kw.pop(p["typo_of"])
            elif m == "cur_dst_hbm":
                kw["dst"] = out[lo : lo + tp, 0:cg]
            elif m == "cur_op_str":
                kw["op"] = p["bad"]
            if m == "cur_classic_form":  # a classic call (returning a tile) in a current kernel
                nisa.tensor_tensor(dst=z, data1=x, data2=y, op=getattr(nl, p["op"]))
                z = nisa.tensor_tensor(x, y, getattr(nl, p["op"]))
            elif m == "cur_extra_pos":
                nisa.tensor_tensor(z, x, y, getattr(nl, p["op"]), nisa.engine.vector, "n", 1)
            else:
                nisa.tensor_tensor(**kw)
            nisa.dma_copy(dst=out[lo : lo + tp, 0:cg], src=z)

        if m == "cur_fori_bounds":
            nl.fori_loop(p["bad"], n, body)
        elif m == "cur_fori_body":
            nl.fori_loop(0, n, p["bad"] if p["bad"] != "arity" else (lambda i, j: None))
        else:
            for i in nl.affine_range(n):
                body(i)
        return out

    return nki.jit(kern)


def draw_current(r: random.Random) -> dict:
    m = r.choice(CURRENT_MUTATIONS)
    lnc = r.choice([1, 2])
    tp, n = r.randint(2, 128), r.randint(1, 3)
    p = dict(mut=m, lnc=lnc, tp=tp, n=n, rows=tp * n * lnc, cg=r.randint(2, 16))
    p["extra"] = r.randint(1, 3)
    p["op"] = r.choice(["add", "subtract", "multiply", "maximum"])
    # (leaving dst out makes a valid classic call whose result is dropped: not this mistake)
    p["typo_of"] = r.choice(
        ["dst", "data1", "data2", "op"] if m != "cur_missing_arg" else ["data1", "data2", "op"]
    )
    p["typo"] = r.choice(["ds", "dts", "data", "dat1", "data3", "ops", "opp", "dst_", "out"])
    p["bad"] = {
        "cur_op_str": lambda: r.choice(["addd", np.sin, None, 3, nl.exp, nl.sbuf]),
        "cur_buffer": lambda: r.choice(["sbuf_", "x", 3, nl.float32, nl.hbm, nl.psum]),
        "cur_dtype": lambda: r.choice(["float99", np.float64, int, 3, nl.sbuf, None]),
        "cur_ap_pattern": lambda: r.choice(
            ["x", [[1]], [[0, 0]], 3, [[1, 10**9], [1, 2]], [[1, 2.5]], [[-1, 4], [1, 4]], []]
        ),
        "cur_slice": lambda: r.choice(
            [(5, 0, 2), (0, 4, 2), (0, "a", 2), (0, 0, 10**6), (1, -3, 2), (0, 0, 4, 0), ()]
        ),
        "cur_fori_bounds": lambda: r.choice(["0", 0.5, None, [0], -5, nl.sbuf]),
        "cur_fori_body": lambda: r.choice([None, 3, "body", "arity"]),
    }.get(m, lambda: None)()
    return p


# ---- current API: symbolic loops (traced once, unrolled where Python needs the int) ----------
LOOP_MUTATIONS = (
    "loop_no_min",
    "loop_waw",
    "loop_after_oob",
    "loop_counter_oob",
    "loop_too_large",
    "loop_float_index",
    "loop_dst_shape",
    "loop_uninit",
)
LOOP_KINDS = {"affine": nl.affine_range, "sequential": nl.sequential_range, "range": nl.range}


def build_loops(p: dict):
    """A current-API tiled add whose loop exercises what symbolic loops must get right (a
    min()-bounded ragged tile, an `if` on the iterator, a Python counter, a list of tiles read
    after the loop, an SBUF accumulator carried across iterations), with one planted mistake."""
    m, tp, cg, big = p["mut"], p["tp"], p["cg"], p["rows"]
    loop = LOOP_KINDS["affine" if m == "loop_waw" else p["loop"]]

    def kern(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        acc = nl.ndarray((tp, cg), dtype=nl.float32, buffer=nl.sbuf)
        if m != "loop_uninit":
            nisa.memset(dst=acc, value=0.0)
        off = tp * p["extra"] if m == "loop_counter_oob" else 0
        tiles = []
        if m == "loop_too_large":
            for i in nl.affine_range(200_000):
                if i % 7 == 3:  # Python needs the int: unrolled, far too many iterations
                    nisa.memset(dst=acc, value=0.0)
        for i in loop(-(-big // tp)):
            r0 = off if p["carry"] else i * tp
            rows = tp if m in ("loop_no_min", "loop_counter_oob") else min(tp, big - r0)
            x, y = (nl.ndarray((tp, cg), dtype=nl.float32, buffer=nl.sbuf) for _ in range(2))
            z = nl.ndarray((tp, cg + (m == "loop_dst_shape")), dtype=nl.float32, buffer=nl.sbuf)
            src = a[r0 * 0.5 : r0 * 0.5 + rows, :] if m == "loop_float_index" else a[r0 : r0 + rows]
            nisa.dma_copy(dst=x[0:rows, :], src=src)
            nisa.dma_copy(dst=y[0:rows, :], src=b[r0 : r0 + rows, :])
            nisa.tensor_tensor(dst=z[0:rows, :], data1=x[0:rows, :], data2=y[0:rows, :],
                               op=getattr(nl, p["op"]))  # fmt: skip
            if p["use_if"] and i == 0:
                nisa.tensor_scalar(dst=z[0:rows, :], data=z[0:rows, :], op0=nl.multiply,
                                   operand0=1.0)  # fmt: skip
            if p["accumulate"]:
                nisa.tensor_tensor(dst=acc[0:rows, :], data1=acc[0:rows, :], data2=z[0:rows, :],
                                   op=nl.add)  # fmt: skip
            dst = out[0:rows, :] if m == "loop_waw" else out[r0 : r0 + rows, :]
            nisa.dma_copy(dst=dst, src=z[0:rows, :])
            if p["keep"]:
                tiles.append(z)
            if p["carry"]:
                off += tp
        if m == "loop_after_oob":  # r0 is the last iteration's: one tile past the end
            t = nl.ndarray((tp, cg), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a[r0 + tp : r0 + 2 * tp, :])
            nisa.dma_copy(dst=out[0:tp, :], src=t)
        if p["accumulate"] and m == "loop_uninit":  # the sum read back: NaN (full checks)
            nisa.dma_copy(dst=out[0:tp, :], src=acc)
        if len(tiles) > 1:  # the first tile written again (a Python list filled in the loop)
            nisa.dma_copy(dst=out[0 : min(tp, big), :], src=tiles[0][0 : min(tp, big), :])
        return out

    return nki.jit(kern)


def draw_loops(r: random.Random) -> dict:
    m = r.choice(LOOP_MUTATIONS)
    tp = r.randint(2, 128)
    big = r.randint(tp + 1, 3 * tp)
    if m == "loop_no_min" and big % tp == 0:
        big += 1
    p = dict(mut=m, tp=tp, rows=big, cg=r.randint(2, 16), extra=r.randint(1, 3))
    p["loop"] = r.choice(sorted(LOOP_KINDS))
    p["op"] = r.choice(["add", "subtract", "multiply", "maximum"])
    p["carry"], p["use_if"], p["keep"] = (r.random() < 0.5 for _ in range(3))
    p["accumulate"] = m == "loop_uninit" or r.random() < 0.5
    if m == "loop_counter_oob":
        p["carry"] = True  # the counter starts past the first tile: the last tile overruns
    if m == "loop_waw":  # (a loop unrolled for Python is program order: last write wins)
        p.update(carry=False, use_if=False, keep=False, rows=tp * r.randint(2, 3))
    return p


# ---- argument checking of every nki.isa instruction of the spec --------------------------------
ARG_MUTATIONS = ("kw_typo", "kw_unknown", "pos_extra", "missing", "wrong_type", "dup")
_ACT = ("activation", "activation_reduce", "activate2")
_CMP = {"cmp_op", "comp_op0", "comp_op1"}
_ENUMS = ("reduce_cmd", "oob_mode", "dge_mode", "matmul_perf_mode", "engine", "dma_engine")


def _bad_values(par, t: dict) -> list:
    """Values of the wrong kind for one parameter (by its role and type in the spec)."""
    role, typ = par.role, par.type
    if role in ("dst", "in", "out") or "tile" in typ and role != "operand":
        return [3, "x", None, [1.0, 2.0], np.ones((2, 2), np.float32), t["hbm"], t["wide"],
                t["int"], 2.5]  # fmt: skip
    if role == "operand":
        return ["x", [1, 2], {"a": 1}, None, t["wide"], t["hbm"], complex(1, 2), nl.add]
    if role == "op":
        return ["add", np.add, None, 3, (lambda v: v), nl.exp, nl.sbuf, nl.float32]
    if role == "dtype":
        return ["float99", np.float64, int, 3, nl.sbuf, "x"]
    if role in ("engine", "register") or any(e in typ for e in _ENUMS):
        return ["x", 3.5, [1], nl.add, -1]
    if role == "mask":
        return ["x", 3, t["tile"], [True]]
    if role == "name":
        return [3, ["x"], t["tile"]]
    if "bool" in typ:
        return ["yes", 2, [True], 1.5, t["tile"]]
    if "pattern" in typ:
        return ["x", [[1]], [[0, 0]], 3, [[1, 10**9]], [[1, 2.5]]]
    if "32 ints" in typ:
        return [[0] * 5, "x", [99] * 32, None, [0.5] * 32]
    if "tuple" in typ or "ints" in typ:
        return ["x", (1.5,), 5, -7, (1, 1), [None], {"a": 1}]
    if "int" in typ or "float" in typ or "scalar" in typ:
        return [1.5, "x", -1, None, 10**12, [1], t["tile"], float("nan")]
    return ["x", 3, None, [1], t["tile"]]


def _good_value(name: str, par, t: dict):
    """A plausible value for a required parameter (the mutation makes the call wrong)."""
    role, typ = par.role, par.type
    if role == "dst":
        return t["dst"]
    if role == "out":
        return t["col"]
    if role == "in":
        return [t["tile"], t["tile2"]] if "list" in typ else t["tile"]
    if role == "operand":
        return 1.0
    if role == "op":
        return nl.exp if name in _ACT and par.name == "op" else (
            nl.less if par.name in _CMP else nl.add
        )  # fmt: skip
    if role == "dtype":
        return nl.float32
    if role == "register":
        return nisa.register_alloc(0) if "register" in typ else 0
    if "pattern" in typ:
        return [[1, t["cg"]]]
    if "32 ints" in typ:
        return list(range(32))
    if "bool" in typ:
        return False
    if "tuple" in typ:
        return (1,)
    if "predicate" in typ or "expression" in typ:
        return t["pred"]
    return 1


def _mutated(p: dict) -> str:
    """What an ``args`` mutant changed (for the report of accepted mutants)."""
    params = spec.get(p["instr"]).params(p["form"])
    if p["mut"] != "wrong_type":
        return ""
    q = params[p["pick"] % len(params)]
    bad = _bad_values(q, dict.fromkeys(("hbm", "wide", "int", "tile"), "<tile>"))
    return f"{q.name}={bad[p['seed'] % len(bad)]!r}"


def build_args(p: dict):
    name, form, m = p["instr"], p["form"], p["mut"]
    tp, cg = p["tp"], p["cg"]
    params = [q for q in spec.get(name).params(form)]

    def kern(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        if form == spec.CURRENT:
            x = nl.ndarray((tp, cg), dtype=nl.float32, buffer=nl.sbuf)
            x2 = nl.ndarray((tp, cg), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a[0:tp, 0:cg])
            nisa.dma_copy(dst=x2, src=b[0:tp, 0:cg])
        else:
            x, x2 = nl.load(a[0:tp, 0:cg]), nl.load(b[0:tp, 0:cg])
        ip, jf = nl.mgrid[0:tp, 0:cg]
        t = dict(
            hbm=a,
            tile=x,
            tile2=x2,
            cg=cg,
            pred=(ip < tp - 1),
            dst=nl.ndarray((tp, cg), dtype=nl.float32, buffer=nl.sbuf),
            col=nl.ndarray((tp, 1), dtype=nl.float32, buffer=nl.sbuf),
            wide=nl.ndarray((tp, cg + 3), dtype=nl.float32, buffer=nl.sbuf),
            int=nl.ndarray((tp, cg), dtype=nl.int32, buffer=nl.sbuf),
        )
        args = {q.name: _good_value(name, q, t) for q in params if q.required}
        if m == "kw_typo":
            key = p["pick"] % len(args) if args else 0
            k0 = sorted(args)[key] if args else "name"
            args[k0[1:] if p["seed"] % 2 else k0 + "s"] = args.pop(k0, 1)
        elif m == "kw_unknown":
            args[p["unknown"]] = 1
        elif m == "missing" and args:
            args.pop(sorted(args)[p["pick"] % len(args)])
        elif m == "wrong_type":
            q = params[p["pick"] % len(params)]
            bad = _bad_values(q, t)
            args[q.name] = bad[p["seed"] % len(bad)]
        fn = getattr(nisa, name)
        if m in ("pos_extra", "dup"):
            pos = [args.pop(q.name) for q in params if q.name in args and not q.kw_only]
            if m == "pos_extra":
                pos += [None] * (len(params) + 1 - len(pos))
            elif pos:
                args[next(q.name for q in params if not q.kw_only)] = pos[0]
            res = fn(*pos, **args)
        else:
            res = fn(**args)
        if form == spec.CLASSIC and res is not None:
            nl.store(out[0:tp, 0:cg], value=res)
        return out

    return nki.jit(kern)


def draw_args(r: random.Random) -> dict:
    form = r.choice([spec.CLASSIC, spec.CURRENT])
    name = r.choice([n for n in spec.names(form) if hasattr(nisa, n)])
    return dict(
        instr=name,
        form=form,
        mut=r.choice(ARG_MUTATIONS),
        tp=r.randint(2, 128),
        cg=r.randint(2, 16),
        rows=128,
        pick=r.randint(0, 99),
        seed=r.randint(0, 999),
        unknown=r.choice(["foo", "msk", "dtyp", "bais", "axes_", "dst_", "tranpose_x", "out"]),
    )


# ---- launching and configuring a valid kernel wrongly -----------------------------------------
LAUNCH_MUTATIONS = (
    "grid",
    "config",
    "jit_option",
    "configure",
    "arg_count",
    "arg_kw",
    "arg_type",
    "arg_dtype",
)


def _valid(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(b)))
    return out


def draw_launch(r: random.Random) -> dict:
    m = r.choice(LAUNCH_MUTATIONS)
    bad = {
        "grid": lambda: r.choice([0, -1, "x", 2.5, None, (2, 0), (1, "a"), 10**9]),
        "config": lambda: r.choice(
            [
                ("checks", "paranoid"),
                ("backend", "gpu"),
                ("shuffle_seed", "x"),
                ("precise_fp", "maybe"),
                ("checks", 3),
                ("backend", 7),
            ]
        ),  # fmt: skip
        "jit_option": lambda: r.choice(
            [
                ("mode", "fast"),
                ("platform_target", "trn9"),
                ("api", "newest"),
                ("platform_target", 3),
                ("mode", None),
                ("chekcs", "full"),
                ("target", "trn1"),
            ]
        ),  # fmt: skip
        "configure": lambda: r.choice([("chekcs", "full"), ("target", "trn7"), ("grid", 2)]),
        "arg_count": lambda: r.choice([1, 3, 0]),
        "arg_kw": lambda: r.choice(["c", "out", "a_"]),
        "arg_type": lambda: r.choice(["x", None, [[1.0, 2.0]], {"a": 1}, 3.5]),
        "arg_dtype": lambda: r.choice([np.float64, np.complex64, np.int64, object, np.uint64]),
    }[m]()
    return dict(mut=m, bad=bad, rows=128, cg=8)


def run_launch(p: dict, checks: str, backend: str, a, b):
    m, bad = p["mut"], p["bad"]
    k = nki.jit(_valid)
    if m == "jit_option":
        k = nki.jit(_valid, **{bad[0]: bad[1]})
    k = k.configure(checks=checks, backend=backend)
    if m == "grid":
        return k[bad](a, b)
    if m == "config":
        return k.configure(**{bad[0]: bad[1]})(a, b)
    if m == "configure":
        return k.configure(**{bad[0]: bad[1]})(a, b)
    if m == "arg_count":
        return k(*([a, b, a][:bad]))
    if m == "arg_kw":
        return k(a, b, **{bad: a})
    if m == "arg_type":
        return k(a, bad)
    return k(a, b.astype(bad))


BACKENDS = ("numpy", "batched", "numba")


class Hang(Exception):
    pass


def _alarm(*_):
    raise Hang()


FAMILIES = {
    "classic": draw_classic,
    "current": draw_current,
    "loops": draw_loops,
    "args": draw_args,
    "launch": draw_launch,
}


def draw(r: random.Random, family: str | None = None) -> dict:
    """One generated kernel's parameters (``family``: one of FAMILIES, else drawn)."""
    family = family or r.choice(sorted(FAMILIES))
    return dict(FAMILIES[family](r), family=family)


def launch_one(p: dict, checks: str, backend: str) -> None:
    """Build and run one generated kernel (what the fuzz test calls too)."""
    rng = np.random.default_rng(p["rows"])
    a = rng.standard_normal((p["rows"], p["cg"])).astype(np.float32)
    b = rng.standard_normal(a.shape).astype(np.float32)
    fam = p["family"]
    if fam == "launch":
        run_launch(p, checks, backend, a, b)
        return
    if fam == "current":
        build_current(p).configure(checks=checks, backend=backend)[p["lnc"]](a, b)
        return
    if fam == "args":
        build_args(p).configure(checks=checks, backend=backend)(a, b)
        return
    if fam == "loops":
        build_loops(p).configure(checks=checks, backend=backend)(a, b)
        return
    out_param = np.zeros(a.shape, np.float32)
    if p["mut"] == "readonly_out":
        out_param.flags.writeable = False
    build(p).configure(checks=checks, backend=backend)(a, b, out_param)


def run_one(p: dict, checks: str, backend: str, timeout: int) -> str:
    """The outcome of one run: 'located', 'clean', 'unlocated', 'err_runtime', 'internal:<T>'
    or 'hang'."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            launch_one(p, checks, backend)
        return "clean"
    except Hang:
        return "hang"
    except NKIError as e:
        if e.loc is None or e.loc.file != __file__ or e.loc.line <= 0:
            return f"unlocated:{e.code}:{e.loc}"
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
    ap.add_argument("--show-accepted", action="store_true", help="list accepted args mutants")
    args = ap.parse_args()
    r = random.Random(args.seed)
    sys.setrecursionlimit(600)  # the recursion mutation ends quickly
    counts: collections.Counter[str] = collections.Counter()
    by_family: collections.Counter[tuple[str, str]] = collections.Counter()
    bad: list[str] = []
    accepted: list[str] = []
    t0 = time.time()
    for _ in range(args.kernels):
        p = draw(r)
        for checks in ("static", "full"):
            for backend in BACKENDS:
                got = run_one(p, checks, backend, args.timeout)
                if got == "clean" and p.get("mut") in FULL_ONLY and checks != "full":
                    got = "clean (full-only mistake)"
                elif got == "clean" and p["family"] == "args":
                    got = "clean (accepted)"
                counts[got] += 1
                if got == "clean (accepted)" and checks == "static" and backend == "numpy":
                    accepted.append(f"{p['instr']} {p['form']} {p['mut']} {_mutated(p)}")
                by_family[(p["family"], got.split(":")[0])] += 1
                if got not in ("located", "clean (full-only mistake)", "clean (accepted)"):
                    bad.append(f"{got} {checks} {backend} {p}")
    runs = sum(counts.values())
    print(f"{args.kernels} kernels, {runs} runs, {time.time() - t0:.0f} s")
    for k, v in sorted(counts.items()):
        print(f"  {v:6d}  {k}")
    for (fam, got), v in sorted(by_family.items()):
        print(f"  {fam:8s} {got:28s} {v:6d}")
    if args.show_accepted:
        for line in sorted(set(accepted)):
            print("ACCEPTED", line)
    for line in bad[:40]:
        print("BAD", line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
