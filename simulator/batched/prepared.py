"""Prepared executors of the batched backend: an instruction that reads and writes whole tiles,
unmasked and not accumulating, has its batched executor's per-call decisions (operand kinds,
immediates, op functions, attributes) made once, when the walk of its traced kernel is made; at
run time it looks its operands' storage up directly instead of through ``BCtx``'s views.

Each prepared run computes with its batched executor's own numerics (the functions ``ops.py``,
``select.py`` and ``matmuls.py`` share with it) on the same operand arrays, then writes through
``BCtx.write``, so results are bit-identical. It returns False, having done nothing, when an
operand is not a whole tile's storage at run time (a tile not written yet, a reshape view, a
tile of another batch depth); the batched executor then runs the instruction.

The walk (``backend._steps``) asks ``prepare`` for every instruction its batched executor
runs; a kind without a preparer here is run by its executor alone."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from nki.ir import Access, Const, Instr, TensorDecl
from nki.optable import OPS, activation_function, apply

from .. import numerics
from ..isa import formulas as M
from . import gemm, into, matmuls, ops, select
from .context import BCtx, contiguous, takes_over
from .keys import whole
from .matmuls import as_2d
from .ops import (
    _LAYOUT_FREE,
    _all_int,
    _exact_int_of,
    _isa_store,
    activation_values,
    reduce_into,
)
from .select import selected

Run = Callable[[BCtx], bool]  # the prepared instruction (False: its executor runs it)
Values = Callable[[BCtx, np.ndarray], np.ndarray]  # a result from a source tile's view
Preparer = Callable[[Instr, "_Decls"], "Run | None"]
# the batched executor -> the preparer that mirrors it (an instruction the registry gives
# another executor, as a test that replaces one does, is not prepared)
_PREPARERS: dict[Callable[..., None], Preparer] = {}
# the preparers that also mirror their executor's ``accumulate="add"`` (``+=``)
_ADDING: set[Preparer] = set()


def _prepares(executor: Callable[..., None]) -> Callable[[Preparer], Preparer]:
    def deco(fn: Preparer) -> Preparer:
        _PREPARERS[executor] = fn
        return fn

    return deco


class _Decls:
    """The tensors' declarations (what the executors' dtype rules read, as ``ctx.decl``)."""

    def __init__(self, decl: Callable[[str], TensorDecl]) -> None:
        self.decl = decl


def prepare(
    instr: Instr, executor: Callable[..., None] | None, decl: Callable[[str], TensorDecl]
) -> Run | None:
    """``instr``'s prepared run (``executor``: the batched executor the registry gives it;
    ``decl``: its kernel's tensor declarations by name), or None: no preparer mirrors that
    executor, or the instruction is masked, accumulates (but for a matmul adding to its
    destination), or reads or writes part of a tile (or indirectly)."""
    fn = _PREPARERS.get(executor)  # type: ignore[arg-type]
    if fn is None or instr.mask is not None:
        return None
    if instr.accumulate is not None and not (instr.accumulate == "add" and fn in _ADDING):
        return None
    dst = instr.dst
    if dst is None or dst.indirect or not whole(dst):
        return None
    for s in instr.srcs:
        if isinstance(s, Access) and (s.indirect or not whole(s)):
            return None
    return fn(instr, _Decls(decl))


def _tile(ctx: BCtx, acc: Access) -> np.ndarray | None:
    """``BCtx.view`` of the whole tile ``acc`` reads, when its storage is laid out as the
    batch's tile (a view of it: ``BCtx.write`` never takes a view over as another tile's
    storage); None when it is not stored so (its executor then runs)."""
    arr = ctx.arrays.get(acc.tensor)
    if arr is None:
        return None
    dims = ctx.dims
    return arr[...] if arr.shape == ((*dims, *acc.shape) if dims else acc.shape) else None


def _put(ctx: BCtx, instr: Instr, vals: np.ndarray, isa: bool = True) -> None:
    """Write a prepared run's result (whole, unmasked, not accumulating): a fresh C-ordered
    array of the tile's shape and storage dtype becomes the fresh tile, as ``BCtx.write``
    hands it over; anything else goes through ``ops._isa_store`` (``isa``) or ``BCtx.write``."""
    dst = instr.dst
    assert dst is not None
    name = dst.tensor
    pend = ctx.pending.get(name)
    if pend is not None and takes_over(pend, vals):
        del ctx.pending[name]
        ctx.arrays[name] = vals
    elif isa:
        _isa_store(instr, ctx, vals)
    else:
        ctx.write(dst, vals)


def _column(ctx: BCtx, src: object, p: int) -> object | None:
    """``ops._scalar_operand`` (fp32): an immediate, or a (P, 1) tile broadcast over the free
    axis; None when the tile is not stored whole."""
    if isinstance(src, Const):
        return np.float32(src.value)
    assert isinstance(src, Access)
    arr = _tile(ctx, src)
    if arr is None:
        return None
    return numerics.to_compute(contiguous(arr)).reshape((*ctx.dims, p, 1))


# ---- the preparers, one per instruction (each mirrors its batched executor) ------------------


@_prepares(ops._activation)
def _activation(instr: Instr, decls: _Decls) -> Run | None:
    data, scale, bias = instr.srcs
    if not isinstance(data, Access):
        return None
    p = data.shape[0]
    fn = activation_function(instr.attr("op"))
    one = isinstance(scale, Const) and float(scale.value) == 1.0
    res, reduce_op = instr.attr("reduce_res"), instr.attr("reduce_op")
    # (immediates made once: ``_column``'s fp32 values of them)
    sc0 = np.float32(scale.value) if isinstance(scale, Const) else None
    bi0 = np.float32(bias.value) if isinstance(bias, Const) else None
    res_whole = res is not None and whole(res)

    def run(ctx: BCtx) -> bool:
        arr = _tile(ctx, data)
        sc = sc0 if sc0 is not None else _column(ctx, scale, p)
        bi = bi0 if bi0 is not None else _column(ctx, bias, p)
        if arr is None or sc is None or bi is None:
            return False
        x2 = numerics.to_compute(contiguous(arr)).reshape((*ctx.dims, p, -1))
        y = activation_values(x2, sc, bi, one, fn)
        if res is not None:
            _reduce_res(ctx, res, res_whole, reduce_op, y)
        _put(ctx, instr, y)
        return True

    return run


def _reduce_res(ctx: BCtx, res: Access, res_whole: bool, op: str, y: np.ndarray) -> None:
    """``ops.reduce_into``: the row reductions of ``y`` into ``res``, assigned straight into
    its fp32 storage when that is stored as the batch's whole tile (what ``BCtx.write`` does
    there, without finding the view)."""
    partial = M.reduce(op, y, (y.ndim - 1,))
    tgt = _tile(ctx, res) if res_whole else None
    if tgt is not None and tgt.dtype == partial.dtype and tgt.shape == partial.shape:
        tgt[...] = partial
        return
    reduce_into(ctx, res, op, y, partial)


def _one_source(instr: Instr, values: Values, isa: bool) -> Run | None:
    """The prepared run of an instruction whose result is ``values(ctx, tile)`` of its one
    source tile, written as an ``nki.isa`` result (``isa``: ``ops._isa_store``) or as is."""
    src, dst = instr.srcs[0], instr.dst
    if not isinstance(src, Access) or dst is None:
        return None

    def run(ctx: BCtx) -> bool:
        arr = _tile(ctx, src)
        if arr is None:
            return False
        _put(ctx, instr, values(ctx, arr), isa)
        return True

    return run


@_prepares(ops._tensor_reduce)
def _tensor_reduce(instr: Instr, decls: _Decls) -> Run | None:
    op, axes, negate = instr.attr("op"), tuple(instr.attr("axes")), instr.attr("negate")

    def values(ctx: BCtx, arr: np.ndarray) -> np.ndarray:
        nb = len(ctx.dims)
        r = M.reduce(
            op, numerics.to_compute(np.ascontiguousarray(arr)), tuple(a + nb for a in axes)
        )
        return -np.asarray(r, dtype=np.float32) if negate else r

    return _one_source(instr, values, isa=True)


@_prepares(ops._reciprocal)
def _reciprocal(instr: Instr, decls: _Decls) -> Run | None:
    return _one_source(instr, lambda ctx, arr: np.float32(1.0) / numerics.to_compute(arr), isa=True)


@_prepares(ops._tensor_copy)
def _tensor_copy(instr: Instr, decls: _Decls) -> Run | None:
    src, dst = instr.srcs[0], instr.dst
    if not isinstance(src, Access) or dst is None:
        return None
    same = decls.decl(src.tensor).dtype == decls.decl(dst.tensor).dtype
    if instr.attr("exact") and same:
        return _one_source(instr, lambda ctx, arr: arr, isa=True)
    return _one_source(instr, lambda ctx, arr: numerics.to_compute(arr), isa=True)


@_prepares(select._affine_select)
def _affine_select(instr: Instr, decls: _Decls) -> Run | None:
    fval, dst = instr.srcs[1], instr.dst
    if not isinstance(fval, Const) or dst is None:
        return None
    fill = fval.value

    def values(ctx: BCtx, arr: np.ndarray) -> np.ndarray:
        x = numerics.to_compute(arr.reshape((*ctx.dims, *dst.shape)))
        return selected(instr, ctx, x, fill)

    return _one_source(instr, values, isa=False)


@_prepares(ops._copy)
def _copy(instr: Instr, decls: _Decls) -> Run | None:
    return _one_source(instr, lambda ctx, arr: arr, isa=False)


@_prepares(ops._transpose)
def _transpose(instr: Instr, decls: _Decls) -> Run | None:
    return _one_source(
        instr, lambda ctx, arr: np.ascontiguousarray(arr.swapaxes(-1, -2)), isa=False
    )


@_prepares(ops._reduce)
def _reduce(instr: Instr, decls: _Decls) -> Run | None:
    src, dst = instr.srcs[0], instr.dst
    if not isinstance(src, Access) or dst is None:
        return None
    tile_axes = tuple(instr.attr("axes"))
    exact = ops.reduces_exactly(instr, decls)  # type: ignore[arg-type]

    def values(ctx: BCtx, arr: np.ndarray) -> np.ndarray:
        x = numerics.to_compute(np.ascontiguousarray(arr), exact_int=exact)
        out = ops.reduced(instr.op, x, len(ctx.dims), tile_axes, src.shape)
        return np.asarray(out).reshape((*ctx.dims, *dst.shape))

    return _one_source(instr, values, isa=False)


@_prepares(matmuls._nc_matmul)
def _nc_matmul(instr: Instr, decls: _Decls) -> Run | None:
    sacc, macc = instr.srcs
    dst = instr.dst
    if not isinstance(sacc, Access) or not isinstance(macc, Access) or dst is None:
        return None
    if instr.attr("transpose"):  # (a pass-through, checked: its executor's)
        return None
    k = sacc.shape[0]

    def run(ctx: BCtx) -> bool:
        a, b = _tile(ctx, sacc), _tile(ctx, macc)
        if a is None or b is None:
            return False
        nb = len(ctx.dims)
        s = gemm.unbroadcast(as_2d(a, nb, k))
        m = gemm.unbroadcast(as_2d(b, nb, k))
        _put(ctx, instr, matmuls.tile_product(ctx, s, m, dst), isa=False)
        return True

    return run


def _pf(ctx: BCtx, arr: np.ndarray, p: int, exact: bool = False) -> np.ndarray:
    """``ops._pf`` of a tile's view ``arr``."""
    return numerics.to_compute(contiguous(arr), exact_int=exact).reshape((*ctx.dims, p, -1))


