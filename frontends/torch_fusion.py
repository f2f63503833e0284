"""Fusing chains of element-wise ATen ops of a compiled graph into one NKI kernel launch
(:func:`nki.kernels.fused_elementwise_kernel`) for the ``"nki"`` torch.compile backend.

Once per compiled graph, :func:`find_groups` groups the float element-wise nodes (unary math
and activations, add / sub / mul / div / maximum / minimum / pow with tensors or Python scalars,
activation backward ops, float dtype conversions, means / sums over the last dim with
``keepdim``, cats of the last dim, and the copies of backward graphs: expand, slices of the last
dim and their gradients, sums over every row) that compute on one shape (or its row statistics,
or some of its columns) into groups that can run as one step of the graph. Each group becomes a
static program of the fused kernel; the graph runner launches it once per call
(:func:`run_group`), and when the fused kernel's guard refuses a call the group's nodes run one
by one as before. Each step computes and rounds as its separate kernel does, so fusing never
changes a result. :func:`find_matmuls` groups the matrix products that do not depend on each
other into one matmul launch (:func:`run_matmuls`)."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

import nki.kernels as K
from nki.kernels._tiles import FREE_MAX

from .torch_fusion_rules import _ALONE, Key, _col, _key, _part, _Spec, fusable
from .torch_ops import _DTYPE_NAMES, FLOATS, _rows
from .torch_ops import _operand as _int32  # int64 as int32 (values must fit)
from .torch_registry import Guard

__all__ = [
    "Cat",
    "Group",
    "Horizontal",
    "fusable",
    "Matmuls",
    "find_cats",
    "find_groups",
    "find_matmuls",
    "run_cat",
    "run_group",
    "run_horizontal",
    "run_matmuls",
    "schedule",
]

FUSED_KERNEL = "fused_elementwise_kernel"

# --------------------------------------------------------------------------------------------
# Grouping (once per compiled graph)
# --------------------------------------------------------------------------------------------


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
    names: tuple = ()  # the members' ATen op names
    shape: tuple | None = None
    shape_from: int = -1
    rows: tuple = ()  # per stored value: its shape if it is a colsum's row, else None


class _Groups:
    """Union-find of groups, with what each node depends on (to keep every group a convex part
    of the graph: no path leaves a group and comes back into it)."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}
        self.members: dict[int, list[torch.fx.Node]] = {}
        self.full: dict[int, Key] = {}
        self.reduces: dict[int, bool] = {}
        self.of: dict[torch.fx.Node, int] = {}
        self.deps: dict[torch.fx.Node, set[int]] = {}

    def find(self, g: int) -> int:
        while self.parent[g] != g:
            self.parent[g] = self.parent[self.parent[g]]
            g = self.parent[g]
        return g

    def group(self, a: Any) -> int | None:
        return self.find(self.of[a]) if a in self.of else None

    def merge(self, c: int, into: int) -> None:
        self.parent[c] = into
        self.members[into] += self.members.pop(c)
        self.reduces[into] = self.reduces[into] or self.reduces.pop(c)
        self.full.pop(c)

    def rows_only(self, g: int, key_of: Callable) -> bool:
        """True when every input of group ``g`` from outside it has the rows of its full shape
        or one row (a row vector, a scalar): the forms the fused kernel broadcasts whatever the
        full shape's last dim (so the group may grow to more columns)."""
        full = self.full[g]
        for m in self.members[g]:
            for a in m.all_input_nodes:
                k = key_of(a)
                if self.group(a) == g or k is None:
                    continue
                pad = (1,) * (len(full) - len(k)) + tuple(k)
                if pad[:-1] != full[:-1] and any(s != 1 for s in pad[:-1]):
                    return False
        return True

    def upstream(self, a: torch.fx.Node) -> set[int]:
        """The groups ``a`` depends on (its own excluded)."""
        return {self.find(g) for g in self.deps.get(a, ())}

    def convex(self, roots: set[int], new_inputs: list[torch.fx.Node]) -> bool:
        """True when merging ``roots`` with a node reading ``new_inputs`` keeps the group
        convex: no input from outside it depends on one of them."""
        outside = [a for a in new_inputs if self.group(a) not in roots]
        for r in roots:
            for m in self.members[r]:
                outside += [a for a in m.all_input_nodes if self.group(a) not in roots]
        return all(not (self.upstream(a) & roots) for a in outside)


