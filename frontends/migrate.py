"""The migration assistant: classic NKI source (``neuronxcc.nki``, SDK 2.19-2.26) to the current
API (``import nki``, NKI 0.3+).

``nki-compat --migrate file.py`` prints a unified diff that rewrites every classic construct
with a mechanical current-API equivalent, then lists, with line numbers, what a person has to
port and why. Only the statements that change are touched: the rest of the file is kept byte
for byte (positions come from ``ast``). Exit status: 0 when nothing is left for a person, 1
when something is, 2 when the file cannot be read or parsed.

What is rewritten (see docs/guides/porting.md): imports; ``nl.load`` / ``nl.store`` ->
``nl.ndarray`` + ``nisa.dma_copy`` (PSUM staged through SBUF); ``nl.arange`` / ``nl.mgrid``
indices -> slices, or ``.ap(...)`` for broadcasts and transposed reads; ``mask=`` upper
bounds -> ``min()``-bounded slices, masks without tile indices -> ``if``; ``nisa`` calls that
return a tile -> an ``nl.ndarray`` allocation (shape, dtype and buffer by the classic result
rules) and the destination-first call; ``psum += nc_matmul(...)`` -> ``nc_matmul(dst=psum,
...)``; ``+=`` and Python operators on tiles -> ``nisa.tensor_tensor`` / ``tensor_scalar`` /
``nl.add``...; NumPy ops -> ``nl`` ops; ``nisa.iota`` / ``affine_select`` expressions ->
patterns; ``dst_rmw_op`` -> ``nisa.dma_compute``; ``nl.affine_range`` & co. -> ``range``;
``buffer='sbuf'`` strings; ``nl.hbm`` outputs -> ``nl.shared_hbm``; ``nt.mutable_tensor``
annotations; ``nki.jit(mode=..., platform_target=...)``, ``nki.baremetal``,
``nki.simulate_kernel``."""

from __future__ import annotations

import ast
import difflib
import re
import sys
from dataclasses import dataclass

from . import migrate_table as tbl
from .migrate_index import Unsupported
from .migrate_rewrite import Func

__all__ = ["Migration", "MigrationError", "Note", "main", "migrate_file", "migrate_source"]

_CANONICAL = {
    "nki.language": "nl", "nki.isa": "nisa", "nki": "nki", "numpy": "np", "nki.typing": "nt",
    "nki.compiler": "ncc",
}  # fmt: skip
_IMPORTS = {"nl": "import nki.language as nl", "nisa": "import nki.isa as nisa"}
_KERNEL_DECORATORS = ("nki.jit", "nki.baremetal", "nki.benchmark", "nki.profile")


@dataclass(frozen=True)
class Note:
    """One line of the report: a construct left for a person (``rewritten=False``) or a
    rewrite to check."""

    line: int
    what: str
    reason: str
    rewritten: bool = False


@dataclass(frozen=True)
class Migration:
    """The result of migrating one file."""

    path: str
    old: str
    new: str
    notes: tuple[Note, ...]

    @property
    def manual(self) -> tuple[Note, ...]:
        return tuple(n for n in self.notes if not n.rewritten)

    def diff(self) -> str:
        """The unified diff from the classic source to the current-API one."""
        return "".join(
            difflib.unified_diff(
                self.old.splitlines(keepends=True),
                self.new.splitlines(keepends=True),
                fromfile=self.path,
                tofile=f"{self.path} (current API)",
            )
        )

    def report(self) -> str:
        """``path:line: needs a human: construct: reason`` (or ``check:``), one per note."""
        return "".join(
            f"{self.path}:{n.line}: {'check' if n.rewritten else 'needs a human'}: "
            f"{n.what}: {n.reason}\n"
            for n in self.notes
        )


class MigrationError(Exception):
    """The file cannot be migrated at all (unreadable, not Python)."""


