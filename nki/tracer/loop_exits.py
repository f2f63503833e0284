"""The ``for`` statement of a symbolic loop (``nl.affine_range`` / ``nl.sequential_range``) read
from the kernel's source: the loop variable's name (for messages) and the ``break`` /
``return`` that left the body.

The body of a symbolic loop is traced once and stands for every iteration, so an early exit
taken while tracing would silently apply to all of them (the trace would record one body and
the loop would still run every iteration). The compiler cannot express it either: the tracer
notices the exit (the loop's generator is closed before it finished) and reports it at the
statement the source shows."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator

from ..errors import NKIControlFlowError, SrcLoc, source_tree

# nodes whose body a break / return belongs to instead of the loop being checked
_OWN_BREAK = (ast.For, ast.AsyncFor, ast.While)
_OWN_RETURN = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _statements(node: ast.AST) -> Iterator[ast.AST]:
    """The statements below ``node`` (and the handlers and cases holding statements), without
    the expressions, which hold no statement and are most of a file's nodes."""
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, ast.expr):
            yield child
            yield from _statements(child)


# the loop statements found by the line of their header: kind -> the header's part
_HEADERS = {ast.For: "iter", ast.While: "test"}


@functools.lru_cache(maxsize=64)
def _loops_by_line(tree: ast.Module | None, kind: type) -> dict[int, ast.stmt]:
    """Per source line, the innermost ``kind`` statement (``for`` / ``while``) whose iterable /
    test spans that line (each parsed file's statements read once per kind)."""
    out: dict[int, ast.stmt] = {}
    for n in _statements(tree) if tree is not None else ():
        if isinstance(n, kind):
            head = getattr(n, _HEADERS[kind])
            for line in range(head.lineno, (head.end_lineno or head.lineno) + 1):
                best = out.get(line)
                if best is None or n.lineno >= best.lineno:
                    out[line] = n
    return out


def _exits(nodes: list[ast.AST], in_inner_loop: bool = False) -> ast.stmt | None:
    """The first ``return``, or ``break`` of the loop itself, among ``nodes`` and below."""
    for n in nodes:
        if isinstance(n, ast.Return) or (isinstance(n, ast.Break) and not in_inner_loop):
            return n
        if isinstance(n, _OWN_RETURN) or isinstance(n, ast.expr):
            continue
        hit = _exits(list(ast.iter_child_nodes(n)), in_inner_loop or isinstance(n, _OWN_BREAK))
        if hit is not None:
            return hit
    return None


def _for_node(loc: SrcLoc) -> ast.For | None:
    return _loops_by_line(source_tree(loc.file), ast.For).get(loc.line)  # type: ignore[return-value]


def while_statement(loc: SrcLoc) -> ast.While | None:
    """The ``while`` statement whose test, a register itself (``while reg:``, not ``while reg
    and x:``), is evaluated at ``loc`` (None: not such a test)."""
    node = _loops_by_line(source_tree(loc.file), ast.While).get(loc.line)
    plain = isinstance(getattr(node, "test", None), (ast.Name, ast.Attribute, ast.Subscript))
    return node if plain else None  # type: ignore[return-value]


def while_exit(node: ast.While, loc: SrcLoc) -> NKIControlFlowError | None:
    """The error for a ``break`` / ``return`` in the body of a device ``while reg:`` loop: its
    body is traced once and runs whole on every trip."""
    hit = _exits(node.body)
    if hit is None:
        return None
    what = "return" if isinstance(hit, ast.Return) else "break"
    return NKIControlFlowError(
        f"'{what}' inside a 'while reg:' loop on a register: the loop runs on the device and "
        f"its body is traced once, so the body cannot be left early; end the loop by writing 0 "
        f"into the register",
        code="err_dynamic_control_flow_not_supported",
        loc=SrcLoc(loc.file, hit.lineno, hit.col_offset, loc.func),
    )


def loop_variable(loc: SrcLoc) -> str:
    """The name of the ``for`` variable of the symbolic loop created at ``loc`` ('' when the
    source or a plain name is not available)."""
    node = _for_node(loc)
    return node.target.id if node is not None and isinstance(node.target, ast.Name) else ""


def early_exit_error(kind: str, loc: SrcLoc) -> NKIControlFlowError | None:
    """The error for a symbolic loop (created at ``loc``) whose body was left by ``break`` or
    ``return`` while tracing, located at that statement when the source shows it. None when
    the loop is not iterated by a ``for`` statement (``next(iter(nl.affine_range(n)))``: the
    iterator escapes its loop, which the bounds check reports)."""
    node = _for_node(loc)
    if node is None:
        return None
    hit = _exits(node.body)
    what = "return" if isinstance(hit, ast.Return) else "break" if hit is not None else "exit"
    where = loc if hit is None else SrcLoc(loc.file, hit.lineno, hit.col_offset, loc.func)
    return NKIControlFlowError(
        f"'{what}' inside nl.{kind}_range: the loop body is traced once and stands for every "
        f"iteration, so the compiler (and nki-sim) cannot leave the loop early; every "
        f"iteration would still run. Shorten the range, skip the work of some iterations with "
        f"a mask (mask=i * 128 + ip < n), or use nl.static_range, which unrolls the loop at "
        f"trace time so '{what}' is plain Python (nl.sequential_range is traced once too)",
        code="err_dynamic_control_flow_not_supported",
        loc=where,
    )
