"""Shared operand handling for nki.isa calls: tiles, scalar-or-vector operands, dtypes, ops and
instruction emission. Every nki.isa function is a thin signature over these helpers and the
rule checks in ``rules.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import NKIError, NKIMemoryError, NKIShapeError, NKITypeError, user_loc
from ..ir import Access, Const, Mask
from ..optable import Op, lookup
from ..targets import isa_rules
from ..tracer import (
    NkiTensor,
    TileOps,
    _Assigned,
    check_partitions,
    check_start_partition,
    const_operand,
    emit,
    operand,
    require_buffer,
    result_tile,
    state,
    to_mask,
)

ON_CHIP = ("sbuf", "psum")


def target():
    """The ``nki.targets.Target`` being traced."""
    return state("nki.isa").target


def rules():
    """The ``IsaRules`` row of the target being traced."""
    return isa_rules(target().name)


def prod(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def free_size(shape: tuple[int, ...]) -> int:
    """Elements per partition of a tile shape."""
    return prod(shape[1:])


def is_tile(x: object) -> bool:
    return isinstance(x, (TileOps, _Assigned))


def tile(
    x: object, api: str, role: str, buffers: tuple[str, ...] = ON_CHIP, *, compute: bool = True
) -> tuple[Access, NkiTensor]:
    """A tile operand: in one of ``buffers``, at most 128 partitions; for compute engines
    (``compute``) a compile-time start partition must follow the quadrant rule."""
    acc, t = operand(x, api, role)
    require_buffer(t, buffers, api, role)
    if t.decl.on_chip:
        check_partitions(acc.shape, api, role)
    if t.decl.on_chip and len(acc.shape) < 2:
        raise NKIShapeError(
            f"operand '{role}' of '{api}' is a {len(acc.shape)}-D access {list(acc.shape)}; "
            "on-chip tiles need a partition and a free dimension",
            code="err_insufficient_rank",
            loc=user_loc(),
        )
    if compute and t.decl.on_chip:
        check_start_partition(acc, t, api, role)
    return acc, t


def dt(t: NkiTensor) -> str:
    return t.decl.dtype


def out_dtype(dtype: object, default: str) -> str:
    return dtype_name(dtype) if dtype is not None else default


def dtype_name(dtype: object) -> str:
    """``dtypes.name_of`` with the kernel's line on the error for an unsupported dtype."""
    try:
        return dtypes.name_of(dtype)
    except NKIError as e:
        raise NKITypeError(e.message, code=e.code, loc=user_loc()) from None


