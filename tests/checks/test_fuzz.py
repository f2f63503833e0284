"""Fuzz: random mis-shaped / mis-placed / out-of-bounds kernels always end in an NKIError with a
kernel location (never an internal IndexError, AssertionError, KeyError, NumPy error or crash),
and the valid kernels of the same generator run clean and match NumPy. The generator of
``benchmarks/fuzz_invalid.py`` adds current-API kernels (and ones whose loops are traced once
and unrolled where Python needs the int), argument checking of every ``nki.isa`` instruction in
both calling forms, and wrong launches."""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nki
import nki.language as nl
from nki.errors import NKIError

BREAKS = (
    None,
    "nomask",
    "tp_big",
    "mismatch",
    "load_sbuf",
    "compute_hbm",
    "store_small",
    "loop_carried",
    "race",
    "sbuf_cap",
    "psum_bank",
    "uninit",
    "immutable",
    "col_oob",
    "neg_index",
    # argument checking and full-check paths of issue 13
    "bad_kwarg",
    "bad_shape",
    "iter_escape",
    "ds_tile",
    "unwritten",
    "loop_break",
    "or_mask",
    "pid_axis",
)
OPS = {
    "add": (nl.add, np.add),
    "subtract": (nl.subtract, np.subtract),
    "multiply": (nl.multiply, np.multiply),
    "maximum": (nl.maximum, np.maximum),
}


