"""Executors of the batched backend (``backend.py``): the reference executors of
``simulator/language`` restated over operands with leading batch axes. Each repeats its
reference's numerics call for call (fp32 compute, same NumPy functions on contiguous operands,
``numerics.cast`` on write) so results are bit-identical. Each registers in the executor
registry (``executors.py``) with the predicate that says which instructions of its key it
declines; those, and instructions without a batched executor, are hosted (see ``host.py``)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from nki import dtypes
from nki.ir import Access, Const, IndexExpr, Instr, PidSym
from nki.optable import OPS, activation_function, apply

from .. import numerics
from ..backends import name_of
from ..collectives import fold, member_input
from ..executors import Declines, Executor, executes
from ..isa import formulas as M
from ..language.common import is_int_access
from . import gather, into
from .context import BCtx, contiguous

BATCHED = name_of(__package__)  # this backend's name in the registry

_REDUCE_ROW = {"sum": "add", "max": "maximum", "min": "minimum", "prod": "multiply",
               "all": "logical_and"}  # fmt: skip


def _same_rank(instr: Instr) -> bool:
    """Operand tiles have the destination's rank (batch axes then line up when broadcasting)."""
    if instr.dst is None:
        return False
    r = len(instr.dst.shape)
    return all(len(s.shape) == r for s in instr.srcs if isinstance(s, Access))


def _indirect(instr: Instr) -> str | None:
    if any(isinstance(a, Access) and a.indirect for a in (instr.dst, *instr.srcs)):
        return "uses an indirect (data-dependent) access"
    return None


def _operands(instr: Instr) -> str | None:
    """What every batched executor needs: direct accesses and no index-expression operand."""
    if any(not isinstance(s, (Access, Const)) for s in instr.srcs):
        return _indirect(instr) or "takes an index-expression operand"
    return _indirect(instr)


def _rank(instr: Instr) -> str | None:
    return None if _same_rank(instr) else "broadcasts operands of another rank"


def _batched(kind: str, declines: Declines = _operands) -> Callable[[Executor], Executor]:
    return executes(kind, backend=BATCHED, declines=declines)


def _declines_ew(instr: Instr) -> str | None:
    bitvec = "is a bit-vector op" if OPS[instr.op].bitvec else None
    return _operands(instr) or bitvec or _rank(instr)


def _declines_copy(instr: Instr) -> str | None:
    return _operands(instr) or _rank(instr)


def _declines_reduce(instr: Instr) -> str | None:
    return _operands(instr) or ("is a masked reduction" if instr.mask is not None else None)


def _declines_matmul(instr: Instr) -> str | None:
    why = _operands(instr)
    if why:
        return why
    if any(isinstance(a, Access) and len(a.shape) != 2 for a in (instr.dst, *instr.srcs)):
        return "on tiles that are not 2-D"
    return None


def _declines_transpose(instr: Instr) -> str | None:
    return _declines_matmul(instr) or ("is masked" if instr.mask is not None else None)


def _declines_dma(instr: Instr) -> str | None:
    return _gathers(instr) or ("accumulates" if instr.accumulate is not None else None)


@_batched("dma", _declines_dma)
def _dma(instr: Instr, ctx: BCtx) -> None:
    sel = ctx.mask(instr)
    src = instr.srcs[0]
    assert isinstance(src, Access) and instr.dst is not None
    if not src.indirect and sel is not None and ctx.copy_box(instr.dst, src, sel):
        return
    vals = gather.gather(ctx, src, sel) if src.indirect else ctx.read(src, sel)
    hit = _BITS.get(id(instr))
    if hit is None or hit[0] is not instr:
        hit = _bits(instr, ctx)
    if hit[1] is not None:  # (an integer DMA copying the bits)
        vals = vals.view(hit[1])
    ctx.write(instr.dst, vals, sel, instr.accumulate)


# id(instr) -> (a DMA, the storage dtype its values are viewed as when it copies bits between
# integer types, else None): bounded; decided by its operands' declared dtypes alone
_BITS: dict[int, tuple[Instr, np.dtype | None]] = {}


