"""Running the fused steps of a compiled graph (for :mod:`frontends.torch_fusion`, which
decides them once per graph): a :class:`Group` (a chain of element-wise ops), a :class:`Cat`
(a cat in no chain) or a :class:`Horizontal` step (several of them that depend on none of each
other) is one launch of :func:`nki.kernels.fused_elementwise_kernel`, a segment of the launch
per group or cat; when the kernel does not apply (:class:`Guard`) the runner runs their parts
or nodes on their own."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
import torch.fx

import nki.kernels as K
from nki.kernels._tiles import FREE_MAX

from .torch_fusion_rules import Key
from .torch_ops import FLOATS, _rows
from .torch_ops import _operand as _int32  # int64 as int32 (values must fit)
from .torch_registry import Guard

__all__ = [
    "Cat",
    "Group",
    "Horizontal",
    "cat_dim",
    "op_names",
    "run_cat",
    "run_group",
    "run_horizontal",
]


def op_names(members: list[torch.fx.Node]) -> tuple:
    """The ATen op names of a step's members (``"aten::mul"``), for the report."""
    return tuple(m.target._schema.name for m in members)  # type: ignore[union-attr]


@dataclass
class Group:
    """Nodes run as one fused launch: ``members`` (graph order), the fused kernel's
    ``program`` and ``outs`` (the members stored: ``outputs``), the group's external tensor
    ``inputs`` (graph nodes), and the full shape (``shape``: ints, or None when it is taken at
    run time from input ``shape_from``); a stored value has the full shape's columns, one (a row
    statistic) or a part of them (a cat's operand)."""

    members: list[torch.fx.Node]
    full: Key
    program: tuple = ()
    outs: tuple = ()
    outputs: tuple = ()  # the member nodes stored, in the order of outs
    inputs: tuple = ()
    shape: tuple | None = None
    shape_from: int = -1
    # per stored value: None (the full shape's rows), a colsum's row shape, or ("cat", d,
    # trailing dims) for a cat along dim d joined to the group
    rows: tuple = ()
    views: tuple = ()  # per input: True when it is a cat's part, given as (rows, -1)
    parts: tuple = ()  # a group with a joined cat: the group and the cat, run apart if refused

    @cached_property
    def names(self) -> tuple:
        return op_names(self.members)


@dataclass
class Cat:
    """A ``cat`` of float tensors (along any dim) in no chain: the fused kernel's cat step on
    (rows, columns) views of its parts (the dims before the cat's, the rest), whose tiles have
    as many partitions as the parts have rows (a KV cache's cat in a decode step: a few rows)."""

    members: list[torch.fx.Node]
    program: tuple

    @property
    def outputs(self) -> tuple:
        return tuple(self.members)

    @property
    def inputs(self) -> tuple:
        return tuple(self.members[0].args[0])

    @cached_property
    def names(self) -> tuple:
        return op_names(self.members)


@dataclass
class Horizontal:
    """Element-wise steps (:class:`Group`, :class:`Cat`) none of which depends on another,
    ready at one point of the schedule: one launch of the fused kernel, a segment per part."""

    parts: list[Any]

    @cached_property
    def members(self) -> list[torch.fx.Node]:
        return [m for p in self.parts for m in p.members]

    @cached_property
    def outputs(self) -> tuple:
        return tuple(m for p in self.parts for m in p.outputs)

    @cached_property
    def names(self) -> tuple:
        return op_names(self.members)


_SEGMENTS = (Group, Cat)  # the steps a Horizontal launch joins


@dataclass(frozen=True)
class _Segment:
    """One program of a fused launch: its kernel inputs, program, stored steps, and the
    function giving the graph's values from the stored results."""

    ins: list
    program: tuple
    outs: tuple
    done: Callable[[list[torch.Tensor]], list[torch.Tensor]]


def cat_dim(n: torch.fx.Node) -> int:
    """The dim (not negative) a ``cat`` node joins its parts along."""
    dim = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim", 0)
    return dim % n.meta["val"].dim()


def _cat_segment(g: Cat, env: dict) -> _Segment:
    """The cat as a segment of the fused kernel; :class:`Guard` when it does not apply."""
    parts = [env[a] for a in g.inputs]
    d = cat_dim(g.members[0])
    shape = list(parts[0].shape)
    shape[d] = sum(p.shape[d] for p in parts)
    rows = math.prod(shape[:d])
    xs = [p.contiguous().reshape(rows, -1) for p in parts]
    if any(p.dtype not in FLOATS or p.dim() != len(shape) for p in parts) or rows == 0:
        raise Guard("not float tensors of one rank")
    if any(x.shape[1] == 0 or x.shape[1] > FREE_MAX for x in xs) or sum(shape[d:]) == 0:
        raise Guard(f"parts of {[x.shape[1] for x in xs]} columns")
    return _Segment(xs, g.program, (0,), lambda res: [res[0].reshape(shape)])


