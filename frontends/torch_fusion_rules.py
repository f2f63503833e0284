"""Which ATen nodes of a compiled graph the fused element-wise kernel computes, and how: one rule
per op (:data:`RULES`) turns a node into a step of the kernel's program (:class:`_Spec`: its op,
its arguments, the shape its tensor arguments need relative to the group) or refuses it. The
grouping and running are :mod:`frontends.torch_fusion`'s."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from nki.kernels._tiles import FREE_MAX, PSUM_FMAX

from .torch_ops import FLOATS

__all__ = ["RULES", "fusable"]

Key = tuple  # a shape with symbolic sizes as their expressions
_ALONE = ("unary", "cast")  # steps of one operand: they may run on a part of a cat's columns


def _key(t: Any) -> Key | None:
    if not isinstance(t, torch.Tensor):
        return None
    return tuple(s.node.expr if isinstance(s, torch.SymInt) else int(s) for s in t.shape)


def _col(k: Key) -> Key:
    return k[:-1] + (1,)


def _part(k: Key, full: Key) -> bool:
    """``k`` is some of the columns of ``full`` (one row per row; a cat joins such parts)."""
    return (
        len(k) == len(full)
        and k[:-1] == full[:-1]
        and isinstance(k[-1], int)
        and k[-1] not in (1, full[-1])
    )


@dataclass(frozen=True)
class _Spec:
    """One node as a fused step: op (``"binary:mul"``), its arguments (graph nodes or
    ``("s", x)`` scalars), the shape keys its tensor arguments must have relative to the group
    (``"full"`` for reductions, ``"same"`` for the two operands of a backward op)."""

    op: str
    args: tuple
    needs: str = ""
    free: bool = False  # a copy torch makes as a view: a group of only such steps is no launch


_UNARY = "neg abs reciprocal sqrt rsqrt exp log tanh sigmoid relu silu sin cos erf".split()
_BINARY = {
    "add": True,
    "sub": False,
    "mul": True,
    "div": False,
    "maximum": True,
    "minimum": False,
    "pow": False,
}  # op -> commutative (the adapters put the full-shaped operand first)
_GRAD = {"silu_backward", "sigmoid_backward", "tanh_backward"}


def _float_node(a: Any) -> bool:
    v = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
    return isinstance(v, torch.Tensor) and v.dtype in FLOATS and v.dim() > 0


def _scalar(a: Any) -> bool:
    return type(a) in (int, float)


def _unary(op: str) -> Callable:
    def rule(n: torch.fx.Node) -> _Spec | None:
        if len(n.args) != 1 or n.kwargs or not _float_node(n.args[0]):
            return None
        return _Spec(f"unary:{op}", (n.args[0],))

    return rule


def _gelu(n: torch.fx.Node) -> _Spec | None:
    op = {"none": "gelu", "tanh": "gelu_tanh"}.get(n.kwargs.get("approximate", "none"))
    if len(n.args) != 1 or set(n.kwargs) - {"approximate"} or op is None:
        return None
    return _Spec(f"unary:{op}", (n.args[0],)) if _float_node(n.args[0]) else None


def _binary(op: str, commutative: bool) -> Callable:
    def rule(n: torch.fx.Node) -> _Spec | None:
        if len(n.args) != 2 or n.kwargs.get("alpha", 1) != 1 or n.kwargs.get("rounding_mode"):
            return None
        x, y = n.args
        if _scalar(x) and _float_node(y):
            return _Spec(f"binary:{op}", (("s", float(x)), y))
        if _float_node(x) and _scalar(y):
            return _Spec(f"binary:{op}", (x, ("s", float(y))))
        if not (_float_node(x) and _float_node(y)):
            return None
        out = _key(n.meta["val"])
        if commutative and _key(x.meta["val"]) != out and _key(y.meta["val"]) == out:
            x, y = y, x
        return _Spec(f"binary:{op}", (x, y))

    return rule


def _rsub(n: torch.fx.Node) -> _Spec | None:
    if len(n.args) != 2 or n.kwargs.get("alpha", 1) != 1 or not _scalar(n.args[1]):
        return None
    return _Spec("binary:sub", (("s", float(n.args[1])), n.args[0]))


def _grad(op: str) -> Callable:
    def rule(n: torch.fx.Node) -> _Spec | None:
        g, saved = n.args[:2]
        if op == "threshold_backward" and n.args[2] != 0:
            return None
        if not (_float_node(g) and _float_node(saved)) or len(n.args) > 3:
            return None
        if g.meta["val"].dtype != saved.meta["val"].dtype:
            return None
        name = {"threshold_backward": "relu_backward"}.get(op, op)
        if op == "gelu_backward":
            a = n.kwargs.get("approximate", "none")
            name = {"none": "gelu_backward", "tanh": "gelu_tanh_backward"}.get(a)
            if name is None:
                return None
        return _Spec(f"grad:{name}", (g, saved), needs="same")

    return rule


def _cast(n: torch.fx.Node) -> _Spec | None:
    if n.target is torch.ops.prims.convert_element_type.default:
        x, dt = n.args
    elif len(n.args) == 1 and set(n.kwargs) <= {"dtype"}:
        x, dt = n.args[0], n.kwargs.get("dtype")
    else:
        return None
    ok = dt is None or dt in FLOATS
    v = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    ints = isinstance(v, torch.Tensor) and v.dtype in (torch.int32, torch.int64) and v.dim() > 0
    return _Spec("cast", (x,)) if ok and (_float_node(x) or ints) else None  # ints as int32


def _reduce(op: str) -> Callable:
    def rule(n: torch.fx.Node) -> _Spec | None:
        if len(n.args) not in (2, 3) or n.kwargs or not _float_node(n.args[0]):
            return None
        x, dims = n.args[:2]
        keep = len(n.args) == 3 and n.args[2] is True
        nd = x.meta["val"].dim()
        dims = sorted(d % nd for d in (dims if isinstance(dims, (list, tuple)) else [dims]))
        if dims == [nd - 1] and keep:
            return _Spec(op, (x,), needs="full")
        w = _key(x.meta["val"])[-1]
        if op == "sum" and nd > 1 and dims == list(range(nd - 1)) and _static(w, PSUM_FMAX):
            return _Spec("colsum", (x,), needs="colsum")  # (a bias or norm weight gradient)
        return None

    return rule


def _static(w: Any, most: int = FREE_MAX) -> bool:
    return isinstance(w, int) and 0 < w <= most


def _expand(n: torch.fx.Node) -> _Spec | None:
    """expand of a float tensor to a static last dim: a broadcast copy."""
    x = n.args[0]
    w = _key(n.meta["val"])[-1]
    if not _float_node(x) or not _static(w) or n.kwargs.get("implicit"):
        return None
    return _Spec("expand", (x, ("s", w)), free=True)


def _bounds(start: Any, end: Any, size: Any) -> tuple[int, int] | None:
    """A slice's (start, stop) in a dim of ``size`` (None: not static)."""
    start = 0 if start is None else start
    end = size if end is None else end
    if not (type(start) is int and type(end) is int and isinstance(size, int)):
        return None
    start, end = (v + size if v < 0 else v for v in (start, end))
    return min(max(start, 0), size), min(max(end, 0), size)