def _bits(instr: Instr, ctx: BCtx) -> tuple[Instr, np.dtype | None]:
    a = instr.srcs[0]
    assert isinstance(a, Access) and instr.dst is not None
    src, dst = ctx.decl(a.tensor).dtype, ctx.decl(instr.dst.tensor).dtype
    got = (instr, numerics.storage_dtype(dst) if numerics.dma_copies_bits(src, dst) else None)
    if len(_BITS) >= 4096:
        _BITS.clear()
    _BITS[id(instr)] = got
    return got


@_batched("copy", _declines_copy)
def _copy(instr: Instr, ctx: BCtx) -> None:
    sel = ctx.mask(instr)
    src = instr.srcs[0]
    assert isinstance(src, Access) and instr.dst is not None
    ctx.write(instr.dst, ctx.read(src, sel), sel, instr.accumulate)


@_batched("memset")
def _memset(instr: Instr, ctx: BCtx) -> None:
    c = instr.srcs[0]
    assert isinstance(c, Const) and instr.dst is not None
    value = np.asarray(c.value)
    if instr.accumulate is None:  # (the one value rounded once, not once per element)
        value = numerics.cast(value, ctx.decl(instr.dst.tensor).dtype, ctx.config.precise_fp)
    ctx.write(instr.dst, value, ctx.mask(instr), instr.accumulate)


# id(instr) -> (instr, whether it computes in exact integers): bounded; decided by the
# instruction's operands and their declared dtypes alone
_EXACT: dict[int, tuple[Instr, bool]] = {}


def _exact_int(instr: Instr, ctx: BCtx) -> bool:
    hit = _EXACT.get(id(instr))
    if hit is None or hit[0] is not instr:
        if len(_EXACT) >= 4096:
            _EXACT.clear()
        hit = _EXACT[id(instr)] = (instr, _exact_int_of(instr, ctx))
    return hit[1]


def _exact_int_of(instr: Instr, ctx: BCtx) -> bool:
    if not OPS[instr.op].exact_int:
        return False
    for s in instr.srcs:
        if isinstance(s, Access):
            d = ctx.decl(s.tensor).dtype
            if not (dtypes.is_int(d) or dtypes.is_bool(d)):
                return False
        elif isinstance(s, Const):
            v = s.value
            if isinstance(v, float) or (isinstance(v, np.generic) and v.dtype.kind == "f"):
                return False
    return True


_LAYOUT_FREE = frozenset({"add", "subtract", "multiply", "divide", "maximum", "minimum",
                          "negative", "abs", "equal", "not_equal", "greater", "greater_equal",
                          "less", "less_equal"})  # fmt: skip


@_batched("ew", _declines_ew)
def _elementwise(instr: Instr, ctx: BCtx) -> None:
    op = OPS[instr.op]
    assert instr.dst is not None
    sel = None if instr.mask is None else ctx.mask(instr)
    hit = _EXACT.get(id(instr))  # (``_exact_int``, its common case inline)
    exact = hit[1] if hit is not None and hit[0] is instr else _exact_int(instr, ctx)
    if sel is None and not exact and instr.accumulate is None and instr.op in into.INTO:
        if into.fp32_into(instr, ctx, instr.op, instr.srcs):
            return
    vals = []
    # correctly rounded IEEE ops give the same bits on any layout; others (exp, tanh...) may
    # take another SIMD path on strided data, so they see contiguous operands as the reference
    contig = instr.op not in _LAYOUT_FREE
    for s in instr.srcs:
        s_sel = sel if isinstance(s, Access) and s.shape == instr.dst.shape else None
        vals.append(ctx.value(s, s_sel, exact_int=exact, contig=contig))
    ctx.write(instr.dst, apply(op, vals, None), sel, instr.accumulate)


