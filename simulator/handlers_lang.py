"""Executors of the nki.language instruction kinds beyond element-wise ops: reductions,
matmul / transpose, select (``nl.where``), gathers, fused softmax / rms_norm and randomness.

All math is fp32 (exact int64 for integer-only reductions); results are rounded to the
destination dtype by ``Ctx.write`` (round-to-nearest-even, saturating integers)."""

from __future__ import annotations

import numpy as np

from nki import dtypes
from nki.ir import Access, Const, Instr
from nki.optable import OPS

from . import numerics
from .interpreter import Ctx, handler

_REDUCE_ROW = {"sum": "add", "max": "maximum", "min": "minimum", "prod": "multiply",
               "all": "logical_and"}  # fmt: skip


def _is_int_access(acc: object, ctx: Ctx) -> bool:
    if not isinstance(acc, Access):
        return False
    d = ctx.decl(acc.tensor).dtype
    return dtypes.is_int(d) or dtypes.is_bool(d)


@handler("reduce")
def _reduce(instr: Instr, ctx: Ctx) -> None:
    """nl.sum / max / min / prod / all / mean / var over free axes, per partition."""
    src = instr.srcs[0]
    assert isinstance(src, Access) and instr.dst is not None
    axes = tuple(instr.attr("axes"))
    exact = instr.op in _REDUCE_ROW and _is_int_access(src, ctx)
    sel = ctx.mask(instr, src.shape)
    # masked-off lanes are not read (under checks=full they may be uninitialised)
    x = numerics.to_compute(ctx.read(src, sel), exact_int=exact)
    out_sel = None
    if sel is not None:
        # masked-out inputs do not take part: replace them with the reduction's identity
        ident = {"sum": 0, "mean": 0, "var": 0, "prod": 1, "all": 1}.get(instr.op)
        if instr.op == "max":
            ident = np.iinfo(np.int64).min if exact else -np.inf
        elif instr.op == "min":
            ident = np.iinfo(np.int64).max if exact else np.inf
        x = np.where(sel, x, np.asarray(ident, dtype=x.dtype))
        out_sel = np.any(sel, axis=axes).reshape(instr.dst.shape)
    if instr.op in _REDUCE_ROW:
        fn = OPS[_REDUCE_ROW[instr.op]].reduce
        assert fn is not None
        if instr.op == "all":
            out = fn(x, axis=axes, keepdims=False)
        else:
            out = fn(x, axis=axes)
    else:
        xf = x.astype(np.float32)
        if sel is not None:
            n = np.maximum(np.sum(sel, axis=axes, keepdims=True), 1).astype(np.float32)
        else:
            n = np.float32(np.prod([x.shape[a] for a in axes]))
        mean = (np.sum(xf, axis=axes, keepdims=True, dtype=np.float32) / n).astype(np.float32)
        if instr.op == "mean":
            out = mean
        else:
            d = xf - mean
            if sel is not None:
                d = np.where(sel, d, np.float32(0))
            out = np.sum(d * d, axis=axes, keepdims=True, dtype=np.float32) / n
        out = np.asarray(out, dtype=np.float32)
    out = np.asarray(out).reshape(instr.dst.shape)
    ctx.write(instr.dst, out, out_sel, instr.accumulate)


@handler("matmul")
def _matmul(instr: Instr, ctx: Ctx) -> None:
    """x @ y (x.T @ y with transpose_x) with fp32 products and accumulation."""
    xa, ya = instr.srcs
    assert isinstance(xa, Access) and isinstance(ya, Access) and instr.dst is not None
    x = numerics.to_compute(ctx.read(xa))
    y = numerics.to_compute(ctx.read(ya))
    if not instr.attr("transpose_x", False):
        x = x.T  # the compiler inserts a (bit-exact) PE transpose
    out = np.matmul(x.T.astype(np.float32), y.astype(np.float32)).astype(np.float32)
    from .handlers_isa import matmul_write  # psum += matmul: PSUM accumulation groups

    matmul_write(instr, ctx, out)


@handler("reshape")
def _reshape(instr: Instr, ctx: Ctx) -> None:
    """tile.reshape: the same values per partition, row-major, in the destination's shape."""
    src = instr.srcs[0]
    assert isinstance(src, Access) and instr.dst is not None
    vals = np.ascontiguousarray(ctx.read(src)).reshape(instr.dst.shape)
    ctx.write(instr.dst, vals, ctx.mask(instr), instr.accumulate)


