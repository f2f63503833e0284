"""Classic index expressions for the migration assistant (``frontends/migrate.py``).

A classic kernel builds tile indices from ``nl.arange`` / ``nl.mgrid`` axes: ``i_p =
nl.arange(128)[:, None]`` runs along tile dimension 0, ``t * 128 + i_p`` is that axis shifted
by an expression Python knows at trace time. Here such an expression is a :class:`Lin`: integer
coefficients on axes plus an axis-free offset kept as source text. From Lins this module writes
what the current API says instead: slices (``x[t * 128 : t * 128 + 128, 0:d]``), an access
pattern over the base tensor (``g.ap([[0, 128], [1, d]], offset=0)``) for broadcasts and
transposed reads, the ``pattern`` / ``channel_multiplier`` / ``offset`` of ``nisa.iota`` and
``nisa.affine_select``, and ``min()``-bounded counts for masks."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass

Seg = Callable[[ast.AST], str]  # source text of a node (with nested rewrites applied)


class Unsupported(Exception):
    """An index form the assistant does not rewrite; the message says why (for the report)."""


@dataclass(frozen=True)
class Axis:
    """One ``nl.arange`` / ``nl.mgrid`` axis: its extent (source text) and tile dimension."""

    id: int
    size: str
    dim: int
    ndim: int
    name: str


@dataclass(frozen=True)
class Lin:
    """``sum(coef * axis) + offset``: integer coefficients on axes (0 kept: ``i_p * 0`` still
    spans its tile dimension) and an axis-free offset as (multiplier, source text) terms."""

    coefs: tuple[tuple[Axis, int], ...] = ()
    terms: tuple[tuple[int, str], ...] = ()
    const: int = 0

    @property
    def axes(self) -> tuple[Axis, ...]:
        return tuple(a for a, _ in self.coefs)

    def coef(self, axis: Axis) -> int:
        return dict(self.coefs).get(axis, 0)

    def __add__(self, other: Lin) -> Lin:
        acc = dict(self.coefs)
        for a, c in other.coefs:
            acc[a] = acc.get(a, 0) + c
        coefs = tuple(sorted(acc.items(), key=lambda t: t[0].id))
        return Lin(coefs, self.terms + other.terms, self.const + other.const)

    def scale(self, k: int) -> Lin:
        return Lin(
            tuple((a, c * k) for a, c in self.coefs),
            tuple((m * k, t) for m, t in self.terms if m * k),
            self.const * k,
        )

    def offset(self) -> str:
        """The axis-free part as Python source (``"0"`` when there is none)."""
        out = ""
        for m, t in self.terms:
            text = t if m in (1, -1) else f"{abs(m)} * {paren(t)}"
            if m < 0 and not out:
                out = f"-{paren(t)}" if m == -1 else f"-{text}"
            else:
                out += text if not out else f" {'-' if m < 0 else '+'} {text}"
        if self.const or not out:
            c = self.const
            out = str(c) if not out else f"{out} {'-' if c < 0 else '+'} {abs(c)}"
        return out


def paren(text: str, loose: tuple[type, ...] = ()) -> str:
    """``text`` in parentheses unless it is an atom (a name, call, subscript, number) or a
    binary operation of one of the ``loose`` kinds."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return f"({text})"
    atom = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)
    if isinstance(node, atom) or (isinstance(node, ast.BinOp) and isinstance(node.op, loose)):
        return text
    return f"({text})"


def plus(a: str, b: str) -> str:
    """``a + b`` as source, dropping a zero."""
    if a == "0":
        return b
    if b == "0":
        return a
    if b.startswith("-"):
        return f"{a} - {paren(b[1:], (ast.Mult, ast.FloorDiv))}"
    return f"{a} + {paren(b, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv))}"


def minus(a: str, b: str) -> str:
    """``a - b`` as source, dropping a zero."""
    return a if b == "0" else f"{a} - {paren(b, (ast.Mult, ast.FloorDiv))}"


