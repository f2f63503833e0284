"""GpSimd-engine instructions: iota, memset, affine_select, tensor_partition_reduce,
local_gather and sequence_bounds, and of the current API only nc_n_gather,
nonzero_with_count and topk. The current form of iota and affine_select describes its values
by a ``[[step, num], ...]`` pattern instead of an affine expression (adapters below)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import dtypes
from .. import language as nl
from ..errors import NKIError, NKIShapeError, NKITypeError, NKIUnsupportedError, user_loc
from ..ir import Affine, Cond, IndexExpr, Mask, tensor_label
from ..symbolic import Index, Pred, Scalar, expand_expr
from ..tracer import NkiTensor, _Assigned, concrete_value, const_operand, is_register
from ..tracer.api_checks import broken
from .common import (
    SBUF,
    Call,
    Instruction,
    alu_op,
    check_bitvec_dtypes,
    dt,
    dtype_in,
    free_size,
    same_dtype,
    same_partitions,
    static_int,
)
from .forms import dst_dtype, dst_view, generic_current, instruction, require_dst_dtype
from .rules import check_dtype_in


def _invalid(msg: str, code: str = "err_invalid_argument") -> NKIError:
    return NKIError(msg, code=code, loc=user_loc())


# ---- the current form's [[step, num], ...] patterns --------------------------------------------
def _pattern_shape(name: str, dst: Any, pattern: Any) -> Any:
    """``dst`` seen as ``[P, num_0, num_1, ...]`` (the pattern's pairs, outermost first) when the
    pairs cover its elements per partition in another shape: the engine walks the pattern and
    writes dst's elements in order."""
    t = dst_view(dst)
    try:
        nums = tuple(int(pair[1]) for pair in pattern)
    except (TypeError, IndexError, ValueError):
        return dst  # _pattern_value reports the malformed pattern
    shape = tuple(t.shape)
    if isinstance(dst, _Assigned) or nums == shape[1:] or not hasattr(t, "reshape"):
        return dst
    if math.prod(nums) != math.prod(shape[1:]):
        raise NKIUnsupportedError(
            f"pattern {pattern!r} of nisa.{name} walks {math.prod(nums)} elements per partition "
            f"but dst {list(shape)} has {math.prod(shape[1:])}: the [step, num] pairs must cover "
            "dst's elements per partition exactly",
            code="err_free_size_mismatch",
            loc=user_loc(),
        )
    return t.reshape((shape[0], *nums))


def _pattern_value(name: str, dst: Any, a: dict[str, Any]) -> Any:
    """``offset + p * channel_multiplier + sum(idx_k * step_k)`` over ``dst``'s partitions and the
    ``[[step, num], ...]`` pairs, as an affine index expression (one free dim of dst per pair)."""
    pattern, offset, cm = a.pop("pattern"), a.pop("offset"), a.pop("channel_multiplier")
    shape = tuple(dst_view(dst).shape)
    seq = isinstance(pattern, (list, tuple))
    pairs = [tuple(q) if isinstance(q, (list, tuple)) else (q,) for q in pattern] if seq else []
    if not pairs or any(
        len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
        for pair in pairs
    ):
        raise NKITypeError(
            f"pattern of nisa.{name} must be a list of [step, num] int pairs; got {pattern!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    if len(pairs) > 4:  # (the iota / affine_select pages: "up to 4D" patterns)
        raise NKITypeError(
            f"pattern of nisa.{name} has {len(pairs)} [step, num] pairs; at most 4",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    if isinstance(offset, np.integer):
        offset = int(offset)
    if is_register(offset):
        raise NKIUnsupportedError(
            f"offset of nisa.{name} is a register: nki-sim does not simulate register "
            "offsets of generated patterns (an int, a loop iterator or a program id works)",
            code="err_unsupported_attribute",
            loc=user_loc(),
        )
    # (the offset may also be a traced int: a loop iterator or a program id, as in a causal
    # mask whose diagonal moves with the loop)
    if not isinstance(offset, (int, Scalar)) or isinstance(offset, bool):
        raise NKITypeError(
            f"offset of nisa.{name} must be an int or a loop iterator / program id expression; "
            f"got {offset!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    if not isinstance(cm, int) or isinstance(cm, bool):
        raise NKITypeError(
            f"channel_multiplier of nisa.{name} must be an int; got {cm!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    if tuple(n for _, n in pairs) != shape[1:] and not (
        len(shape) == 2 and len(pairs) == 1 and pairs[0][1] == shape[1]
    ):
        raise NKIUnsupportedError(
            f"pattern {pattern!r} of nisa.{name}: nki-sim simulates one [step, num] pair per free "
            f"dimension of dst (dst shape {list(shape)})",
            code="err_unsupported_attribute",
            loc=user_loc(),
        )
    k = len(pairs)
    expr = nl.arange(shape[0])[(slice(None), *([None] * k))] * int(cm) + offset
    for i, (step, num) in enumerate(pairs):
        sel = [None] * (k + 1)
        sel[i + 1] = slice(None)
        expr = expr + nl.arange(num)[tuple(sel)] * int(step)
    return expr


def _iota_into(name: str, dst: Any, a: dict[str, Any]) -> tuple[Any, None, dict[str, Any]]:
    dst = _pattern_shape(name, dst, a["pattern"])
    a["expr"] = _pattern_value(name, dst, a)
    a["dtype"] = dst_dtype(dst)
    return dst, None, {}


_COMPARE = {
    "equal": lambda v: v == 0,
    "not_equal": lambda v: v != 0,
    "greater": lambda v: v > 0,
    "greater_equal": lambda v: v >= 0,
    "less": lambda v: v < 0,
    "less_equal": lambda v: v <= 0,
}


def _affine_select_into(name: str, dst: Any, a: dict[str, Any]) -> tuple[Any, None, dict[str, Any]]:
    """``dst = on_true_tile where cmp_op(value, 0) else on_false_value`` with the iota value; a
    pattern whose pairs cover dst's elements per partition in another shape walks dst and
    on_true_tile both seen in the pattern's shape (as ``iota``)."""
    shaped = _pattern_shape(name, dst, a["pattern"])
    if shaped is not dst:
        src = a.get("on_true_tile")
        if hasattr(src, "reshape") and tuple(src.shape) == tuple(dst_view(dst).shape):
            a["on_true_tile"] = src.reshape(tuple(shaped.shape))
        dst = shaped
    v = _pattern_value(name, dst, a)
    op = a.pop("cmp_op")
    op_name = getattr(op, "__name__", str(op))
    if op_name not in _COMPARE:
        raise NKITypeError(
            f"cmp_op of nisa.affine_select must be one of {', '.join('nl.' + c for c in _COMPARE)}"
            f"; got {op!r}",
            code="err_unsupported_op",
            loc=user_loc(),
        )
    a["pred"] = _COMPARE[op_name](v)
    a["dtype"] = dst_dtype(dst)
    return dst, None, {}


def _memset_into(name: str, dst: Any, a: dict[str, Any]) -> tuple[Any, None, dict[str, Any]]:
    """The destination-first memset: ``value`` typed like ``dst`` (an integer tile takes an
    integer value; x4 packed dtypes only 0)."""
    a["shape"] = tuple(dst_view(dst).shape)
    a["dtype"] = dtype = dst_dtype(dst)
    value = a.get("value")
    floaty = isinstance(value, (float, np.floating))
    if dtype in dtypes.PACKED_X4 and not (isinstance(value, (int, float)) and value == 0):
        broken("memset.value_dtype", f"'nisa.memset' got value={value!r} for a {dtype} dst")
    elif dtypes.is_int(dtype) and dtype not in dtypes.PACKED_X4 and floaty:
        broken(
            "memset.value_dtype",
            f"'nisa.memset' got the float value={value!r} for an integer ({dtype}) dst",
        )
    return dst, None, {}


# ---- instructions of both forms ----------------------------------------------------------------
@instruction(current=_iota_into)
def iota(expr: Any, dtype: Any, *, mask: Any = None) -> NkiTensor:
    """Materialise an affine ``nl.arange`` expression as values in a new SBUF tile (int32 math,
    cast to ``dtype``), e.g. ``nisa.iota(i_p * 512 + i_f, nl.int32)``. Loop iterators and program
    ids may appear in the expression. The expression must be at least 2-D (partition, free);
    a scalar expression (``nisa.iota(nl.program_id(1), nl.int32)``, as vLLM's paged attention
    writes) gives a [1, 1] tile.
    """
    c = Call("iota", dtype)
    if isinstance(expr, (Scalar, int)) and not isinstance(expr, bool):
        aff = expr.aff if isinstance(expr, Scalar) else Affine.constant(int(expr))
        expr = Index(IndexExpr(aff, (0, 0), (1, 1)))
    if not isinstance(expr, Index):
        raise NKITypeError(
            f"'expr' of '{c.api}' must be an affine expression of nl.arange / nl.mgrid indices, "
            f"got {type(expr).__name__}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    if dtype is None:
        raise NKITypeError(f"'{c.api}' needs a dtype", code="err_unsupported_dtype", loc=user_loc())
    shape = expr.shape
    if len(shape) < 2:
        raise NKIShapeError(
            f"'expr' of '{c.api}' has shape {list(shape)}; the result tile needs a partition and "
            "a free axis (e.g. nl.arange(128)[:, None] and nl.arange(64)[None, :])",
            code="err_insufficient_rank",
            loc=user_loc(),
        )
    return c.new(shape, (expand_expr(expr.expr, shape),), mask=mask)


@instruction(current=_memset_into)
def memset(
    shape: Any, value: Any, dtype: Any, *, mask: Any = None, engine: Any = None
) -> NkiTensor:
    """A new SBUF tile of ``shape`` (partition axis first) filled with the compile-time constant
    ``value`` cast to ``dtype`` (Vector engine by default, or GpSimd).

    Example: ``z = nisa.memset((128, 512), 0.0, nl.float32)``.
    """
    c = Call("memset", dtype)
    dims = shape if isinstance(shape, (tuple, list)) else (shape,)
    shp = tuple(static_int(s, c.api, "shape") for s in dims)
    eng = c.choose_engine(engine)
    if isinstance(value, Scalar):  # (a program id / loop iterator: its int, where one has it)
        concrete_value(value, f"the value of {c.api}")
    if not isinstance(value, (int, float, bool)) and not (
        hasattr(value, "dtype") and getattr(value, "shape", 0) == ()
    ):
        raise NKITypeError(
            f"'value' of '{c.api}' must be a compile-time scalar, got {type(value).__name__}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    return c.new(shp, (const_operand(value),), mask=mask, engine=eng)


@instruction(current=_affine_select_into)
def affine_select(
    pred: Any,
    on_true_tile: Any,
    on_false_value: Any,
    *,
    mask: Any = None,
    dtype: Any = None,
) -> NkiTensor:
    """``pred ? on_true_tile : on_false_value`` element-wise on GpSimd, where ``pred`` is an
    affine predicate over ``nl.arange`` indices computed on the fly (e.g. the causal mask
    ``i_q >= i_k``, or an affine expression meaning ``expr > 0``) and ``on_false_value`` a
    float32 scalar. ``on_true_tile`` may be an SBUF or a PSUM tile (classic kernels, e.g. the
    AWS attention tutorials, select straight from a matmul's PSUM result; the compiler stages it
    for the GpSimd engine); the result is an SBUF tile and may not be written into PSUM.

    Example: ``masked = nisa.affine_select(i_q[:, None] >= i_k[None, :], scores, -9984.0)``.
    """
    c = Call("affine_select", dtype)
    acc, t = c.tile(on_true_tile, "on_true_tile")
    if t.buffer == "psum":
        broken("affine_select.on_true_sbuf", f"'{c.api}' got the PSUM tile {tensor_label(t.decl)}")
    shape = acc.shape
    if isinstance(pred, Pred):
        conds = pred.conds
    elif isinstance(pred, Index):
        conds = (Cond(pred.expr, ">"),)
    else:
        raise _invalid(
            f"'pred' of '{c.api}' must be an affine predicate over nl.arange indices (e.g. "
            f"i_p >= i_f), got {type(pred).__name__}",
            "err_unsupported_expression_in_mask",
        )
    full = []
    for cond in conds:
        try:
            e = expand_expr(cond.expr, shape)
            ok = all(n == 1 or n == s for n, s in zip(cond.expr.shape[::-1], shape[::-1]))
        except NKIError:
            ok = False
        if not ok or len(cond.expr.shape) > len(shape):
            raise NKIShapeError(
                f"'pred' of shape {list(cond.expr.shape)} of '{c.api}' does not match the tile "
                f"shape {list(shape)} of 'on_true_tile'",
                code="err_mask_shape_mismatch",
                loc=user_loc(),
            )
        full.append(Cond(e, cond.op))
    if isinstance(on_false_value, bool) or not isinstance(on_false_value, (int, float)):
        if not (hasattr(on_false_value, "dtype") and getattr(on_false_value, "shape", 0) == ()):
            raise NKITypeError(
                f"'on_false_value' of '{c.api}' must be a float32 scalar, got "
                f"{type(on_false_value).__name__}",
                code="err_unsupported_operand",
                loc=user_loc(),
            )
    odt = c.result_dtype()
    if odt in ("int32", "uint32") or dt(t) in ("int32", "uint32"):
        raise NKITypeError(
            f"'{c.api}' supports float and 8/16-bit integer tiles, not {dt(t)} -> {odt}",
            code="err_unsupported_dtype",
            loc=user_loc(),
        )
    srcs = (acc, const_operand(float(on_false_value)))
    return c.new(shape, srcs, dtype=odt, mask=mask, pred=Mask(tuple(full)))


_PART_REDUCERS = ("add", "maximum", "minimum", "bitwise_or", "bitwise_and", "bitwise_xor")
# the ops that average the partitions (``nl.average``, the SDK's token; ``nl.mean`` / ``np.mean``,
# the name later releases document): their fp32 sum divided by the partition count
_AVERAGES = ("average", "mean")


def _averages(op: Any) -> bool:
    if op is nl.mean or op is np.mean:
        return True
    name = getattr(op, "nki_token", op if isinstance(op, str) else None)
    return name in _AVERAGES


@instruction
def tensor_partition_reduce(
    op: Any, data: Any, *, mask: Any = None, dtype: Any = None
) -> NkiTensor:
    """Reduce across partitions on GpSimd (add, average, max, min, bitwise_or, bitwise_and,
    bitwise_xor): the result has one partition, shape (1, *free). ``nl.average`` (or
    ``nl.mean``) is the fp32 sum of the partitions divided by their count.

    A classic ``mask`` is over the data: masked-out elements take no part (an average divides
    by the partitions selected in its column), and a column with none selected keeps its result.

    Example: ``col_sum = nisa.tensor_partition_reduce(np.add, x)``.
    """
    c = Call("tensor_partition_reduce", dtype)
    acc, t = c.tile(data, "data", SBUF)
    average = _averages(op)
    fn = alu_op("add" if average else op, c.api, "op")
    if fn.name not in _PART_REDUCERS:
        raise _invalid(
            f"'op'={fn.name} of '{c.api}' is not supported; supported: "
            f"{', '.join(_PART_REDUCERS[:1] + _AVERAGES[:1] + _PART_REDUCERS[1:])}",
            "err_unsupported_reduce_op",
        )
    odt = c.result_dtype()
    check_bitvec_dtypes(fn, [dt(t), odt], c.api, "op")
    extra = {"average": True} if average else {}
    return c.new(
        (1, *acc.shape[1:]), (acc,), dtype=odt, mask=mask, mask_shape=acc.shape, op=fn.name,
        **extra,
    )  # fmt: skip


def _local_gather_into(name: str, dst: Any, a: dict[str, Any]) -> tuple[Any, None, dict]:
    """The destination-first ``local_gather``: the page's "no data type casting is allowed"."""
    require_dst_dtype(name, dst, a.get("src_buffer"), "src_buffer")
    return generic_current(name, dst, a)


@instruction(current=_local_gather_into)
def local_gather(
    src_buffer: Any,
    index: Any,
    num_elem_per_idx: int = 1,
    num_valid_indices: int | None = None,
    *,
    mask: Any = None,
) -> NkiTensor:
    """Gather within each group of 16 partitions (one GpSimd core each). Per group, the uint16
    ``index`` values of its 16 partitions are flattened partition-first; the first
    ``num_valid_indices`` are element offsets into each partition's flattened free axis, from
    which ``num_elem_per_idx`` (1, 2, 4, 8, 16 or 32) contiguous elements are read. Result,
    same dtype: (P, F, 16, num_elem_per_idx) when every index of a (P, F) index tile is valid
    (gathered element ``[:, f, q, :]`` comes from index ``[group + q, f]``), otherwise
    (P, num_valid_indices, num_elem_per_idx) in the flattened order. Out-of-range offsets are
    undefined on hardware and an error here.

    Example: ``g = nisa.local_gather(src, idx, num_elem_per_idx=4, num_valid_indices=64)``.
    """
    c = Call("local_gather")
    sacc, _ = c.tile(src_buffer, "src_buffer", SBUF)
    iacc, it = c.tile(index, "index", SBUF)
    p = sacc.shape[0]
    if p != iacc.shape[0] or p % 16:
        raise NKIShapeError(
            f"'src_buffer'{list(sacc.shape)} and 'index'{list(iacc.shape)} of '{c.api}' need "
            "the same partition count, a multiple of 16",
            code="err_num_partition_mismatch",
            loc=user_loc(),
        )
    check_dtype_in(dt(it), ("uint16",), c.api, "index")
    if num_elem_per_idx not in (1, 2, 4, 8, 16, 32):
        raise _invalid(
            f"'num_elem_per_idx'={num_elem_per_idx} of '{c.api}' must be 1, 2, 4, 8, 16 or 32"
        )
    per_core = 16 * free_size(iacc.shape)
    nvalid = per_core if num_valid_indices is None else int(num_valid_indices)
    if not 0 < nvalid <= min(per_core, 4096):
        raise _invalid(
            f"'num_valid_indices'={nvalid} of '{c.api}' must be in [1, {min(per_core, 4096)}] "
            f"(indices per 16-partition group: {per_core}; at most 4096)"
        )
    n = int(num_elem_per_idx)
    if nvalid == per_core and len(iacc.shape) == 2:
        # every index of a (P, F) index tile: the result keeps that layout, index column f and
        # partition q of the group at [:, f, q, :] (the SDK's own example stores it so)
        shape: tuple[int, ...] = (p, iacc.shape[1], 16, n)
    else:
        shape = (p, nvalid, n)
    return c.new(shape, (sacc, iacc), mask=mask, num_elem_per_idx=n, num_valid_indices=nvalid)


@instruction
def sequence_bounds(*, segment_ids: Any, dtype: Any = None) -> NkiTensor:
    """Segment boundaries on GpSimd: for a ``(1, n)`` tile of non-negative segment ids, a
    ``(1, 2, n)`` tile holding for every element the start index (``[:, 0, :]``) and the end
    index, exclusive (``[:, 1, :]``) of the run of equal ids it belongs to. Id 0 is padding: its
    elements get start ``n`` and end ``-1``. The partition dimension must be 1; input and output
    dtypes float32 or int32 (output defaults to the input dtype).

    Example: ids ``[[0, 1, 1, 2]]`` -> ``[[[4, 1, 1, 3], [-1, 3, 3, 4]]]``.
    """
    c = Call("sequence_bounds", dtype)
    acc, t = c.tile(segment_ids, "segment_ids")
    if acc.shape[0] != 1:
        raise NKIShapeError(
            f"'segment_ids'{list(acc.shape)} of '{c.api}' must have a partition dimension of 1",
            code="err_num_partition_mismatch",
            loc=user_loc(),
        )
    check_dtype_in(dt(t), ("float32", "int32"), c.api, "segment_ids", "err_unsupported_dtype")
    odt = c.result_dtype()
    check_dtype_in(odt, ("float32", "int32"), c.api, "dtype", "err_unsupported_dtype")
    return c.new((1, 2, free_size(acc.shape)), (acc,), dtype=odt)


# ---- instructions of the current API only ------------------------------------------------------
def _free_plus(a: tuple[int, ...], b: tuple[int, ...], api: str, ra: str, rb: str, extra=0):
    """``ra`` has ``rb``'s elements per partition (plus ``extra``)."""
    if free_size(a) != free_size(b) + extra:
        more = f" + {extra}" if extra else ""
        raise NKIShapeError(
            f"'{api}' needs {free_size(b)}{more} elements per partition in '{ra}' "
            f"{list(a)} ('{rb}' {list(b)} has {free_size(b)}); got {free_size(a)}",
            code="err_free_size_mismatch",
            loc=user_loc(),
        )


@instruction
def nc_n_gather(dst: Any, data: Any, indices: Any, name: Any = None) -> Instruction:
    """``dst[p, j] = data[p].flatten()[indices[p, j]]`` on the GpSimd engine, per partition.

    All three tiles are in SBUF with the same partition count; ``indices`` is uint32 with as
    many elements per partition as ``dst``, each below ``data``'s elements per partition
    (checked when the kernel runs); ``dst`` has ``data``'s dtype (values are copied bit-exact).

    Example: ``nisa.nc_n_gather(g, table, idx)``.
    """
    c = Call("nc_n_gather")
    dacc, dtile = c.tile(dst, "dst", SBUF)
    sacc, stile = c.tile(data, "data", SBUF)
    iacc, itile = c.tile(indices, "indices", SBUF)
    same_partitions(dacc.shape, sacc.shape, c.api, "dst", "data")
    same_partitions(dacc.shape, iacc.shape, c.api, "dst", "indices")
    dtype_in(itile, ("uint32",), c.api, "indices")
    same_dtype(dtile, stile, c.api, "dst", "data", " (the gather copies values without a cast)")
    _free_plus(dacc.shape, iacc.shape, c.api, "dst", "indices")
    return c.emit(dacc, (sacc, iacc))


@instruction
def nonzero_with_count(
    dst: Any, src: Any, index_offset: Any = 0, padding_val: Any = -1, name: Any = None
) -> Instruction:
    """Positions of the nonzero elements of a row, then padding, then their count, on the
    GpSimd engine (NeuronCore-v3+).

    Only partitions 0, 16, ..., 112 of the tiles are processed (each of the 8 GpSimd cores
    reads and writes the first of its 16 partitions); the other partitions of ``dst`` are left
    unchanged. Per processed row of T elements (free dims flattened) with N nonzeros: ``dst``
    gets the N positions + ``index_offset``, T - N times ``padding_val``, then N (so ``dst``
    has T + 1 elements per partition). ``src``: float32 or int32; ``dst``: int32; both SBUF.

    Example: ``nisa.nonzero_with_count(pos, mask_row, index_offset=t * 512)``.
    """
    c = Call("nonzero_with_count")
    dacc, dtile = c.tile(dst, "dst", SBUF)
    sacc, stile = c.tile(src, "src", SBUF)
    same_partitions(dacc.shape, sacc.shape, c.api, "dst", "src")
    dtype_in(stile, ("float32", "int32"), c.api, "src")
    dtype_in(dtile, ("int32",), c.api, "dst")
    _free_plus(dacc.shape, sacc.shape, c.api, "dst", "src", extra=1)
    return c.emit(
        dacc, (sacc,), index_offset=static_int(index_offset, c.api, "index_offset"),
        padding_val=static_int(padding_val, c.api, "padding_val"),
    )  # fmt: skip


@instruction
def topk(val_dst: Any, idx_dst: Any, src: Any, n: Any, name: Any = None) -> Instruction:
    """The K largest of ``n`` bf16 values per 16-partition group, on the GpSimd engine.

    Each group of 16 partitions holds one problem in a snake layout: element e of the group is
    at partition e % 16, free position e // 16 (``src`` needs ceil(n / 16) free positions;
    positions past n are ignored). K is the free size of ``val_dst`` (bf16) and ``idx_dst``
    (uint32, indices 0..n-1 into the group's snake). Result j of a group is written in the same
    snake layout (partition j % 16, free position j // 16), values in ascending order (ties:
    lower index first; the largest K values with the lower index win a tie at the cut). The
    hardware writes each of the ceil(K / 16) result positions across all 16 partitions, so the
    lanes of the last position past K receive unspecified values (NaN / 0xFFFFFFFF here,
    uninitialised under ``checks="full"``); later positions are left unchanged. This follows the
    documentation's statement of the snake layout for input and results (NKI 2.33); an older
    page says each partition is independent, which contradicts the snake input.
    Limits: 8 <= n < 65536, 1 <= K < 32768, K <= n, partitions a multiple of 16, all SBUF.

    Example: ``nisa.topk(vals, idxs, scores, n=1024)``.
    """
    c = Call("topk")
    vacc, vtile = c.tile(val_dst, "val_dst", SBUF)
    iacc, itile = c.tile(idx_dst, "idx_dst", SBUF)
    sacc, stile = c.tile(src, "src", SBUF)
    dtype_in(stile, ("bfloat16",), c.api, "src")
    dtype_in(vtile, ("bfloat16",), c.api, "val_dst")
    dtype_in(itile, ("uint32",), c.api, "idx_dst")
    parts = sacc.shape[0]
    if vacc.shape[0] != parts or iacc.shape[0] != parts or parts % 16:
        raise NKIShapeError(
            f"'val_dst'{list(vacc.shape)}, 'idx_dst'{list(iacc.shape)} and 'src'"
            f"{list(sacc.shape)} of '{c.api}' need the same partition count, a multiple of 16",
            code="err_num_partition_mismatch",
            loc=user_loc(),
        )
    _free_plus(iacc.shape, vacc.shape, c.api, "idx_dst", "val_dst")
    count = static_int(n, c.api, "n")
    k = free_size(vacc.shape)
    if not 8 <= count < 65536:
        raise _invalid(f"'n'={count} of '{c.api}' must satisfy 8 <= n < 65536")
    if not 1 <= k < 32768 or k > count:
        raise _invalid(
            f"K = {k} (the free size of 'val_dst') of '{c.api}' must satisfy 1 <= K < 32768 and "
            f"K <= n = {count}"
        )
    if free_size(sacc.shape) < math.ceil(count / 16):
        raise NKIShapeError(
            f"'src'{list(sacc.shape)} of '{c.api}' holds {free_size(sacc.shape)} positions per "
            f"partition; n = {count} in a 16-partition snake needs ceil(n / 16) = "
            f"{math.ceil(count / 16)}",
            code="err_size_of_dimension_exceed_arch_limit",
            loc=user_loc(),
        )
    return c.emit(vacc, (sacc,), n=count, idx_dst=iacc)