@_batched("reduce", _declines_reduce)
def _reduce(instr: Instr, ctx: BCtx) -> None:
    src = instr.srcs[0]
    assert isinstance(src, Access) and instr.dst is not None
    tile_axes = tuple(instr.attr("axes"))
    exact = reduces_exactly(instr, ctx)
    x = numerics.to_compute(np.ascontiguousarray(ctx.read(src)), exact_int=exact)
    out = reduced(instr.op, x, len(ctx.dims), tile_axes, src.shape)
    out = np.asarray(out).reshape((*ctx.dims, *instr.dst.shape))
    ctx.write(instr.dst, out, None, instr.accumulate)


def reduces_exactly(instr: Instr, ctx: BCtx) -> bool:
    """Whether an ``nl`` reduction computes in exact integers (a row reduction of an integer
    or bool tile)."""
    d = ctx.decl(instr.srcs[0].tensor).dtype  # type: ignore[union-attr]
    return instr.op in _REDUCE_ROW and (dtypes.is_int(d) or dtypes.is_bool(d))


def reduced(
    op: str, x: np.ndarray, nb: int, tile_axes: tuple[int, ...], shape: tuple[int, ...]
) -> np.ndarray:
    """The ``nl`` reduction ``op`` of ``x`` (``nb`` batch axes, then a tile of ``shape``) along
    the tile's ``tile_axes``."""
    axes = tuple(a + nb for a in tile_axes)
    if op in _REDUCE_ROW:
        fn = OPS[_REDUCE_ROW[op]].reduce
        assert fn is not None
        return fn(x, axis=axes, keepdims=False) if op == "all" else fn(x, axis=axes)
    xf = x.astype(np.float32)
    n = np.float32(np.prod([shape[a] for a in tile_axes]))
    mean = (np.sum(xf, axis=axes, keepdims=True, dtype=np.float32) / n).astype(np.float32)
    if op == "mean":
        out = mean
    else:
        dlt = xf - mean
        out = np.sum(dlt * dlt, axis=axes, keepdims=True, dtype=np.float32) / n
    return np.asarray(out, dtype=np.float32)


@_batched("transpose", _declines_transpose)
def _transpose(instr: Instr, ctx: BCtx) -> None:
    src = instr.srcs[0]
    assert isinstance(src, Access) and instr.dst is not None
    vals = np.ascontiguousarray(np.swapaxes(ctx.read(src), -1, -2))
    ctx.write(instr.dst, vals, None, instr.accumulate)


# ---- nki.isa (the engines' (P, F) view of a tile; the same destination rules first) ----------


def _isa(
    op: str, declines: Declines | None = None, operands: Declines = _operands
) -> Callable[[Executor], Executor]:
    """Register the batched executor of ``nki.isa`` instruction ``op`` (the registry runs the
    kind's destination rules first). It declines instructions whose operands the batched
    executors cannot take, scalar tiles, and what ``declines`` says."""

    def check(instr: Instr) -> str | None:
        if any(isinstance(a, Access) and len(a.shape) < 1 for a in instr.srcs):
            return "has a scalar tile"
        return operands(instr) or (declines(instr) if declines is not None else None)

    return executes("isa", op, backend=BATCHED, declines=check)


def _bitvec(*attrs: str) -> Declines:
    """Declines an instruction whose ``attrs`` name a bit-vector op."""

    def check(instr: Instr) -> str | None:
        return "is a bit-vector op" if any(OPS[instr.attr(a)].bitvec for a in attrs) else None

    return check


def _declines_tensor_reduce(instr: Instr) -> str | None:
    op = instr.attr("op")
    if OPS[op].bitvec or op == "subtract" or instr.mask is not None:
        return "is a bit-vector, subtracting or masked reduction"
    return None


def _declines_activation(instr: Instr) -> str | None:
    """A reduction runs batched when it resets the registers first (``activation_reduce``): its
    ``reduce_res`` is then its own partials (``plan`` hosts it when another instruction reads
    the registers)."""
    if instr.attr("reduce_op") is None:
        return None
    if instr.attr("reduce_cmd") != "reset_reduce":
        return "folds into the engine's accumulator registers across instructions"
    if instr.mask is not None:
        return "is a masked reduction"
    return None