# ---- building Lins from the AST ----------------------------------------------------------------
def _int(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _int(node.operand)
        return None if v is None else -v
    return None


class Axes:
    """The arange / mgrid axes of one function: names bound to Lins, predicates and masks."""

    def __init__(self, seg: Seg, is_nl: Callable[[ast.AST, str], bool]) -> None:
        self.seg = seg
        self.is_nl = is_nl  # is_nl(node, "arange"): node is nl.arange under the file's alias
        self.names: dict[str, Lin] = {}
        self.preds: dict[str, list[tuple[Lin, str, Lin]]] = {}
        self.by_id: dict[int, Axis] = {}

    def mentions(self, node: ast.AST) -> bool:
        """Whether ``node`` uses an axis (a bound name, ``nl.arange`` or ``nl.mgrid``)."""
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and (n.id in self.names or n.id in self.preds):
                return True
            if self.is_nl(n, "arange") or self.is_nl(n, "mgrid"):
                return True
        return False

    def _axis(self, size: str, dim: int, ndim: int, name: str) -> Axis:
        axis = Axis(len(self.by_id) + 1, size, dim, ndim, name)
        self.by_id[axis.id] = axis
        return axis

    def define(self, target: ast.AST, value: ast.AST) -> bool:
        """Record ``target = value`` when ``value`` is an index expression or predicate over
        axes; False when it is not one (the statement is ordinary code)."""
        if isinstance(target, ast.Tuple) and _is_call_sub(value, self.is_nl, "mgrid"):
            sizes = self._mgrid(value)
            names = [t.id for t in target.elts if isinstance(t, ast.Name)]
            if len(names) != len(target.elts) or len(names) != len(sizes):
                raise Unsupported("nl.mgrid unpacked into other than one name per axis")
            for d, ((start, size), name) in enumerate(zip(sizes, names)):
                lin = Lin(((self._axis(size, d, len(names), name), 1),))
                self.names[name] = lin + (Lin(terms=((1, start),)) if start != "0" else Lin())
            return True
        if not isinstance(target, ast.Name) or not self.mentions(value):
            return False
        if not self._index_like(value):  # code using an index (nl.load(x[i_p, i_f]))
            return False
        if isinstance(value, (ast.Compare, ast.BinOp)) and _is_pred(value):
            self.preds[target.id] = self.pred(value)
            return True
        self.names[target.id] = self.lin(value, target.id)
        return True

    def _index_like(self, node: ast.AST) -> bool:
        """Arithmetic and comparisons of axes and Python values, no tile in sight."""
        for n in ast.walk(node):
            if isinstance(n, ast.Subscript) and not self.is_nl(n.value, "arange"):
                if self.mentions(n):
                    return False
            if isinstance(n, ast.Call) and not self.is_nl(n, "arange") and self.mentions(n):
                return False
        return True

    def _mgrid(self, node: ast.Subscript) -> list[tuple[str, str]]:
        keys = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        out = []
        for k in keys:
            if not isinstance(k, ast.Slice) or k.upper is None or k.step is not None:
                raise Unsupported("nl.mgrid with other than start:stop slices")
            start = "0" if k.lower is None else self.seg(k.lower)
            stop = self.seg(k.upper)
            out.append((start, stop if start == "0" else f"{paren(stop)} - {paren(start)}"))
        return out

    def lin(self, node: ast.AST, name: str = "") -> Lin:
        """The Lin of an index expression (raises Unsupported for a non-affine one)."""
        if isinstance(node, ast.Name) and node.id in self.names:
            return self.names[node.id]
        if not self.mentions(node):
            v = _int(node)
            return Lin(const=v) if v is not None else Lin(terms=((1, self.seg(node)),))
        if isinstance(node, ast.Subscript) and self.is_nl(node.value, "arange"):
            return self._arange(node, name)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            right = self.lin(node.right, name)
            return self.lin(node.left, name) + (
                right if isinstance(node.op, ast.Add) else right.scale(-1)
            )
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            for a, b in ((node.left, node.right), (node.right, node.left)):
                k = _int(b)
                if k is not None:
                    return self.lin(a, name).scale(k)
            raise Unsupported(
                f"'{self.seg(node)}' multiplies an nl.arange axis by a value that is not an "
                f"integer literal"
            )
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return self.lin(node.operand, name).scale(-1)
        raise Unsupported(f"'{self.seg(node)}' is not an affine index expression")

    def _arange(self, node: ast.Subscript, name: str) -> Lin:
        call = node.value
        assert isinstance(call, ast.Call)
        if len(call.args) != 1 or call.keywords:
            raise Unsupported("nl.arange with a start or step")
        keys = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        full = [i for i, k in enumerate(keys) if isinstance(k, ast.Slice)]
        if len(full) != 1 or any(
            not (isinstance(k, ast.Constant) and k.value is None)
            for k in keys
            if k is not keys[full[0]]
        ):
            raise Unsupported("nl.arange indexed other than [:, None] / [None, :]")
        axis = self._axis(self.seg(call.args[0]), full[0], len(keys), name or "arange")
        return Lin(((axis, 1),))

    def pred(self, node: ast.AST) -> list[tuple[Lin, str, Lin]]:
        """A predicate as (left, op, right) comparisons joined by ``&``."""
        if isinstance(node, ast.Name) and node.id in self.preds:
            return self.preds[node.id]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd):
            return self.pred(node.left) + self.pred(node.right)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            op = _CMP.get(type(node.ops[0]))
            if op is not None:
                return [(self.lin(node.left), op, self.lin(node.comparators[0]))]
        raise Unsupported(f"'{self.seg(node)}' is not a comparison of index expressions")