def _fits(spec: _Spec, k: Key, full: Key, key_of: Callable) -> bool:
    """Whether a node of shape key ``k`` computes on a group of full shape ``full``."""
    tensors = [a for a in spec.args if isinstance(a, torch.fx.Node)]
    if spec.needs in ("slice", "colsum"):  # (a slice's value is a part, a colsum's one row)
        return key_of(tensors[0]) == full
    if spec.needs == "pad":
        return k == full and _part(key_of(tensors[0]), full)
    if spec.needs == "parts":
        return k == full and all(key_of(a) == full or _part(key_of(a), full) for a in tensors)
    if spec.op.split(":")[0] in _ALONE and _part(k, full):
        return key_of(tensors[0]) == k
    if k != full and k != _col(full):
        return False
    if spec.needs == "full":
        return key_of(tensors[0]) == full and k == _col(full)
    if spec.needs == "same":
        return key_of(tensors[0]) == key_of(tensors[1]) == k
    return all(_broadcasts(key_of(a), full) for a in tensors)


def _broadcasts(k: Key, full: Key) -> bool:
    if len(k) > len(full):
        return False
    pad = (1,) * (len(full) - len(k)) + tuple(k)
    return all(a == b or a == 1 for a, b in zip(pad, full))


def find_groups(nodes: list[torch.fx.Node], specs: dict[torch.fx.Node, _Spec]) -> list[Group]:
    """Groups of two or more fusable nodes (``specs``) that run as one launch."""
    gs = _Groups()

    def key_of(a: torch.fx.Node) -> Key | None:
        return _key(a.meta.get("val"))

    sums: set[torch.fx.Node] = set()  # colsum members: read by no other member

    def reads_sum(roots: set[int]) -> bool:
        ms = {m for r in roots for m in gs.members[r]}
        return any(a in sums and a in ms for m in ms for a in m.all_input_nodes)

    for i, n in enumerate(nodes):
        ins = n.all_input_nodes
        up: set[int] = set()
        for a in ins:
            up |= gs.deps.get(a, set())
            if a in gs.of:
                up.add(gs.of[a])
        gs.deps[n] = up
        spec = specs.get(n)
        if spec is None:
            continue
        k = key_of(n)
        cands = {gs.group(a) for a in ins if a in gs.of} - {gs.group(a) for a in ins if a in sums}
        fitting = []
        for c in sorted(cands):  # type: ignore[type-var]
            full = gs.full[c]
            if not gs.reduces[c] and full == _col(k) and full != k and gs.rows_only(c, key_of):
                full = k  # a group of row statistics grows to the full shape
            elif spec.needs == "parts" and _part(full, k) and gs.rows_only(c, key_of):
                full = k  # and one of a cat's parts to the cat's
            if _fits(spec, k, full, key_of):
                fitting.append((c, full))
        wide = [f for _, f in fitting if any(g == _col(f) != f for _, g in fitting)]
        if wide and _fits(spec, k, wide[0], key_of):  # row statistics join the full shape
            fitting = [
                (c, wide[0] if f == _col(wide[0]) and not gs.reduces[c] else f) for c, f in fitting
            ]
        choice: list[tuple[int, Key]] = []
        fulls = {f for _, f in fitting}
        roots = {c for c, _ in fitting}
        if len(fulls) == 1 and gs.convex(roots, ins) and not reads_sum(roots):
            choice = fitting
        else:
            choice = next(([f] for f in fitting if gs.convex({f[0]}, ins)), [])
        start = key_of(spec.args[0]) if spec.needs in ("full", "slice", "colsum") else k
        if not choice and not _fits(spec, k, start, key_of):
            continue
        if spec.needs == "colsum":
            sums.add(n)
        gs.parent[i] = i
        gs.members[i] = [n]
        gs.full[i] = choice[0][1] if choice else start
        gs.reduces[i] = spec.needs in ("full", "slice", "colsum")  # (their full is their input's)
        gs.of[n] = i
        for c, _ in choice:
            gs.merge(c, i)
    for a in nodes:  # groups reading one value (sin(x) and cos(x)) load it once
        roots = sorted({gs.find(gs.of[u]) for u in a.users if u in gs.of})
        for r in roots[1:]:
            pair = {roots[0], r}
            if gs.full[r] == gs.full[roots[0]] and gs.convex(pair, []) and not reads_sum(pair):
                gs.merge(r, roots[0])
    order = {n: i for i, n in enumerate(nodes)}
    out = []
    for r, members in gs.members.items():
        if len(members) < 2 or all(specs[m].free for m in members):
            continue
        g = _program(sorted(members, key=order.__getitem__), gs.full[r], specs)
        if g is not None:
            out.append(g)
    return out


