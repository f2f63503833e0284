"""Executors of the nki.isa instructions (IR kind ``isa``; ``instr.op`` names the instruction).

Trace time already checked every static rule; what remains here are the rules only visible after
an op's result was fused into its destination (GpSimd writing PSUM, the Tensor engine writing
outside PSUM, a compute engine writing HBM) and data-dependent checks."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nki import dtypes
from nki.errors import NKIMemoryError, NKIRuntimeError
from nki.ir import HBM_BUFFERS, Access, Const, Instr
from nki.optable import OPS
from nki.targets import isa_rules

from . import isa_math as M
from . import numerics
from .interpreter import Ctx, handler

ISA: dict[str, Callable[[Instr, Ctx], None]] = {}


def isa(name: str):
    def deco(fn):
        ISA[name] = fn
        return fn

    return deco


@handler("isa")
def _isa(instr: Instr, ctx: Ctx) -> None:
    fn = ISA.get(instr.op)
    if fn is None:
        raise NKIRuntimeError(f"no executor for nki.isa instruction '{instr.op}'")
    _check_dst(instr, ctx)
    fn(instr, ctx)


def _check_dst(instr: Instr, ctx: Ctx) -> None:
    if instr.dst is None:
        return
    buf = ctx.decl(instr.dst.tensor).buffer
    eng = instr.attr("engine", "")
    api = instr.api or f"nisa.{instr.op}"
    tensor_out = instr.op == "nc_matmul" or (instr.op == "nc_transpose" and eng == "tensor")
    if tensor_out and buf != "psum":
        raise NKIMemoryError(
            f"'{api}' runs on the Tensor engine, which writes PSUM only; its result was assigned "
            f"to '{instr.dst.tensor}' in {buf}. Assign it to a PSUM tile and copy it out",
            code="err_unsupported_memory",
        )
    if eng == "gpsimd" and buf == "psum":
        raise NKIMemoryError(
            f"'{api}' runs on the GpSimd engine, which cannot access PSUM; its result was "
            f"assigned to the PSUM tile '{instr.dst.tensor}'",
            code="err_unsupported_memory",
        )
    if eng not in ("dma", "") and buf in HBM_BUFFERS:
        raise NKIMemoryError(
            f"'{api}' runs on a compute engine and cannot write HBM tensor '{instr.dst.tensor}'; "
            "write an SBUF tile and nl.store it",
            code="err_unsupported_memory",
        )


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _dtype(ctx: Ctx, acc: Access) -> str:
    return ctx.decl(acc.tensor).dtype


def _f32(ctx: Ctx, src, p: int | None = None) -> np.ndarray:
    """An operand in fp32: tiles as (P, F) (``p`` given) or their own shape; constants 0-D."""
    if isinstance(src, Const):
        return np.float32(src.value)  # type: ignore[return-value]
    v = numerics.to_compute(ctx.read(src))
    return v.reshape(p, -1) if p is not None else v


def _operand(ctx: Ctx, src, p: int, bitvec: bool = False, exact: bool = False) -> np.ndarray:
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


def _tile(ctx: Ctx, src: Access, p: int, bitvec: bool, exact: bool = False) -> np.ndarray:
    raw = ctx.read(src)
    if bitvec:
        return M.bits(raw).reshape(p, -1)
    return numerics.to_compute(raw, exact_int=exact).reshape(p, -1)


def _store(instr: Instr, ctx: Ctx, values: np.ndarray, bitvec: bool = False) -> None:
    dst = instr.dst
    assert dst is not None
    vals = np.asarray(values)
    if bitvec:
        vals = M.wrap(vals, numerics.storage_dtype(_dtype(ctx, dst), ctx.config.precise_fp))
    vals = vals.reshape(dst.shape) if vals.size == int(np.prod(dst.shape)) else vals
    ctx.write(dst, vals, ctx.mask(instr), instr.accumulate)


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
    key = f"psum_group.{dst.tensor}"
    entry = ctx.state.get(key)
    if entry is None or entry[0] is not arr:  # a fresh allocation of this tile
        entry = (arr, np.zeros(arr.shape, dtype=bool))
        ctx.state[key] = entry
    started = entry[1]
    want = np.ones(dst.shape, dtype=bool) if sel is None else np.broadcast_to(sel, dst.shape)
    idx = ctx._fancy(dst, want)
    untouched = ~started[idx] & np.isnan(arr[idx].astype(np.float32))
    first = want & untouched
    if first.any():
        ctx.write(dst, vals, first, None)
    rest = want & ~untouched
    if rest.any():
        ctx.write(dst, vals, rest, "add")
    started[tuple(i[want] for i in idx)] = True


def _all_int(ctx: Ctx, *accs) -> bool:
    for a in accs:
        if isinstance(a, Access):
            d = _dtype(ctx, a)
            if not (dtypes.is_int(d) or dtypes.is_bool(d)):
                return False
        elif isinstance(a, Const) and isinstance(a.value, float):
            return False
    return True


def _regs(ctx: Ctx, engine: str, cmd: str, op: str, partial: np.ndarray | None, p: int):
    """The engine's 128 per-partition accumulator registers after ``cmd``."""
    key = f"accumulators.{engine}"
    ident = OPS[op].identity if OPS[op].identity is not None else 0.0
    regs = ctx.state.get(key)
    if regs is None:  # never reset: undefined on hardware, NaN here so it shows
        regs = np.full(128, np.nan, dtype=np.float32)
    regs = regs.copy()
    if cmd == "reset":
        regs[:] = ident
    elif cmd in ("reset_reduce", "load_reduce") and partial is not None:
        regs[:] = ident
        regs[:p] = partial
    elif cmd == "reduce" and partial is not None:
        regs[:p] = M.apply(op, regs[:p], partial)
    ctx.state[key] = regs
    return regs[:p]