def _slice(n: torch.fx.Node) -> _Spec | None:
    """A slice of the last dim (columns), or of a whole dim (a copy)."""
    x = n.args[0]
    if not _float_node(x):
        return None
    dim, start, end, step = (list(n.args[1:]) + [0, None, None, 1][len(n.args) - 1 :])[:4]
    key = _key(x.meta["val"])
    if step != 1 or type(dim) is not int:
        return None
    dim %= len(key)
    if start in (None, 0) and (end is None or (type(end) is int and end >= 2**62)):
        return _Spec("cast", (x,), free=True)  # the whole dim
    b = _bounds(start, end, key[dim])
    if b is not None and b == (0, key[dim]):
        return _Spec("cast", (x,), free=True)
    if b is None or dim != len(key) - 1 or b[1] <= b[0]:
        return None
    return _Spec("slice", (x, ("s", b[0]), ("s", b[1])), needs="slice", free=True)


def _slice_backward(n: torch.fx.Node) -> _Spec | None:
    """The gradient of a slice of the last dim: zero columns around the gradient's."""
    g, sizes, dim, start, end, step = n.args
    if (
        not _float_node(g)
        or step != 1
        or type(dim) is not int
        or dim % len(sizes) != len(sizes) - 1
    ):
        return None
    w = sizes[-1]
    b = _bounds(start, end, w)
    if b is None or not _static(w) or _key(g.meta["val"])[-1] != b[1] - b[0]:
        return None
    return _Spec("pad", (g, ("s", b[0]), ("s", w)), needs="pad", free=True)