@st.composite
def kernels(draw):
    brk = draw(st.sampled_from(BREAKS))
    g = 2 if brk == "race" else draw(st.sampled_from([1, 2]))
    cg = draw(st.integers(2, 24))  # columns per instance
    if brk == "tp_big":
        tp = draw(st.integers(129, 256))
    else:
        tp = draw(st.integers(1, 128))
    if brk == "nomask":
        rows = tp * draw(st.integers(1, 3)) + draw(st.integers(1, max(1, tp - 1)))
        if rows % tp == 0:
            rows += 1
        if tp == 1:
            tp, rows = 2, 3
    else:
        rows = draw(st.integers(max(1, tp if brk == "tp_big" else 1), 300))
    if brk in ("store_small", "uninit") and tp < 2:
        tp = 2
    if brk in ("store_small", "mismatch"):
        rows = max(rows, tp, 128)  # the broken statement must be the only problem
    n = -(-rows // tp)
    if brk == "loop_carried" and n < 2:
        rows, n = tp * 2, 2
    p = dict(
        brk=brk,
        g=g,
        cg=cg,
        tp=tp,
        rows=rows,
        n=n,
        op=draw(st.sampled_from(sorted(OPS))),
        unary=draw(st.booleans()),
        tp2=draw(st.integers(2, 128).filter(lambda v: v != tp)),
        extra=draw(st.integers(1, 3)),
        target=draw(st.sampled_from(["trn1", "trn2", "trn3"])),
        shuffle=draw(st.sampled_from([None, 0, 7])),
        typo=draw(st.sampled_from(["msk", "maks", "dtyp", "dype"])),
        bad_shape=draw(st.sampled_from([None, float("nan"), "x", 1.5])),
    )
    return p


def build(p):
    brk, tp, rows, n, cg = p["brk"], p["tp"], p["rows"], p["n"], p["cg"]
    nl_op = OPS[p["op"]][0]

    def kern(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        j = nl.program_id(0) if p["g"] > 1 and brk != "race" else 0
        if brk == "pid_axis":
            j = j + nl.program_id(3)
        ip, jf = nl.mgrid[0:tp, 0:cg]
        col = j * cg + jf
        if brk == "col_oob":
            col = col + p["extra"] + (p["g"] - 1) * cg
        if brk == "bad_shape":
            nl.ndarray(p["bad_shape"], dtype=nl.float32, buffer=nl.sbuf)
        loops = list(nl.affine_range(n)) if brk == "iter_escape" else nl.affine_range(n)
        for i in loops:
            row = i * tp + ip
            if brk == "neg_index":
                row = row - p["extra"]
            m = None if brk == "nomask" or rows % tp == 0 else (row < rows)
            if brk == "bad_kwarg":
                x = nl.load(a[row, col], **{p["typo"]: m})
            x = nl.load(a[row, col], mask=m)
            if brk == "ds_tile":
                x = nl.load(a[row, nl.ds(nl.load(a[0:1, 0:1]), cg)])
            if brk == "load_sbuf":
                x = nl.load(x)
            if brk == "mismatch":
                y = nl.load(b[0 : p["tp2"], 0:cg])
            else:
                y = nl.load(b[row, col], mask=m)
            if brk == "compute_hbm":
                z = nl_op(a, y)
            elif p["unary"]:
                z = nl.exp(nl_op(x, y))
            else:
                z = nl_op(x, y)
            if brk == "sbuf_cap":
                big = nl.ndarray((tp, 60000), dtype=nl.float32, buffer=nl.sbuf)
                big[:, 0:cg] = z
                z = nl.copy(big[:, 0:cg])
            if brk == "psum_bank":
                ps = nl.zeros((tp, 512 + p["extra"]), dtype=nl.float32, buffer=nl.psum)
                z = nl.add(z, ps[:, 0:cg])
            if brk == "uninit":
                t = nl.ndarray((tp, cg), dtype=nl.float32, buffer=nl.sbuf)
                t[:, 0 : cg - 1] = z[:, 0 : cg - 1]
                z = nl.exp(t)
            if brk == "store_small":
                nl.store(out[i * tp : i * tp + max(1, tp // 2), 0:cg], value=z)
            elif brk == "immutable":
                nl.store(a[row, col], value=z, mask=m)
            elif brk == "unwritten":
                nl.store(out[row, col], value=z, mask=(row < rows - 1))
            elif brk == "loop_carried":
                nl.store(out[ip, col], value=z, mask=(ip < rows))
            elif brk == "or_mask":
                # `or` whose right operand is not a comparison (a bare `or` is a disjunction)
                nl.store(out[row, col], value=z, mask=(row < rows or (jf < cg) & (ip < tp)))
            else:
                nl.store(out[row, col], value=z, mask=m)
            if brk == "loop_break":
                break
        return out

    opts = {"platform_target": p["target"], "shuffle_seed": p["shuffle"]}
    if brk in ("uninit", "unwritten"):
        opts["checks"] = "full"
    if brk == "sbuf_cap":
        opts["platform_target"] = "trn1"
    if brk == "psum_bank" and p["target"] == "trn3":
        opts["platform_target"] = "trn2"  # NeuronCore-v4 PSUM tiles may span banks
    return nki.jit(kern, **opts)


def reference(p, a, b):
    z = OPS[p["op"]][1](a, b)
    return np.exp(z) if p["unary"] else z


# a broken kernel may also warn (an output region it never writes) before it fails
@pytest.mark.filterwarnings("ignore::nki.errors.NKIWarning")
@settings(max_examples=100, deadline=None)
@given(kernels(), st.integers(0, 2**31 - 1))
def test_fuzz_kernels_end_in_nki_errors_or_run_clean(p, seed):
    rng = np.random.default_rng(seed)
    shape = (p["rows"], p["cg"] * p["g"])
    a = rng.standard_normal(shape).astype(np.float32) * 0.5
    b = rng.standard_normal(shape).astype(np.float32) * 0.5
    k = build(p)
    launch = k[p["g"]] if p["g"] > 1 else k
    if p["brk"] is None:
        got = launch(a, b)
        np.testing.assert_allclose(got, reference(p, a, b), rtol=1e-5, atol=1e-6)
        return
    try:
        launch(a, b)
    except NKIError as e:
        assert e.code, f"{p}: {e!r} has no code"
        assert e.loc is not None and e.loc.file == __file__, f"{p}: {e}"
        assert e.code != "err_runtime", f"{p}: internal failure surfaced as: {e}"
    else:
        raise AssertionError(f"broken kernel ran clean: {p}")


_FUZZ_PATH = pathlib.Path(__file__).parents[2] / "benchmarks" / "fuzz_invalid.py"
_spec = importlib.util.spec_from_file_location("fuzz_invalid", _FUZZ_PATH)
fuzz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["classic", "current", "loops", "args", "launch"]),
    st.randoms(use_true_random=False),
)
def test_fuzz_current_api_arguments_and_launches_end_in_located_errors(family, r):
    p = fuzz.draw(r, family)
    if p.get("mut") == "recursion":
        return  # recursing to Python's limit takes seconds; the benchmark covers it
    try:
        fuzz.launch_one(p, "static", "numpy")
    except NKIError as e:
        assert e.code, f"{p}: {e!r} has no code"
        assert e.loc is not None and e.loc.file == fuzz.__file__ and e.loc.line > 0, f"{p}: {e}"
        assert e.code != "err_runtime", f"{p}: internal failure surfaced as: {e}"
    else:
        # an argument mutant may be legal after all (a negative axis, an int tile); a
        # full-only mistake runs at the default level: every other mutant must be reported
        assert family == "args" or p["mut"] in fuzz.FULL_ONLY, f"mutant ran clean: {p}"