@handler("transpose")
def _transpose(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    assert isinstance(src, Access) and instr.dst is not None
    vals = ctx.read(src)
    ctx.write(instr.dst, np.ascontiguousarray(vals.T), ctx.mask(instr), instr.accumulate)


@handler("select")
def _select(instr: Instr, ctx: Ctx) -> None:
    """nl.where: condition != 0 picks x, else y."""
    assert instr.dst is not None
    sel = ctx.mask(instr)
    exact = all(
        _is_int_access(s, ctx) or (isinstance(s, Const) and isinstance(s.value, (int, np.integer)))
        for s in instr.srcs[1:]
    )
    c, a, b = (
        ctx.value(
            s,
            sel if isinstance(s, Access) and s.shape == instr.dst.shape else None,
            exact_int=exact,
        )  # fmt: skip
        for s in instr.srcs
    )
    out = np.where(np.asarray(c) != 0, a, b)
    ctx.write(instr.dst, out, sel, instr.accumulate)


@handler("gather")
def _gather(instr: Instr, ctx: Ctx) -> None:
    """nl.gather_flattened: per-partition gather from the flattened free axes."""
    da, ia = instr.srcs
    assert isinstance(da, Access) and isinstance(ia, Access) and instr.dst is not None
    data = ctx.read(da)
    p = data.shape[0]
    flat = data.reshape(p, -1)
    idx = ctx.read(ia).astype(np.int64).reshape(p, -1)
    ok = (idx >= 0) & (idx < flat.shape[1])
    got = np.take_along_axis(flat, np.where(ok, idx, 0), axis=1)
    garbage = numerics.fill_value(ctx.decl(da.tensor).dtype)
    out = np.where(ok, numerics.to_compute(got), np.float32(garbage))
    if _is_int_access(da, ctx):
        out = np.where(ok, got.astype(np.int64), np.int64(garbage))  # type: ignore[arg-type]
    ctx.write(instr.dst, out.reshape(instr.dst.shape), ctx.mask(instr), instr.accumulate)


@handler("softmax")
def _softmax(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    assert isinstance(src, Access) and instr.dst is not None
    axes = tuple(instr.attr("axes"))
    x = numerics.to_compute(ctx.read(src)).astype(np.float32)
    e = np.exp(x - np.max(x, axis=axes, keepdims=True))
    out = e / np.sum(e, axis=axes, keepdims=True, dtype=np.float32)
    ctx.write(instr.dst, out.astype(np.float32), ctx.mask(instr), instr.accumulate)


@handler("rms_norm")
def _rms_norm(instr: Instr, ctx: Ctx) -> None:
    xa, wa = instr.srcs
    assert isinstance(xa, Access) and isinstance(wa, Access) and instr.dst is not None
    axes = tuple(instr.attr("axes"))
    x = numerics.to_compute(ctx.read(xa)).astype(np.float32)
    w = numerics.to_compute(ctx.read(wa)).astype(np.float32)
    ms = np.sum(x * x, axis=axes, keepdims=True, dtype=np.float32) / np.float32(instr.attr("n"))
    r = np.float32(1.0) / np.sqrt(ms + np.float32(instr.attr("epsilon")))
    ctx.write(instr.dst, (x * r * w).astype(np.float32), ctx.mask(instr), instr.accumulate)


def _rng(ctx: Ctx) -> np.random.Generator:
    g = ctx.state.get("nl.rng")
    if g is None:
        g = np.random.Generator(np.random.PCG64([0x6E6B69, *ctx.instance]))
        ctx.state["nl.rng"] = g
    return g


@handler("seed")
def _seed(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    if isinstance(src, Access):
        seed = int(np.asarray(ctx.read(src)).astype(np.int64).ravel()[0])
    else:
        assert isinstance(src, Const)
        seed = int(src.value)
    ctx.state["nl.rng"] = np.random.Generator(np.random.PCG64(seed & 0xFFFFFFFF))


@handler("rand")
def _rand(instr: Instr, ctx: Ctx) -> None:
    assert instr.dst is not None
    vals = _rng(ctx).random(instr.dst.shape, dtype=np.float32)
    ctx.write(instr.dst, vals, ctx.mask(instr), instr.accumulate)


@handler("dropout")
def _dropout(instr: Instr, ctx: Ctx) -> None:
    xa, r = instr.srcs
    assert isinstance(xa, Access) and instr.dst is not None
    exact = _is_int_access(xa, ctx)
    x = ctx.value(xa, None, exact_int=exact)
    rate = ctx.value(r)
    u = _rng(ctx).random(xa.shape, dtype=np.float32)
    out = np.where(u < rate, np.zeros((), dtype=x.dtype), x)
    ctx.write(instr.dst, out, ctx.mask(instr), instr.accumulate)


@handler("const")
def _const(instr: Instr, ctx: Ctx) -> None:
    """nl.shared_constant: write the compile-time data (rounded to the tensor's dtype)."""
    c = instr.srcs[0]
    assert isinstance(c, Const) and instr.dst is not None
    dt, shape, raw = c.value
    data = np.frombuffer(raw, dtype=np.dtype(dt)).reshape(shape)
    if data.dtype.kind == "f":
        data = data.astype(np.float32)  # engines / DMA see fp32 values
    ctx.write(instr.dst, data)


@handler("atomic_rmw")
def _atomic_rmw(instr: Instr, ctx: Ctx) -> None:
    """nl.atomic_rmw: dst = op(dst, value) element by element; repeated destination elements
    (an indirect index naming a row twice) receive every update, in tile order."""
    from nki.language.hbm_ops import ATOMIC_UFUNCS

    dst, src = instr.dst, instr.srcs[0]
    assert isinstance(dst, Access)
    sel = ctx.mask(instr)
    decl = ctx.decl(dst.tensor)
    arr = ctx.array(dst.tensor)
    int_dst = dtypes.is_int(decl.dtype) or dtypes.is_bool(decl.dtype)
    if isinstance(src, Const):  # a scalar value
        exact = int_dst and isinstance(src.value, int)
        value = np.asarray(src.value, dtype=np.int64 if exact else np.float32)
    else:
        exact = _is_int_access(src, ctx) and int_dst
        value = numerics.to_compute(ctx.read(src), exact_int=exact)
    vals = np.broadcast_to(value, dst.shape)
    idx = ctx._fancy(dst, sel)
    if sel is not None:
        idx = tuple(i[sel] for i in idx)
        vals = vals[sel]
    # work on the touched elements only: gather, apply with ufunc.at, round once, scatter
    flat = np.ravel_multi_index(idx, arr.shape)
    uniq, inv = np.unique(np.ravel(flat), return_inverse=True)
    cur = numerics.to_compute(arr.reshape(-1)[uniq], exact_int=exact).copy()
    ATOMIC_UFUNCS[instr.op].at(cur, inv, np.ravel(vals).astype(cur.dtype))
    arr.reshape(-1)[uniq] = numerics.cast(cur, decl.dtype, ctx.config.precise_fp)