def _int_width(a: torch.fx.Node) -> bool:
    """A cat operand with a static, non-zero last dim (legacy empty 1-D tensors stay out)."""
    w = _key(a.meta["val"])[-1]
    return isinstance(w, int) and w > 0


def _cat(n: torch.fx.Node) -> _Spec | None:
    """torch.cat along the last dim of float tensors of the result's dtype (a copy)."""
    if not n.args or not isinstance(n.args[0], (list, tuple)) or len(n.args[0]) < 2:
        return None
    parts = n.args[0]
    dim = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim", 0)
    nd = n.meta["val"].dim()
    if not all(_float_node(a) for a in parts) or not isinstance(dim, int) or dim % nd != nd - 1:
        return None
    dts = {a.meta["val"].dtype for a in parts} | {n.meta["val"].dtype}
    if len(dts) > 1 or not all(_int_width(a) for a in parts):
        return None
    return _Spec("cat", tuple(parts), needs="parts")


RULES: dict[str, Callable[[torch.fx.Node], _Spec | None]] = {
    **{f"aten::{op}": _unary(op) for op in _UNARY},
    "aten::gelu": _gelu,
    **{f"aten::{op}": _binary(op, c) for op, c in _BINARY.items()},
    "aten::rsub": _rsub,
    **{f"aten::{op}": _grad(op) for op in _GRAD | {"gelu_backward", "threshold_backward"}},
    "aten::_to_copy": _cast,
    "prims::convert_element_type": _cast,
    "aten::mean": _reduce("mean"),
    "aten::sum": _reduce("sum"),
    "aten::cat": _cat,
    "aten::expand": _expand,
    "aten::slice": _slice,
    "aten::slice_backward": _slice_backward,
}


def fusable(n: torch.fx.Node, name: str | None) -> _Spec | None:
    """The node as a fused step, or None when it is not a float element-wise op the fused
    kernel computes exactly as its own kernel does."""
    rule = RULES.get(name or "")
    val = n.meta.get("val")
    if rule is None or not isinstance(val, torch.Tensor) or val.dtype not in FLOATS:
        return None
    if val.dim() == 0 or any(isinstance(a, torch.SymInt) for a in n.args):
        return None
    return rule(n)


def schema_name(target: Any) -> str | None:
    """The ATen schema name of a node's target (``"aten::mm"``), or None for a target without a
    schema (a Python function, ``operator.getitem``)."""
    schema = getattr(target, "_schema", None)
    return schema.name if schema is not None else None


def writes_operand(n: torch.fx.Node) -> bool:
    """Whether the node writes one of its operands (an in-place ATen op)."""
    schema = getattr(n.target, "_schema", None)
    return schema is not None and any(
        a.alias_info is not None and a.alias_info.is_write for a in schema.arguments
    )