class Names:
    """What the file's imports bind: local name -> canonical (``nl``, ``nisa``, ``nl.par_dim``)."""

    def __init__(self, tree: ast.Module) -> None:
        self.local: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    mod = _current_module(a.name)
                    if a.asname:
                        self.local[a.asname] = _CANONICAL.get(mod, mod)
                    else:
                        head = mod.split(".")[0]
                        self.local[head] = _CANONICAL.get(head, head)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                mod = _current_module(node.module)
                for a in node.names:
                    full = _current_module(f"{node.module}.{a.name}")
                    if full in _CANONICAL:
                        self.local[a.asname or a.name] = _CANONICAL[full]
                    elif mod in _CANONICAL:
                        self.local[a.asname or a.name] = f"{_CANONICAL[mod]}.{a.name}"

    def qual(self, node: ast.AST) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.local:
            return None
        dotted = ".".join([self.local[node.id], *reversed(parts)])
        for mod, short in _CANONICAL.items():
            if dotted.startswith(mod + ".") and mod != "nki":
                return short + dotted[len(mod) :]
        return dotted

    def alias(self, canonical: str) -> str | None:
        return next((k for k, v in self.local.items() if v == canonical), None)


def _current_module(name: str) -> str:
    for old, new in tbl.MODULES:
        if name == old or name.startswith(old + "."):
            return new + name[len(old) :]
    return "nki" if name == "neuronxcc.nki" else name


class Source:
    """The file being migrated: byte positions of nodes, expression edits, replaced lines."""

    def __init__(self, text: str, tree: ast.Module) -> None:
        self.text, self.data = text, text.encode()
        self.starts = [0] + [m.end() for m in re.finditer(rb"\n", self.data)]
        self.edits: dict[tuple[int, int], str] = {}
        self.lines: dict[tuple[int, int], str] = {}
        self.notes: dict[tuple[int, str], Note] = {}
        self.names = Names(tree)
        # the ``nl.par_dim`` names of partition dimensions written first in a shape, which the
        # migration drops (``(nl.par_dim(128), 512)`` is ``(128, 512)``): id of a name -> its call
        self.dropped_par_dims: dict[int, ast.Call] = {
            id(e.func): e
            for t in ast.walk(tree)
            if isinstance(t, (ast.Tuple, ast.List)) and t.elts
            for e in t.elts[:1]
            if isinstance(e, ast.Call) and len(e.args) == 1 and not e.keywords
            and self.names.qual(e.func) == "nl.par_dim"
        }  # fmt: skip
        widths = [s.col_offset for s in ast.walk(tree) if isinstance(s, ast.stmt) and s.col_offset]
        self.unit = " " * (min(widths) if widths else 4)

    # ---- the Editor protocol of frontends.migrate_rewrite -----------------------------------
    def seg(self, node: ast.AST) -> str:
        s, e = self.span(node)
        out, pos = [], s
        for (a, b), text in sorted(self.edits.items()):
            if s <= a and b <= e and a >= pos:
                out += [self.data[pos:a].decode(), text]
                pos = b
        out.append(self.data[pos:e].decode())
        return "".join(out)

    def qual(self, node: ast.AST) -> str | None:
        return self.names.qual(node)

    def alias(self, module: str) -> str:
        return self.names.alias(module) or module

    def replace(self, stmt: ast.stmt, lines: list[str]) -> None:
        start, end, indent, comment = self._line_span(stmt)
        body = [indent + line for line in lines]
        if comment:
            body[-1] += f"  {comment}"
        newline = "\n" if self.data[:end].endswith(b"\n") else ""
        self.lines[(start, end)] = "\n".join(body) + newline

    def delete(self, stmt: ast.stmt) -> None:
        start, end, _, _ = self._line_span(stmt)
        self.lines[(start, end)] = ""

    def note(self, line: int, what: str, reason: str, rewritten: bool = False) -> None:
        self.notes.setdefault((line, reason), Note(line, what, reason, rewritten))

    def indent_unit(self) -> str:
        return self.unit

    # ---- positions ----------------------------------------------------------------------------
    def span(self, node: ast.AST) -> tuple[int, int]:
        n: ast.expr = node  # type: ignore[assignment]
        s = self.starts[n.lineno - 1] + n.col_offset
        return s, self.starts[n.end_lineno - 1] + n.end_col_offset  # type: ignore[operator]

    def _line_span(self, stmt: ast.stmt) -> tuple[int, int, str, str]:
        s, e = self.span(stmt)
        start = self.starts[stmt.lineno - 1]
        end = self.starts[stmt.end_lineno] if stmt.end_lineno < len(self.starts) else len(self.data)  # type: ignore[operator]
        indent = self.data[start:s].decode()
        tail = self.data[e:end].decode().strip()
        if indent.strip() or (tail and not tail.startswith("#")):
            raise Unsupported("the statement shares its line with another one")
        return start, end, indent, tail

    def edit(self, node: ast.AST, text: str) -> None:
        self.edits[self.span(node)] = text

    def render(self) -> str:
        out, pos = [], 0
        replaced = sorted(self.lines.items())
        edits = [
            (span, t)
            for span, t in self.edits.items()
            if not any(a <= span[0] and span[1] <= b for (a, b), _ in replaced)
        ]
        for (a, b), text in sorted(replaced + edits):
            if a < pos:
                continue
            out += [self.data[pos:a].decode(), text]
            pos = b
        out.append(self.data[pos:].decode())
        return "".join(out)


