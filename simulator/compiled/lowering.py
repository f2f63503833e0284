"""Per-kind instruction lowering for the Numba backend: each ``@lowers(kind)`` function emits
the library kernel call(s) of one instruction (``numba_kernels.Spec``: the kernel, its
parameters) through an :class:`~simulator.compiled.access.Emitter`, or raises
:class:`~simulator.compiled.access.Unsupported` (the instruction is then hosted: compiled code
calls the interpreter's executor for it). Lowerings are found through the executor registry's
keys (``executors.lowering_of``).

Compiled natively (bit-identical to the interpreter): DMA / copy with affine, masked or
broadcast accesses, memset, the exact op-table rows in ``NATIVE`` (fp32 math, one rounding),
``nl.where``, ``sum`` / ``max`` / ``min`` over trailing free axes (a sum adds the elements in
order, as the engines do), with ``+=``-style accumulation. The other op-table rows gather their
operands and call NumPy back (numba's libm differs from NumPy's SIMD functions by 1-3 ulp)."""

from __future__ import annotations

import dataclasses

import numpy as np

from nki import dtypes
from nki.ir import Access, Const, Instr
from nki.optable import NATIVE, NATIVE_INT_OK, OPS

from ..executors import lowers
from .access import Emitter, Unsupported, broadcastable
from .kernels import Spec

# Op-table rows are computed natively in fp32 from the table's ``native`` column (NATIVE: exact
# IEEE arithmetic, one rounding, so the result equals NumPy's); NATIVE_INT_OK are the rows the
# interpreter runs in exact int64 when every operand is integral.
ACCUMULATE = ("add", "subtract", "multiply", "maximum", "minimum")

REDUCE = ("sum", "max", "min")


def elementwise(g: Emitter, ins: Instr, expr: str, srcs: tuple) -> None:
    """One ew-kernel call: ``expr`` is the fp32 value over ``{v0}, {v1}...`` (the values of
    ``srcs``: tile accesses or scalars)."""
    dst = ins.dst
    assert dst is not None
    S = dst.shape
    accs = [a for a in srcs if isinstance(a, Access)]
    for a in accs:
        if not broadcastable(a.shape, S):
            raise Unsupported("operand shape does not broadcast to the destination")
    masked = ins.mask is not None
    checks = []
    if masked:  # operands not of the mask's shape are read whole
        g.tile_checks([a for a in accs if a.shape != S])
        checks = g.bound_checks([a for a in accs if a.shape == S] + [dst], len(S))
    two_phase = ins.accumulate is not None or g.overlaps(ins)
    kinds = tuple(g.kind(a.tensor) if isinstance(a, Access) else "c" for a in srcs)
    spec = Spec(
        "ew",
        expr=expr,
        dst=g.kind(dst.tensor),
        operands=kinds,
        acc=NATIVE[ins.accumulate] if ins.accumulate is not None else "",
        mask=1 if masked else 0,
        two_phase=two_phase,
        checks=bool(checks),
    )
    rank = len(S)
    tmp = g.scratch(S) if two_phase else "Z"
    blocks = [g.flat(dst, rank)] + [g.flat(a, rank) for a in accs]
    spec = dataclasses.replace(spec, unit=g.unit(S, blocks))
    args = [g.arg(dst.tensor)] + [g.arg(a.tensor) for a in accs] + [tmp]
    consts = [const_value(c) for c in srcs if not isinstance(c, Access)]
    g.call(spec, S, rank, args, blocks, ins.mask, checks, consts=consts)


def const_value(c: object) -> float:
    if isinstance(c, Const) and isinstance(c.value, (bool, int, float, np.generic)):
        return float(np.float32(c.value))  # the interpreter makes every scalar an np.float32
    raise Unsupported(f"operand {c!s}")


def raw_copy(g: Emitter, ins: Instr, src: Access) -> bool:
    """Same-storage moves copy bits (NaN payloads included), as NumPy does."""
    dst = ins.dst
    assert dst is not None
    if ins.accumulate is not None or g.kind(src.tensor) != g.kind(dst.tensor):
        return False
    S = dst.shape
    if not broadcastable(src.shape, S):
        raise Unsupported("source shape does not broadcast to the destination")
    masked = ins.mask is not None
    checks = g.bound_checks([src, dst], len(S)) if masked else []
    two_phase = g.overlaps(ins)
    tmp = g.scratch(S, g.args[dst.tensor].dtype) if two_phase else g.arg(dst.tensor)
    blocks = [g.flat(dst, len(S)), g.flat(src, len(S))]
    spec = Spec("copy", mask=int(masked), two_phase=two_phase, checks=bool(checks),
                unit=g.unit(S, blocks))  # fmt: skip
    args = [g.arg(dst.tensor), g.arg(src.tensor), tmp]
    g.call(spec, S, len(S), args, blocks, ins.mask, checks)
    return True


