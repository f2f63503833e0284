"""Matrix products whose one reader is a fused element-wise chain, for the ``"nki"``
torch.compile backend: :func:`with_epilogues` merges an ``aten::mm`` node (or a
:class:`Matmuls` step of one left operand) with the :class:`Group` that reads its products
through views keeping their rows, and :func:`run_epilogue` runs the two as one launch of
:func:`nki.kernels.matmul_epilogue_kernel` (a layer's gated activation after its gate and up
projections, the residual add and norm after its output projection). The products are never
stored; each product and each step computes and rounds as in the separate launches, so the
results are theirs bit for bit. When the kernel does not apply the parts run on their own."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
import torch.fx

import nki.kernels as K
from nki.kernels._tiles import PSUM_FMAX

from .torch_fusion_launch import Group, _group_segment, op_names
from .torch_fusion_matmul import _VIEWS, Matmuls
from .torch_fusion_rules import writes_operand
from .torch_ops import FLOATS
from .torch_registry import Guard

__all__ = ["Epilogue", "run_epilogue", "with_epilogues"]


@dataclass
class Epilogue:
    """A product step (a :class:`Matmuls` of one left operand, or one ``aten::mm`` node), the
    views of its products and the :class:`Group` reading them (``reads``: per product, the
    group's input holding it, itself or its view), run as one launch. ``parts`` are the three in
    graph order, run on their own when the kernel does not apply."""

    mm: Any
    views: list[torch.fx.Node]
    group: Group
    reads: list[torch.fx.Node]

    @cached_property
    def products(self) -> list[torch.fx.Node]:
        return list(self.mm.members) if isinstance(self.mm, Matmuls) else [self.mm]

    @cached_property
    def members(self) -> list[torch.fx.Node]:
        return [*self.products, *self.views, *self.group.members]

    @property
    def outputs(self) -> tuple:
        return self.group.outputs

    @cached_property
    def parts(self) -> tuple:
        return (self.mm, *self.views, self.group)

    @cached_property
    def names(self) -> tuple:  # (the views are recorded as views: ``view_names``)
        return op_names([*self.products, *self.group.members])

    @cached_property
    def view_names(self) -> tuple:
        return op_names(self.views)

    @cached_property
    def product_of(self) -> dict[torch.fx.Node, int]:
        """Each group input holding a product -> that product's index."""
        return {r: i for i, r in enumerate(self.reads)}


def _name(n: Any) -> str | None:
    schema = getattr(getattr(n, "target", None), "_schema", None)
    return schema.name if schema is not None else None


def _row_view(v: Any, p: torch.fx.Node) -> bool:
    """``v`` is a view of product ``p`` keeping its last dim (so its rows are p's rows)."""
    if not isinstance(v, torch.fx.Node) or _name(v) not in _VIEWS or v.args[:1] != (p,):
        return False
    val, pv = v.meta.get("val"), p.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dim() >= 1 and val.shape[-1] == pv.shape[-1]


def _merge(mm: Any, products: list, g: Group) -> Epilogue | None:
    """The epilogue of ``mm`` and ``g`` when the group reads every product, itself or through
    one view, and nothing else reads it (nor its view); not as a cat's part."""
    part = dict(zip(g.inputs, g.views or (False,) * len(g.inputs)))  # input -> a cat's part
    members = set(g.members)
    views, reads = [], []
    for p in products:
        users = set(p.users)
        if part.get(p) is False and users <= members:
            reads.append(p)
            continue
        (v,) = users if len(users) == 1 else (None,)
        if not _row_view(v, p) or part.get(v) is not False or set(v.users) - members:
            return None
        views.append(v)
        reads.append(v)
    return Epilogue(mm, views, g, reads)


def with_epilogues(steps: list, mms: set[torch.fx.Node]) -> list:
    """``steps`` (a schedule of the graph) with each product step whose products only one
    group reads merged into an :class:`Epilogue` at the group's place (nothing between reads
    the products or their views). ``mms``: the ``aten::mm`` nodes that may run as kernels."""
    at = {}  # node -> the index of the step that computes it
    for i, st in enumerate(steps):
        for m in st.members if hasattr(st, "members") else [st]:
            at[m] = i
    merged: dict[int, Epilogue] = {}
    gone: set[int] = set()
    for i, st in enumerate(steps):
        if not isinstance(st, Group):
            continue
        for a in st.inputs:  # (a product, or a view of one)
            p = a if _name(a) == "aten::mm" else a.args[0] if a.args else None
            j = at.get(p) if isinstance(p, torch.fx.Node) else None
            if j is None or j in gone or j >= i:
                continue
            if any(isinstance(s, torch.fx.Node) and writes_operand(s) for s in steps[j + 1 : i]):
                continue  # (the products would move past a write: they stay where they are)
            mm = steps[j]
            if isinstance(mm, Matmuls) and mm.lhs is not None:
                products = list(mm.members)
            elif isinstance(mm, torch.fx.Node) and mm in mms:
                products = [mm]
            else:
                continue
            ep = _merge(mm, products, st)
            if ep is not None and all(steps[at[v]] is v for v in ep.views):
                merged[i] = ep
                gone |= {j} | {at[v] for v in ep.views}
                break
    return [merged.get(i, st) for i, st in enumerate(steps) if i not in gone]


def run_epilogue(run: Any, g: Epilogue, env: dict) -> list[torch.Tensor]:
    """The group's stored values from one launch of the epilogue kernel; :class:`Guard` when
    the kernel does not apply (the product step, the views and the group then run apart)."""
    a = env[g.products[0].args[0]]
    bs = [env[p.args[1]] for p in g.products]
    for t in (a, *bs):
        if t.dim() != 2 or t.dtype not in FLOATS or t.dtype != a.dtype or t.numel() == 0:
            raise Guard("not 2-D float tensors of one dtype")
    ns = [b.shape[1] for b in bs]
    if any(b.shape[0] != a.shape[1] for b in bs) or sum(ns) > PSUM_FMAX:
        raise Guard(f"products of {ns} columns")
    # the group's inputs, each product's view as a tensor without data (only its shape is read)
    values = []
    for x in g.group.inputs:
        k = g.product_of.get(x)
        if k is None:
            values.append(env[x])
            continue
        empty = torch.empty((a.shape[0], ns[k]), dtype=a.dtype, device="meta")
        if x is g.products[k]:
            values.append(empty)
        else:
            args = torch.fx.node.map_arg(x.args[1:], env.__getitem__)
            values.append(x.target(empty, *args, **x.kwargs))
    seg = _group_segment(g.group, values)
    inputs = list(g.group.inputs)
    first = len(bs)
    others: list[torch.Tensor] = []
    refs: dict[int, int] = {}  # the group's input index -> the kernel's
    for j, (x, t) in enumerate(zip(inputs, seg.ins)):
        if x in g.product_of:
            k = g.product_of[x]
            if tuple(t.shape) != (a.shape[0], ns[k]):
                raise Guard(f"a view of {tuple(t.shape)} rows of a ({a.shape[0]}, {ns[k]}) product")
            refs[j] = k
        else:
            refs[j] = first + len(others)
            others.append(t)
    program = _remapped(g, seg.program, refs)
    res = run(
        K.matmul_epilogue_kernel,
        a.contiguous(),
        [b.contiguous() for b in bs],
        others,
        program=program,
        outs=seg.outs,
    )
    return seg.done(list(res) if isinstance(res, tuple) else [res])  # (one comes alone)


# id(epilogue) -> (the step, its group's program, the program with the kernel's input indices):
# the same tuple object every launch of the step, so the kernel's trace cache keys it once;
# bounded, the step kept so that its id is not reused
_PROGRAMS: dict[int, tuple[Epilogue, tuple, tuple]] = {}


def _remapped(g: Epilogue, program: tuple, refs: dict[int, int]) -> tuple:
    hit = _PROGRAMS.get(id(g))
    if hit is not None and hit[0] is g and hit[1] is program:
        return hit[2]
    out = tuple(
        (op, tuple(("in", refs[r[1]]) if r[0] == "in" else r for r in args), dt)
        for op, args, dt in program
    )
    if len(_PROGRAMS) >= 1024:
        _PROGRAMS.clear()
    _PROGRAMS[id(g)] = (g, program, out)
    return out