def _program(members: list[torch.fx.Node], full: Key, specs: dict) -> Group | None:
    """The fused kernel's program for a group; None when its full shape cannot be known at run
    time (symbolic, and no input has it)."""
    index = {m: j for j, m in enumerate(members)}
    inputs: list[torch.fx.Node] = []
    steps: list[tuple] = []
    at: dict[torch.fx.Node, int] = {}  # member -> its step

    def ref(a: Any, dtype: torch.dtype) -> tuple:
        if not isinstance(a, torch.fx.Node):
            return a  # ("s", x)
        if a in index:
            r = ("v", at[a])
            src = a.meta["val"].dtype
        else:
            if a not in inputs:
                inputs.append(a)
            r = ("in", inputs.index(a))
            src = a.meta["val"].dtype
        if src != dtype:  # the adapters convert an operand to the result dtype first
            steps.append(("cast", (r,), _DTYPE_NAMES[dtype]))
            r = ("v", len(steps) - 1)
        return r

    for m in members:
        spec = specs[m]
        dt = m.meta["val"].dtype
        src = dt if spec.op.startswith(("binary", "grad")) else None
        args = tuple(ref(a, src or a.meta["val"].dtype) if isinstance(a, torch.fx.Node) else a
                     for a in spec.args)  # fmt: skip
        same = _identity(spec.op, args, m.args[0] if spec.op == "cast" else None, dt)
        if same is not None:  # no step: the value is its operand's (a copy torch makes)
            at[m] = same
            continue
        steps.append((spec.op, args, _DTYPE_NAMES[dt]))
        at[m] = len(steps) - 1
    used_outside = [m for m in members if m.users.keys() - set(members)]
    g = Group(members, full)
    g.program = tuple(steps)
    g.outputs = tuple(used_outside)
    g.rows = tuple(
        tuple(m.meta["val"].shape) if specs[m].op == "colsum" else None for m in used_outside
    )
    g.outs = tuple(at[m] for m in used_outside)
    g.inputs = tuple(inputs)
    if all(isinstance(s, int) for s in full):
        g.shape = tuple(full)
    else:
        g.shape_from = next((j for j, a in enumerate(inputs) if _key(a.meta["val"]) == full), -1)
        if g.shape_from < 0:
            return None
    return g


def _identity(op: str, args: tuple, src: Any, dtype: torch.dtype) -> int | None:
    """The step whose value a step is, bit for bit (a cast to the dtype it has, a product with
    or a quotient by 1.0 in its operand's dtype), or None."""
    if op == "cast" and args[0][0] == "v" and src.meta["val"].dtype == dtype:
        return args[0][1]
    if op in ("binary:mul", "binary:div") and args[1] == ("s", 1.0) and args[0][0] == "v":
        return args[0][1]  # (the operand was converted to the result's dtype first)
    if op == "binary:mul" and args[0] == ("s", 1.0) and args[1][0] == "v":
        return args[1][1]
    return None