_CMP = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
CMP_OPS = {
    ">=": "greater_equal", ">": "greater", "<=": "less_equal", "<": "less", "==": "equal",
    "!=": "not_equal",
}  # fmt: skip


def _is_pred(node: ast.AST) -> bool:
    if isinstance(node, ast.Compare):
        return True
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd)


def _is_call_sub(node: ast.AST, is_nl: Callable[[ast.AST, str], bool], name: str) -> bool:
    return isinstance(node, ast.Subscript) and is_nl(node.value, name)


# ---- what the current API writes ---------------------------------------------------------------
def tile_axes(lins: list[Lin]) -> list[Axis]:
    """The axes of a classic tile indexed by ``lins``, in tile-dimension order."""
    seen: dict[int, Axis] = {}
    for lin in lins:
        for a in lin.axes:
            seen.setdefault(a.id, a)
    axes = sorted(seen.values(), key=lambda a: a.dim)
    if len({a.dim for a in axes}) != len(axes):
        raise Unsupported("two nl.arange axes run along the same tile dimension")
    return axes


def shape_text(axes: list[Axis], counts: dict[int, str]) -> str:
    sizes = [counts.get(a.id, a.size) for a in axes]
    return f"({sizes[0]},)" if len(sizes) == 1 else f"({', '.join(sizes)})"


def slice_key(lin: Lin, count: str) -> str:
    """``off : off + count`` (step ``c`` for a coefficient ``c`` > 1)."""
    ((axis, c),) = lin.coefs
    off = lin.offset()
    if c == 1:
        return f"{off} : {plus(off, count)}" if off != "0" else f"0:{count}"
    stop = plus(off, f"{c} * ({count} - 1) + 1")
    return f"{off} : {stop} : {c}"


def as_slices(lins: list[Lin], counts: dict[int, str]) -> list[str] | None:
    """Subscript keys as slices when each axis is one key of its own with a positive
    coefficient, in tile-dimension order (else None: the access needs ``.ap``)."""
    keyed = [lin for lin in lins if lin.axes]
    axes = tile_axes(lins)
    if any(len(lin.coefs) != 1 or lin.coefs[0][1] <= 0 for lin in keyed):
        return None
    if [lin.axes[0] for lin in keyed] != axes:
        return None
    return [
        slice_key(lin, counts.get(lin.axes[0].id, lin.axes[0].size)) if lin.axes else lin.offset()
        for lin in lins
    ]


def access_pattern(base: str, lins: list[Lin], counts: dict[int, str]) -> str:
    """``base.ap([[stride, count], ...], offset=...)`` reading the classic tile: strides in
    elements of ``base``'s row-major layout (``base`` must be a whole tensor, not a view)."""
    n = len(lins)
    strides = ["1" if k == n - 1 else " * ".join(f"{base}.shape[{j}]" for j in range(k + 1, n))
               for k in range(n)]  # fmt: skip
    pattern = []
    for a in tile_axes(lins):
        parts = [_times(lin.coef(a), strides[k]) for k, lin in enumerate(lins) if lin.coef(a)]
        pattern.append(f"[{' + '.join(parts) or '0'}, {counts.get(a.id, a.size)}]")
    offset = "0"
    for k, lin in enumerate(lins):
        off = lin.offset()
        if off != "0":
            offset = plus(offset, off if strides[k] == "1" else f"({off}) * {strides[k]}")
    return f"{base}.ap([{', '.join(pattern)}], offset={offset})"