@_prepares(ops._tensor_scalar)
def _tensor_scalar(instr: Instr, decls: _Decls) -> Run | None:
    data, o0, o1 = instr.srcs
    if not isinstance(data, Access):
        return None
    op0, op1 = instr.attr("op0"), instr.attr("op1")
    ops_exact = OPS[op0].exact_int and (op1 is None or OPS[op1].exact_int)
    if instr.attr("engine") == "gpsimd" and ops_exact and _all_int(decls, data, o0, o1):
        return None  # (exact integer ALU steps: its executor's)
    p = data.shape[0]
    rev0, rev1 = instr.attr("reverse0"), instr.attr("reverse1")
    how = into.two_steps(instr, data, o0, o1)

    def run(ctx: BCtx) -> bool:
        if how is not None and into.fp32_into(instr, ctx, *how):
            return True
        arr, c0 = _tile(ctx, data), _column(ctx, o0, p)
        c1 = None if op1 is None else _column(ctx, o1, p)
        if arr is None or c0 is None or (op1 is not None and c1 is None):
            return False
        r = M.alu(op0, _pf(ctx, arr, p), c0, rev0)
        if op1 is not None:
            r = M.alu(op1, r, c1, rev1)
        _put(ctx, instr, r)
        return True

    return run


@_prepares(ops._tensor_tensor)
def _tensor_tensor(instr: Instr, decls: _Decls) -> Run | None:
    a1, a2 = instr.srcs
    dst = instr.dst
    if not isinstance(a1, Access) or not isinstance(a2, Access) or dst is None:
        return None
    op = OPS[instr.attr("op")]
    exact = instr.attr("engine") == "gpsimd" and op.exact_int and _all_int(decls, a1, a2)
    fused = a1.shape == a2.shape == dst.shape and op.name in into.INTO and not exact

    def run(ctx: BCtx) -> bool:
        if fused and into.fp32_into(instr, ctx, op.name, (a1, a2)):
            return True
        x1, x2 = _tile(ctx, a1), _tile(ctx, a2)
        if x1 is None or x2 is None:
            return False
        y = M.alu(op.name, _pf(ctx, x1, a1.shape[0], exact), _pf(ctx, x2, a2.shape[0], exact))
        _put(ctx, instr, y)
        return True

    return run