def schedule(nodes: list[torch.fx.Node], groups: list[Any]) -> list[Any] | None:
    """The graph's nodes with each group as one step, in an order where every step comes after
    the steps computing its inputs; None if the groups made that impossible (they are convex,
    so they never should).

    Element-wise steps (:class:`Group`, :class:`Cat`) wait until no other step is ready; then
    all those ready run as one step (a :class:`Horizontal` launch when there are several:
    they depend on none of each other). Other steps go in graph order wherever it allows, and
    the graph's output comes last."""
    unit: dict[torch.fx.Node, Any] = {n: n for n in nodes}
    for g in groups:
        for m in g.members:
            unit[m] = g
    first: dict[int, int] = {}
    for i, n in enumerate(nodes):
        first.setdefault(id(unit[n]), i)
    preds: dict[int, set[int]] = {}
    succs: dict[int, list[Any]] = {}
    units = {id(u): u for u in unit.values()}
    for n in nodes:
        u = unit[n]
        for a in n.all_input_nodes:
            p = unit[a]
            if p is not u and id(p) not in preds.setdefault(id(u), set()):
                preds[id(u)].add(id(p))
                succs.setdefault(id(p), []).append(u)
    ready: list[tuple[int, int]] = []
    waiting: list[Any] = []  # ready element-wise steps
    last = [u for u in units.values() if getattr(u, "op", None) == "output"]

    def release(k: int) -> None:
        if not preds.get(k) and not (last and units[k] is last[0]):
            if isinstance(units[k], _SEGMENTS):
                waiting.append(units[k])
            else:
                heapq.heappush(ready, (first[k], k))

    for k in units:
        release(k)
    order: list[Any] = []
    emitted = len(last)
    while ready or waiting:
        if ready:
            done = [heapq.heappop(ready)[1]]
            order.append(units[done[0]])
        else:
            batch = sorted(waiting, key=lambda u: first[id(u)])
            waiting.clear()
            order.append(batch[0] if len(batch) == 1 else Horizontal(batch))
            done = [id(u) for u in batch]
        emitted += len(done)
        for k in done:
            for s in succs.get(k, []):
                preds[id(s)].discard(k)
                release(id(s))
    return order + last if emitted == len(units) else None


@dataclass
class Matmuls:
    """``aten::mm`` nodes none of which depends on another, run as one launch: of
    ``matmul_shared_kernel`` when they read one left operand (``lhs``), else of
    ``matmul_pairs_kernel``."""

    members: list[torch.fx.Node]
    lhs: torch.fx.Node | None = None
    names: tuple = ()

    @property
    def outputs(self) -> tuple:
        return tuple(self.members)


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
    name = getattr(getattr(a, "target", None), "_schema", None)
    if name is not None and name.name in _VIEWS and len(a.args) == 2:
        shape = a.args[1]
        if isinstance(shape, (list, tuple)) and all(type(s) is int for s in shape):
            return ("view", a.args[0], tuple(shape))
    return a


def run_matmuls(run: Any, g: Matmuls, env: dict) -> list[torch.Tensor]:
    """The products of one launch; :class:`Guard` when the kernels do not apply (the mms then
    run one by one)."""
    pairs = [(env[m.args[0]], env[m.args[1]]) for m in g.members]
    for a, b in pairs:
        if any(t.dim() != 2 or t.dtype not in FLOATS or t.numel() == 0 for t in (a, b)):
            raise Guard("not 2-D float tensors")
        if a.dtype != b.dtype:
            raise Guard("mixed dtypes")
    bs = [b.contiguous() for _, b in pairs]
    if g.lhs is not None:
        if len({b.dtype for b in bs} | {env[g.lhs].dtype}) > 1:
            raise Guard("mixed dtypes")
        return list(run(K.matmul_shared_kernel, env[g.lhs].contiguous(), bs))
    return list(run(K.matmul_pairs_kernel, [a.contiguous() for a, _ in pairs], bs))


@dataclass
class Cat:
    """A ``cat`` of float tensors (along any dim) in no chain: the fused kernel's cat step on
    (rows, columns) views of its parts (the dims before the cat's, the rest), whose tiles have
    as many partitions as the parts have rows (a KV cache's cat in a decode step: a few rows)."""

    members: list[torch.fx.Node]
    program: tuple
    names: tuple = ()

    @property
    def outputs(self) -> tuple:
        return tuple(self.members)

    @property
    def inputs(self) -> tuple:
        return tuple(self.members[0].args[0])