def _times(c: int, stride: str) -> str:
    if stride == "1":
        return str(c)
    return stride if c == 1 else f"-{stride}" if c == -1 else f"{c} * {stride}"


def affine_value(lin: Lin) -> tuple[str, str, str]:
    """``(pattern, channel_multiplier, offset)`` of ``nisa.iota`` / ``nisa.affine_select``
    computing ``lin`` over a [partition, free...] tile."""
    axes = tile_axes([lin])
    if not axes or axes[0].dim != 0 or axes[0].ndim < 2:
        raise Unsupported("the expression has no partition axis (an nl.arange along dim 0)")
    part, free = axes[0], axes[1:]
    if not free:
        raise Unsupported("the expression has no free axis")
    pattern = ", ".join(f"[{lin.coef(a)}, {a.size}]" for a in free)
    return f"[{pattern}]", str(lin.coef(part)), lin.offset()


def mask_counts(conds: list[tuple[Lin, str, Lin]]) -> dict[int, str]:
    """Per masked axis, how many leading elements the mask keeps (``min(N, bound)``): each
    condition bounds one axis (coefficient 1) from above."""
    bounds: dict[int, list[str]] = {}
    axes: dict[int, Axis] = {}
    for left, op, right in conds:
        if op in (">", ">="):
            left, right, op = right, left, {">": "<", ">=": "<="}[op]
        if op not in ("<", "<=") or right.axes or len(left.coefs) != 1 or left.coefs[0][1] != 1:
            raise Unsupported(
                "the mask is not an upper bound on one nl.arange axis (i + offset < bound)"
            )
        axis = left.axes[0]
        bound = plus(right.offset(), "1") if op == "<=" else right.offset()
        off = left.offset()
        rest = minus(bound, off)
        axes[axis.id] = axis
        bounds.setdefault(axis.id, []).append(rest)
    return {i: f"min({axes[i].size}, {', '.join(b)})" for i, b in bounds.items()}


# ---- definitions still in use -----------------------------------------------------------------
def still_used(
    fn: ast.FunctionDef, defs: dict[str, list[ast.Assign]], rewritten: set[int], new_text: str
) -> set[str]:
    """The index names of ``defs`` that code not rewritten still reads (a statement left as it
    was, a nested function's closure, a rewritten statement that kept the name), with the
    names their definitions are built from."""
    own = {id(d) for stmts in defs.values() for d in stmts}
    kept = {
        n.id
        for n, stmt in _loads(fn)
        if n.id in defs and (stmt is None or (id(stmt) not in own and id(stmt) not in rewritten))
    }
    kept |= {d for d in defs if re.search(rf"\b{re.escape(d)}\b", new_text)}
    todo = list(kept)
    while todo:  # a kept definition keeps the names it is built from
        for stmt in defs[todo.pop()]:
            for n in ast.walk(stmt.value):
                if isinstance(n, ast.Name) and n.id in defs and n.id not in kept:
                    kept.add(n.id)
                    todo.append(n.id)
    return kept


def _loads(fn: ast.FunctionDef) -> list[tuple[ast.Name, ast.stmt | None]]:
    """Each name ``fn`` reads with the simple statement reading it; None for a nested
    function's free variable (the nested function's own names are its business)."""
    out: list[tuple[ast.Name, ast.stmt | None]] = []

    def visit(node: ast.AST, stmt: ast.stmt | None, nested: ast.AST | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, None, child)
                continue
            here = child if isinstance(child, ast.stmt) and not _compound(child) else stmt
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
                if nested is None:
                    out.append((child, stmt))
                elif child.id not in _assigned(nested):
                    out.append((child, None))
            visit(child, here, nested)

    visit(fn, None, None)
    return out


def _compound(s: ast.stmt) -> bool:
    return any(isinstance(getattr(s, f, None), list) for f in ("body", "orelse", "handlers"))


def _assigned(fn: ast.AST) -> set[str]:
    names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    args = getattr(fn, "args", None)
    if args is not None:
        names |= {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    return names


class Ctx:
    """One statement being rewritten: hoisted statements, guards from axis-free masks."""

    def __init__(self) -> None:
        self.pre: list[str] = []
        self.guards: list[str] = []
        self.masks: dict[int, dict[int, str]] = {}  # id(call) -> its mask's counts
