"""Per-kind instruction lowering for the Numba backend: each ``@lowers(kind)`` function writes
the loop nest of one instruction through an :class:`~simulator.numba_access.Emitter`, or raises
:class:`~simulator.numba_access.Unsupported` (the instruction is then hosted: compiled code
calls the interpreter's executor for it). Lowerings are found through the executor registry's
keys (``executors.lowering_of``).

Compiled natively (bit-identical to the interpreter): DMA / copy with affine, masked or
broadcast accesses, memset, the exact op-table rows in ``NATIVE`` (fp32 math, one rounding),
``nl.where``, ``sum`` / ``max`` / ``min`` over trailing free axes (NumPy's pairwise summation
order), with ``+=``-style accumulation. The other op-table rows gather their operands and call
NumPy back (numba's libm differs from NumPy's SIMD functions by 1-3 ulp)."""

from __future__ import annotations

import numpy as np

from nki import dtypes
from nki.ir import Access, Const, Instr
from nki.optable import NATIVE, NATIVE_INT_OK, OPS

from .executors import lowers
from .numba_access import Emitter, Unsupported, broadcastable, f32_literal

# Op-table rows are computed natively in fp32 from the table's ``native`` column (NATIVE: exact
# IEEE arithmetic, one rounding, so the result equals NumPy's); NATIVE_INT_OK are the rows the
# interpreter runs in exact int64 when every operand is integral.
ACCUMULATE = ("add", "subtract", "multiply", "maximum", "minimum")

REDUCE = ("sum", "max", "min")


def elementwise(g: Emitter, ins: Instr, value_of, operands: list[Access]) -> None:
    """``value_of(ivars) -> fp32 expression``; ``operands`` are the Access operands."""
    dst = ins.dst
    assert dst is not None
    S = dst.shape
    for a in operands:
        if not broadcastable(a.shape, S):
            raise Unsupported("operand shape does not broadcast to the destination")
    masked = ins.mask is not None
    if masked:  # operands not of the mask's shape are read whole
        g.tile_checks([a for a in operands if a.shape != S])
        g.precheck(ins, S, [a for a in operands if a.shape == S] + [dst])
    two_phase = ins.accumulate is not None or g.overlaps(ins)
    tmp = g.scratch(S) if two_phase else ""
    iv = g.loops(S)
    if masked:
        g.emit(f"if not ({g.mask_cond(ins.mask, iv)}): continue")
    v = value_of(iv)
    if ins.accumulate is not None:
        v = NATIVE[ins.accumulate].format(a=g.read(dst, iv), b=f"({v})")
    if two_phase:
        g.emit(f"{tmp}[{', '.join(iv)}] = {v}")
    else:
        g.store(dst, iv, v)
    g.close(len(S))
    if two_phase:
        iv = g.loops(S)
        if masked:
            g.emit(f"if not ({g.mask_cond(ins.mask, iv)}): continue")
        g.store(dst, iv, f"{tmp}[{', '.join(iv)}]")
        g.close(len(S))


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
    if masked:
        g.precheck(ins, S, [src, dst])
    two_phase = g.overlaps(ins)
    tmp = g.scratch(S, g.args[dst.tensor].dtype) if two_phase else ""
    iv = g.loops(S)
    if masked:
        g.emit(f"if not ({g.mask_cond(ins.mask, iv)}): continue")
    target = f"{tmp}[{', '.join(iv)}]" if two_phase else g.access(dst, iv)
    g.emit(f"{target} = {g.access(src, iv)}")
    g.close(len(S))
    if two_phase:
        iv = g.loops(S)
        if masked:
            g.emit(f"if not ({g.mask_cond(ins.mask, iv)}): continue")
        g.emit(f"{g.access(dst, iv)} = {tmp}[{', '.join(iv)}]")
        g.close(len(S))
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
        elementwise(g, ins, lambda iv: g.read(src, iv), [src])


@lowers("memset")
def lower_memset(g: Emitter, ins: Instr) -> None:
    c = ins.srcs[0]
    if len(ins.srcs) != 1 or not isinstance(c, Const) or ins.attrs:
        raise Unsupported("memset form")
    if not isinstance(c.value, (bool, int, float, np.generic)):
        raise Unsupported("memset of a non-scalar")
    lit = f32_literal(c.value)
    elementwise(g, ins, lambda iv: lit, [])


def operand(g: Emitter, s: object, iv: list[str]) -> str:
    if isinstance(s, Access):
        return g.read(s, iv)
    if isinstance(s, Const) and isinstance(s.value, (bool, int, float, np.generic)):
        return f32_literal(s.value)
    raise Unsupported(f"operand {s!s}")


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
    accs = [s for s in ins.srcs if isinstance(s, Access)]
    if ins.op in NATIVE:
        tpl = NATIVE[ins.op]

        def value(iv: list[str]) -> str:
            vals = [operand(g, s, iv) for s in ins.srcs]
            return tpl.format(a=f"({vals[0]})", b=f"({vals[-1]})")

        elementwise(g, ins, value, accs)
    else:
        numpy_ew(g, ins)


