"""Matrix products of a compiled graph that share one NKI kernel launch, for the ``"nki"``
torch.compile backend: :func:`find_matmuls` groups the ``aten::mm`` nodes at one depth of the
graph (none depends on another), :func:`run_matmuls` runs a group as one launch of
``matmul_shared_kernel`` (one left operand) or ``matmul_pairs_kernel``, each product computed as
``matmul_kernel`` computes it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
import torch.fx

import nki.kernels as K

from .torch_fusion_launch import op_names
from .torch_fusion_rules import schema_name
from .torch_ops import FLOATS
from .torch_registry import Guard

__all__ = ["Matmuls", "find_matmuls", "product_operands", "run_matmuls"]


@dataclass
class Matmuls:
    """``aten::mm`` nodes none of which depends on another, run as one launch: of
    ``matmul_shared_kernel`` when they read one left operand (``lhs``), else of
    ``matmul_pairs_kernel``."""

    members: list[torch.fx.Node]
    lhs: torch.fx.Node | None = None

    @property
    def outputs(self) -> tuple:
        return tuple(self.members)

    @cached_property
    def names(self) -> tuple:
        return op_names(self.members)


def find_matmuls(nodes: list[torch.fx.Node], mms: set[torch.fx.Node]) -> list[Matmuls]:
    """Groups of two or more of the ``aten::mm`` nodes ``mms`` at one depth: the depth of a node
    is the largest number of ``mms`` on a path from the graph's inputs to it (itself included),
    so no product of a group depends on another, and every path between two groups goes from
    the shallower to the deeper (the groups can always be scheduled). In a backward graph a
    layer's input and weight gradients are at one depth; in a forward graph the products of
    one input (the query, key and value projections)."""
    depth: dict[torch.fx.Node, int] = {}
    by_depth: dict[int, list[torch.fx.Node]] = {}
    for n in nodes:
        d = max((depth[a] for a in n.all_input_nodes), default=0)
        depth[n] = d + (n in mms)
        if n in mms:
            by_depth.setdefault(depth[n], []).append(n)
    out = []
    for ms in by_depth.values():
        if len(ms) >= 2:
            lhs = {_same_value(m.args[0]) for m in ms}
            out.append(Matmuls(ms, ms[0].args[0] if len(lhs) == 1 else None))
    return out


_VIEWS = ("aten::view", "aten::_unsafe_view", "aten::reshape")


def _same_value(a: Any) -> Any:
    """A key equal for nodes that hold the same value: a view of a node to a static shape is
    keyed by the node and the shape."""
    if schema_name(getattr(a, "target", None)) in _VIEWS and len(a.args) == 2:
        shape = a.args[1]
        if isinstance(shape, (list, tuple)) and all(type(s) is int for s in shape):
            return ("view", a.args[0], tuple(shape))
    return a


def product_operands(products: list, env: dict) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The (a, b) values of ``aten::mm`` nodes; :class:`Guard` unless each is a pair of non-empty
    2-D float tensors of one dtype (what the product kernels take)."""
    pairs = [(env[m.args[0]], env[m.args[1]]) for m in products]
    for a, b in pairs:
        if any(t.dim() != 2 or t.dtype not in FLOATS or t.numel() == 0 for t in (a, b)):
            raise Guard("not 2-D float tensors")
        if a.dtype != b.dtype:
            raise Guard("mixed dtypes")
    return pairs


def run_matmuls(run: Any, g: Matmuls, env: dict) -> list[torch.Tensor]:
    """The products of one launch; :class:`Guard` when the kernels do not apply (the mms then
    run one by one)."""
    pairs = product_operands(g.members, env)
    bs = [b.contiguous() for _, b in pairs]
    if g.lhs is not None:
        if len({b.dtype for b in bs} | {env[g.lhs].dtype}) > 1:
            raise Guard("mixed dtypes")
        return list(run(K.matmul_shared_kernel, env[g.lhs].contiguous(), bs))
    return list(run(K.matmul_pairs_kernel, [a.contiguous() for a, _ in pairs], bs))