@_prepares(ops._elementwise)
def _elementwise(instr: Instr, decls: _Decls) -> Run | None:
    op = OPS[instr.op]
    dst = instr.dst
    assert dst is not None
    exact = _exact_int_of(instr, decls)
    fused = not exact and instr.op in into.INTO
    contig = instr.op not in _LAYOUT_FREE
    srcs = instr.srcs
    # ``BCtx.value`` of each immediate, once
    consts = [
        None
        if isinstance(s, Access)
        else np.int64(s.value)
        if exact and isinstance(s.value, (int, np.integer)) and not isinstance(s.value, bool)
        else np.float32(s.value)
        for s in srcs
    ]

    def run(ctx: BCtx) -> bool:
        if fused and into.fp32_into(instr, ctx, instr.op, srcs):
            return True
        vals: list[object] = []
        for s, c in zip(srcs, consts):
            if c is not None:
                vals.append(c)
                continue
            raw = _tile(ctx, s)  # type: ignore[arg-type]
            if raw is None:
                return False
            if contig and not raw.flags.c_contiguous:
                raw = np.ascontiguousarray(raw)
            vals.append(
                raw if raw.dtype == np.float32 else numerics.to_compute(raw, exact_int=exact)
            )
        _put(ctx, instr, apply(op, vals, None), isa=False)
        return True

    return run