def migrate_source(text: str, path: str = "<source>") -> Migration:
    """Migrate classic NKI source text (raises :class:`MigrationError` when it is not Python)."""
    try:
        tree = ast.parse(text, path)
    except SyntaxError as e:
        raise MigrationError(
            f"{path}:{e.lineno}:{e.offset}: syntax error: {e.msg} (the file must be valid Python "
            "to be migrated)"
        ) from None
    src = Source(text, tree)
    _File(src, tree).run()
    _add_imports(src, tree)
    new = src.render()
    notes = tuple(sorted(src.notes.values(), key=lambda n: (n.line, n.rewritten, n.what)))
    return Migration(path, text, new, notes)


def migrate_file(path: str) -> Migration:
    """Read and migrate one file (raises :class:`MigrationError` when it cannot)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise MigrationError(f"cannot read {path!r}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise MigrationError(f"cannot read {path!r}: not UTF-8 text ({e.reason})") from None
    return migrate_source(text, path)


class _File:
    """The file-level part: imports, decorators, launches, names that are gone, functions."""

    def __init__(self, src: Source, tree: ast.Module) -> None:
        self.src, self.tree = src, tree
        self.kernels: set[str] = set()

    def run(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.imports(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.decorators(node)
        nki_nodes: set[int] = set()
        for fn in ast.walk(self.tree):
            if isinstance(fn, ast.FunctionDef) and self.uses_nki(fn):
                nki_nodes |= {id(n) for n in ast.walk(fn)}
        for node in ast.walk(self.tree):
            self.expression(node, id(node) in nki_nodes)
        for fn in ast.walk(self.tree):
            if isinstance(fn, ast.FunctionDef) and self.uses_nki(fn):
                self.outputs(fn)
                Func(self.src, fn, fn.name in self.kernels).run()

    def uses_nki(self, fn: ast.FunctionDef) -> bool:
        return fn.name in self.kernels or any(
            (self.src.qual(n) or "").startswith(("nl.", "nisa."))
            for n in ast.walk(fn)
            if isinstance(n, ast.Attribute)
        )

    def imports(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
            if not any(n.startswith("neuronxcc") for n in names):
                return
            parts = [
                _current_module(a.name)
                + (f" as {a.asname}" if a.asname and a.asname != _current_module(a.name) else "")
                for a in node.names
            ]
            self.src.edit(node, f"import {', '.join(parts)}")
        elif node.module and node.module.startswith("neuronxcc") and not node.level:
            full = [_current_module(f"{node.module}.{a.name}") for a in node.names]
            if node.module == "neuronxcc" and all(f == "nki" for f in full):
                self.src.edit(
                    node,
                    "import "
                    + ", ".join(
                        "nki" + (f" as {a.asname}" if a.asname else "") for a in node.names
                    ),
                )
                return
            names = [a for a in node.names if not self.dropped_import(node, a)]
            if not names:  # (par_dim only, every use of it dropped)
                self.src.delete(node)
                return
            text = self.src.seg(node)
            if len(names) < len(node.names):
                shown = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in names)
                text = f"from {node.module} import {shown}"
            self.src.edit(node, text.replace(node.module, _current_module(node.module), 1))
            for a in names:
                reason = tbl.GONE_NL.get(a.name) if node.module.endswith("language") else None
                if reason:
                    self.src.note(node.lineno, f"import of {a.name}", reason)

    def dropped_import(self, node: ast.ImportFrom, a: ast.alias) -> bool:
        """An imported ``par_dim`` whose every use the migration drops (a leading partition
        dimension in a shape): the import goes too."""
        if a.name != "par_dim" or not (node.module or "").endswith("language"):
            return False
        local = a.asname or a.name
        uses = [n for n in ast.walk(self.tree) if isinstance(n, ast.Name) and n.id == local]
        return all(id(n) in self.src.dropped_par_dims for n in uses)

    def decorators(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for d in fn.decorator_list:
            call = d if isinstance(d, ast.Call) else None
            q = self.src.qual(call.func if call else d)
            if q not in _KERNEL_DECORATORS:
                continue
            mode = next((k.value for k in call.keywords if k.arg == "mode"), None) if call else None
            if isinstance(mode, ast.Constant) and mode.value == "trace":
                # a classic sub-kernel: a plain function called from the kernel
                start = self.src.starts[d.lineno - 1]
                self.src.lines[(start, self.src.starts[d.end_lineno])] = ""  # type: ignore[index]
                continue
            self.kernels.add(fn.name)
            keep = [
                self.src.seg(k)
                for k in (call.keywords if call else [])
                if k.arg not in ("mode", "platform_target")
            ]
            jit = f"{self.src.names.alias('nki') or 'nki'}.jit"
            if q != "nki.jit" or (call and len(keep) != len(call.keywords)) or call and call.args:
                self.src.edit(d, f"{jit}({', '.join(keep)})" if keep else jit)

    def expression(self, node: ast.AST, in_kernel: bool) -> None:
        q = self.src.qual(node) if isinstance(node, (ast.Attribute, ast.Name)) else None
        if q and q.startswith("nl.") and q[3:] in tbl.LOOPS:
            self.src.edit(node, "range")
        elif id(node) in self.src.dropped_par_dims:
            call = self.src.dropped_par_dims[id(node)]
            self.src.edit(call, self.src.seg(call.args[0]))
        elif (
            q and q.startswith("nl.") and q[3:] in tbl.GONE_NL and q[3:] not in ("arange", "mgrid")
        ):
            self.src.note(node.lineno, q, tbl.GONE_NL[q[3:]])
        elif q and q.startswith("nisa.") and q[5:] in tbl.GONE_ISA:
            self.src.note(node.lineno, q, tbl.GONE_ISA[q[5:]])
        elif q and q.startswith("ncc."):
            self.src.note(
                node.lineno, q.replace("ncc.", "nki.compiler.", 1),
                "direct allocation is nl.ndarray(..., address=(partition, byte offset)) in the "
                "current API (PSUM on 2 KiB bank boundaries)",
            )  # fmt: skip
        if isinstance(node, ast.keyword) and node.arg == "buffer":
            v = node.value
            if isinstance(v, ast.Constant) and v.value in ("sbuf", "psum", "hbm", "shared_hbm"):
                self.src.edit(v, f"{self.src.alias('nl')}.{v.value}")
        if isinstance(node, ast.arg) and node.annotation is not None:
            if self.src.qual(node.annotation) == "nt.mutable_tensor":
                self.src.edit(node, node.arg)  # current kernels may write their inputs
        if isinstance(node, ast.Call):
            self.call(node, in_kernel)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            if node.value.id in self.kernels and isinstance(node.ctx, ast.Load):
                self.src.note(node.lineno, self.src.seg(node), tbl.LAUNCH)

    def call(self, node: ast.Call, in_kernel: bool) -> None:
        q = self.src.qual(node.func) or ""
        if q in ("nl.program_id", "nl.num_programs", "nl.program_ndim") and in_kernel:
            self.src.note(node.lineno, self.src.seg(node), tbl.GRID)
        elif q == "nki.simulate_kernel" and node.args:
            rest = ", ".join(self.src.seg(a) for a in node.args[1:] + node.keywords)
            self.src.edit(node, f"nki.simulate({self.src.seg(node.args[0])})({rest})")
        elif q == "nki.baremetal" and node.args:
            self.src.edit(node, self.src.seg(node.args[0]))
        if (
            in_kernel
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in tbl.TILE_METHODS
            and node.func.attr != "astype"  # rewritten on tiles (frontends.migrate_rewrite)
        ):
            if not (self.src.qual(node.func.value) or "").startswith("np"):
                self.src.note(node.lineno, self.src.seg(node), tbl.TILE_METHODS[node.func.attr])

    def outputs(self, fn: ast.FunctionDef) -> None:
        """``nl.ndarray(..., buffer=nl.hbm)`` a kernel returns -> ``nl.shared_hbm``."""
        returned = set()
        for r in ast.walk(fn):
            if isinstance(r, ast.Return) and r.value is not None:
                elts = r.value.elts if isinstance(r.value, ast.Tuple) else [r.value]
                returned |= {e.id for e in elts if isinstance(e, ast.Name)}
        for a in ast.walk(fn):
            if not (isinstance(a, ast.Assign) and isinstance(a.value, ast.Call)):
                continue
            names = [t.id for t in a.targets if isinstance(t, ast.Name)]
            if self.src.qual(a.value.func) != "nl.ndarray" or not set(names) & returned:
                continue
            for k in a.value.keywords:
                if k.arg == "buffer" and self.src.qual(k.value) in ("nl.hbm", "nl.private_hbm"):
                    self.src.edit(k.value, f"{self.src.alias('nl')}.shared_hbm")


def _add_imports(src: Source, tree: ast.Module) -> None:
    """``import nki.isa as nisa`` (and nl) after the last top-level import when the rewritten
    statements use a module the file did not import."""
    used = "\n".join(src.lines.values())
    missing = [m for m in _IMPORTS if src.names.alias(m) is None and re.search(rf"\b{m}\.", used)]
    tops = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    ours = [n for n in tops if any(m.startswith(("nki", "neuronxcc")) for m in _modules(n))]
    tops = ours or tops
    if missing and tops:
        end = tops[-1].end_lineno or tops[-1].lineno
        at = src.starts[end] if end < len(src.starts) else len(src.data)
        src.lines[(at, at)] = "".join(_IMPORTS[m] + "\n" for m in missing)


def _modules(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return [node.module or ""]


def main(argv: list[str] | None = None) -> int:
    """``nki-compat --migrate file.py [file.py ...]``: print the diff and the report."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: nki-compat --migrate file.py [file.py ...]", file=sys.stderr)
        return 2
    status = 0
    for path in args:
        try:
            m = migrate_file(path)
        except MigrationError as e:
            print(f"nki-compat --migrate: {e}", file=sys.stderr)
            return 2
        sys.stdout.write(m.diff())
        sys.stdout.write(m.report())
        if m.manual:
            status = 1
    return status
