"""Tensor-engine style ops of nki.language: ``nl.matmul``, ``nl.transpose`` and the
transposing DMA ``nl.load_transpose2d``.

``nl.matmul(x, y)`` computes ``x @ y`` (``x.T @ y`` with ``transpose_x=True``) with fp32
accumulation and returns an fp32 PSUM tile; ``psum_tile += nl.matmul(...)`` accumulates in
fp32 across loop iterations."""

from __future__ import annotations

from typing import Any

from .. import dtypes
from ..errors import NKIShapeError, NKITypeError, user_loc
from ..ir import HBM_BUFFERS, Access, IndexExpr
from ..tracer import (
    NkiTensor,
    _Assigned,
    check_partitions,
    check_start_partition,
    classic_mode,
    emit,
    operand,
    require_buffer,
    result_tile,
    stage_psum_operand,
    state,
    to_mask,
)
from ..tracer.operand_masks import result_mask, transposed_mask, unwrap

_PE_DTYPES = ("float32", "tfloat32", "bfloat16", "float16", "float8_e4m3", "float8_e4m3fn",
              "float8_e5m2")  # fmt: skip


def _tile2d(x: Any, api: str, role: str) -> tuple[Access, NkiTensor]:
    if isinstance(x, _Assigned):
        x = x.view
    acc, t = operand(x, api, role)
    check_start_partition(acc, t, api, role)
    if len(acc.shape) != 2:
        raise NKIShapeError(
            f"operand '{role}' of '{api}' must be a 2-D tile, got shape {list(acc.shape)}",
            code="err_unsupported_tile_rank",
            loc=user_loc(),
        )
    return acc, t


def _limit(value: int, limit: int, what: str, api: str, role: str, shape: tuple[int, ...]):
    if value > limit:
        raise NKIShapeError(
            f"{what} of operand '{role}' of '{api}' is {value}, exceeding the limit of {limit} "
            f"(shape {list(shape)})",
            code="err_matmul_tile_size_exceeds_limit",
            loc=user_loc(),
        )


def matmul(x: Any, y: Any, *, transpose_x: bool = False, mask: Any = None, **_kw: Any):
    """``x @ y`` (or ``x.T @ y`` when ``transpose_x``) on the Tensor Engine; fp32 PSUM result.

    Constraints (NKIShapeError ``err_matmul_tile_size_exceeds_limit`` /
    ``err_matmul_contraction_mismatch``): x and y are 2-D SBUF tiles with partition dim <= 128;
    x's free dim <= 128 (the stationary operand) and must equal y's partition dim (with
    ``transpose_x`` x's partition dim is the contraction dim); y's free dim <= 512. Inputs must
    be float types (fp8 / bf16 / fp16 / tf32 / fp32). Products and the accumulation are fp32.
    Operand masks (``x[i_m < M]``, ``y[i_n < N]``, classic) bound the result rows / columns.

    Example: ``acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)``;
    ``acc += nl.matmul(a_t, b, transpose_x=True)``."""
    api = "nl.matmul"
    (x, x_conds), (y, y_conds) = unwrap(x), unwrap(y)
    # classic mode: PSUM operands staged in SBUF
    x, y = stage_psum_operand(x, api), stage_psum_operand(y, api)
    xa, xt = _tile2d(x, api, "x")
    ya, yt = _tile2d(y, api, "y")
    require_buffer(xt, ("sbuf",), api, "x")
    require_buffer(yt, ("sbuf",), api, "y")
    for role, acc, t in (("x", xa, xt), ("y", ya, yt)):
        check_partitions(acc.shape, api, role)
        if t.decl.dtype not in _PE_DTYPES:
            raise NKITypeError(
                f"operand '{role}' of '{api}' has dtype {t.decl.dtype}; the Tensor Engine takes "
                f"{', '.join(_PE_DTYPES)}",
                code="err_unsupported_dtype",
                loc=user_loc(),
            )
    tgt = state(api).target  # Tensor-engine tile limits of the target being traced
    _limit(xa.shape[1], tgt.gemm_stationary_fmax, "free dimension", api, "x", xa.shape)
    _limit(ya.shape[1], tgt.gemm_moving_fmax, "free dimension", api, "y", ya.shape)
    k_x = xa.shape[0] if transpose_x else xa.shape[1]
    m = xa.shape[1] if transpose_x else xa.shape[0]
    if k_x != ya.shape[0]:
        which = "partition" if transpose_x else "free"
        raise NKIShapeError(
            f"contraction dimension mismatch in '{api}': x's {which} dimension is {k_x} but y's "
            f"partition dimension is {ya.shape[0]} (x {list(xa.shape)}, y {list(ya.shape)}, "
            f"transpose_x={bool(transpose_x)})",
            code="err_matmul_contraction_mismatch",
            loc=user_loc(),
        )
    out_shape = (m, ya.shape[1])
    if x_conds or y_conds:  # operand masks: x's free axis is the result's partition axis
        x_axes = (None, 0) if transpose_x else (0, None)
        operands = ((x_conds, xa.shape, x_axes), (y_conds, ya.shape, (None, 1)))
        mask = result_mask(mask, operands, out_shape, api)
    out = result_tile(out_shape, "float32", "psum", api)
    emit(
        "matmul",
        "matmul",
        out.access_(),
        (xa, ya),
        attrs=(("transpose_x", bool(transpose_x)),) + _classic_group(),
        mask=to_mask(mask, out_shape, api),
        api=api,
    )
    return out