def _write_res(ctx: Ctx, instr: Instr, key: str, values: np.ndarray) -> None:
    acc = instr.attr(key)
    if acc is not None:
        ctx.write(acc, np.asarray(values).reshape(acc.shape))


# --------------------------------------------------------------------------------------------
# Tensor engine
# --------------------------------------------------------------------------------------------


def _check_tile_position(instr: Instr, ctx: Ctx) -> None:
    """A loop-dependent ``tile_position`` must be aligned to ``tile_size`` and inside the
    128x128 PE array at every iteration (constant positions were checked at trace time)."""
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


@isa("nc_matmul")
def _nc_matmul(instr: Instr, ctx: Ctx) -> None:
    _check_tile_position(instr, ctx)
    sacc, macc = instr.srcs
    s_raw, m_raw = ctx.read(sacc), ctx.read(macc)  # type: ignore[arg-type]
    if instr.attr("transpose"):
        k = s_raw.shape[0]
        if not np.array_equal(numerics.to_compute(m_raw).reshape(k, k), np.eye(k)):
            raise NKIRuntimeError(
                "nisa.nc_matmul(is_transpose=True) needs 'moving' to be an identity matrix; its "
                "values are not the identity",
                code="err_matmul_transpose_needs_identity",
            )
        matmul_write(instr, ctx, s_raw.reshape(k, -1).T)
        return
    s = numerics.to_compute(s_raw)
    m = numerics.to_compute(m_raw)
    if instr.attr("perf_mode", "none") != "none":  # [K, 2, F]: contract over K and the pair
        out = np.einsum("kim,kin->mn", s, m, dtype=np.float32)
    else:
        k = s.shape[0]
        out = np.matmul(s.reshape(k, -1).T, m.reshape(k, -1), dtype=np.float32)
    matmul_write(instr, ctx, out)


