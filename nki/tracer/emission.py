"""Emission: declaring tensors and recording IR instructions in the trace, assignment into
tiles (``t[...] = v``, ``t[...] += v``) with the fusion of an op's result into its target, and
the classic staging of PSUM matmul operands."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import NKIIndexError, NKIMemoryError, NKIShapeError, NKITypeError, user_loc
from ..ir import HBM_BUFFERS, Access, Alloc, Const, IndexExpr, Instr, Mask, TensorDecl
from ..symbolic import Index, Scalar
from .handles import NkiTensor, TileOps, _Assigned
from .loops import escaped_loops
from .operands import as_2d, operand
from .state import TraceState, classic_mode, state


def new_tensor(
    shape: tuple[int, ...],
    dtype: str,
    buffer: str,
    *,
    name: str | None = None,
    par_dim: int = 0,
    kind: str = "local",
    temp: bool = False,
    api: str = "",
    placement: tuple[int, ...] | None = None,
    address: tuple[int, int] | None = None,
) -> NkiTensor:
    st = state(api or "tensor creation")
    loc = user_loc()
    if buffer in ("sbuf", "psum"):
        if len(shape) - par_dim < 2:
            raise NKIShapeError(
                f"insufficient rank: on-chip tile of shape {list(shape)} in {buffer} must have a "
                "partition dimension and at least one free dimension, e.g. (128, 1)",
                code="err_insufficient_rank",
                loc=loc,
            )
        p, pmax = shape[par_dim], st.target.pmax
        if p > pmax:
            raise NKIShapeError(
                f"number of partitions {p} exceeds the architecture limitation of {pmax} "
                f"({api or 'allocation'} of shape {list(shape)} in {buffer})",
                code="err_num_partition_exceed_arch_limit",
                loc=loc,
            )
    for s in shape:
        if not isinstance(s, int) or s <= 0:
            raise NKIShapeError(
                f"tensor dimensions must be positive integers, got {shape}",
                code="err_invalid_shape",
                loc=loc,
            )
    prefix = {"sbuf": "sb", "psum": "ps"}.get(buffer, "hbm")
    nm = st.fresh(f"{name}_") if name and name in st.tensors else (name or st.fresh(prefix))
    decl = TensorDecl(
        nm, tuple(shape), dtype, buffer, kind, par_dim, loc, placement=placement, address=address
    )
    st.declare(decl)
    st.append(Alloc(nm, loc))
    return NkiTensor(decl, tuple(st.loops), temp=temp)


def emit(
    kind: str,
    op: str,
    dst: Access | None,
    srcs: tuple[Any, ...],
    *,
    attrs: tuple[tuple[str, Any], ...] = (),
    mask: Mask | None = None,
    accumulate: str | None = None,
    api: str = "",
) -> Instr:
    st = state(api)
    st.check_early_exit()
    instr = Instr(kind, op, dst, tuple(srcs), attrs, mask, user_loc(), accumulate, api)
    escaped_loops(st, instr)
    st.append(instr)
    if dst is not None:
        st.written.setdefault(dst.tensor, instr.loc)  # type: ignore[arg-type]
    return instr


def column_major_rows(idx: TileOps, rows: int) -> TileOps:
    """The row indices of a ``(128, n)`` ``vector_offset`` tile (n > 1) as the documentation of
    ``dma_transpose`` lays them out: column after column (``indices.T.flatten()``), the first
    ``rows`` of them. They are copied, a column per DMA, into a private HBM ``(rows, 1)`` tensor
    which the access reads its rows from."""
    shape = tuple(idx.shape)
    p = state("tensor.ap").target.pmax
    if (
        len(shape) != 2
        or shape[1] < 2
        or shape[0] != p
        or not p * (shape[1] - 1) < rows <= p * shape[1]
    ):
        raise NKIIndexError(
            f"ap: vector_offset must be a ({rows}, 1) tile, or a ({p}, n) tile whose columns, "
            f"taken one after another, hold the {rows} indices (each column used), got {shape}",
            code="err_invalid_view",
            loc=user_loc(),
        )
    decl = idx.tensor_().decl
    flat = new_tensor((rows, 1), decl.dtype, "private_hbm", api="tensor.ap")
    dma = (("engine", "dma"), ("oob", "error"), ("dge", "unknown"), ("rmw", None))
    for c in range(-(-rows // p)):
        k = min(p, rows - c * p)
        dst, src = flat[c * p : c * p + k, 0:1], idx[0:k, c : c + 1]
        emit("isa", "dma_copy", dst.access_(), (src.access_(),), attrs=dma, api=".ap")
    return flat


def scaled_offset(reg: TileOps, unit: int) -> TileOps:
    """A one-element scalar offset times ``unit``, as a private int32 SBUF tile: an access
    pattern whose steps cross the offset's steps along a partition row reads the row from the
    register's value times the elements one step holds (GpSimd's exact integer multiply)."""
    out = new_tensor((1, 1), "int32", "sbuf", api="tensor.ap")
    attrs = (("engine", "gpsimd"), ("op0", "multiply"), ("op1", None), ("reverse0", False),
             ("reverse1", False))  # fmt: skip
    emit("isa", "tensor_scalar", out.access_(), (reg.access_(), Const(unit), Const(0)),
         attrs=attrs, api=".ap")  # fmt: skip
    return out


def result_tile(shape: tuple[int, ...], dtype: str, buffer: str, api: str) -> NkiTensor:
    return new_tensor(tuple(shape), dtype, buffer, temp=True, api=api)


def const_operand(x: object) -> Const:
    return Const(x.item() if hasattr(x, "item") else x)


def assign(
    dst: Access,
    value: object,
    *,
    accumulate: str | None = None,
    mask: Mask | None = None,
    api: str = "assignment",
    fusable: bool = False,
) -> None:
    """``dst = value`` / ``dst op= value``: write a tile, view or scalar into an access."""
    st = state(api)
    dtensor = st.tensors[dst.tensor]
    dst = as_2d(dst, dtensor)
    if isinstance(value, _Assigned):
        value = value.view
    if isinstance(value, (Index, Scalar)):
        raise NKITypeError(
            "cannot assign an index expression to a tile; materialise it with nisa.iota",
            code="err_cannot_assign_to_index",
            loc=user_loc(),
        )
    if isinstance(value, NkiTensor) and accumulate is None:
        lr = st.loop_reduce_results.get(value.name)
        if lr is not None:  # dst = nl.loop_reduce(x, op, ...): dst accumulates
            op, xacc, lmask, update = lr
            body = st.bodies[-1]
            if body and body[-1] is update:  # the stand-alone accumulator is not needed
                body.pop()
            check_broadcast_into(xacc.shape, dst.shape, api)
            emit("ew", op, dst, (dst, xacc), mask=mask or lmask, api=api)
            return
    if isinstance(value, TileOps):
        src, t = operand(value, api, "value")
        src = trailing_units(src, dst.shape)
        check_broadcast_into(src.shape, dst.shape, api)
        if len(src.shape) > len(dst.shape):  # (the extra leading axes have extent 1: checked)
            src, dst = _same_rank(src, dst, t.buffer, dtensor.buffer, api)
        if fusable and _fuse_into(st, t, dst, accumulate, mask):
            return
        if mask is None and fusable and src.shape == dst.shape:
            mask = _producer_mask(st, t, dst)
        emit("copy", "copy", dst, (src,), mask=mask, accumulate=accumulate, api=api)
        return
    if isinstance(value, (int, float, bool)) or hasattr(value, "dtype"):
        if hasattr(value, "shape") and getattr(value, "shape", ()) != ():
            raise NKITypeError(
                "cannot assign a NumPy array inside a kernel; load data from an HBM tensor",
                code="err_unsupported_operand",
                loc=user_loc(),
            )
        if dtensor.buffer in HBM_BUFFERS:
            raise NKIMemoryError(
                "cannot write a scalar directly to an HBM tensor; fill an SBUF tile and nl.store "
                "it",
                code="err_unsupported_memory",
                loc=user_loc(),
            )
        emit(
            "memset",
            "memset",
            dst,
            (const_operand(value),),
            mask=mask,
            accumulate=accumulate,
            api=api,
        )
        return
    raise NKITypeError(
        f"cannot assign a value of type {type(value).__name__} to a tile",
        code="err_unsupported_operand",
        loc=user_loc(),
    )


def _same_rank(
    src: Access, dst: Access, src_buffer: str, dst_buffer: str, api: str
) -> tuple[Access, Access]:
    """A source of more axes than its destination, the extra leading ones of extent 1: an HBM
    destination gains them (a DMA copies equal element counts); otherwise the source loses
    them, an on-chip source only into one partition (the engines copy within partitions)."""
    k = len(src.shape) - len(dst.shape)
    if dst_buffer in HBM_BUFFERS:
        shape = src.shape[:k] + dst.shape
        idx = tuple(IndexExpr(e.base, (0,) * k + e.coeffs, shape) for e in dst.index)
        return src, Access(dst.tensor, shape, idx, dst.indirect)
    if src_buffer not in HBM_BUFFERS and dst.shape[0] > 1:
        raise NKIShapeError(
            f"'{api}' of a {list(src.shape)} source, one partition, into a destination of "
            f"{dst.shape[0]} partitions {list(dst.shape)}: an engine copies within partitions; "
            "give the source the destination's partition axis (or copy through HBM)",
            code="err_num_partition_mismatch",
            loc=user_loc(),
        )
    shape = src.shape[k:]
    idx = tuple(IndexExpr(e.base, e.coeffs[k:], shape) for e in src.index)
    return Access(src.tensor, shape, idx, src.indirect), dst


def trailing_units(src: Access, dst: tuple[int, ...]) -> Access:
    """A tile whose shape differs from its destination's only by trailing unit axes, which
    NumPy's alignment (from the last axis) does not fit but partition-first does: a (P, 1)
    ``tensor_reduce`` result into a (P, 1, 1) tile, or a (P, 1, 1) tile stored into a (P, 1)
    tensor. The source gains or loses those axes; any other pair is left to the broadcast
    check (``check_broadcast_into``)."""
    n, m = len(src.shape), len(dst)
    short, long_ = (src.shape, dst) if n < m else (dst, src.shape)
    k = len(long_) - len(short)
    if k == 0 or tuple(long_[: len(short)]) != tuple(short) or any(d != 1 for d in long_[-k:]):
        return src
    if n < m and all(a == b or a == 1 for a, b in zip((1,) * k + tuple(src.shape), dst)):
        return src  # (NumPy's own alignment already fits: it decides)
    coeffs = (lambda c: c + (0,) * k) if n < m else (lambda c: c[:m])
    idx = tuple(IndexExpr(e.base, coeffs(e.coeffs), tuple(dst)) for e in src.index)
    return Access(src.tensor, tuple(dst), idx, src.indirect)


def check_broadcast_into(src: tuple[int, ...], dst: tuple[int, ...], api: str) -> None:
    """Source tiles broadcast into destinations; the destination may not be smaller."""
    ok = len(src) <= len(dst) or all(s == 1 for s in src[: len(src) - len(dst)])
    if ok:
        s2 = tuple(src[-len(dst) :]) if len(src) >= len(dst) else (1,) * (len(dst) - len(src)) + src
        ok = all(a == b or a == 1 for a, b in zip(s2, dst))
    if not ok:
        raise NKIShapeError(
            f"destination shape {list(dst)} of '{api}' is smaller than (or incompatible with) "
            f"the source shape {list(src)}",
            code="err_store_dst_shape_smaller_than_other_shape",
            loc=user_loc(),
        )


def _fuse_into(
    st: TraceState, t: NkiTensor, dst: Access, accumulate: str | None, mask: Mask | None
) -> bool:
    """``t[...] = nl.op(...)``: when the op's result tile is referenced nowhere else, let the
    instruction write its target directly (no temporary tile, as the real compiler does)."""
    body = st.bodies[-1]
    if not t.temp or len(body) < 2:
        return False
    last, alloc = body[-1], body[-2]
    if not (isinstance(last, Instr) and isinstance(alloc, Alloc)):
        return False
    if alloc.tensor != t.name or last.dst is None or last.dst.tensor != t.name:
        return False
    if last.accumulate is not None:
        return False
    if last.mask is not None and mask is not None and last.mask != mask:
        return False
    if last.dst.shape != dst.shape or any(a.tensor == t.name for a in last.reads()):
        return False
    if st.tensors[dst.tensor].dtype != t.decl.dtype:
        return False
    if last.attr("staged") and st.tensors[dst.tensor].buffer != t.decl.buffer:
        # an instruction whose engine the compiler picks (nc_transpose without engine=) assigned
        # to a tile in another buffer: it is staged in its own buffer and copied, not fused
        return False
    # a masked op writes only its selected lanes of the target (the rest keep their values)
    mask = mask if mask is not None else last.mask
    body[-2:] = [
        Instr(last.kind, last.op, dst, last.srcs, last.attrs, mask, last.loc, accumulate, last.api)
    ]
    del st.tensors[t.name]
    st.written.pop(t.name, None)
    st.written.setdefault(dst.tensor, last.loc)  # type: ignore[arg-type]
    return True


def _producer_mask(st: TraceState, t: NkiTensor, dst: Access) -> Mask | None:
    """``t[...] = nl.op(..., mask=m)`` that could not be fused (e.g. another dtype): the copy
    takes the op's mask, so the lanes the op left unwritten do not overwrite the target."""
    body = st.bodies[-1]
    last = body[-1] if body else None
    if not t.temp or not isinstance(last, Instr) or last.mask is None or last.dst is None:
        return None
    if last.dst.tensor != t.name or last.dst.shape != dst.shape:
        return None
    return last.mask