def numpy_ew(g: Emitter, ins: Instr) -> None:
    """Gather the operands, run the op-table row with NumPy (call back), write back."""
    dst = ins.dst
    assert dst is not None
    S = dst.shape
    masked = ins.mask is not None
    accs = [s for s in ins.srcs if isinstance(s, Access)]
    for s in accs:
        if not broadcastable(s.shape, S):
            raise Unsupported("operand shape does not broadcast to the destination")
    if masked:
        g.tile_checks([a for a in accs if a.shape != S])
        g.precheck(ins, S, [a for a in accs if a.shape == S] + [dst])
    args: list[object] = []  # scratch names (gathered tiles) or fp32 constants
    for s in ins.srcs:
        if isinstance(s, Const):
            args.append(float(np.float32(s.value)))
            continue
        assert isinstance(s, Access)
        gathered = g.scratch(s.shape)
        args.append(gathered)
        iv = g.loops(s.shape)
        if masked and s.shape == S:  # masked-out lanes are not read (their value is unused)
            g.emit(f"if not ({g.mask_cond(ins.mask, iv)}):")
            g.emit(f"    {gathered}[{', '.join(iv)}] = np.float32(0.0)")
            g.emit("    continue")
        g.emit(f"{gathered}[{', '.join(iv)}] = {g.read(s, iv)}")
        g.close(len(s.shape))
    r = g.scratch(S)
    g.ew_calls[g.cur] = (ins.op, tuple(S), tuple(args), r)
    g.callback(1)
    iv = g.loops(S)
    if masked:
        g.emit(f"if not ({g.mask_cond(ins.mask, iv)}): continue")
    if ins.accumulate is not None:  # old values are all read before any is written
        v = NATIVE[ins.accumulate].format(a=g.read(dst, iv), b=f"{r}[{', '.join(iv)}]")
        g.emit(f"{r}[{', '.join(iv)}] = {v}")
        g.close(len(S))
        iv = g.loops(S)
        if masked:
            g.emit(f"if not ({g.mask_cond(ins.mask, iv)}): continue")
    g.store(dst, iv, f"{r}[{', '.join(iv)}]")
    g.close(len(S))


@lowers("select")
def lower_select(g: Emitter, ins: Instr) -> None:
    if len(ins.srcs) != 3 or ins.attrs:
        raise Unsupported("select form")
    if all(is_int_operand(g, s) for s in ins.srcs[1:]):
        raise Unsupported("exact integer select")
    accs = [s for s in ins.srcs if isinstance(s, Access)]

    def value(iv: list[str]) -> str:
        c, a, b = (operand(g, s, iv) for s in ins.srcs)
        return f"(({a}) if ({c}) != 0 else ({b}))"

    elementwise(g, ins, value, accs)


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
    outer, inner = src.shape[:k], src.shape[k:]
    if int(np.prod(outer)) != int(np.prod(dst.shape)):
        raise Unsupported("reduction result shape")
    masked = ins.mask is not None
    ident = {
        "sum": "np.float32(0.0)",
        "max": "np.float32(-np.inf)",
        "min": "np.float32(np.inf)",
    }
    if masked:
        g.tile_checks([src])  # read whole; the destination where any input is selected
        reduce_loops(g, ins, outer, inner, dst, None, check=True)
    row = g.scratch((max(1, int(np.prod(inner))),)) if ins.op == "sum" else ""
    acc, n, x = g.new("acc"), g.new("n"), g.new("x")

    def per_element(iv: list[str]) -> None:
        if masked:
            g.emit(f"if {g.mask_cond(ins.mask, iv)}:")
            g.emit(f"    {x} = {g.read(src, iv)}")
            g.emit("else:")
            g.emit(f"    {x} = {ident[ins.op]}")
        else:
            g.emit(f"{x} = {g.read(src, iv)}")
        if ins.op == "sum":
            g.emit(f"{row}[{n}] = {x}")
            g.emit(f"{n} += 1")
        else:
            g.emit(f"{acc} = {'fmax' if ins.op == 'max' else 'fmin'}({acc}, {x})")

    def start() -> None:
        g.emit(f"{acc} = {ident[ins.op]}")
        g.emit(f"{n} = 0")

    def finish(dv: list[str]) -> None:
        if ins.op == "sum":
            g.emit(f"{acc} = pairwise_sum({row}, 0, {n})")
        g.store(dst, dv, acc)

    reduce_loops(g, ins, outer, inner, dst, (start, per_element, finish), check=False)


def reduce_loops(g: Emitter, ins, outer, inner, dst, parts, check: bool) -> None:
    """Loop over the outer points; per point over the reduced axes; then the destination
    element (the C-order position of the outer point in the destination tile)."""
    fo, hit = g.new("fo"), g.new("any")
    g.emit(f"{fo} = 0")
    ov = g.loops(outer, "o")
    g.emit(f"{hit} = False")
    if parts:
        parts[0]()
    iv = ov + g.loops(inner, "r")
    if ins.mask is not None:
        g.emit(f"if {g.mask_cond(ins.mask, iv)}:")
        g.emit(f"    {hit} = True")
    if parts:
        parts[1](iv)
    g.close(len(inner))
    dv = [g.new("d") for _ in dst.shape]
    q = g.new("q")
    g.emit(f"{q} = {fo}")
    for v, m in zip(reversed(dv), reversed(dst.shape)):
        g.emit(f"{v} = {q} % {m}")
        g.emit(f"{q} //= {m}")
    g.emit(f"{fo} += 1")
    if ins.mask is not None:
        g.emit(f"if {hit}:")
        g.depth += 1
    if check:
        conds = g.elem_checks([dst], dv)
        if conds:
            g.fail(" or ".join(conds))
        else:
            g.emit("pass")
    else:
        parts[2](dv)
    if ins.mask is not None:
        g.depth -= 1
    g.close(len(outer))