@isa("nc_transpose")
def _nc_transpose(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    raw = ctx.read(src)  # type: ignore[arg-type]
    p = raw.shape[0]
    x = raw.reshape(p, -1)
    if instr.attr("exact"):
        _store(instr, ctx, x.T)
        return
    # NeuronCore-v2 PE transpose = matmul with an identity: NaN / Inf spread along the column
    out = np.matmul(numerics.to_compute(x).T, np.eye(p, dtype=np.float32), dtype=np.float32)
    _store(instr, ctx, out)


# --------------------------------------------------------------------------------------------
# Scalar engine
# --------------------------------------------------------------------------------------------


@isa("activation")
def _activation(instr: Instr, ctx: Ctx) -> None:
    data, scale, bias = instr.srcs
    x = _f32(ctx, data)
    p = x.shape[0]
    x2 = x.reshape(p, -1)
    sc = _operand(ctx, scale, p)
    bi = _operand(ctx, bias, p)
    with np.errstate(all="ignore"):
        y = np.asarray(OPS[instr.attr("op")].fn((x2 * sc + bi).astype(np.float32)))
    y = y.astype(np.float32)
    rop = instr.attr("reduce_op")
    if rop is not None:
        cmd = instr.attr("reduce_cmd", "idle")
        partial = (
            M.free_reduce(rop, y) if cmd in ("reduce", "reset_reduce", "load_reduce") else None
        )
        regs = _regs(ctx, "scalar", cmd, rop, partial, p)
        _write_res(ctx, instr, "reduce_res", regs)
    _store(instr, ctx, y)


# --------------------------------------------------------------------------------------------
# Vector engine (and Scalar / GpSimd variants)
# --------------------------------------------------------------------------------------------


@isa("tensor_tensor")
def _tensor_tensor(instr: Instr, ctx: Ctx) -> None:
    a1, a2 = instr.srcs
    op = OPS[instr.attr("op")]
    p = a1.shape[0]  # type: ignore[union-attr]
    exact = instr.attr("engine") == "gpsimd" and op.exact_int and _all_int(ctx, a1, a2)
    x = _tile(ctx, a1, p, op.bitvec, exact)  # type: ignore[arg-type]
    y = _tile(ctx, a2, p, op.bitvec, exact)  # type: ignore[arg-type]
    _store(instr, ctx, M.apply(op.name, x, y), op.bitvec)


@isa("tensor_scalar")
def _tensor_scalar(instr: Instr, ctx: Ctx) -> None:
    data, o0, o1 = instr.srcs
    p = data.shape[0]  # type: ignore[union-attr]
    op0, op1 = instr.attr("op0"), instr.attr("op1")
    bv = OPS[op0].bitvec
    # GpSimd's native integer path: integer-only arithmetic is exact (no fp32 detour)
    ops_exact = OPS[op0].exact_int and (op1 is None or OPS[op1].exact_int)
    ex = instr.attr("engine") == "gpsimd" and ops_exact and _all_int(ctx, data, o0, o1)
    x = _tile(ctx, data, p, bv, ex)  # type: ignore[arg-type]
    r = M.apply(op0, x, _operand(ctx, o0, p, bv, ex), instr.attr("reverse0"))
    if op1 is not None:
        r = M.apply(op1, r, _operand(ctx, o1, p, bv, ex), instr.attr("reverse1"))
    _store(instr, ctx, r, bv)


@isa("scalar_tensor_tensor")
def _scalar_tensor_tensor(instr: Instr, ctx: Ctx) -> None:
    data, o0, o1 = instr.srcs
    p = data.shape[0]  # type: ignore[union-attr]
    op0, op1 = instr.attr("op0"), instr.attr("op1")
    bv = OPS[op0].bitvec or OPS[op1].bitvec
    x = _tile(ctx, data, p, bv)  # type: ignore[arg-type]
    r = M.apply(op0, x, _operand(ctx, o0, p, bv), instr.attr("reverse0"))
    r = M.apply(op1, r, _tile(ctx, o1, p, bv), instr.attr("reverse1"))  # type: ignore[arg-type]
    _store(instr, ctx, r, bv)


@isa("tensor_scalar_reduce")
def _tensor_scalar_reduce(instr: Instr, ctx: Ctx) -> None:
    data, o0 = instr.srcs
    p = data.shape[0]  # type: ignore[union-attr]
    x = _tile(ctx, data, p, False)  # type: ignore[arg-type]
    r = np.asarray(M.apply(instr.attr("op0"), x, _operand(ctx, o0, p), instr.attr("reverse0")))
    r = r.astype(np.float32)
    _write_res(ctx, instr, "reduce_res", M.free_reduce(instr.attr("reduce_op"), r))
    _store(instr, ctx, r)


@isa("tensor_reduce")
def _tensor_reduce(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    op = OPS[instr.attr("op")]
    raw = ctx.read(src)  # type: ignore[arg-type]
    x = M.bits(raw) if op.bitvec else numerics.to_compute(raw)
    r = M.reduce(op.name, x, tuple(instr.attr("axes")))
    if instr.attr("negate"):
        r = -np.asarray(r, dtype=np.float32)
    _store(instr, ctx, r, op.bitvec)


@isa("tensor_tensor_scan")
def _tensor_tensor_scan(instr: Instr, ctx: Ctx) -> None:
    a0, a1, init = instr.srcs
    p = a0.shape[0]  # type: ignore[union-attr]
    d0 = _tile(ctx, a0, p, False)  # type: ignore[arg-type]
    d1 = _tile(ctx, a1, p, False)  # type: ignore[arg-type]
    iv = _operand(ctx, init, p)
    r = M.scan(
        d0,
        d1,
        iv,
        instr.attr("op0"),
        instr.attr("op1"),
        instr.attr("reverse0"),
        instr.attr("reverse1"),
    )
    _store(instr, ctx, r)


@isa("tensor_copy")
def _tensor_copy(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    raw = ctx.read(src)  # type: ignore[arg-type]
    same = _dtype(ctx, src) == _dtype(ctx, instr.dst)  # type: ignore[arg-type]
    if instr.attr("exact") and same:
        _store(instr, ctx, raw)  # bit-exact copy
    else:
        _store(instr, ctx, numerics.to_compute(raw))  # through fp32


@isa("tensor_copy_predicated")
def _tensor_copy_predicated(instr: Instr, ctx: Ctx) -> None:
    src, pred = instr.srcs
    dst = instr.dst
    assert dst is not None
    keep = ctx.read(pred).reshape(dst.shape) != 0  # type: ignore[arg-type]
    if instr.attr("reverse_pred"):
        keep = ~keep
    m = ctx.mask(instr)
    sel = keep if m is None else keep & m
    if isinstance(src, Const):
        vals = np.broadcast_to(np.asarray(src.value), dst.shape)
    elif src.shape[0] == dst.shape[0] and int(np.prod(src.shape)) == dst.shape[0] != int(
        np.prod(dst.shape)
    ):
        vals = np.broadcast_to(
            ctx.read(src).reshape(dst.shape[0], *([1] * (len(dst.shape) - 1))), dst.shape
        )
    else:
        vals = ctx.read(src).reshape(dst.shape)
    ctx.write(dst, vals, sel)


@isa("select_reduce")
def _select_reduce(instr: Instr, ctx: Ctx) -> None:
    pred, on_true, on_false = instr.srcs
    dst = instr.dst
    assert dst is not None
    p = on_true.shape[0]  # type: ignore[union-attr]
    keep = ctx.read(pred).reshape(p, -1) != 0  # type: ignore[arg-type]
    if instr.attr("reverse_pred"):
        keep = ~keep
    t = _tile(ctx, on_true, p, False)  # type: ignore[arg-type]
    r = np.where(keep, t, _operand(ctx, on_false, p)).astype(np.float32)
    _vector_accumulate(instr, ctx, r, p)
    _store(instr, ctx, r)


def _vector_accumulate(instr: Instr, ctx: Ctx, r: np.ndarray, p: int) -> None:
    cmd = instr.attr("reduce_cmd", "idle")
    if instr.attr("reduce_res") is None and cmd == "idle":
        return
    partial = (
        M.free_reduce("maximum", r) if cmd in ("reduce", "reset_reduce", "load_reduce") else None
    )
    _write_res(ctx, instr, "reduce_res", _regs(ctx, "vector", cmd, "maximum", partial, p))


@isa("range_select")
def _range_select(instr: Instr, ctx: Ctx) -> None:
    src, b0, b1, fill = instr.srcs
    p = src.shape[0]  # type: ignore[union-attr]
    x = _tile(ctx, src, p, False)  # type: ignore[arg-type]
    j = np.arange(x.shape[1], dtype=np.float32)[None, :] + np.float32(instr.attr("range_start"))
    keep = np.asarray(M.apply(instr.attr("comp_op0"), j, _operand(ctx, b0, p))) & np.asarray(
        M.apply(instr.attr("comp_op1"), j, _operand(ctx, b1, p))
    )
    r = np.where(keep, x, np.float32(fill.value)).astype(np.float32)  # type: ignore[union-attr]
    _vector_accumulate(instr, ctx, r, p)
    _store(instr, ctx, r)


@isa("bn_stats")
def _bn_stats(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    p = src.shape[0]  # type: ignore[union-attr]
    m = ctx.mask(instr, src.shape)  # type: ignore[union-attr]
    if m is None:
        _store(instr, ctx, M.bn_stats(_tile(ctx, src, p, False)))  # type: ignore
        return
    # the mask selects input elements: masked-out ones are neither read nor counted
    keep = np.broadcast_to(m, src.shape).reshape(p, -1)  # type: ignore[union-attr]
    x = numerics.to_compute(ctx.read(src, np.broadcast_to(m, src.shape))).reshape(p, -1)  # type: ignore
    rows = keep.any(axis=1) | bool((keep == keep[:1]).all())  # partition-masked rows unwritten
    vals = M.bn_stats(x, keep)
    dst = instr.dst
    assert dst is not None
    sel = np.broadcast_to(rows.reshape((p,) + (1,) * (len(dst.shape) - 1)), dst.shape)
    ctx.write(dst, vals.reshape(dst.shape), sel, instr.accumulate)


@isa("bn_aggr")
def _bn_aggr(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    _store(instr, ctx, M.bn_aggr(_tile(ctx, src, src.shape[0], False)))  # type: ignore


@isa("sequence_bounds")
def _sequence_bounds(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    ids = numerics.to_compute(ctx.read(src), exact_int=True).reshape(-1)  # type: ignore
    _store(instr, ctx, M.sequence_bounds(ids)[None])


@isa("max8")
def _max8(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    _store(instr, ctx, M.top8(_tile(ctx, src, src.shape[0], False)))  # type: ignore


def _sentinel(ctx: Ctx, acc: Access) -> int:
    return int(np.iinfo(dtypes.storage(_dtype(ctx, acc))).max)


@isa("nc_find_index8")
def _nc_find_index8(instr: Instr, ctx: Ctx) -> None:
    data, vals = instr.srcs
    p = data.shape[0]  # type: ignore[union-attr]
    d = _tile(ctx, data, p, False)  # type: ignore[arg-type]
    v = _tile(ctx, vals, p, False)  # type: ignore[arg-type]
    _store(instr, ctx, M.find_index8(d, v, _sentinel(ctx, instr.dst)))  # type: ignore[arg-type]


@isa("nc_match_replace8")
def _nc_match_replace8(instr: Instr, ctx: Ctx) -> None:
    data, vals, imm = instr.srcs
    p = data.shape[0]  # type: ignore[union-attr]
    d = _tile(ctx, data, p, False)  # type: ignore[arg-type]
    v = _tile(ctx, vals, p, False)  # type: ignore[arg-type]
    idx_acc = instr.attr("dst_idx")
    sentinel = _sentinel(ctx, idx_acc) if idx_acc is not None else -1
    out, idx = M.match_replace8(d, v, float(imm.value), sentinel)  # type: ignore[union-attr]
    _write_res(ctx, instr, "dst_idx", idx)
    _store(instr, ctx, out)


@isa("nc_stream_shuffle")
def _nc_stream_shuffle(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    dst = instr.dst
    assert dst is not None
    p = src.shape[0]  # type: ignore[union-attr]
    raw = ctx.read(src).reshape(p, -1)  # type: ignore[arg-type]
    out = np.zeros_like(raw)
    rows = np.zeros(p, dtype=bool)
    shuffle = instr.attr("shuffle")
    for q in range(0, max(p, 1), 32):
        for i, m in enumerate(shuffle):
            dp, sp = q + i, q + m
            if m == 255 or dp >= p:
                continue
            if sp >= p:
                raise NKIRuntimeError(
                    f"nisa.nc_stream_shuffle: shuffle_mask[{i}] = {m} reads partition {sp} "
                    f"beyond the {p} partitions of the source",
                    code="err_invalid_shuffle_mask",
                )
            out[dp] = raw[sp]
            rows[dp] = True
    sel = np.broadcast_to(rows.reshape(p, *([1] * (len(dst.shape) - 1))), dst.shape)
    m = ctx.mask(instr)
    ctx.write(dst, out.reshape(dst.shape), sel if m is None else sel & m)


@isa("reciprocal")
def _reciprocal(instr: Instr, ctx: Ctx) -> None:
    x = _f32(ctx, instr.srcs[0])
    with np.errstate(all="ignore"):
        _store(instr, ctx, np.float32(1.0) / x)


@isa("dropout")
def _dropout(instr: Instr, ctx: Ctx) -> None:
    data, prob = instr.srcs
    p = data.shape[0]  # type: ignore[union-attr]
    raw = ctx.read(data).reshape(p, -1)  # type: ignore[arg-type]
    rng = ctx.state.get("dropout.rng")
    if rng is None:
        seed = ctx.config.shuffle_seed or 0
        rng = np.random.default_rng([seed, *ctx.instance, ctx.core])
        ctx.state["dropout.rng"] = rng
    pr = _operand(ctx, prob, p)
    keep = rng.random(raw.shape, dtype=np.float32) >= pr
    x = raw if raw.dtype.kind in "iu" else numerics.to_compute(raw)
    _store(instr, ctx, np.where(keep, x, np.zeros((), dtype=x.dtype)))


def rules_of(ctx: Ctx):
    """The target's nki.isa rule row (for executors that depend on the generation)."""
    return isa_rules(ctx.ir.target)


from . import isa_gpsimd_dma  # noqa: E402,F401 - registers the GpSimd / DMA executors
