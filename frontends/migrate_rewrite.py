"""The migration assistant's statement rewriter: one classic kernel function at a time.

Each simple statement that uses a classic-only construct (``nl.load`` / ``nl.store``, a
``nisa`` call that returns a new tile, ``nl.arange`` indices, ``mask=``, Python operators on
tiles, ``psum += matmul``) is replaced by its current-API statements; calls nested inside it
are hoisted into temporaries before it, in evaluation order. A statement the rewriter cannot
port raises :class:`Unsupported` with the reason, and stays as it was."""

from __future__ import annotations

import ast
import re
from typing import Protocol

from . import migrate_index as ix
from . import migrate_table as tbl
from .migrate_index import Ctx, Unsupported
from .migrate_isa import IsaCalls, bind_call, none


class Editor(Protocol):
    """What the rewriter needs from the file being migrated (``frontends.migrate.Source``)."""

    def seg(self, node: ast.AST) -> str: ...
    def qual(self, node: ast.AST) -> str | None: ...
    def alias(self, module: str) -> str: ...
    def replace(self, stmt: ast.stmt, lines: list[str]) -> None: ...
    def delete(self, stmt: ast.stmt) -> None: ...
    def note(self, line: int, what: str, reason: str, rewritten: bool = False) -> None: ...
    def indent_unit(self) -> str: ...


def _pure(text: str) -> bool:
    """Whether ``text`` can be repeated without running anything (a name, attribute or view)."""
    return re.fullmatch(r"[\w.]+(\[[^()]*\])?", text) is not None


_BROADCAST = (
    "written with dst=: if the value has fewer partitions or elements per partition than the "
    "target (classic assignment broadcast it), broadcast its source with a stride-0 view "
    "(.broadcast_to / .ap): the current API writes the result's own shape"
)