@lowers("dma")
@lowers("copy")
def lower_move(g: Emitter, ins: Instr) -> None:
    src = ins.srcs[0] if len(ins.srcs) == 1 else None
    if not isinstance(src, Access) or ins.attrs:
        raise Unsupported(f"{ins.kind} with attributes / non-tile operand")
    if ins.mask is not None and src.shape != ins.dst.shape:  # type: ignore[union-attr]
        raise Unsupported("masked move between tiles of different shapes")
    if not raw_copy(g, ins, src):
        elementwise(g, ins, "{v0}", (src,))


@lowers("memset")
def lower_memset(g: Emitter, ins: Instr) -> None:
    c = ins.srcs[0]
    if len(ins.srcs) != 1 or not isinstance(c, Const) or ins.attrs:
        raise Unsupported("memset form")
    if not isinstance(c.value, (bool, int, float, np.generic)):
        raise Unsupported("memset of a non-scalar")
    elementwise(g, ins, "{v0}", (c,))


def is_int_operand(g: Emitter, s: object) -> bool:
    if isinstance(s, Access):
        d = g.ir.tensor(s.tensor).dtype
        return dtypes.is_int(d) or dtypes.is_bool(d)
    v = getattr(s, "value", None)
    return not (isinstance(v, float) or (isinstance(v, np.generic) and v.dtype.kind == "f"))


def check_exact(g: Emitter, ins: Instr, op_ok: bool) -> None:
    """The interpreter's exact-int64 path must give the same numbers as fp32 here."""
    if not all(is_int_operand(g, s) for s in ins.srcs):
        return
    if not op_ok:
        raise Unsupported(f"exact integer '{ins.op}'")
    for s in ins.srcs:
        if isinstance(s, Const):
            v = s.value
            if isinstance(v, bool):
                continue
            if not isinstance(v, (int, np.integer)) or abs(int(v)) >= 2**24:
                raise Unsupported("large integer constant in exact integer math")


@lowers("ew")
def lower_ew(g: Emitter, ins: Instr) -> None:
    op = OPS.get(ins.op)
    if op is None or op.bitvec or len(ins.srcs) != op.arity or ins.attrs:
        raise Unsupported(f"element-wise op '{ins.op}'")
    for s in ins.srcs:
        if not isinstance(s, (Access, Const)):
            raise Unsupported(f"operand {s!s}")
    if op.exact_int:
        check_exact(g, ins, ins.op in NATIVE_INT_OK)
    if ins.op in NATIVE:
        last = len(ins.srcs) - 1
        expr = NATIVE[ins.op].format(a="{v0}", b=f"{{v{last}}}")
        elementwise(g, ins, expr, tuple(ins.srcs))
    else:
        numpy_ew(g, ins)


