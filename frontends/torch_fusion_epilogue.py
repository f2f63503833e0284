"""Matrix products read by a fused element-wise chain, for the ``"nki"`` torch.compile backend:
:func:`with_epilogues` merges a product step (one ``aten::mm`` node, or a :class:`Matmuls`
step) with the :class:`Group` that reads some of its products, each itself or through a view
keeping its rows, and :func:`run_epilogue` runs the two as one launch of
:func:`nki.kernels.matmul_epilogue_kernel` (a layer's gated activation after its gate and up
projections, the residual add and norm after its output projection, a backward chain after the
input gradients it sums). A read product is stored only when something else reads it too (a
training forward saves it for the backward); the step's other products (a backward graph's
weight gradients) are computed and stored in the same launch. Each product and each step
computes and rounds as in the separate launches, so the results are theirs bit for bit. When
the kernel does not apply, the parts run on their own."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
import torch.fx

import nki.kernels as K
from nki.kernels._tiles import PSUM_FMAX

from .torch_fusion_launch import Group, _group_segment, op_names
from .torch_fusion_matmul import _VIEWS, Matmuls, product_operands
from .torch_fusion_rules import schema_name, writes_operand
from .torch_registry import Guard

__all__ = ["Epilogue", "run_epilogue", "with_epilogues"]


@dataclass
class Epilogue:
    """A product step, the views of its products that the group reads and the :class:`Group`,
    run as one launch. ``reads``: per product the group input holding it (itself or its view),
    or None when the group does not read it; ``stored``: the products the launch stores (read
    elsewhere too, or not by the group); ``remade``: the views read elsewhere too (made again
    from their stored products). ``parts`` are the three in graph order, run on their own when
    the kernel does not apply."""

    mm: Any
    views: list[torch.fx.Node]
    group: Group
    reads: list[torch.fx.Node | None]
    stored: list[torch.fx.Node]
    remade: list[torch.fx.Node]

    @cached_property
    def products(self) -> list[torch.fx.Node]:
        return _members(self.mm)

    @cached_property
    def shared(self) -> bool:
        """Every product reads one left operand (the read ones run side by side)."""
        return not isinstance(self.mm, Matmuls) or self.mm.lhs is not None

    @cached_property
    def members(self) -> list[torch.fx.Node]:
        return [*self.products, *self.views, *self.group.members]

    @cached_property
    def outputs(self) -> tuple:
        return (*self.stored, *self.remade, *self.group.outputs)

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
    def read(self) -> tuple[int, ...]:
        """The indices of the products the group reads."""
        return tuple(i for i, r in enumerate(self.reads) if r is not None)

    @cached_property
    def keep(self) -> tuple[int, ...]:
        """The read products the launch also stores."""
        return tuple(i for i in self.read if self.products[i] in self.stored)

    @cached_property
    def shapes(self) -> dict[tuple, torch.Tensor]:
        """(group input, rows, columns, dtype, the view's other arguments) -> the input as a
        tensor without data (``run_epilogue``): the same object every launch of that shape."""
        return {}

    @cached_property
    def product_of(self) -> dict[torch.fx.Node, int]:
        """Each group input holding a product -> its position in ``read``."""
        return {self.reads[i]: j for j, i in enumerate(self.read)}  # type: ignore[misc]


def _members(mm: Any) -> list[torch.fx.Node]:
    """The products of a product step (a :class:`Matmuls`, or one node)."""
    return list(mm.members) if isinstance(mm, Matmuls) else [mm]


def _row_view(v: Any, p: torch.fx.Node) -> bool:
    """``v`` is a view of product ``p`` keeping its last dim (so its rows are p's rows)."""
    if not isinstance(v, torch.fx.Node) or v.args[:1] != (p,):
        return False
    if schema_name(v.target) not in _VIEWS:
        return False
    val, pv = v.meta.get("val"), p.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dim() >= 1 and val.shape[-1] == pv.shape[-1]


def _merge(mm: Any, g: Group, alone: set) -> Epilogue | None:
    """The epilogue of product step ``mm`` and ``g`` when the group reads some products, each
    itself or through a view (not as a cat's part; ``alone``: the nodes in no other step);
    None when it reads none."""
    products = _members(mm)
    part = dict(zip(g.inputs, g.views or (False,) * len(g.inputs)))  # input -> a cat's part
    members = set(g.members)
    views, reads, stored, remade = [], [], [], []
    for p in products:
        users = set(p.users)
        v = None
        if part.get(p) is False:
            reads.append(p)
        else:
            v = next((u for u in users if part.get(u) is False and _row_view(u, p)), None)
            reads.append(v)
            if v is not None and v not in alone:
                return None
        if v is not None:
            views.append(v)
            if set(v.users) - members:
                remade.append(v)  # (made again from the stored product)
        if reads[-1] is None or users - members - {v} or remade[-1:] == [v]:
            stored.append(p)  # (not read by the group, or read elsewhere too)
    if all(r is None for r in reads):
        return None
    return Epilogue(mm, views, g, reads, stored, remade)


def with_epilogues(nodes: list[torch.fx.Node], groups: list, mms: set[torch.fx.Node]) -> list:
    """``groups`` (the graph's fused steps) with each product step (a :class:`Matmuls`, or a
    node of ``mms``: the ``aten::mm`` nodes that may run as kernels) and a :class:`Group` that
    reads some of its products merged into an :class:`Epilogue`, unless an in-place write lies
    between them in graph order. The schedule then places it (or refuses the merged steps)."""
    pos = {n: i for i, n in enumerate(nodes)}
    writes = [i for i, n in enumerate(nodes) if writes_operand(n)]
    step_of: dict[torch.fx.Node, Any] = {n: n for n in mms}
    for st in groups:
        if isinstance(st, Matmuls):
            step_of.update(dict.fromkeys(st.members, st))
    inside = {m for st in groups for m in st.members}
    alone = set(nodes) - inside
    out = list(groups)
    for g in groups:
        if not isinstance(g, Group):
            continue
        for a in g.inputs:  # (a product, or a view of one)
            p = a if schema_name(a.target) == "aten::mm" else a.args[0] if a.args else None
            mm = step_of.get(p) if isinstance(p, torch.fx.Node) else None
            if mm is None or (isinstance(mm, torch.fx.Node) and mm in inside):
                continue
            span = range(min(map(pos.get, _members(mm))), max(map(pos.get, g.members)))
            if any(w in span for w in writes):
                continue  # (the products would move past a write: they stay apart)
            ep = _merge(mm, g, alone)
            if ep is not None:
                out = [ep if s is g else s for s in out if s is not mm]
                step_of = {n: s for n, s in step_of.items() if s is not mm}
                break
    return out


def run_epilogue(run: Any, g: Epilogue, env: dict) -> list[torch.Tensor]:
    """The epilogue's outputs (its stored products, the views made again from them, the
    group's stored values) from one launch of the epilogue kernel; :class:`Guard` when the
    kernel does not apply (the product step, the views and the group then run apart)."""
    lhs, rhs = map(list, zip(*product_operands(g.products, env)))
    if any(a.shape[1] != b.shape[0] for a, b in zip(lhs, rhs)):
        raise Guard("mixed shapes")
    m = lhs[g.read[0]].shape[0]
    ns = [rhs[i].shape[1] for i in g.read]
    if any(lhs[i].shape[0] != m for i in g.read) or (sum(ns) if g.shared else max(ns)) > PSUM_FMAX:
        raise Guard(f"read products of {ns} columns")
    # the group's inputs, each read product as a tensor without data (only its shape is read)
    values = []
    for x in g.group.inputs:
        j = g.product_of.get(x)
        if j is None:
            values.append(env[x])
            continue
        values.append(_shape_of(g, x, m, ns[j], lhs[g.read[j]].dtype, env))
    seg = _group_segment(g.group, values)
    others: list[torch.Tensor] = []
    refs: dict[int, int] = {}  # the group's input index -> the kernel's
    for i, (x, t) in enumerate(zip(g.group.inputs, seg.ins)):
        j = g.product_of.get(x)
        if j is None:
            refs[i] = len(g.read) + len(others)
            others.append(t)
        elif tuple(t.shape) != (m, ns[j]):
            raise Guard(f"a view of {tuple(t.shape)} rows of a ({m}, {ns[j]}) product")
        else:
            refs[i] = j
    res = run(
        K.matmul_epilogue_kernel,
        [a.contiguous() for a in lhs],
        [b.contiguous() for b in rhs],
        others,
        program=_remapped(g, seg.program, refs),
        outs=seg.outs,
        read=g.read,
        keep=g.keep,
        shared=g.shared,
    )
    res = list(res) if isinstance(res, tuple) else [res]  # (one comes alone)
    stored = dict(zip(g.stored, res))
    remade = [_view(v, stored[v.args[0]], env) for v in g.remade]
    return [*res[: len(g.stored)], *remade, *seg.done(res[len(g.stored) :])]


def _shape_of(g: Epilogue, x: torch.fx.Node, m: int, n: int, dtype: Any, env: dict) -> Any:
    """Group input ``x``, a read (m, n) product or a view of it, as a tensor without data: only
    its shape is read, so one object serves every launch of that shape (made once, on the meta
    device)."""
    product = x is g.products[g.read[g.product_of[x]]]
    args = () if product else torch.fx.node.map_arg(x.args[1:], env.__getitem__)
    key: tuple | None = (x, m, n, dtype, _hashable(args))
    try:
        hit = g.shapes.get(key)  # type: ignore[arg-type]
    except TypeError:  # (an argument that is no key: made each time)
        key, hit = None, None
    if hit is None:
        empty = torch.empty((m, n), dtype=dtype, device="meta")
        hit = empty if product else x.target(empty, *args, **x.kwargs)
        if key is not None:
            if len(g.shapes) >= 64:  # (bounded: a dynamic graph's shapes)
                g.shapes.clear()
            g.shapes[key] = hit
    return hit


def _hashable(args: Any) -> Any:
    """A view's arguments (ints, lists of ints) as a key."""
    if isinstance(args, (list, tuple)):
        return tuple(_hashable(a) for a in args)
    return args


def _view(v: torch.fx.Node, base: torch.Tensor, env: dict) -> torch.Tensor:
    """View node ``v`` run on ``base`` in place of its product (its other arguments from
    ``env``)."""
    args = torch.fx.node.map_arg(v.args[1:], env.__getitem__)
    return v.target(base, *args, **v.kwargs)


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