class Func(IsaCalls):
    """Rewrites the simple statements of one function (nested functions are their own)."""

    def __init__(self, src: Editor, fn: ast.FunctionDef, kernel: bool) -> None:
        self.src, self.fn, self.kernel = src, fn, kernel
        self.nl, self.nisa = src.alias("nl"), src.alias("nisa")
        self.axes = ix.Axes(self.seg, self.is_nl)
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
        # name -> buffer of the tile it holds ("sbuf", "psum", "hbm"); whole tensors for .ap
        self.tiles: dict[str, str] = {p: "hbm" for p in params} if kernel else {}
        self.bases: set[str] = set(params) if kernel else set()
        self.used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} | set(params)
        self.defs: dict[str, list[ast.Assign]] = {}  # arange / mgrid / predicate definitions
        self.replaced: dict[int, list[str]] = {}  # id(stmt) -> its new lines

    # ---- names --------------------------------------------------------------------------------
    def seg(self, node: ast.AST) -> str:
        """Source text of ``node``, parenthesised when it spans lines outside brackets (so it
        stays valid inside the one-line statements written here)."""
        text = self.src.seg(node)
        if "\n" in text and isinstance(node, ast.expr):
            if isinstance(node, ast.Tuple) and any(isinstance(e, ast.Slice) for e in node.elts):
                # (a subscript's index: no parentheses there; its lines joined into one)
                joined = re.sub(r"\s*\n\s*", " ", text)
                try:
                    ast.parse(f"_[{joined}]", mode="eval")
                    return joined
                except SyntaxError:
                    return text
            try:
                ast.parse(text, mode="eval")
            except SyntaxError:
                return f"({text})"
        return text

    def is_nl(self, node: ast.AST, name: str) -> bool:
        target = node.func if isinstance(node, ast.Call) else node
        return self.src.qual(target) == f"nl.{name}"

    def temp(self, hint: str) -> str:
        hint = re.sub(r"\W", "_", hint).strip("_") or "tile"
        name, k = hint, 1
        while name in self.used:
            k += 1
            name = f"{hint}_{k}"
        self.used.add(name)
        return name

    # ---- classification -----------------------------------------------------------------------
    def is_tile(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return self.tiles.get(node.id) in ("sbuf", "psum")
        if isinstance(node, ast.Subscript):
            return self.is_tile(node.value)
        if isinstance(node, ast.Call):
            q = self.src.qual(node.func) or ""
            if q.startswith("nl."):
                return q[3:] not in tbl.NOT_TILES
            return self.isa_name(node) is not None or self.astype(node)
        if isinstance(node, ast.BinOp):
            return self.is_tile(node.left) or self.is_tile(node.right)
        if isinstance(node, ast.UnaryOp):
            return self.is_tile(node.operand)
        return False

    def buffer_of(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.tiles.get(node.id)
        if isinstance(node, ast.Subscript):
            return self.buffer_of(node.value)
        if isinstance(node, ast.Call):
            q = self.src.qual(node.func) or ""
            if q.startswith("nl."):
                fn = q[3:]
                return None if fn in tbl.NOT_TILES else "psum" if fn in tbl.PSUM_RESULTS else "sbuf"
            name = self.isa_name(node)
            return "psum" if name in ("nc_matmul", "nc_transpose") else "sbuf" if name else None
        return "sbuf" if self.is_tile(node) else None

    def needs(self, node: ast.AST) -> bool:
        """Whether the expression uses a construct the current API does not have."""
        if isinstance(node, ast.Call):
            q = self.src.qual(node.func) or ""
            if q in ("nl.load", "nl.store") or self.isa_name(node) or self.astype(node):
                return True
            if q.startswith(("nl.", "nisa.")) and any(
                k.arg == "mask" and not none(k.value) for k in node.keywords
            ):
                return True
        if isinstance(node, ast.BinOp) and type(node.op).__name__ in tbl.BINOPS:
            if self.is_tile(node.left) or self.is_tile(node.right):
                return True
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            if self.is_tile(node.operand):
                return True
        if isinstance(node, ast.Subscript) and self.axes.mentions(node.slice):
            return True
        return any(self.needs(c) for c in ast.iter_child_nodes(node))

    # ---- the walk -----------------------------------------------------------------------------
    def run(self) -> None:
        self.block(self.fn.body)
        self.drop_definitions()

    def block(self, stmts: list[ast.stmt]) -> None:
        for s in stmts:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            bodies = [getattr(s, f, None) for f in ("body", "orelse", "finalbody")]
            if isinstance(s, ast.Try):
                bodies += [h.body for h in s.handlers]
            if any(isinstance(b, list) and b for b in bodies):
                for b in bodies:
                    if isinstance(b, list):
                        self.block(b)
                continue
            try:
                self.simple(s)
            except Unsupported as e:
                self.src.note(s.lineno, self.seg(s).splitlines()[0].strip(), str(e))

    def simple(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Assign) and len(s.targets) == 1:
            if self.axes.define(s.targets[0], s.value):
                for n in ast.walk(s.targets[0]):
                    if isinstance(n, ast.Name):
                        self.defs.setdefault(n.id, []).append(s)
                return
        for n in ast.walk(s):  # t.astype on a value not known to be a tile: left to a person
            f = n.func if isinstance(n, ast.Call) else None
            if isinstance(f, ast.Attribute) and f.attr == "astype" and not self.astype(n):
                if not (self.src.qual(f.value) or "").startswith("np"):
                    self.src.note(n.lineno, self.seg(n), tbl.TILE_METHODS["astype"])
        if not self.needs_statement(s):
            self.track(s)
            return
        for n in ast.walk(s):  # a name the current API lacks: the statement is a person's job
            q = self.src.qual(n) if isinstance(n, (ast.Attribute, ast.Name)) else None
            if (
                q
                and q.startswith("nl.")
                and q[3:] in tbl.GONE_NL
                and q[3:] not in ("arange", "mgrid")
                and id(n) not in self.src.dropped_par_dims
            ):
                raise Unsupported(tbl.GONE_NL[q[3:]])
            if (
                isinstance(n, ast.Attribute)
                and n.attr in tbl.TILE_METHODS
                and n.attr != "astype"
                and self.is_tile(n.value)
            ):
                raise Unsupported(tbl.TILE_METHODS[n.attr])
        ctx = Ctx()
        lines = self.statement(s, ctx)
        body = ctx.pre + lines
        if ctx.guards:
            unit = self.src.indent_unit()
            cond = " and ".join(
                f"({g})" if " or " in g and len(ctx.guards) > 1 else g for g in ctx.guards
            )
            body = [f"if {cond}:"] + [unit + line for line in body]
        try:
            ast.parse("\n".join(body))
        except SyntaxError as e:  # a layout the rewriter mangled: leave the statement alone
            raise Unsupported(f"the rewritten statement would not parse ({e.msg})") from None
        self.replaced[id(s)] = body
        self.src.replace(s, body)

    def needs_statement(self, s: ast.stmt) -> bool:
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
            if self.isa_name(s.value) and not self.classic_statement_call(s.value):
                return False  # already the current destination-first form
        if isinstance(s, ast.AugAssign) and self.tile_target(s.target) is not None:
            return True
        return self.needs(s)

    def tile_target(self, t: ast.AST) -> str | None:
        base = t.value if isinstance(t, ast.Subscript) else t
        return self.tiles.get(base.id) if isinstance(base, ast.Name) else None

    def track(self, s: ast.stmt) -> None:
        """Remember the tiles an untouched statement makes (``x = nl.zeros(..., psum)``, also
        annotated: ``r: nt.tensor[128, 128] = nl.matmul(...)``)."""
        if isinstance(s, ast.AnnAssign) and s.value is not None:
            t, v = s.target, s.value
        elif isinstance(s, ast.Assign) and len(s.targets) == 1:
            t, v = s.targets[0], s.value
        else:
            return
        if not isinstance(t, ast.Name):
            return
        self.tiles.pop(t.id, None)
        if isinstance(v, ast.Call):
            q = self.src.qual(v.func) or ""
            if q in ("nl.ndarray", "nl.zeros", "nl.ones", "nl.full", "nl.rand", "nl.empty_like"):
                buf = next((k.value for k in v.keywords if k.arg == "buffer"), None)
                qb = self.src.qual(buf) if buf is not None else "nl.sbuf"
                self.tiles[t.id] = {"nl.psum": "psum", "nl.sbuf": "sbuf"}.get(qb or "", "hbm")
                self.bases.add(t.id)
                return
        buf = self.buffer_of(v)
        if buf is not None:
            self.tiles[t.id] = buf

    # ---- statements ---------------------------------------------------------------------------
    def statement(self, s: ast.stmt, ctx: Ctx) -> list[str]:
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
            q = self.src.qual(s.value.func)
            if q == "nl.store":
                return [self.store(s.value, ctx)]
            if self.isa_name(s.value):
                return self.isa(s.value, ctx)
            return [self.expr(s.value, ctx)]
        if isinstance(s, ast.Assign) and len(s.targets) == 1:
            return self.assign(s.targets[0], s.value, ctx)
        if isinstance(s, ast.AugAssign):
            return self.augassign(s, ctx)
        if isinstance(s, ast.Return) and s.value is not None:
            return [f"return {self.expr(s.value, ctx)}"]
        raise Unsupported(f"a {type(s).__name__.lower()} statement with classic constructs")

    def assign(self, t: ast.AST, v: ast.AST, ctx: Ctx) -> list[str]:
        q = self.src.qual(v.func) if isinstance(v, ast.Call) else None
        counts = self.mask(v, ctx) if isinstance(v, ast.Call) else {}
        if isinstance(t, ast.Name):
            if q == "nl.load":
                return self.load(v, ctx, new=t.id)
            if self.isa_name(v):
                return self.isa(v, ctx, new=t.id)
            if self.astype(v):
                return self.cast(v, ctx, t.id)
            rhs = self.expr(v, ctx)
            buf = self.buffer_of(v)
            if buf is not None:
                self.tiles[t.id] = buf
            return [f"{t.id} = {rhs}"]
        if isinstance(t, ast.Subscript):
            dst = self.expr(t, ctx, counts)
            if q == "nl.load":
                return self.load(v, ctx, dst=dst)
            if self.isa_name(v) or self.is_tile(v):
                # (classic assignment broadcast a smaller value into the target; an instruction
                # writes its result's own shape, which the assistant cannot see)
                self.src.note(t.lineno, self.seg(t), _BROADCAST, rewritten=True)
            if self.isa_name(v):
                return self.isa(v, ctx, dst=dst, overwrite=True)
            if self.is_tile(v):
                return [f"{self.nisa}.tensor_copy(dst={dst}, src={self.operand(v, ctx, counts)})"]
            return [f"{dst} = {self.expr(v, ctx)}"]
        raise Unsupported("an assignment to several targets with classic constructs")

    def augassign(self, s: ast.AugAssign, ctx: Ctx) -> list[str]:
        op = type(s.op).__name__
        buf = self.tile_target(s.target)
        if buf is None:
            raise Unsupported(
                f"'{self.seg(s.target)}' is not known to be a tile here (a helper's parameter?): "
                "write the accumulation as a nisa call with dst="
            )
        if op not in tbl.AUGOPS:
            raise Unsupported(f"the operator {op} on a tile")
        dst = self.expr(s.target, ctx)
        v = s.value
        if buf == "psum" and op == "Add":
            if self.isa_name(v) == "nc_matmul":
                return self.isa(v, ctx, dst=dst)
            q = self.src.qual(v.func) if isinstance(v, ast.Call) else None
            if q == "nl.matmul":
                return [self.nl_matmul(v, dst, ctx)]
        if self.is_tile(v):
            data = self.operand(v, ctx)
            return [
                f"{self.nisa}.tensor_tensor(dst={dst}, data1={dst}, data2={data}, "
                f"op={self.nl}.{tbl.AUGOPS[op]})"
            ]
        return [
            f"{self.nisa}.tensor_scalar(dst={dst}, data={dst}, op0={self.nl}.{tbl.AUGOPS[op]}, "
            f"operand0={self.expr(v, ctx)})"
        ]

    def astype(self, node: ast.AST) -> bool:
        """``t.astype(dt)`` on a tile (a NumPy array's astype is left alone)."""
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "astype"
            and self.is_tile(node.func.value)
        )

    def cast(self, call: ast.Call, ctx: Ctx, new: str) -> list[str]:
        """``new = t.astype(dt)`` -> a tile of dtype dt and a ``nisa.tensor_copy`` into it."""
        args = bind_call(call, ("dtype",), "astype")
        assert isinstance(call.func, ast.Attribute)
        src = self.operand(call.func.value, ctx)
        self.tiles[new] = "sbuf"
        self.bases.add(new)
        return [
            self.alloc_line(new, f"{src}.shape", self.seg(args["dtype"]), "sbuf"),
            f"{self.nisa}.tensor_copy(dst={new}, src={src})",
        ]

    def mask(self, call: ast.Call, ctx: Ctx) -> dict[int, str]:
        """Counts of the masked axes of a call's ``mask=``; axis-free conditions become guards."""
        if id(call) not in ctx.masks:
            ctx.masks[id(call)] = self._mask(call, ctx)
        return ctx.masks[id(call)]

    def _mask(self, call: ast.Call, ctx: Ctx) -> dict[int, str]:
        node = next((k.value for k in call.keywords if k.arg == "mask"), None)
        if none(node):
            return {}
        assert node is not None
        if not self.axes.mentions(node):  # a condition Python decides: an `if`
            text = self.seg(node)
            guard = f"{text} is None or {text}" if isinstance(node, ast.Name) else text
            if guard not in ctx.guards:
                ctx.guards.append(guard)
            return {}
        conds = self.axes.pred(node)
        free = [c for c in conds if not c[0].axes and not c[2].axes]
        for left, op, right in free:
            guard = f"{left.offset()} {op} {right.offset()}"
            if guard not in ctx.guards:
                ctx.guards.append(guard)
        return ix.mask_counts([c for c in conds if c not in free])

    def load(self, call: ast.Call, ctx: Ctx, new: str | None = None, dst: str | None = None):
        args = bind_call(call, ("src", "mask", "dtype"), "nl.load")
        counts = self.mask(call, ctx)
        src, axes = self.access(args["src"], ctx, counts)
        node = args["src"]
        base = self.seg(node.value) if isinstance(node, ast.Subscript) else src
        dtype = self.seg(args["dtype"]) if "dtype" in args else f"{base}.dtype"
        lines = []
        if new is not None:
            if not axes and isinstance(node, ast.Subscript):
                items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
                slices = sum(isinstance(e, ast.Slice) for e in items)
                if slices < 2 and len(items) > slices:  # (an integer index leaves one axis)
                    raise Unsupported(
                        f"nl.load({self.seg(node)}): classic NKI keeps the integer-indexed axis "
                        "as size 1, the current API's view drops it (a 1-D tile): index it as "
                        "a slice, i:i+1"
                    )
            shape = ix.shape_text(axes, {}) if axes else f"{src}.shape"
            lines.append(
                f"{new} = {self.nl}.ndarray({shape}, dtype={dtype}, buffer={self.nl}.sbuf)"
            )
            self.tiles[new] = "sbuf"
            self.bases.add(new)
            dst = self.masked(new, counts)
        lines.append(f"{self.nisa}.dma_copy(dst={dst}, src={src})")
        return lines

    def store(self, call: ast.Call, ctx: Ctx) -> str:
        args = bind_call(call, ("dst", "value", "mask"), "nl.store")
        counts = self.mask(call, ctx)
        dst, _ = self.access(args["dst"], ctx, counts)
        value = args["value"]
        src = self.expr(value, ctx, counts)
        if self.buffer_of(value) == "psum":  # DMA cannot read PSUM: stage through SBUF
            src = self.operand(value, ctx, counts) if not _pure(src) else src
            staged = self.temp(f"{src.split('[')[0]}_sb")
            ctx.pre += [
                self.alloc_line(staged, f"{src}.shape", f"{src}.dtype", "sbuf"),
                f"{self.nisa}.tensor_copy(dst={staged}, src={src})",
            ]
            src = staged
        return f"{self.nisa}.dma_copy(dst={dst}, src={src})"

    def operand(self, node: ast.AST, ctx: Ctx, counts: dict[int, str] | None = None) -> str:
        """A tile operand: rendered, and hoisted into a temporary unless it is a plain view."""
        text = self.expr(node, ctx, counts)
        if _pure(text) or not self.is_tile(node):
            return text
        tmp = self.temp(f"{_hint(self.src, node)}_out")
        ctx.pre.append(f"{tmp} = {text}")
        self.tiles[tmp] = self.buffer_of(node) or "sbuf"
        return tmp

    def expr(self, node: ast.AST, ctx: Ctx, counts: dict[int, str] | None = None) -> str:
        counts = counts or {}
        if isinstance(node, ast.Name) and counts and self.is_tile(node):
            return self.masked(node.id, counts)
        masked = counts and any(isinstance(n, ast.Name) and self.is_tile(n) for n in ast.walk(node))
        if not self.needs(node) and not masked:
            return self.seg(node)
        if isinstance(node, ast.Call):
            q = self.src.qual(node.func) or ""
            if q == "nl.load":
                tmp = self.temp(f"{_base_name(node)}_tile")
                ctx.pre += self.load(node, ctx, new=tmp)
                return tmp
            if self.isa_name(node):
                tmp = self.temp(f"{self.isa_name(node)}_out")
                ctx.pre += self.isa(node, ctx, new=tmp)
                return tmp
            if self.astype(node):
                tmp = self.temp("astype_out")
                ctx.pre += self.cast(node, ctx, tmp)
                return tmp
            if q == "nl.store":
                raise Unsupported("nl.store used as a value")
            inner = {**counts, **self.mask(node, ctx)}
            args = [self.expr(a, ctx, inner) for a in node.args]
            kws = [
                f"{k.arg}={self.expr(k.value, ctx, inner)}" if k.arg else f"**{self.seg(k.value)}"
                for k in node.keywords
                if k.arg != "mask"
            ]
            return f"{self.expr(node.func, ctx)}({', '.join(args + kws)})"
        if isinstance(node, ast.BinOp) and (self.is_tile(node.left) or self.is_tile(node.right)):
            fn = tbl.BINOPS.get(type(node.op).__name__)
            if fn is None:
                raise Unsupported(f"the operator {type(node.op).__name__} on tiles")
            left, right = self.expr(node.left, ctx, counts), self.expr(node.right, ctx, counts)
            return f"{self.nl}.{fn}({left}, {right})"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return f"{self.nl}.negative({self.expr(node.operand, ctx, counts)})"
        if isinstance(node, ast.Subscript):
            return self.access(node, ctx, counts)[0]
        if isinstance(node, ast.Attribute):  # a method of a rewritten value
            return f"{ix.paren(self.expr(node.value, ctx, counts))}.{node.attr}"
        if isinstance(node, (ast.Tuple, ast.List)):
            items = ", ".join(self.expr(e, ctx, counts) for e in node.elts)
            return (
                f"({items},)"
                if isinstance(node, ast.Tuple) and len(node.elts) == 1
                else (f"({items})" if isinstance(node, ast.Tuple) else f"[{items}]")
            )
        raise Unsupported(f"'{self.seg(node)}' mixes classic constructs in a way not rewritten")

    def access(self, node: ast.AST, ctx: Ctx, counts: dict[int, str]) -> tuple[str, list]:
        """A tensor access: classic ``nl.arange`` keys become slices or ``.ap``; returns the text
        and the tile axes (empty for an access without axes)."""
        if not (isinstance(node, ast.Subscript) and self.axes.mentions(node.slice)):
            if counts and isinstance(node, ast.Subscript) and _whole(node) and self.is_tile(node):
                return self.masked(self.expr(node.value, ctx), counts), []
            if isinstance(node, ast.Subscript):
                return f"{self.expr(node.value, ctx)}[{self.seg(node.slice)}]", []
            return self.expr(node, ctx, counts), []
        keys = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        for k in keys:
            if isinstance(k, (ast.Slice, ast.Starred)) or (
                isinstance(k, ast.Constant) and k.value is Ellipsis
            ):
                raise Unsupported("slices or ... beside nl.arange indices in one subscript")
            if self.tile_index(k):
                raise Unsupported(
                    "an index tile in a subscript (indirect DMA): nisa.dma_copy with "
                    "src=x.ap(pattern, vector_offset=idx, indirect_dim=0)"
                )
        lins = [self.axes.lin(k) for k in keys]
        axes = ix.tile_axes(lins)
        base = self.seg(node.value)
        slices = ix.as_slices(lins, counts)
        if slices is not None:
            return f"{self.expr(node.value, ctx)}[{', '.join(slices)}]", axes
        if not (isinstance(node.value, ast.Name) and node.value.id in self.bases):
            raise Unsupported(
                f"a broadcast or transposed access of '{base}', which is not a whole tensor here: "
                "write it with .ap([[stride, count], ...]) over the tensor it views"
            )
        return ix.access_pattern(base, lins, counts), axes

    def tile_index(self, k: ast.AST) -> bool:
        return any(isinstance(n, ast.Subscript) and self.is_tile(n.value) for n in ast.walk(k)) or (
            isinstance(k, ast.Name) and self.tiles.get(k.id) in ("sbuf", "psum")
        )

    def masked(self, name: str, counts: dict[int, str]) -> str:
        """``name`` restricted to the leading elements a mask keeps along each masked axis; a
        free axis also to the operand's own size (a ``[P, 1]`` operand broadcast along a masked
        free axis keeps its one column)."""
        if not counts:
            return name
        dims: dict[int, str] = {}
        for i, count in counts.items():
            dims[self.axes.by_id[i].dim] = count
        if not dims:
            return name
        keys = [
            ":"
            if d not in dims
            else f"0:{dims[d]}"
            if d == 0
            else f"0:{_at_most(dims[d], name, d)}"
            for d in range(max(dims) + 1)
        ]
        return f"{name}[{', '.join(keys)}]"

    # ---- arange / mgrid definitions ----------------------------------------------------------
    def drop_definitions(self) -> None:
        """Delete the arange / mgrid / predicate definitions every use of which was rewritten;
        keep (and report) the others."""
        new_text = "\n".join(line for body in self.replaced.values() for line in body)
        kept = ix.still_used(self.fn, self.defs, set(self.replaced), new_text)
        for stmt in dict.fromkeys(d for stmts in self.defs.values() for d in stmts):
            names = [n.id for n in ast.walk(stmt.targets[0]) if isinstance(n, ast.Name)]
            if any(n in kept for n in names):
                self.src.note(
                    stmt.lineno,
                    self.seg(stmt).strip(),
                    "nl.arange / nl.mgrid are gone; this index is also used where the assistant "
                    "does not rewrite it (see the other lines reported): index with slices or "
                    ".ap(...)",
                )
            else:
                self.src.delete(stmt)


def _at_most(count: str, name: str, d: int) -> str:
    """``min(count, name.shape[d])``, folded into ``count`` when it is a ``min(...)`` already."""
    try:
        tree = ast.parse(count, mode="eval").body
    except SyntaxError:
        tree = None
    if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and tree.func.id == "min":
        return f"{count[:-1]}, {name}.shape[{d}])"
    return f"min({count}, {name}.shape[{d}])"


def _whole(node: ast.Subscript) -> bool:
    """``t[...]`` / ``t[:, :]``: the whole tile."""
    keys = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    return all(
        (isinstance(k, ast.Slice) and k.lower is k.upper is k.step is None)
        or (isinstance(k, ast.Constant) and k.value is Ellipsis)
        for k in keys
    )


def _hint(src: Editor, node: ast.AST) -> str:
    """A name for the temporary holding ``node``: its function or operator."""
    if isinstance(node, ast.Call):
        return (src.qual(node.func) or src.seg(node.func)).split(".")[-1]
    if isinstance(node, ast.BinOp):
        return tbl.BINOPS.get(type(node.op).__name__, "tile")
    return "tile"


def _base_name(call: ast.Call) -> str:
    node = call.args[0] if call.args else call.keywords[0].value
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else "tile"
