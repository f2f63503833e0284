"""Element-wise nki.language ops, generated from the op table (``nki/optable.py``).

Every function takes tiles (SBUF / PSUM) or scalars, broadcasts them NumPy-style, computes in
fp32 and returns a new SBUF tile whose dtype follows the classic promotion rules unless
``dtype=`` is given. ``mask=`` restricts which elements are computed."""

from __future__ import annotations

from typing import Any

from .. import dtypes
from ..errors import NKIError, NKIMemoryError, NKIShapeError, NKITypeError, user_loc
from ..ir import Access, IndexExpr
from ..optable import OPS, Op, result_dtype
from ..symbolic import Index, Scalar, broadcast_shapes
from ..tracer import (
    DynOffset,
    NkiTensor,
    TileOps,
    _Assigned,
    check_partitions,
    check_start_partition,
    const_operand,
    emit,
    operand,
    result_tile,
    to_mask,
)
from ..tracer.api_checks import op_on_target
from ..tracer.handles import MaskedOperand
from .reductions import expand_access


def tile_operands(args: tuple[Any, ...], api: str) -> tuple[list[Any], list[str], tuple[int, ...]]:
    """Accesses / constants, their dtypes and the broadcast tile shape of an op's inputs.

    Tiles broadcast NumPy-style, except that a tile of lower rank is aligned on the partition
    axis (its missing trailing axes become extent 1): a ``(P,)`` reduction result or a
    ``(P, 1)`` column broadcasts along every free axis of a ``(P, A, B)`` tile."""
    srcs: list[Any] = []
    dts: list[str] = []
    for i, a in enumerate(args):
        role = f"x{i}" if len(args) > 2 else ("x", "y")[i]
        if isinstance(a, DynOffset):
            a = a.as_value()
        if isinstance(a, _Assigned):
            a = a.view
        if isinstance(a, TileOps):
            acc, t = operand(a, api, role)
            check_start_partition(acc, t, api, role)
            if t.buffer not in ("sbuf", "psum"):
                raise NKIMemoryError(
                    f"expected operand '{role}' of '{api}' to be in address space 'sbuf' or "
                    f"'psum', but got a tensor in '{t.buffer}' ({t.label}); nl.load it first",
                    code="err_unsupported_memory",
                    loc=user_loc(),
                )
            check_partitions(acc.shape, api, role)
            srcs.append(acc)
            dts.append(t.decl.dtype)
        elif isinstance(a, (int, float, bool)) or (
            hasattr(a, "dtype") and getattr(a, "shape", None) == ()
        ):
            srcs.append(const_operand(a))
            dts.append(dtypes.scalar_dtype(a))
        elif isinstance(a, Scalar):  # a loop iterator / program id expression: an integer
            srcs.append(IndexExpr(a.aff, (), ()))
            dts.append(dtypes.scalar_dtype(0))
        elif isinstance(a, (Index, MaskedOperand)):
            operand(a, api, role)  # raises: an index is not a tile, a masked operand no operand
        else:
            raise NKITypeError(
                f"operand '{role}' of '{api}' must be a tile or a scalar, got {type(a).__name__}",
                code="err_unsupported_operand",
                loc=user_loc(),
            )
    tiles = [s for s in srcs if isinstance(s, Access)]
    if not tiles:
        raise NKITypeError(
            f"'{api}' needs at least one tile operand (got only scalars)",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    rank = max(len(t.shape) for t in tiles)
    srcs = [
        expand_access(s, rank - len(s.shape))
        if isinstance(s, Access) and 0 < len(s.shape) < rank
        else s
        for s in srcs
    ]
    shape: tuple[int, ...] = ()
    for s in srcs:
        if isinstance(s, Access):
            try:
                shape = broadcast_shapes(shape, s.shape)
            except NKIError:
                shapes = [list(x.shape) for x in srcs if isinstance(x, Access)]
                raise NKIShapeError(
                    f"operands of '{api}' with shapes {shapes} cannot be broadcast together",
                    code="err_broadcast_shape_mismatch",
                    loc=user_loc(),
                ) from None
    check_partitions(shape, api, "result")
    return srcs, dts, shape


def elementwise(op: Op, args: tuple[Any, ...], dtype: Any, mask: Any) -> NkiTensor:
    api = f"nl.{op.name}"
    op_on_target(op, api)
    srcs, dts, shape = tile_operands(args, api)
    if op.bitvec:
        for d in dts:
            if not (dtypes.is_int(d) or dtypes.is_bool(d)):
                raise NKITypeError(
                    f"'{api}' is a bit-vector operation and needs integer operands, got {d}",
                    code="err_bitvec_op_requires_integer_dtype",
                    loc=user_loc(),
                )
    out_dt = dtypes.name_of(dtype) if dtype is not None else result_dtype(op, dts)
    out = result_tile(shape, out_dt, "sbuf", api)
    # bit-vector ops work on the bit pattern of the operands' promoted integer type (typed
    # NumPy scalars keep their width, which a Const alone does not record)
    attrs = (("bit_dtype", result_dtype(op, dts)),) if op.bitvec else ()
    emit("ew", op.name, out.access_(), tuple(srcs), attrs=attrs,
         mask=to_mask(mask, shape, api), api=api)  # fmt: skip
    return out


def _make(op: Op):
    if op.arity == 2:

        def fn(x: Any, y: Any, *, dtype: Any = None, mask: Any = None, **_kw: Any) -> NkiTensor:
            return elementwise(op, (x, y), dtype, mask)

    else:

        def fn(x: Any, *, dtype: Any = None, mask: Any = None, **_kw: Any) -> NkiTensor:
            return elementwise(op, (x,), dtype, mask)

    fn.__name__ = fn.__qualname__ = op.name
    kind = "binary" if op.arity == 2 else "unary"
    rng = f" Valid input range on hardware: {op.domain}." if op.domain else ""
    fn.__doc__ = (
        f"Element-wise {kind} op: {op.doc}. Engines: {', '.join(op.engines)}; computes in fp32"
        f"{' (exact for integers)' if op.exact_int else ''}"
        f"{'; integer dtypes only' if op.bitvec else ''}.{rng}"
    )
    fn.__nki_op__ = op.name  # type: ignore[attr-defined]
    return fn


_GENERATED = {}
for _name, _op in OPS.items():
    if _name == "copy":
        continue
    _GENERATED[_name] = _make(_op)
globals().update(_GENERATED)

__all__ = sorted(_GENERATED)