def _declines_nc_matmul(instr: Instr) -> str | None:
    if instr.attr("perf_mode", "none") != "none" or instr.attr("tile_position") is not None:
        return "uses perf_mode / tile_position"
    return None


def _declines_nc_transpose(instr: Instr) -> str | None:
    if any(isinstance(a, Access) and len(a.shape) != 2 for a in (instr.dst, *instr.srcs)):
        return "on tiles that are not 2-D"
    return None


def _pf(ctx: BCtx, acc: Access, exact: bool = False) -> np.ndarray:
    """A tile as fp32 (or exact int64) compute values shaped (batch..., P, F)."""
    raw = contiguous(ctx.read(acc))
    return numerics.to_compute(raw, exact_int=exact).reshape((*ctx.dims, acc.shape[0], -1))


def _scalar_operand(ctx: BCtx, src: object, p: int, exact: bool = False) -> object:
    """A scalar immediate, or a (P, 1) tile broadcast over the free axis."""
    if isinstance(src, Const):
        return np.int64(int(src.value)) if exact else np.float32(src.value)
    assert isinstance(src, Access)
    raw = contiguous(ctx.read(src))
    return numerics.to_compute(raw, exact_int=exact).reshape((*ctx.dims, p, 1))


def _isa_store(instr: Instr, ctx: BCtx, values: np.ndarray) -> None:
    dst = instr.dst
    assert dst is not None
    vals = np.asarray(values)
    full = (*ctx.dims, *dst.shape)
    if vals.shape != full and vals.size == math.prod(full):  # (a result already of the
        vals = vals.reshape(full)  # tile's shape stays itself: it may become the tile)
    ctx.write(dst, vals, ctx.mask(instr), instr.accumulate)


def _all_int(ctx: BCtx, *srcs: object) -> bool:
    for a in srcs:
        if isinstance(a, Access):
            d = ctx.decl(a.tensor).dtype
            if not (dtypes.is_int(d) or dtypes.is_bool(d)):
                return False
        elif isinstance(a, Const) and isinstance(a.value, float):
            return False
    return True


@_isa("tensor_tensor", _bitvec("op"))
def _tensor_tensor(instr: Instr, ctx: BCtx) -> None:
    a1, a2 = instr.srcs
    assert isinstance(a1, Access) and isinstance(a2, Access)
    op = OPS[instr.attr("op")]
    exact = instr.attr("engine") == "gpsimd" and op.exact_int and _all_int(ctx, a1, a2)
    same = a1.shape == a2.shape == instr.dst.shape  # type: ignore[union-attr]
    plain = instr.mask is None and instr.accumulate is None and op.name in into.INTO
    if same and plain and not exact and into.fp32_into(instr, ctx, op.name, (a1, a2)):
        return
    _isa_store(instr, ctx, M.alu(op.name, _pf(ctx, a1, exact), _pf(ctx, a2, exact)))


@_isa("tensor_scalar", _bitvec("op0"))
def _tensor_scalar(instr: Instr, ctx: BCtx) -> None:
    data, o0, o1 = instr.srcs
    assert isinstance(data, Access)
    p = data.shape[0]
    op0, op1 = instr.attr("op0"), instr.attr("op1")
    ops_exact = OPS[op0].exact_int and (op1 is None or OPS[op1].exact_int)
    ex = instr.attr("engine") == "gpsimd" and ops_exact and _all_int(ctx, data, o0, o1)
    if not ex and into.two_steps_into(instr, ctx, data, o0, o1):
        return
    r = M.alu(op0, _pf(ctx, data, ex), _scalar_operand(ctx, o0, p, ex), instr.attr("reverse0"))
    if op1 is not None:
        r = M.alu(op1, r, _scalar_operand(ctx, o1, p, ex), instr.attr("reverse1"))
    _isa_store(instr, ctx, r)


