"""A kernel's result as the graph expects it: the dim order (strides) and dtype of the node's
fake value, which the graph's later view ops rely on (the ``"nki"`` backend's boundary)."""

from __future__ import annotations

from typing import Any

import torch


def hint(v: Any) -> int:
    """A size or stride of a fake value as an int: symbolic ones by their hint (used only to
    order dims, never as the size of this call)."""
    if isinstance(v, torch.SymInt):
        return int(v.node.hint)
    return int(v)


# (kernel result dtype, graph dtype) pairs converted at the boundary
_WIDEN = {(torch.int32, torch.int64), (torch.uint8, torch.bool), (torch.int32, torch.bool)}


def conform(res: Any, val: Any) -> Any:
    """``res`` laid out as the eager op lays it out (the dim order of ``val``, the node's fake
    value: later view ops of the graph rely on it), in ``val``'s dtype where the kernel
    computed a narrower integer type. Only the order of the fake strides is used: their sizes
    may be symbolic, and this call's sizes are ``res``'s own."""
    if isinstance(res, (tuple, list)) and isinstance(val, (tuple, list)):
        return type(res)(conform(r, v) for r, v in zip(res, val))
    if not (isinstance(res, torch.Tensor) and isinstance(val, torch.Tensor)):
        return res
    _, dtype, order = _layout_of(val)
    if res.dtype != dtype and (res.dtype, dtype) in _WIDEN:
        res = res.to(dtype)
    if order is None or res.dim() != len(order):
        return res
    if order is _ROW_MAJOR.get(len(order)):  # (the common order: torch's own check)
        return res if res.is_contiguous() else res.contiguous()
    step = 1
    for d in reversed(order):
        n = res.shape[d]
        if n != 1 and res.stride(d) != step:
            out = torch.empty_permuted(res.shape, order, dtype=res.dtype, device=res.device)
            return out.copy_(res)
        step *= n
    return res


# rank -> the dims in row-major order (one list per rank: ``conform`` tests it by identity)
_ROW_MAJOR: dict[int, list[int]] = {}

# id(fake value) -> (the value, its dtype, the order of its dims from the largest stride (None
# below 2 dims)): what ``conform`` reads of a node's fake value, the same every call; bounded,
# the value kept so that its id is not reused
_LAYOUTS: dict[int, tuple[torch.Tensor, torch.dtype, list[int] | None]] = {}


def _layout_of(val: torch.Tensor) -> tuple[torch.Tensor, torch.dtype, list[int] | None]:
    hit = _LAYOUTS.get(id(val))
    if hit is None or hit[0] is not val:
        order = None
        if val.dim() >= 2:
            strides = [hint(s) for s in val.stride()]
            order = sorted(range(val.dim()), key=lambda d: (-strides[d], d))
            row_major = _ROW_MAJOR.setdefault(len(order), list(range(len(order))))
            order = row_major if order == row_major else order
        if len(_LAYOUTS) >= 4096:
            _LAYOUTS.clear()
        hit = _LAYOUTS[id(val)] = (val, val.dtype, order)
    return hit
