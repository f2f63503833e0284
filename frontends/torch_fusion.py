"""Fusing element-wise ATen ops of a compiled graph into few NKI kernel launches
(:func:`nki.kernels.fused_elementwise_kernel`) for the ``"nki"`` torch.compile backend.

Once per compiled graph, :func:`find_groups` groups the float element-wise nodes (unary math
and activations, add / sub / mul / div / maximum / minimum / pow with tensors or Python scalars,
activation backward ops, float dtype conversions, means / sums over the last dim with
``keepdim``, cats of the last dim, and the copies of backward graphs: expand, slices of the last
dim and their gradients, sums over every row) that compute on one shape (or its row statistics,
or some of its columns) into groups that can run as one step of the graph. Each group becomes a
static program of the fused kernel. :func:`find_cats` makes the cats in no chain fused steps
too, :func:`join_cats` joins a cat to the group computing one of its parts (a KV cache's cat
after the new key's rotary embedding), and :func:`schedule` orders the steps, running the
element-wise steps ready at one point as one launch (:class:`Horizontal`). Running them is
:mod:`frontends.torch_fusion_launch`'s; when the fused kernel's guard refuses a call, the
parts or nodes run one by one as before. Each step computes and rounds as its separate kernel
does, so fusing never changes a result. Matrix products that do not depend on each other share
a launch too (:mod:`frontends.torch_fusion_matmul`), and a chain reading products runs in
their launch (:mod:`frontends.torch_fusion_epilogue`)."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from .torch_fusion_epilogue import Epilogue, run_epilogue, with_epilogues
from .torch_fusion_launch import (
    _SEGMENTS,
    Cat,
    Group,
    Horizontal,
    cat_dim,
    run_cat,
    run_group,
    run_horizontal,
)
from .torch_fusion_matmul import Matmuls, find_matmuls, run_matmuls
from .torch_fusion_rules import _ALONE, Key, _col, _key, _part, _Spec, fusable, writes_operand
from .torch_ops import _DTYPE_NAMES, FLOATS

__all__ = [
    "Cat",
    "Epilogue",
    "Group",
    "Horizontal",
    "fusable",
    "Matmuls",
    "STEPS",
    "find_cats",
    "find_groups",
    "find_matmuls",
    "join_cats",
    "run_cat",
    "run_group",
    "run_horizontal",
    "run_matmuls",
    "run_step",
    "schedule",
    "with_epilogues",
]

# the steps of a graph that are not single nodes
STEPS = (Group, Cat, Matmuls, Horizontal, Epilogue)
_RUNS: dict[type, Callable] = {
    Group: run_group,
    Cat: run_cat,
    Matmuls: run_matmuls,
    Horizontal: run_horizontal,
    Epilogue: run_epilogue,
}


def run_step(run: Any, g: Any, env: dict) -> list[torch.Tensor]:
    """The stored values (``g.outputs``) of one of the :data:`STEPS` from the values ``env``
    of the graph; :class:`Guard` when its kernel does not apply (its parts or nodes then run on
    their own)."""
    return _RUNS[type(g)](run, g, env)


# --------------------------------------------------------------------------------------------
# Grouping (once per compiled graph)
# --------------------------------------------------------------------------------------------


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
    the graph's output comes last. A node that writes one of its operands (``copy_`` of an
    input mutation) keeps its place in graph order against every other step."""
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

    def edge(p: Any, u: Any) -> None:  # p before u
        if p is not u and id(p) not in preds.setdefault(id(u), set()):
            preds[id(u)].add(id(p))
            succs.setdefault(id(p), []).append(u)

    for n in nodes:
        for a in n.all_input_nodes:
            edge(unit[a], unit[n])
    for i, w in enumerate(nodes):
        if writes_operand(w):  # (a step reading the operand, or a view of it, must not pass it)
            for k, u in units.items():
                if first[k] < i:
                    edge(u, unit[w])
                else:
                    edge(unit[w], u)
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


def join_cats(groups: list[Group], cats: list[Cat]) -> list[Any]:
    """The groups and the cats, where a cat whose parts are stored values of one group and
    tensors that do not depend on it, along a dim whose rows are the group's (the dims between
    it and the last are 1: the new key of a decode step before the KV cache's cat), is the
    group's last step instead of a launch of its own."""
    out: list[Any] = list(groups)
    rest = []
    for c in cats:
        j = next((i for i, g in enumerate(out) if _joins(g, c)), None)
        if j is None:
            rest.append(c)
        else:
            out[j] = _with_cat(out[j], c)
    return out + rest


def _joins(g: Group, c: Cat) -> bool:
    n = c.members[0]
    d, full = cat_dim(n), g.full
    mine = [p for p in n.args[0] if p in g.outputs]
    if not mine or d == len(full) - 1 or any(s != 1 for s in full[d:-1]):
        return False
    if any(_key(p.meta["val"]) != full or g.rows[g.outputs.index(p)] is not None for p in mine):
        return False
    if not all(isinstance(s, int) for s in _key(n.meta["val"])[d + 1 :]):
        return False
    members = set(g.members)
    return not any(_reaches(members, p) for p in n.args[0] if p not in g.outputs)


def _reaches(members: set, a: torch.fx.Node) -> bool:
    """Whether ``a`` is one of ``members`` or depends on one."""
    seen, todo = set(), [a]
    while todo:
        x = todo.pop()
        if x in members:
            return True
        if x not in seen:
            seen.add(x)
            todo += x.all_input_nodes
    return False


def _with_cat(g: Group, c: Cat) -> Group:
    n = c.members[0]
    inputs, views = list(g.inputs), list(g.views or (False,) * len(g.inputs))
    refs = []
    for p in n.args[0]:
        if p in g.outputs:
            refs.append(("v", g.outs[g.outputs.index(p)]))
        else:
            inputs.append(p)
            views.append(True)
            refs.append(("in", len(inputs) - 1))
    program = g.program + (("cat", tuple(refs), c.program[0][2]),)
    members = g.members + [n]
    keep = [i for i, m in enumerate(g.outputs) if m.users.keys() - set(members)]
    d = cat_dim(n)
    return Group(
        members,
        g.full,
        program,
        outs=tuple(g.outs[i] for i in keep) + (len(program) - 1,),
        outputs=tuple(g.outputs[i] for i in keep) + (n,),
        inputs=tuple(inputs),
        shape=g.shape,
        shape_from=g.shape_from,
        rows=tuple(g.rows[i] for i in keep) + (("cat", d, _key(n.meta["val"])[d + 1 :]),),
        views=tuple(views),
        parts=(g, c),
    )
