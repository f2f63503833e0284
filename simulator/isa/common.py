"""Helpers shared by the nki.isa executors: typed operand access, operands as fp32 / bit
patterns shaped (P, F), storing results and secondary outputs (uninitialised lanes included),
the Tensor engine's PSUM accumulation groups and PE tile positions, and the destination rules
every nki.isa instruction checks before it runs (the rules only visible after an op's result
was fused into its destination). The engines' accumulator registers: ``accumulators.py``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

from nki import dtypes
from nki.errors import NKIMemoryError, NKIRuntimeError
from nki.ir import HBM_BUFFERS, Access, Const, IndexExpr, Instr, tensor_label

from .. import numerics
from ..executors import prepares
from ..memory import PSUM_GROUP, Ctx
from . import formulas as M


def src_tile(instr: Instr, i: int) -> Access:
    """Operand ``i`` of an instruction whose tracer only admits a tile there."""
    s = instr.srcs[i]
    assert isinstance(s, Access), f"{instr.api or instr.op}: operand {i} is not a tile"
    return s


def src_const(instr: Instr, i: int) -> Const:
    """Operand ``i`` of an instruction whose tracer only admits an immediate there."""
    s = instr.srcs[i]
    assert isinstance(s, Const), f"{instr.api or instr.op}: operand {i} is not an immediate"
    return s


def src_index(instr: Instr, i: int) -> IndexExpr:
    """Operand ``i`` of an instruction whose tracer only admits an index expression there."""
    s = instr.srcs[i]
    assert isinstance(s, IndexExpr), f"{instr.api or instr.op}: operand {i} is not an index"
    return s


def dst_of(instr: Instr) -> Access:
    """The destination tile (every nki.isa instruction has one)."""
    assert instr.dst is not None, f"{instr.api or instr.op} has no destination"
    return instr.dst


@prepares("isa")
def check_dst(instr: Instr, ctx: Ctx) -> None:
    """The engines' destination rules (GpSimd cannot write PSUM, the Tensor engine writes
    PSUM only, compute engines cannot write HBM)."""
    if instr.dst is None:
        return
    decl = ctx.decl(instr.dst.tensor)
    buf = decl.buffer
    eng = instr.attr("engine", "")
    tensor_off_psum = eng == "tensor" and buf != "psum"
    gpsimd_on_psum = eng == "gpsimd" and buf == "psum"
    compute_on_hbm = eng not in ("dma", "") and buf in HBM_BUFFERS
    if not (tensor_off_psum or gpsimd_on_psum or compute_on_hbm):
        return  # (the message's label is built only for an error)
    label = tensor_label(decl)
    api = instr.api or f"nisa.{instr.op}"
    if tensor_off_psum:
        raise NKIMemoryError(
            f"'{api}' runs on the Tensor engine, which writes PSUM only; its result was assigned "
            f"to {label} in {buf}. Assign it to a PSUM tile and copy it out",
            code="err_unsupported_memory",
        )
    if gpsimd_on_psum:
        raise NKIMemoryError(
            f"'{api}' runs on the GpSimd engine, which cannot access PSUM; its result was "
            f"assigned to the PSUM tile {label}",
            code="err_unsupported_memory",
        )
    raise NKIMemoryError(
        f"'{api}' runs on a compute engine and cannot write HBM tensor {label}; "
        "write an SBUF tile and nl.store it",
        code="err_unsupported_memory",
    )


def dtype_of(ctx: Ctx, acc: Access) -> str:
    return ctx.decl(acc.tensor).dtype


def f32(ctx: Ctx, src, p: int | None = None) -> np.ndarray:
    """An operand in fp32: tiles as (P, F) (``p`` given) or their own shape; constants 0-D."""
    if isinstance(src, Const):
        return np.float32(src.value)  # type: ignore[return-value]
    v = numerics.to_compute(ctx.read(src))
    return v.reshape(p, -1) if p is not None else v


def operand(ctx: Ctx, src, p: int, bitvec: bool = False, exact: bool = False) -> np.ndarray:
    """A scalar / (P, 1) operand broadcastable over (P, F)."""
    if isinstance(src, Const):
        v = src.value
        if bitvec or exact:
            return np.int64(int(v))  # type: ignore[return-value]
        return np.float32(v)  # type: ignore[return-value]
    raw = ctx.read(src)
    if bitvec:
        return M.bits(raw).reshape(p, 1)
    return numerics.to_compute(raw, exact_int=exact).reshape(p, 1)


def tile(ctx: Ctx, src: Access, p: int, bitvec: bool, exact: bool = False) -> np.ndarray:
    raw = ctx.read(src)
    if bitvec:
        return M.bits(raw).reshape(p, -1)
    return numerics.to_compute(raw, exact_int=exact).reshape(p, -1)


def store(
    instr: Instr,
    ctx: Ctx,
    values: np.ndarray,
    bitvec: bool = False,
    written: np.ndarray | None = None,
) -> None:
    """Write the instruction's result: where its mask selects, or where ``written`` does (an
    instruction masked over what it reads, whose result elements with nothing selected keep
    what they held)."""
    dst = instr.dst
    assert dst is not None
    vals = np.asarray(values)
    if bitvec:
        vals = M.wrap(vals, numerics.storage_dtype(dtype_of(ctx, dst), ctx.config.precise_fp))
    vals = vals.reshape(dst.shape) if vals.size == int(np.prod(dst.shape)) else vals
    sel = ctx.mask(instr) if written is None else written
    ctx.write(dst, vals, sel, instr.accumulate)


def matmul_write(instr: Instr, ctx: Ctx, values: np.ndarray) -> None:
    """Write a Tensor-engine result. In classic mode (attr ``psum_group``, see
    ``nki.classic.set_classic_mode``) ``psum += matmul(...)`` is a PSUM accumulation group: the
    first matmul to reach a PSUM element since its tile was allocated starts the group (it
    overwrites, as the compiler sets the hardware's start flag), later ones accumulate. So
    ``acc = nl.ndarray(..., buffer=nl.psum)`` followed by ``acc += nc_matmul(...)`` sums the
    products, as in AWS's allocated kernels. Elements another engine has written (real data)
    accumulate onto that data. Otherwise accumulating reads the tile as it is."""
    dst = instr.dst
    assert dst is not None
    vals = np.asarray(values).reshape(dst.shape)
    sel = ctx.mask(instr)
    group = instr.attr("psum_group", False)
    if not group or instr.accumulate != "add" or ctx.decl(dst.tensor).buffer != "psum":
        ctx.write(dst, vals, sel, instr.accumulate)
        return
    arr = ctx.array(dst.tensor)
    key = PSUM_GROUP + dst.tensor
    entry = ctx.state.get(key)
    if entry is None or entry[0] is not arr:  # a fresh allocation of this tile: none started
        entry = [arr, None, False]
        ctx.state[key] = entry
    if entry[2]:  # every element of the allocation has started: later matmuls add
        ctx.write(dst, vals, sel, "add")
        return
    if entry[1] is None:
        entry[1] = np.zeros(arr.shape, dtype=bool)
    started = entry[1]
    basic = ctx.basic(dst) if sel is None else None
    if basic is not None:  # the common whole-tile form, on views
        cur = arr[basic]
        untouched = ~started[basic] & np.isnan(cur.astype(np.float32, copy=False))
        if untouched.all():
            ctx.write(dst, vals, None, None)
        elif not untouched.any():
            ctx.write(dst, vals, None, "add")
        else:
            first = untouched.reshape(dst.shape)
            ctx.write(dst, vals, first, None)
            ctx.write(dst, vals, ~first, "add")
        if cur.size == arr.size:  # the access covers the tile: every element has started
            entry[2] = True
            return
        started[basic] = True
        entry[2] = bool(started.all())
        return
    want = np.ones(dst.shape, dtype=bool) if sel is None else np.broadcast_to(sel, dst.shape)
    idx = ctx.indices(dst, want)
    untouched = ~started[idx] & np.isnan(arr[idx].astype(np.float32))
    first = want & untouched
    if first.any():
        ctx.write(dst, vals, first, None)
    rest = want & ~untouched
    if rest.any():
        ctx.write(dst, vals, rest, "add")
    started[tuple(i[want] for i in idx)] = True
    entry[2] = bool(started.all())


def all_int(ctx: Ctx, *accs) -> bool:
    for a in accs:
        if isinstance(a, Access):
            d = dtype_of(ctx, a)
            if not (dtypes.is_int(d) or dtypes.is_bool(d)):
                return False
        elif isinstance(a, Const) and isinstance(a.value, float):
            return False
    return True


def check_tile_position(instr: Instr, ctx: Ctx) -> None:
    """A loop-dependent ``tile_position`` of a matmul must be aligned to ``tile_size`` and inside
    the 128x128 PE array at every iteration (constant positions were checked at trace time)."""
    pos = instr.attr("tile_position")
    if pos is None:
        return
    for what, aff, size in zip(("row", "column"), pos, instr.attr("tile_size")):
        p = aff.evaluate(ctx.env)
        if p % size or not 0 <= p <= 128 - size:
            raise NKIRuntimeError(
                f"nisa.nc_matmul: tile_position {what} {aff} = {p} must be a multiple of the "
                f"tile size {size} within the 128x128 PE array (position + size <= 128)",
                code="err_invalid_tile_position",
            )


@contextlib.contextmanager
def undefined(ctx: Ctx, instr: Instr, lanes: np.ndarray | None) -> Iterator[None]:
    """Writes inside the block mark ``lanes`` (a mask of the written tile; None: none) as
    uninitialised data computed at ``instr`` (reported when read under checks="full")."""
    if lanes is None or not ctx.full_checks:
        yield
        return
    poison = ctx.poison
    saved = poison.mask, poison.root
    poison.mask, poison.root = lanes.copy(), instr.loc
    try:
        yield
    finally:
        poison.mask, poison.root = saved


def write_res(
    ctx: Ctx,
    instr: Instr,
    key: str,
    values: np.ndarray,
    engine: str | None = None,
    rows: np.ndarray | None = None,
) -> None:
    """Write a secondary output (``reduce_res``), on the partitions ``rows`` only when given (a
    masked instruction's). When it copies the ``engine``'s accumulator registers and no
    instruction has set them yet (e.g. the default ``reduce_cmd='idle'``), the result is
    uninitialised: under ``checks="full"`` reading it later is reported."""
    acc = instr.attr(key)
    if acc is None:
        return
    sel = None
    if rows is not None:
        sel = np.broadcast_to(rows.reshape((-1,) + (1,) * (len(acc.shape) - 1)), acc.shape)
    unset = engine is not None and not ctx.state.get(f"accumulators.{engine}.set")
    with undefined(ctx, instr, np.ones(acc.shape, dtype=bool) if unset else None):
        ctx.write(acc, np.asarray(values).reshape(acc.shape), sel)