def static_int(x: object, api: str, role: str) -> int:
    """A compile-time integer argument (Python or NumPy int)."""
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise NKITypeError(
            f"'{role}' of '{api}' must be a compile-time integer, got {x!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    return int(x)


def widest(names: list[str]) -> str:
    """'Whichever input has the highest precision': classic promotion over the inputs."""
    out = names[0]
    for n in names[1:]:
        out = dtypes.promote(out, n)
    return out


def alu_op(op: object, api: str, role: str) -> Op:
    """Resolve an ``op=`` argument (nl.add, np.add, nl.max, ...) through the op table."""
    try:
        return lookup(op)
    except NKIError as e:
        raise NKITypeError(
            f"'{role}' of '{api}': {e.message}", code=e.code, loc=user_loc()
        ) from None


def scalar_or_vector(
    x: object, parts: int, api: str, role: str, *, fp32_only: bool = False
) -> tuple[Access | Const, str]:
    """A compile-time scalar, or a (P, 1) tile with the data's partition count."""
    if is_tile(x):
        acc, t = tile(x, api, role)
        if acc.shape[0] != parts or free_size(acc.shape) != 1:
            raise NKIShapeError(
                f"'{role}' of '{api}' must be a scalar or a vector of shape ({parts}, 1) (one "
                f"element per partition of the data); got a tile of shape {list(acc.shape)}",
                code="err_scalar_or_vector_operand_shape",
                loc=user_loc(),
            )
        if fp32_only and dt(t) != "float32":
            raise NKITypeError(
                f"'{role}' of '{api}' must be a float32 vector, got {dt(t)}",
                code="err_invalid_operand_dtype",
                loc=user_loc(),
            )
        return acc, dt(t)
    if isinstance(x, (bool, int, float)) or (hasattr(x, "dtype") and getattr(x, "shape", 0) == ()):
        return const_operand(x), dtypes.scalar_dtype(x)
    raise NKITypeError(
        f"'{role}' of '{api}' must be a compile-time scalar or a ({parts}, 1) tile, got "
        f"{type(x).__name__}",
        code="err_unsupported_operand",
        loc=user_loc(),
    )


def same_partitions(a: tuple[int, ...], b: tuple[int, ...], api: str, ra: str, rb: str) -> None:
    if a[0] != b[0]:
        raise NKIShapeError(
            f"number of partitions mismatch in parameters ({ra}{list(a)}, {rb}{list(b)}) of "
            f"'{api}': {a[0]} vs {b[0]}",
            code="err_num_partition_mismatch",
            loc=user_loc(),
        )


def same_elements(a: tuple[int, ...], b: tuple[int, ...], api: str, ra: str, rb: str) -> None:
    """Same partition count and the same number of elements per partition."""
    same_partitions(a, b, api, ra, rb)
    if free_size(a) != free_size(b):
        raise NKIShapeError(
            f"'{api}' needs the same number of elements per partition in '{ra}' {list(a)} "
            f"({free_size(a)}) and '{rb}' {list(b)} ({free_size(b)})",
            code="err_free_size_mismatch",
            loc=user_loc(),
        )


def not_both_psum(ta: NkiTensor, tb: NkiTensor, api: str, ra: str, rb: str) -> None:
    if ta.buffer == "psum" and tb.buffer == "psum":
        raise NKIMemoryError(
            f"'{ra}' and '{rb}' of '{api}' cannot both be in PSUM ('{ta.name}', '{tb.name}'): "
            "the engine reads at most one operand from PSUM",
            code="err_unsupported_memory",
            loc=user_loc(),
        )


def out_tile(shape: tuple[int, ...], dtype: str, api: str, buffer: str = "sbuf") -> NkiTensor:
    check_partitions(tuple(shape), api, "result")
    return result_tile(tuple(shape), dtype, buffer, api)


@dataclass(frozen=True, repr=False)
class AttrAccess(Access):
    """An access stored in an instruction's attrs (a secondary output such as ``reduce_res``);
    prints like an access in IR listings."""

    def __repr__(self) -> str:
        return str(self)


@dataclass(frozen=True, repr=False)
class AttrMask(Mask):
    """A predicate stored in attrs (affine_select); prints like a mask in IR listings."""

    def __repr__(self) -> str:
        return str(self)


def _readable(v: Any) -> Any:
    if isinstance(v, Access) and not isinstance(v, AttrAccess):
        return AttrAccess(v.tensor, v.shape, v.index, v.indirect)
    if isinstance(v, Mask) and not isinstance(v, AttrMask):
        return AttrMask(v.conds)
    return v


def emit_isa(
    name: str,
    dst: Access | None,
    srcs: tuple[Any, ...],
    attrs: dict[str, Any],
    *,
    mask: object = None,
    mask_shape: tuple[int, ...] | None = None,
    outputs: tuple[Access, ...] = (),
    api: str = "",
) -> None:
    """Record one ``isa.<name>`` instruction. Secondary outputs (``reduce_res``, ``dst_idx``)
    ride in attrs as accesses; they are registered as written tensors too."""
    api = api or f"nisa.{name}"
    shape = mask_shape if mask_shape is not None else (dst.shape if dst is not None else ())
    m = to_mask(mask, shape, api)
    items = tuple((k, _readable(v)) for k, v in attrs.items())
    emit("isa", name, dst, tuple(srcs), attrs=items, mask=m, api=api)
    st = state(api)
    loc = user_loc()
    for acc in outputs:
        st.written.setdefault(acc.tensor, loc)


def check_bitvec_dtypes(op: Op, names: list[str], api: str, role: str) -> None:
    if not op.bitvec:
        return
    for d in names:
        if not (dtypes.is_int(d) or dtypes.is_bool(d)):
            raise NKITypeError(
                f"'{role}'={op.name} of '{api}' is a bit-vector operator and needs integer "
                f"input/output dtypes, got {d}",
                code="err_bitvec_op_requires_integer_dtype",
                loc=user_loc(),
            )