def run_cat(run: Any, g: Cat, env: dict) -> list[torch.Tensor]:
    """The cat from one launch of the fused kernel; :class:`Guard` when it does not apply."""
    return _launch(run, [_cat_segment(g, env)])


def _operand(t: torch.Tensor, full: tuple, n: int, d: int) -> torch.Tensor:
    """``t`` in one of the forms the fused kernel broadcasts: (n, d), (n, 1), (1, d), (1, 1);
    another broadcast is materialised (a layout copy, as the separate adapters do)."""
    pad = (1,) * (len(full) - t.dim()) + tuple(t.shape)
    if pad == full:
        return _rows(t)
    if pad[:-1] == full[:-1]:  # one value per row, or a part of a cat
        return t.contiguous().reshape(n, pad[-1])
    if all(s == 1 for s in pad[:-1]):  # one row (of the full shape's columns, or a part's)
        return t.contiguous().reshape(1, pad[-1])
    return _rows(t.expand(full))


def _group_segment(g: Group, values: list[torch.Tensor]) -> _Segment:
    """The group as a segment of the fused kernel (``values``: its inputs in the order of
    ``g.inputs``); :class:`Guard` when the kernel does not apply."""
    full = g.shape if g.shape is not None else tuple(values[g.shape_from].shape)
    d = full[-1]
    n = math.prod(full[:-1])
    if d > FREE_MAX or n * d == 0:
        raise Guard(f"shape {full}")
    ins = [
        _part_rows(v, n) if view else _operand(v if v.dtype in FLOATS else _int32(v), full, n, d)
        for v, view in zip(values, g.views or (False,) * len(values))
    ]

    def shape(r: torch.Tensor, rows: Any) -> tuple:
        if rows is None:  # full, a column or a part
            return full[:-1] + (r.shape[1],)
        if rows[0] == "cat":  # the cat's parts join along its dim
            return full[: rows[1]] + (-1,) + rows[2]
        return rows  # a colsum's row

    def done(res: list[torch.Tensor]) -> list[torch.Tensor]:
        return [r.reshape(shape(r, rows)) for r, rows in zip(res, g.rows)]

    return _Segment(ins, g.program, g.outs, done)


def _part_rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """A joined cat's part as (n, -1): a row per row of the group."""
    w = t.numel() // n
    if not 0 < w <= FREE_MAX:
        raise Guard(f"a cat part of {w} columns")
    return t.contiguous().reshape(n, w)


def run_group(run: Any, g: Group, env: dict) -> list[torch.Tensor]:
    """The group's stored values from one launch of the fused kernel; :class:`Guard` when the
    kernel does not apply."""
    return _launch(run, [_group_segment(g, [env[a] for a in g.inputs])])


def run_horizontal(run: Any, g: Horizontal, env: dict) -> list[torch.Tensor]:
    """The stored values of every part (in the order of ``g.outputs``) from one launch of the
    fused kernel, a segment per part; :class:`Guard` when the kernel does not apply to one of
    them (the parts then run one by one)."""
    segs = [
        _group_segment(p, [env[a] for a in p.inputs])
        if isinstance(p, Group)
        else _cat_segment(p, env)
        for p in g.parts
    ]
    return _launch(run, segs, g)


# id(horizontal step) -> (the step, its launch's ``segments`` argument): the same tuple object
# every launch of the step, so the kernel's trace cache keys it once; bounded, the step kept so
# that its id is not reused
_SPECS: dict[int, tuple[Horizontal, tuple]] = {}


def _launch(run: Any, segs: list[_Segment], step: Horizontal | None = None) -> list[torch.Tensor]:
    """One launch of the fused kernel for ``segs`` (the parts of ``step``, when given): their
    stored values, in order."""
    if len(segs) == 1:
        s = segs[0]
        res = run(K.fused_elementwise_kernel, s.ins, program=s.program, outs=s.outs)
        return s.done(list(res) if isinstance(res, tuple) else [res])  # (one comes alone)
    ins: list[torch.Tensor] = []
    spec = []
    for s in segs:
        spec.append((tuple(range(len(ins), len(ins) + len(s.ins))), s.program, s.outs))
        ins += s.ins
    segments = tuple(spec)
    if step is not None:
        hit = _SPECS.get(id(step))
        if hit is not None and hit[0] is step and hit[1] == segments:
            segments = hit[1]
        else:
            if len(_SPECS) >= 1024:
                _SPECS.clear()
            _SPECS[id(step)] = (step, segments)
    res = run(K.fused_elementwise_kernel, ins, segments=segments)
    res = list(res) if isinstance(res, tuple) else [res]
    out: list[torch.Tensor] = []
    for s in segs:
        out += s.done(res[: len(s.outs)])
        res = res[len(s.outs) :]
    return out
