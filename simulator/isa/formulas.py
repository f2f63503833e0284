"""Pure NumPy formulations behind the nki.isa executors: ALU ops with operand reversal,
bit-vector views, reductions, scans, batch-norm statistics and the top-8 search. Everything is
fp32 (or raw integer bits for bit-vector ops), as the engines compute."""

from __future__ import annotations

from typing import Any

import numpy as np

from nki.optable import OPS, apply, quiet


def bits(x: np.ndarray) -> np.ndarray:
    """Integer bit patterns as int64 (signed values reinterpreted as unsigned of their width),
    so shifts are logical and results can be wrapped back to any integer width."""
    x = np.asarray(x)
    if x.dtype == np.bool_:
        return x.astype(np.int64)
    if x.dtype.kind == "i":
        x = x.view(np.dtype(f"u{x.dtype.itemsize}"))
    return x.astype(np.int64)


def wrap(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Keep the low bits of int64 results in an integer storage dtype (bit-vector semantics)."""
    return np.asarray(x, dtype=np.int64).astype(dtype)


def alu(op: str, a: Any, b: Any, reverse: bool = False) -> Any:
    """An engine ALU step: ``op(a, b)`` (or ``op(b, a)`` when reversed), or ``op(a)`` for a
    unary op, through the op table's ``apply`` (fp32, or int64 for exact integer math)."""
    with quiet():
        if OPS[op].arity == 1:  # a unary op0 (nl.abs, ...): the operand slot is unused
            return apply(OPS[op], (a,))
        return apply(OPS[op], (b, a) if reverse else (a, b))


def reduce(op: str, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Reduce along ``axes`` keeping them (size 1). ``subtract`` folds left, one element after
    another as the engines add: x0 - x1 - x2 ..."""
    with quiet():
        if op == "subtract":
            return _left_fold(x, np.ones(x.shape, dtype=bool), axes)
        red = OPS[op].reduce
        return np.asarray(red(x, axis=axes, keepdims=True))


# each reduction's identity: what a reset accumulator register holds, and what a masked-out
# element becomes so that it takes no part
IDENTITY: dict[str, float] = {"add": 0.0, "subtract": 0.0, "multiply": 1.0,
                              "maximum": float("-inf"), "minimum": float("inf"), "abs_max": 0.0,
                              "abs_min": float("inf"), "logical_and": 1.0, "logical_or": 0.0,
                              "logical_xor": 0.0, "bitwise_and": -1.0, "bitwise_or": 0.0,
                              "bitwise_xor": 0.0}  # fmt: skip


def masked_reduce(op: str, x: np.ndarray, sel: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """:func:`reduce` of the elements ``sel`` (``x``'s shape) selects only; ``subtract`` folds
    left from the first selected element."""
    if op != "subtract":
        fill = np.asarray(IDENTITY[op]).astype(x.dtype)
        return reduce(op, np.where(sel, x, fill), axes)
    with quiet():
        return _left_fold(x, sel, axes)


def _left_fold(x: np.ndarray, sel: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """``subtract``'s fold of ``x`` along ``axes`` over the elements ``sel`` selects: the first
    one less each later one in order. In fp32 that is the ordered sum of the first and the
    others negated (a negation is exact); unselected ones add -0.0, which changes nothing."""
    lead = tuple(range(x.ndim - len(axes), x.ndim))
    flat = np.moveaxis(x, axes, lead).reshape(*x.shape[: x.ndim - len(axes)], -1)
    keep = np.moveaxis(sel, axes, lead).reshape(flat.shape)
    first = np.argmax(keep, axis=-1)[..., None]
    rest = keep.copy()
    np.put_along_axis(rest, first, False, axis=-1)
    head = np.take_along_axis(flat, first, axis=-1)
    if flat.dtype.kind == "f":
        terms = np.where(rest, -flat, flat.dtype.type(-0.0))
        np.put_along_axis(terms, first, head, axis=-1)
        out = np.asarray(OPS["add"].reduce(terms, axis=-1))
    else:  # (exact integers: any order)
        out = np.asarray(head[..., 0] - np.sum(np.where(rest, flat, 0), axis=-1, dtype=flat.dtype))
    for a in sorted(axes):
        out = np.expand_dims(out, a)
    return out


def free_reduce(op: str, x2d: np.ndarray) -> np.ndarray:
    """Per-partition reduction of a (P, F) array -> (P,)."""
    return reduce(op, x2d, (1,))[:, 0]


def scan(d0, d1, init, op0: str, op1: str, rev0: bool, rev1: bool) -> np.ndarray:
    """The tensor_tensor_scan recurrence over the columns of (P, F) arrays."""
    p, f = d0.shape
    prev = np.broadcast_to(np.asarray(init, dtype=np.float32).reshape(-1), (p,)).astype(np.float32)
    out = np.empty((p, f), dtype=np.float32)
    for i in range(f):
        t = alu(op0, d0[:, i], prev, rev0)
        prev = np.asarray(alu(op1, t, d1[:, i], rev1), dtype=np.float32)
        out[:, i] = prev
    return out


def _stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = x.shape[1]
    cnt = np.full(x.shape[0], n, dtype=np.float32)
    if n == 0:
        z = np.zeros(x.shape[0], dtype=np.float32)
        return cnt, z, z
    mean = np.mean(x, axis=1, dtype=np.float32)
    m2 = np.sum(np.square(x - mean[:, None]), axis=1, dtype=np.float32)
    return cnt, mean, m2


def _masked_stats(x: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, ...]:
    cnt = np.sum(keep, axis=1).astype(np.float32)
    safe = np.where(cnt > 0, cnt, 1).astype(np.float32)
    xz = np.where(keep, x, np.float32(0))
    mean = (np.sum(xz, axis=1, dtype=np.float32) / safe).astype(np.float32)
    dev = np.where(keep, x - mean[:, None], np.float32(0))
    m2 = np.sum(np.square(dev), axis=1, dtype=np.float32)
    return cnt, mean, m2


def bn_stats(x2d: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    """(P, F) -> (P, 6): (count, mean, var*count) of even then odd free positions. With
    ``keep`` (a mask over the input) only the kept elements are counted."""
    if keep is None:
        ce, me, ve = _stats(x2d[:, 0::2])
        co, mo, vo = _stats(x2d[:, 1::2])
    else:
        ce, me, ve = _masked_stats(x2d[:, 0::2], keep[:, 0::2])
        co, mo, vo = _masked_stats(x2d[:, 1::2], keep[:, 1::2])
    return np.stack([ce, me, ve, co, mo, vo], axis=1)


def bn_aggr(x2d: np.ndarray) -> np.ndarray:
    """(P, 3k) triples -> (P, 2): mean and population variance of the union (Chan et al.)."""
    t = x2d.reshape(x2d.shape[0], -1, 3).astype(np.float32)
    c, m, v = t[..., 0], t[..., 1], t[..., 2]
    n = np.sum(c, axis=1, dtype=np.float32)
    safe = np.where(n > 0, n, 1).astype(np.float32)
    mean = np.sum(c * m, axis=1, dtype=np.float32) / safe
    m2 = np.sum(v, axis=1, dtype=np.float32) + np.sum(
        c * np.square(m - mean[:, None]), axis=1, dtype=np.float32
    )
    var = m2 / safe
    return np.stack([np.where(n > 0, mean, 0), np.where(n > 0, var, 0)], axis=1).astype(np.float32)


def top8(x2d: np.ndarray) -> np.ndarray:
    """The 8 largest values per row, descending."""
    return -np.sort(-x2d, axis=1)[:, :8]


def find_index8(data: np.ndarray, vals: np.ndarray, sentinel: int) -> np.ndarray:
    """First occurrence of each value; duplicate values take successive matches."""
    p = data.shape[0]
    out = np.full((p, 8), sentinel, dtype=np.int64)
    for r in range(p):
        used: set[int] = set()
        for i in range(8):
            for j in np.flatnonzero(data[r] == vals[r, i]):
                if int(j) not in used:
                    used.add(int(j))
                    out[r, i] = int(j)
                    break
    return out


def match_replace8(data: np.ndarray, vals: np.ndarray, imm: float, sentinel: int):
    """Replace the first not-yet-replaced match of vals[7], vals[6], ..., vals[0] with imm."""
    out = data.copy()
    idx = np.full((data.shape[0], 8), sentinel, dtype=np.int64)
    for r in range(data.shape[0]):
        taken = np.zeros(data.shape[1], dtype=bool)
        for i in range(7, -1, -1):
            hits = np.flatnonzero((data[r] == vals[r, i]) & ~taken)
            if hits.size:
                j = int(hits[0])
                taken[j] = True
                out[r, j] = imm
                idx[r, i] = j
    return out, idx


def sequence_bounds(ids: np.ndarray) -> np.ndarray:
    """(n,) segment ids -> (2, n): start and exclusive end of each element's run of equal ids;
    id 0 (padding) gives start n, end -1."""
    n = ids.shape[0]
    start = np.empty(n, dtype=np.float64)
    end = np.empty(n, dtype=np.float64)
    for i in range(n):
        start[i] = i if i == 0 or ids[i] != ids[i - 1] else start[i - 1]
    for i in range(n - 1, -1, -1):
        end[i] = i + 1 if i == n - 1 or ids[i] != ids[i + 1] else end[i + 1]
    pad = ids == 0
    start[pad], end[pad] = n, -1
    return np.stack([start, end])
