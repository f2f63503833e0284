"""Per-dtype tolerances and ``assert_allclose`` with a report of the worst element.

Policy: a result is compared to a reference computed from the same (already rounded) inputs.
``rtol`` is ``2 ** -mantissa_bits`` of the result dtype: two roundings of the format (e.g. the
engine's write plus one intermediate), so a correct kernel passes, while a kernel that computes
in a *narrower* format than its output fails (bf16 arithmetic breaks the fp32 tolerance, fp8
breaks the bf16 one, bf16 breaks the fp16 one). ``atol`` equals ``rtol`` for the low-precision
formats (errors relative to values of order 1, which covers cancellation in intermediate
roundings) and is 1e-5 for fp32. fp32 uses ``rtol=1e-5`` (about 80 ulp) to allow a different
summation order or a different accurate implementation of a function. Integers and bool are
exact.

Accumulation: a value summed from ``n`` terms in fp32 (a matmul's contraction times the
``affine_range`` iterations accumulating into PSUM, a reduction's length) legitimately differs
from a reference summed in another order by up to about ``n x 2**-24`` of the terms'
magnitude. ``check_kernel`` reads ``n`` per output from the traced kernel (``accumulations``)
and widens the default tolerance to ``rtol = n x 2**-24``, ``atol = n x 2**-24 x
max|reference|`` when that is larger (``accumulation_tolerance``); a kernel that computes in a
narrower format still fails, since its error grows with the format's epsilon, not fp32's."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes as _dt
from ..errors import SrcLoc
from ..ir import Access, Alloc, Instr, KernelIR, Loop, PidSym
from ..optable import OPS

TOLERANCES: dict[str, tuple[float, float]] = {
    # dtype: (rtol, atol)
    "float32": (1e-5, 1e-5),
    "tfloat32": (2.0**-10, 2.0**-10),
    "float16": (2.0**-10, 2.0**-10),
    "bfloat16": (2.0**-7, 2.0**-7),
    "float8_e4m3": (2.0**-3, 2.0**-3),
    "float8_e4m3fn": (2.0**-3, 2.0**-3),
    "float8_e5m2": (2.0**-2, 2.0**-2),
}


def tolerance(dtype: Any) -> tuple[float, float]:
    """``(rtol, atol)`` for results of ``dtype``: see the module docstring; ``(0, 0)`` (exact)
    for integer and bool dtypes. Example: ``tolerance("bfloat16") == (2**-7, 2**-7)``."""
    name = _dt.name_of(dtype)
    return TOLERANCES.get(name, (0.0, 0.0))


def _fmt_index(flat: int, shape: tuple[int, ...]) -> str:
    if not shape:
        return "()"
    return str(tuple(int(i) for i in np.unravel_index(flat, shape)))


def _as_numpy(x: Any) -> np.ndarray:
    """NumPy view of a NumPy / torch / jax array (bfloat16 included)."""
    mod = type(x).__module__
    if mod.startswith("torch"):
        t = x.detach().cpu()
        name = str(t.dtype).removeprefix("torch.")
        if name == "bfloat16" or name.startswith("float8"):  # (NumPy has none: their bits)
            import ml_dtypes
            import torch

            bits = t.contiguous().view(torch.int16 if name == "bfloat16" else torch.uint8)
            return bits.numpy().view(getattr(ml_dtypes, name))
        return t.numpy()
    return np.asarray(x)


def _num(v: float, arr: np.ndarray) -> str:
    if arr.dtype.kind in "iub" and np.isfinite(v):
        return str(int(v))
    return f"{float(v):.8g}"


def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def compare(
    actual: Any,
    expected: Any,
    *,
    dtype: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = True,
) -> str | None:
    """``None`` when ``actual`` matches ``expected`` within tolerance, else the failure report
    (the text ``assert_allclose`` raises). Same arguments as ``assert_allclose``."""
    a = _as_numpy(actual)
    e = _as_numpy(expected)
    name = _dt.name_of(dtype if dtype is not None else a.dtype)
    d_rtol, d_atol = tolerance(name)
    rtol = d_rtol if rtol is None else float(rtol)
    atol = d_atol if atol is None else float(atol)
    head = f"dtype {name}, rtol={rtol:.3g}, atol={atol:.3g}"
    if a.shape != e.shape:
        return f"Arrays differ in shape: actual {a.shape} vs expected {e.shape} ({head})"
    if a.size == 0:
        return None
    af = _f64(a).ravel()
    ef = _f64(e).ravel()
    with np.errstate(all="ignore"):
        diff = np.abs(af - ef)
        rel = diff / np.abs(ef)
        an, en = np.isnan(af), np.isnan(ef)
        bound = atol + rtol * np.abs(ef)
        bad = ~(diff <= bound)
        # an infinity on either side must be matched exactly (inf - x is never "close")
        bad = np.where(np.isinf(af) | np.isinf(ef), af != ef, bad)
        if equal_nan:
            bad &= ~(an & en)
        # how far past the bound each element is; NaN / inf mismatches are the worst
        excess = np.where(np.isfinite(diff), diff - bound, np.inf)
    nbad = int(bad.sum())
    if nbad == 0:
        return None
    excess = np.where(bad, excess, -np.inf)
    w = int(np.argmax(excess))
    finite = np.isfinite(diff)  # max errors over every comparable element
    lines = [
        f"Arrays not close ({head}): {nbad} of {a.size} elements differ "
        f"({100.0 * nbad / a.size:.3g}%)",
        f"  worst element at index {_fmt_index(w, a.shape)}: actual {_num(af[w], a)}, "
        f"expected {_num(ef[w], e)} (abs error {diff[w]:.6g}, rel error {rel[w]:.6g})",
    ]
    if finite.any():
        ia = int(np.argmax(np.where(finite, diff, -1.0)))
        rr = np.where(finite & np.isfinite(rel), rel, -1.0)
        ir = int(np.argmax(rr))
        lines.append(f"  max abs error {diff[ia]:.6g} at index {_fmt_index(ia, a.shape)}")
        if rr[ir] >= 0:
            lines.append(f"  max rel error {rel[ir]:.6g} at index {_fmt_index(ir, a.shape)}")
    nan_mis = int((an != en).sum())
    if nan_mis:
        lines.append(f"  NaN in one array but not the other at {nan_mis} element(s)")
    return "\n".join(lines)


def assert_allclose(
    actual: Any,
    expected: Any,
    *,
    dtype: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = True,
) -> None:
    """Assert ``|actual - expected| <= atol + rtol * |expected|`` element-wise.

    Tolerances default to those of ``dtype`` (default: ``actual``'s dtype; see ``tolerance``);
    integer and bool results must be exact. Infinities must match exactly and NaNs must sit in
    the same places (``equal_nan``). Shapes must be equal. Accepts NumPy, torch and jax arrays.
    The ``AssertionError`` reports how many elements differ, the worst element's index and both
    values with its absolute and relative error, and the max absolute and relative errors.
    Example: ``assert_allclose(kernel(a), a + 1, dtype="bfloat16")``."""
    msg = compare(actual, expected, dtype=dtype, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if msg is not None:
        raise AssertionError(msg)


# --------------------------------------------------------------------------------------------
# Accumulation length: how many terms a kernel sums into each output
# --------------------------------------------------------------------------------------------

ACC_EPS = 2.0**-24  # unit roundoff of the fp32 accumulators (PSUM, engines' fp32 arithmetic)


@dataclass(frozen=True)
class Accumulation:
    """What an output's values are summed from: ``terms`` addends in all (contraction of
    matmuls and reductions times the loop iterations accumulating into one element), of which
    ``reordered`` partial results are summed across ``affine_range`` iterations or SPMD
    instances (the order shuffling changes), by the accumulation at ``loc``."""

    terms: int = 1
    reordered: int = 1
    loc: SrcLoc | None = None


def _contraction(instr: Instr) -> int:
    """Addends one execution of ``instr`` sums into each destination element."""
    if "matmul" in instr.op and len(instr.srcs) >= 2 and isinstance(instr.srcs[1], Access):
        return max(1, instr.srcs[1].shape[0])  # the moving operand's partitions: K
    if not isinstance(instr.dst, Access):
        return 1
    n_dst = math.prod(instr.dst.shape)
    n_src = max((math.prod(s.shape) for s in instr.srcs if isinstance(s, Access)), default=1)
    return max(1, n_src // max(1, n_dst))  # a reduction: source elements per result


def _accumulating(instr: Instr) -> bool:
    if instr.accumulate is not None or instr.attr("rmw"):
        return True
    row = OPS.get(instr.op) if instr.kind == "ew" else None  # t = op(t, x), op a reducer
    return row is not None and row.identity is not None and instr.dst in instr.srcs


def accumulations(ir: KernelIR) -> dict[str, Accumulation]:
    """Per output tensor of ``ir``, the largest accumulation its values come from (outputs
    computed without one map to ``Accumulation()``). Follows data flow tensor by tensor: a
    value computed from accumulated values carries their count, a matmul or reduction
    multiplies it by its contraction length, and an accumulating write (``+=``,
    ``dst_rmw_op=``, ``t = op(t, x)``) by the trip counts of the loops around it whose iterator
    does not index the destination (and by the grid size for shared HBM every instance
    accumulates into)."""
    acc: dict[str, Accumulation] = {}
    n_inst = math.prod(ir.grid.shape) if ir.grid.shape else 1

    def visit(instr: Instr, loops: tuple[Loop, ...]) -> None:
        dst = instr.dst
        if not isinstance(dst, Access):
            return
        accumulating = _accumulating(instr)
        key = ir.storage_of(dst.tensor)
        # the destination read by its own accumulation is the running sum, not an input
        found = [
            acc.get(ir.storage_of(s.tensor))
            for s in instr.srcs
            if isinstance(s, Access) and not (accumulating and ir.storage_of(s.tensor) == key)
        ]
        ins = [a for a in found if a is not None and a.terms > 1]
        inner = max((a.terms for a in ins), default=1)
        reordered = max((a.reordered for a in ins), default=1)
        loc = max(ins, key=lambda a: a.terms).loc if ins else None
        own = _contraction(instr)
        if accumulating:
            used = {s for e in dst.index for s in e.base.symbols()}
            # (a fresh tile per iteration)
            mine = alloc_loops.get(ir.storage_of(dst.tensor), frozenset())
            outer = [lp for lp in loops if lp.sym not in used and id(lp) not in mine]
            shuffled = math.prod(lp.trip_count for lp in outer if lp.kind == "affine")
            own *= math.prod(lp.trip_count for lp in outer)
            d = ir.tensor(ir.storage_of(dst.tensor))
            if d.buffer == "shared_hbm" or d.kind == "param":
                if not any(isinstance(s, PidSym) for s in used):
                    own, shuffled = own * n_inst, shuffled * n_inst
            if shuffled > reordered:
                reordered, loc = shuffled, instr.loc
        if own > 1 and loc is None:
            loc = instr.loc
        terms = own * inner  # a sum of own values, each a sum of inner terms
        old = acc.get(key)
        if old is None or terms > old.terms or reordered > old.reordered:
            acc[key] = Accumulation(
                max(terms, old.terms if old else 1),
                max(reordered, old.reordered if old else 1),
                loc if loc is not None else (old.loc if old else None),
            )

    alloc_loops = {
        n.tensor: frozenset(id(lp) for lp in loops)
        for n, loops in ir.walk()
        if isinstance(n, Alloc)
    }
    for _ in range(2):  # a second pass lets values flow back to the top of loops
        for instr, loops in ir.instructions():
            visit(instr, loops)
    return {o: acc.get(ir.storage_of(o), Accumulation()) for o in ir.outputs}


def accumulation_tolerance(
    dtype: Any, terms: int, scale: float, rtol: float | None = None, atol: float | None = None
) -> tuple[float, float]:
    """``(rtol, atol)`` for results of ``dtype`` summed from ``terms`` addends in fp32, whose
    magnitudes are of order ``scale`` (the largest reference value): the dtype's tolerance, or
    the fp32 summation-order bound ``terms x 2**-24`` (relative, and times ``scale`` absolute)
    when larger. Explicit ``rtol`` / ``atol`` win. Example: a K = 1024 fp32 matmul gets
    ``atol = 1024 * 2**-24 * max|C|``."""
    r, a = tolerance(dtype)
    if terms > 1 and _dt.is_float(_dt.name_of(dtype)):
        r = max(r, terms * ACC_EPS)
        a = max(a, terms * ACC_EPS * float(scale))
    return (r if rtol is None else float(rtol)), (a if atol is None else float(atol))
