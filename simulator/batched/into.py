"""ALU steps of the batched executors computed in fp32 straight into their destination (a
fused fp32 tile, or a fresh tile's storage handed over), as the reference computes them step by
step: fp32 operands, each step's result rounded to fp32, no temporary."""

from __future__ import annotations

import numpy as np

from nki.ir import Access, Const, Instr

from .context import BCtx

# fp32 ufuncs of ops whose fp32 result can be written straight into fp32 storage
INTO = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
        "divide": np.true_divide, "maximum": np.maximum, "minimum": np.minimum}  # fmt: skip


def fp32_into(
    instr: Instr, ctx: BCtx, op: str, srcs: tuple[object, ...], then: tuple | None = None
) -> bool:
    """Compute the fp32 op ``op`` of ``srcs`` straight into the destination when it is a fused
    fp32 tile or a fresh one (True), as the reference computes it: fp32 in, fp32 out, the same
    values, no temporary. ``then``: (op, operand, reversed) applied to that result in place
    (a second ALU step, fp32 too)."""
    dst = instr.dst
    assert dst is not None
    out = ctx.into(dst) if ctx.whole and dst.tensor in ctx.fused else None  # (its test first)
    # a fresh tile gets a C-ordered result (strided operands would lend theirs, which
    # ``write`` copies into a C-ordered tile), the same values
    pend = ctx.pending.get(dst.tensor) if out is None and ctx.whole else None
    if pend is not None:
        shape = (*ctx.dims, *dst.shape)
        out = np.empty(shape, dtype=np.float32)
    if out is None:
        return False
    if then is not None:  # (its operand read before the first step writes the destination)
        op1, src1, reverse = then
        v = ctx.value(src1, contig=False)
        if isinstance(v, np.ndarray) and np.may_share_memory(v, out):
            v = v.copy()
    a, b = srcs  # (every op of ``INTO`` is binary)
    INTO[op](ctx.value(a, contig=False), ctx.value(b, contig=False), out=out)
    if then is not None:
        INTO[op1](*((v, out) if reverse else (out, v)), out=out)
    if pend is not None:
        if pend[0] == shape and pend[1] == np.float32:  # (``write``'s hand-over, directly)
            del ctx.pending[dst.tensor]
            ctx.arrays[dst.tensor] = out
        else:
            ctx.write(dst, out)
    return True


def two_steps_into(instr: Instr, ctx: BCtx, data: Access, o0: object, o1: object) -> bool:
    """``(data op0 o0) op1 o1`` (``op1`` None: the first step alone; ``reverse0`` / ``reverse1``
    swap a step's operands) computed in fp32 straight into the destination as ``formulas.alu``
    computes it step by step (True), for unmasked, non-accumulating instructions on 2-D tiles
    whose ops are plain fp32 arithmetic; ``o0`` / ``o1`` immediates or 2-D tiles (columns
    broadcast)."""
    how = two_steps(instr, data, o0, o1)
    return how is not None and fp32_into(instr, ctx, *how)


def two_steps(
    instr: Instr, data: Access, o0: object, o1: object
) -> tuple[str, tuple[object, object], tuple | None] | None:
    """What ``two_steps_into`` hands ``fp32_into`` (the first op, its operands in order, the
    second step), decided by the instruction alone; None when it does not apply."""
    op0, op1 = instr.attr("op0"), instr.attr("op1")
    if op0 not in INTO or (op1 is not None and op1 not in INTO):
        return None
    if instr.mask is not None or instr.accumulate is not None or len(data.shape) != 2:
        return None
    if data.shape != instr.dst.shape:  # type: ignore[union-attr]
        return None
    for o in (o0,) if op1 is None else (o0, o1):
        if not (isinstance(o, Const) or (isinstance(o, Access) and len(o.shape) == 2)):
            return None
    first = (o0, data) if instr.attr("reverse0") else (data, o0)
    then = None if op1 is None else (op1, o1, bool(instr.attr("reverse1")))
    return op0, first, then