def find_cats(nodes: list[torch.fx.Node], cats: set[torch.fx.Node]) -> list[Cat]:
    """The nodes of ``cats`` (``aten::cat`` nodes in no chain) whose parts are float tensors of
    the result's dtype, as :class:`Cat` steps."""
    out = []
    for n in nodes:
        parts = n.args[0] if n in cats and n.args else None
        dim = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim", 0)
        if not isinstance(parts, (list, tuple)) or len(parts) < 2 or type(dim) is not int:
            continue
        dt = n.meta["val"].dtype
        same = all(isinstance(a, torch.fx.Node) and a.meta["val"].dtype == dt for a in parts)
        if same and dt in FLOATS:
            refs = tuple(("in", i) for i in range(len(parts)))
            out.append(Cat([n], (("cat", refs, _DTYPE_NAMES[dt]),)))
    return out


@dataclass
class Horizontal:
    """Element-wise steps (:class:`Group`, :class:`Cat`) none of which depends on another,
    ready at one point of the schedule: one launch of the fused kernel, a segment per part."""

    parts: list[Any]

    @property
    def members(self) -> list[torch.fx.Node]:
        return [m for p in self.parts for m in p.members]

    @property
    def outputs(self) -> tuple:
        return tuple(m for p in self.parts for m in p.outputs)

    @property
    def names(self) -> tuple:
        return tuple(nm for p in self.parts for nm in p.names)


_SEGMENTS = (Group, Cat)  # the steps a Horizontal launch joins


@dataclass(frozen=True)
class _Segment:
    """One program of a fused launch: its kernel inputs, program, stored steps, and the
    function giving the graph's values from the stored results."""

    ins: list
    program: tuple
    outs: tuple
    done: Callable[[list[torch.Tensor]], list[torch.Tensor]]


def _cat_segment(g: Cat, env: dict) -> _Segment:
    """The cat as a segment of the fused kernel; :class:`Guard` when it does not apply."""
    n = g.members[0]
    parts = [env[a] for a in g.inputs]
    dim = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim", 0)
    d = dim % parts[0].dim()
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


# --------------------------------------------------------------------------------------------
# Running a group
# --------------------------------------------------------------------------------------------


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
    ins = [_operand(v if v.dtype in FLOATS else _int32(v), full, n, d) for v in values]

    def done(res: list[torch.Tensor]) -> list[torch.Tensor]:
        return [  # (full, a column or a part; a colsum's row)
            r.reshape(full[:-1] + (r.shape[1],) if rows is None else rows)
            for r, rows in zip(res, g.rows)
        ]

    return _Segment(ins, g.program, g.outs, done)


def run_group(run: Any, g: Group, values: list[torch.Tensor]) -> list[torch.Tensor]:
    """The group's stored values from one launch of the fused kernel (``values``: its inputs
    in the order of ``g.inputs``); :class:`Guard` when the kernel does not apply."""
    return _launch(run, [_group_segment(g, values)])


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
    return _launch(run, segs)


def _launch(run: Any, segs: list[_Segment]) -> list[torch.Tensor]:
    """One launch of the fused kernel for ``segs``: their stored values, in order."""
    if len(segs) == 1:
        s = segs[0]
        res = run(K.fused_elementwise_kernel, s.ins, program=s.program, outs=s.outs)
        return s.done(list(res) if isinstance(res, tuple) else [res])  # (one comes alone)
    ins: list[torch.Tensor] = []
    spec = []
    for s in segs:
        spec.append((tuple(range(len(ins), len(ins) + len(s.ins))), s.program, s.outs))
        ins += s.ins
    res = run(K.fused_elementwise_kernel, ins, segments=tuple(spec))
    res = list(res) if isinstance(res, tuple) else [res]
    out: list[torch.Tensor] = []
    for s in segs:
        out += s.done(res[: len(s.outs)])
        res = res[len(s.outs) :]
    return out