@_isa("activation", _declines_activation)
def _activation(instr: Instr, ctx: BCtx) -> None:
    data, scale, bias = instr.srcs
    assert isinstance(data, Access)
    p = data.shape[0]
    x2 = _pf(ctx, data)
    sc = _scalar_operand(ctx, scale, p)
    bi = _scalar_operand(ctx, bias, p)
    one = isinstance(scale, Const) and float(scale.value) == 1.0
    y = activation_values(x2, sc, bi, one, activation_function(instr.attr("op")))
    res = instr.attr("reduce_res")
    if res is not None:  # (reset_reduce: the registers hold this instruction's row partials)
        reduce_into(ctx, res, instr.attr("reduce_op"), y)
    _isa_store(instr, ctx, y)


def activation_values(
    x2: np.ndarray, sc: object, bi: object, one: bool, fn: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """``fn(x * scale + bias)`` in fp32 with one temporary (``one``: the scale is the immediate
    1.0, and x * 1.0 is x: no pass for it)."""
    t = np.add(x2, bi, dtype=np.float32) if one else np.multiply(x2, sc, dtype=np.float32)
    if not one:
        np.add(t, bi, out=t)
    return np.asarray(fn(t), dtype=np.float32)


def reduce_into(
    ctx: BCtx, res: Access, op: str, y: np.ndarray, partial: np.ndarray | None = None
) -> None:
    """Write the row reductions (by ``op``, along the last axis) of ``y`` (or ``partial``, those
    reductions already made) into ``res``."""
    if partial is None:
        partial = M.reduce(op, y, (y.ndim - 1,))
    shape = (*ctx.dims, *res.shape)
    # (a fresh result of the tile's shape stays its own array: ``BCtx.write`` may take it over)
    ctx.write(res, partial if partial.shape == shape else partial.reshape(shape))


@_isa("tensor_copy")
def _tensor_copy(instr: Instr, ctx: BCtx) -> None:
    src = instr.srcs[0]
    assert isinstance(src, Access) and instr.dst is not None
    raw = ctx.read(src)
    same = ctx.decl(src.tensor).dtype == ctx.decl(instr.dst.tensor).dtype
    _isa_store(instr, ctx, raw if instr.attr("exact") and same else numerics.to_compute(raw))


@_isa("memset")
def _isa_memset(instr: Instr, ctx: BCtx) -> None:
    c = instr.srcs[0]
    assert isinstance(c, Const)
    ctx.write(instr.dst, np.asarray(c.value), ctx.mask(instr), instr.accumulate)


@_isa("nc_transpose", _declines_nc_transpose)
def _nc_transpose(instr: Instr, ctx: BCtx) -> None:
    """``simulator/isa/tensor._nc_transpose`` over the batch: bit-exact, or (NeuronCore-v2's
    PE) a matmul with the identity."""
    src = instr.srcs[0]
    assert isinstance(src, Access)
    raw = np.swapaxes(ctx.read(src), -1, -2)
    if instr.attr("exact"):
        _isa_store(instr, ctx, raw)
        return
    eye = np.eye(src.shape[0], dtype=np.float32)
    _isa_store(instr, ctx, np.matmul(numerics.to_compute(raw), eye, dtype=np.float32))


def _gathers(instr: Instr) -> str | None:  # (``_operands``, but for ``gather.py``'s gathers)
    return None if gather.gathers(instr) else _operands(instr)


@_isa(
    "dma_copy",
    lambda instr: "accumulates (dst_rmw_op)" if instr.attr("rmw") or instr.accumulate else None,
    _gathers,
)
def _dma_copy(instr: Instr, ctx: BCtx) -> None:
    src, dst = instr.srcs[0], instr.dst
    assert isinstance(src, Access) and dst is not None
    sel = ctx.mask(instr)
    ssel = sel if src.shape == dst.shape else None
    raw = gather.gather(ctx, src, ssel) if src.indirect else ctx.read(src, ssel)
    sdt, ddt = ctx.decl(src.tensor).dtype, ctx.decl(dst.tensor).dtype
    if sdt == ddt:
        vals = raw
    elif numerics.dma_copies_bits(sdt, ddt):
        vals = raw.view(numerics.storage_dtype(ddt))
    else:
        vals = numerics.to_compute(raw)
    ctx.write(dst, vals.reshape((*ctx.dims, *dst.shape)), sel, None)


@_isa("reciprocal", lambda instr: None if isinstance(instr.srcs[0], Access) else "of a constant")
def _reciprocal(instr: Instr, ctx: BCtx) -> None:
    src = instr.srcs[0]
    assert isinstance(src, Access)
    _isa_store(instr, ctx, np.float32(1.0) / numerics.to_compute(ctx.read(src)))


@_isa("scalar_tensor_tensor", _bitvec("op0", "op1"))
def _scalar_tensor_tensor(instr: Instr, ctx: BCtx) -> None:
    data, o0, o1 = instr.srcs
    assert isinstance(data, Access) and isinstance(o1, Access)
    if into.two_steps_into(instr, ctx, data, o0, o1):
        return
    p = data.shape[0]
    r = M.alu(
        instr.attr("op0"), _pf(ctx, data), _scalar_operand(ctx, o0, p), instr.attr("reverse0")
    )
    _isa_store(instr, ctx, M.alu(instr.attr("op1"), r, _pf(ctx, o1), instr.attr("reverse1")))


@_isa("tensor_reduce", _declines_tensor_reduce)
def _tensor_reduce(instr: Instr, ctx: BCtx) -> None:
    src = instr.srcs[0]
    assert isinstance(src, Access)
    nb = len(ctx.dims)
    x = numerics.to_compute(np.ascontiguousarray(ctx.read(src)))
    r = M.reduce(instr.attr("op"), x, tuple(a + nb for a in instr.attr("axes")))
    if instr.attr("negate"):
        r = -np.asarray(r, dtype=np.float32)
    _isa_store(instr, ctx, r)


@_isa("iota", operands=_indirect)
def _iota(instr: Instr, ctx: BCtx) -> None:
    """The index expression's values over the batch (a device loop's induction register is an
    iota of its symbol), in int32 arithmetic as the interpreter computes them."""
    e, dst = instr.srcs[0], instr.dst
    assert isinstance(e, IndexExpr) and dst is not None
    out = np.empty((*ctx.dims, *dst.shape), dtype=np.int64)
    out[...] = ctx.index_values(e, len(dst.shape))
    lo, hi = ctx.extremes(e, e.shape)  # (int32 arithmetic wraps no value inside its range)
    if lo < -(2**31) or hi >= 2**31:
        out = (out + 2**31) % 2**32 - 2**31
    _isa_store(instr, ctx, out)


@_batched("all_reduce")
def _all_reduce(instr: Instr, ctx: BCtx) -> None:
    """``nl.all_reduce``: a group (the instances that differ only along the program axes) is
    whole in the batch (those grid axes are never chunked), so its inputs are folded along their
    batch axes in the order of the instances' grid coordinates, as ``collectives.combine``
    does, and every member gets the result."""
    src = instr.srcs[0]
    assert isinstance(src, Access) and instr.dst is not None
    sel = ctx.mask(instr, src.shape)
    exact = OPS[instr.op].exact_int and is_int_access(src, ctx)  # type: ignore[arg-type]
    x = member_input(instr.op, ctx.value(src, sel, exact_int=exact), sel)
    axes = sorted(ctx.axis[PidSym(a)][0] for a in instr.attr("axes"))
    front = list(range(len(axes)))
    moved = np.moveaxis(np.broadcast_to(x, (*ctx.dims, *src.shape)), axes, front)
    acc = fold(instr.op, moved.reshape(-1, *moved.shape[len(axes) :]))
    ctx.write(instr.dst, np.moveaxis(np.broadcast_to(acc, moved.shape), front, axes), sel)