def stage_psum_operand(x: Any, api: str) -> Any:
    """Classic mode: a Tensor-engine operand that lives in PSUM (e.g. an ``nc_transpose``
    result fed straight to ``nc_matmul``, as in AWS's flash-attention backward kernel) is
    copied to SBUF first, as the classic compiler does; anything else is returned as is."""
    if not classic_mode() or not isinstance(x, (TileOps, _Assigned)):
        return x
    acc, t = operand(x.view if isinstance(x, _Assigned) else x, api, "operand")
    if t.decl.buffer != "psum":
        return x
    staged = result_tile(acc.shape, t.decl.dtype, "sbuf", api)
    emit("copy", "copy", staged.access_(), (acc,), api=api)
    return staged


def onchip_return(r: Any, grid_shape: tuple[int, ...]) -> Any:
    """A kernel that returns an SBUF/PSUM tile (allowed by the classic simulator, e.g. the
    ``nisa.dma_transpose`` and ``nisa.range_select`` documentation examples) returns its value:
    the tile is stored into a fresh ``shared_hbm`` output at the end of the kernel. Only for a
    single-instance launch; other returns are left for the caller to reject."""
    if not isinstance(r, NkiTensor) or not r.decl.on_chip:
        return r
    if grid_shape and int(np.prod(grid_shape)) > 1:
        return r
    src: Access = as_2d(r.access_(), r)
    out = new_tensor(tuple(src.shape), r.decl.dtype, "shared_hbm", api="kernel return")
    emit("dma", "store", out.access_(), (src,), api="kernel return")
    return out