def _classic_group() -> tuple[tuple[str, Any], ...]:
    """Classic mode: ``psum += nl.matmul(...)`` on a fresh PSUM tile starts the group."""
    return (("psum_group", True),) if classic_mode() else ()


def transpose(x: Any, *, dtype: Any = None, mask: Any = None, **_kw: Any) -> NkiTensor:
    """Swap the partition and free axes of a 2-D tile (each dim <= 128), bit-exact, cast to
    ``dtype`` if given. The result is an SBUF tile: the compiler runs the transpose through PSUM
    and copies it back, so it can feed ``nl.matmul`` directly (as in the AWS attention
    tutorial)."""
    api = "nl.transpose"
    acc, t = _tile2d(x, api, "x")
    require_buffer(t, ("sbuf", "psum"), api, "x")
    for d, n in enumerate(acc.shape):
        if n > state(api).target.pmax:
            raise NKIShapeError(
                f"'{api}' supports tiles up to 128 x 128; dimension {d} of x is {n} "
                f"(shape {list(acc.shape)})",
                code="err_transpose_tile_size_exceeds_limit",
                loc=user_loc(),
            )
    out_shape = (acc.shape[1], acc.shape[0])
    out_dt = dtypes.name_of(dtype) if dtype is not None else t.decl.dtype
    out = result_tile(out_shape, out_dt, "sbuf", api)
    mask = to_mask(transposed_mask(mask, acc.shape, api), out_shape, api)
    emit("transpose", "transpose", out.access_(), (acc,), mask=mask, api=api)
    return out


def transposed_access(acc: Access) -> Access:
    """The same elements seen with the two tile axes swapped (an affine re-indexing)."""
    p, f = acc.shape
    shape = (f, p)
    idx = tuple(IndexExpr(e.base, (e.coeffs[1], e.coeffs[0]), shape) for e in acc.index)
    return Access(acc.tensor, shape, idx, acc.indirect)


def load_transpose2d(src: Any, *, mask: Any = None, dtype: Any = None, **_kw: Any) -> NkiTensor:
    """Load a 2-D HBM tile ``(F, P)`` into SBUF transposed, as a ``(P, F)`` tile (P <= 128).
    The DMA reads the source with swapped strides, so it is exact."""
    api = "nl.load_transpose2d"
    acc, t = _tile2d(src, api, "src")
    require_buffer(t, HBM_BUFFERS, api, "src")
    tacc = transposed_access(acc)
    check_partitions(tacc.shape, api, "result")
    out_dt = dtypes.name_of(dtype) if dtype is not None else t.decl.dtype
    out = result_tile(tacc.shape, out_dt, "sbuf", api)
    mask = to_mask(transposed_mask(mask, acc.shape, api), tacc.shape, api)
    emit("dma", "load_transpose2d", out.access_(), (tacc,), mask=mask, api=api)
    return out


__all__ = ["load_transpose2d", "matmul", "transpose"]