def numpy_ew(
    g: Emitter, ins: Instr, op: str | None = None, srcs: tuple | None = None, pre: str = ""
) -> None:
    """Gather the operands, run the op-table row ``op`` (default: the instruction's) with
    NumPy (call back), write back. With ``pre`` (an fp32 expression over ``srcs``, as in
    ``elementwise``), the row's one operand is ``pre`` computed natively while gathering."""
    dst = ins.dst
    assert dst is not None
    op = ins.op if op is None else op
    srcs = tuple(ins.srcs) if srcs is None else srcs
    S = dst.shape
    rank = len(S)
    masked = ins.mask is not None
    accs = [s for s in srcs if isinstance(s, Access)]
    for s in accs:
        if not broadcastable(s.shape, S):
            raise Unsupported("operand shape does not broadcast to the destination")
    if masked:  # everything is checked before anything is gathered
        g.tile_checks([a for a in accs if a.shape != S])
        checks = g.bound_checks([a for a in accs if a.shape == S] + [dst], rank)
        if checks:
            g.call(Spec("check", checks=True), S, rank, [], [], ins.mask, checks)
    args: list[object] = []  # scratch names (gathered tiles) or fp32 constants
    if pre:
        for s in srcs:
            if not isinstance(s, (Access, Const)):
                raise Unsupported(f"operand {s!s}")
        gathered = g.scratch(S)
        args.append(gathered)
        kinds = tuple(g.kind(s.tensor) if isinstance(s, Access) else "c" for s in srcs)
        spec = Spec("ew", expr=pre, dst="f", operands=kinds, mask=2 * masked)
        blocks = [g.dense(S)] + [g.flat(a, rank) for a in accs]
        spec = dataclasses.replace(spec, unit=g.unit(S, blocks))
        consts = [const_value(c) for c in srcs if not isinstance(c, Access)]
        names = [gathered] + [g.arg(a.tensor) for a in accs] + ["Z"]
        g.call(spec, S, rank, names, blocks, ins.mask, consts=consts)
        srcs = ()
    for s in srcs:
        if isinstance(s, Const):
            args.append(const_value(s))
            continue
        if not isinstance(s, Access):
            raise Unsupported(f"operand {s!s}")
        gathered = g.scratch(s.shape)
        args.append(gathered)
        # masked-out lanes are not read (their value is unused)
        mask = ins.mask if masked and s.shape == S else None
        spec = Spec("ew", expr="{v0}", dst="f", operands=(g.kind(s.tensor),), mask=2 * bool(mask))
        blocks = [g.dense(s.shape), g.flat(s, rank)]
        spec = dataclasses.replace(spec, unit=g.unit(s.shape, blocks))
        g.call(spec, s.shape, rank, [gathered, g.arg(s.tensor), "Z"], blocks, mask, consts=[])
    r = g.scratch(S)
    g.ew_calls[g.cur] = (op, tuple(S), tuple(args), r)
    g.callback(1)
    spec = Spec(
        "ew",
        expr="{v0}",
        dst=g.kind(dst.tensor),
        operands=("f",),
        acc=NATIVE[ins.accumulate] if ins.accumulate is not None else "",
        mask=1 if masked else 0,
        two_phase=ins.accumulate is not None,  # old values are all read before any is written
    )
    tmp = g.scratch(S) if spec.two_phase else "Z"
    blocks = [g.flat(dst, rank), g.dense(S)]
    spec = dataclasses.replace(spec, unit=g.unit(S, blocks))
    g.call(spec, S, rank, [g.arg(dst.tensor), r, tmp], blocks, ins.mask, consts=[])


@lowers("select")
def lower_select(g: Emitter, ins: Instr) -> None:
    if len(ins.srcs) != 3 or ins.attrs:
        raise Unsupported("select form")
    if all(is_int_operand(g, s) for s in ins.srcs[1:]):
        raise Unsupported("exact integer select")
    for s in ins.srcs:
        if not isinstance(s, (Access, Const)):
            raise Unsupported(f"operand {s!s}")
    elementwise(g, ins, "(({v1}) if ({v0}) != 0 else ({v2}))", tuple(ins.srcs))


@lowers("reduce")
def lower_reduce(g: Emitter, ins: Instr) -> None:
    src, dst = ins.srcs[0], ins.dst
    assert dst is not None
    if ins.op not in REDUCE or not isinstance(src, Access) or len(ins.srcs) != 1:
        raise Unsupported(f"reduction '{ins.op}'")
    if set(k for k, _ in ins.attrs) - {"axes", "keepdims"}:
        raise Unsupported("reduction attributes")
    if g.kind(src.tensor) == "b":
        raise Unsupported("reduction of a bool tile")
    if ins.accumulate is not None or g.overlaps(ins):
        raise Unsupported("accumulating / in-place reduction")
    rank = len(src.shape)
    axes = tuple(sorted(int(a) for a in ins.attr("axes")))
    k = rank - len(axes)
    if not axes or axes != tuple(range(k, rank)) or (ins.op == "sum" and len(axes) != 1):
        raise Unsupported(f"reduction over axes {axes}")
    outer = src.shape[:k]
    if int(np.prod(outer)) != int(np.prod(dst.shape)):
        raise Unsupported("reduction result shape")
    if len(dst.shape) > rank:
        raise Unsupported("reduction result of higher rank than its source")
    masked = ins.mask is not None
    checks = []
    if masked:  # the source is read whole; the destination where any input is selected
        g.tile_checks([src])
        checks = g.bound_checks([dst], len(dst.shape))
    spec = Spec("reduce", expr=ins.op, dst=g.kind(dst.tensor), operands=(g.kind(src.tensor),),
                mask=int(masked), checks=bool(checks))  # fmt: skip
    eshape = [1] * (4 - len(dst.shape)) + [int(n) for n in dst.shape]
    blocks = [g.flat(dst, len(dst.shape)), g.flat(src, rank)]
    args = [g.arg(dst.tensor), g.arg(src.tensor), "Z"]
    g.call(spec, src.shape, rank, args, blocks, ins.mask, checks, extra=[len(axes), *eshape])