@_prepares(matmuls._matmul)
def _matmul(instr: Instr, decls: _Decls) -> Run | None:
    xa, ya = instr.srcs
    dst = instr.dst
    if not isinstance(xa, Access) or not isinstance(ya, Access) or dst is None:
        return None
    plain = not instr.attr("transpose_x", False)  # (x is (M, K): the reference's C-ordered x.T)
    if instr.accumulate is not None:
        return _matmul_added(instr, xa, ya, dst, plain)

    def run(ctx: BCtx) -> bool:
        a, b = _tile(ctx, xa), _tile(ctx, ya)
        if a is None or b is None:
            return False
        x, y = gemm.unbroadcast(a), gemm.unbroadcast(b)
        _put(ctx, instr, gemm.product(x.swapaxes(-1, -2) if plain else x, y, nn=plain), isa=False)
        return True

    return run


_ADDING.add(_matmul)


def _matmul_added(instr: Instr, xa: Access, ya: Access, dst: Access, plain: bool) -> Run:
    """``matmuls._matmul`` accumulating (``acc += nl.matmul(...)``): with one position in the
    batch the product is added to the fp32 tile in place, as ``BCtx.write`` adds it; with more,
    the executor itself runs (one BLAS call into PSUM laid out as a matrix, else the product
    added)."""

    def run(ctx: BCtx) -> bool:
        a, b = _tile(ctx, xa), _tile(ctx, ya)
        if a is None or b is None:
            return False
        if not ctx.whole and math.prod(ctx.dims) == 1:  # (no batch axes to stack: added)
            d = _tile(ctx, dst)
            if d is not None and d.dtype == np.float32:
                one = (0,) * len(ctx.dims)  # (the 2-D tiles: the one position's gemm)
                x, y = a[one], b[one]
                np.add(d, gemm.product(x.T if plain else x, y, nn=plain), out=d)
                return True
        matmuls._matmul(instr, ctx)
        return True

    return run


@_prepares(ops._memset)
def _memset(instr: Instr, decls: _Decls) -> Run | None:
    c, dst = instr.srcs[0], instr.dst
    if not isinstance(c, Const) or dst is None:
        return None
    value, dtype = np.asarray(c.value), decls.decl(dst.tensor).dtype
    cast = {}  # precise_fp -> the value rounded once to the destination's dtype

    def run(ctx: BCtx) -> bool:
        precise = ctx.config.precise_fp
        v = cast.get(precise)
        if v is None:
            v = cast[precise] = numerics.cast(value, dtype, precise)
        ctx.write(dst, v)
        return True

    return run


@_prepares(ops._scalar_tensor_tensor)
def _scalar_tensor_tensor(instr: Instr, decls: _Decls) -> Run | None:
    data, o0, o1 = instr.srcs
    if not isinstance(data, Access) or not isinstance(o1, Access):
        return None
    p = data.shape[0]
    op0, op1 = instr.attr("op0"), instr.attr("op1")
    rev0, rev1 = instr.attr("reverse0"), instr.attr("reverse1")
    how = into.two_steps(instr, data, o0, o1)

    def run(ctx: BCtx) -> bool:
        if how is not None and into.fp32_into(instr, ctx, *how):
            return True
        arr, c0, arr1 = _tile(ctx, data), _column(ctx, o0, p), _tile(ctx, o1)
        if arr is None or c0 is None or arr1 is None:
            return False
        r = M.alu(op0, _pf(ctx, arr, p), c0, rev0)
        _put(ctx, instr, M.alu(op1, r, _pf(ctx, arr1, o1.shape[0]), rev1))
        return True

    return run
