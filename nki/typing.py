"""nki.typing (``import nki.typing as nt``): parameter annotations checked at trace time.

* ``nt.tensor[128, 512]``: the parameter must have exactly this shape.
* ``nt.mutable_tensor`` (optionally ``nt.mutable_tensor[128, 512]``): a parameter the kernel may
  write. A kernel that returns its outputs may write no other parameter."""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import re
import sys
import types
from typing import Any

from .errors import NKIShapeError, SrcLoc, source_tree
from .parsing import PARSE_LOCK
from .tracer import TileOps


class _TensorType:
    def __init__(self, mutable: bool, shape: tuple[Any, ...] | None = None) -> None:
        self.mutable = mutable
        self.shape = shape

    def __getitem__(self, shape: Any) -> _TensorType:
        shape = shape if isinstance(shape, tuple) else (shape,)
        return _TensorType(self.mutable, tuple(shape))

    def __instancecheck__(self, obj: Any) -> bool:
        """``isinstance(x, nt.tensor)``: x is a kernel tensor or tile (kernels check their
        arguments so), of the annotated shape if one is given."""
        if not isinstance(obj, TileOps):
            return False
        return self.shape is None or tuple(obj.shape) == tuple(self.shape)

    def __repr__(self) -> str:
        base = "nt.mutable_tensor" if self.mutable else "nt.tensor"
        return base + (f"[{', '.join(map(str, self.shape))}]" if self.shape else "")


tensor = _TensorType(False)
mutable_tensor = _TensorType(True)


# a string annotation naming an nt type through any module path (``nt.``, ``nki.typing.``,
# ``neuronxcc.nki.typing.``, an alias), with its shape, if any
_NAMED = re.compile(r"(?:[A-Za-z_][\w.]*\.)?(mutable_tensor|tensor)(?:\[(.*)\])?")


def annotation_of(ann: Any, fn: Any = None) -> _TensorType | None:
    """The nt annotation behind a parameter annotation. A string (``from __future__ import
    annotations`` stores every annotation so) is evaluated in the kernel ``fn``'s globals and
    closure, else read by name: ``mutable_tensor`` or ``tensor`` through any module path."""
    if isinstance(ann, _TensorType):
        return ann
    if not isinstance(ann, str):
        return None
    if fn is not None:
        names = dict(getattr(fn, "__globals__", {}))
        code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
        for name, cell in zip(code.co_freevars if code else (), cells):
            with contextlib.suppress(ValueError):  # (an empty cell)
                names[name] = cell.cell_contents
        try:
            value = eval(ann, names)  # noqa: S307 - the kernel's own annotation
        except Exception:
            value = None
        if isinstance(value, _TensorType):
            return value
    m = _NAMED.fullmatch(ann.replace(" ", ""))
    if m is None:
        return None
    base = mutable_tensor if m.group(1) == "mutable_tensor" else tensor
    if m.group(2) is None:
        return base
    try:
        return base[tuple(int(x) for x in m.group(2).split(",") if x)]
    except ValueError:  # (dims named, not numbers: only the mutability is known)
        return base


# --------------------------------------------------------------------------------------------
# Annotated locals: ``x: nt.tensor[128, 512] = nl.load(...)`` checked while the kernel traces
# --------------------------------------------------------------------------------------------


def _function_node(tree: ast.AST, name: str, line: int) -> ast.AST | None:
    """The ``def`` named ``name`` whose first line (its first decorator's, or the ``def``'s) is
    ``line``, looked for only inside the statements whose lines contain ``line`` (the file's
    other statements cannot hold it), outer ones first."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.expr):  # (no statement, so no ``def``, inside an expression)
            continue
        start = getattr(node, "lineno", None)
        if start is not None:
            first = min([start] + [d.lineno for d in getattr(node, "decorator_list", ())])
            if not first <= line <= (node.end_lineno or start):
                continue
            is_def = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            if is_def and node.name == name and line in (first, start):
                return node
        hit = _function_node(node, name, line)
        if hit is not None:
            return hit
    return None


@functools.lru_cache(maxsize=256)
def _annotated_locals(
    code: types.CodeType, tree: ast.Module
) -> tuple[tuple[str, int, types.CodeType | None, str], ...]:
    """The annotated assignments to plain names in the ``def`` of ``code`` (nested functions
    included), read from ``tree``, the parsed text of its file (a new text parses to a new
    tree, so an edited kernel gets a new entry): (name, line, compiled annotation or None when
    it does not compile, annotation text)."""
    node = _function_node(tree, code.co_name, code.co_firstlineno)
    out = []
    for n in ast.walk(node) if node is not None else ():
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            try:
                compiled = compile(ast.Expression(n.annotation), "<annotation>", "eval")
            except Exception:  # (evaluated as text instead, as when evaluating fails)
                compiled = None
            out.append((n.target.id, n.lineno, compiled, ast.unparse(n.annotation)))
    return tuple(out)


def _local_annotations(fn: Any) -> dict[str, tuple[_TensorType, int]]:
    """Annotated local assignments of ``fn`` whose annotation is an nt type with a shape:
    name -> (annotation, line of the assignment). The ``def`` is found in the parse of the
    whole file, so that a nested function, a method, a decorated one or one with lines
    indented less than its ``def`` (a docstring or a string continued at column 0, which
    defeat dedenting the function's own lines) is read as the file's parser sees it; the
    statements are read once per function and text of its file, the annotations evaluated in
    the kernel's globals at every trace (a global may change between traces)."""
    try:
        code = inspect.unwrap(fn).__code__
    except (AttributeError, TypeError):  # not a Python function: nothing to read
        return {}
    with PARSE_LOCK:  # parsing and compiling the annotations both convert ASTs
        tree = source_tree(code.co_filename)
        if tree is None:
            return {}
        found = _annotated_locals(code, tree)
    out: dict[str, tuple[_TensorType, int]] = {}
    for name, line, compiled, text in found:
        ann = _eval_annotation(compiled, text, fn)
        if ann is not None and ann.shape is not None:
            out[name] = (ann, line)
    return out


def _eval_annotation(compiled: types.CodeType | None, text: str, fn: Any) -> _TensorType | None:
    if compiled is None:
        return annotation_of(text)
    try:
        value = eval(compiled, dict(fn.__globals__))  # noqa: S307 - the kernel's own annotation
    except Exception:
        return annotation_of(text)
    return annotation_of(value)


class local_shape_checks:  # noqa: N801 - used as a context manager
    """While tracing ``fn``, check each annotated local (``x: nt.tensor[128, 512] = ...``)
    right after its assignment runs: a tile of another shape raises NKIShapeError
    ``err_annotation_shape_mismatch`` at the assignment line. Costs nothing for kernels
    without such annotations (no trace hook is installed)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.anns = _local_annotations(fn)
        self._old: Any = None

    def __enter__(self) -> local_shape_checks:
        if not self.anns:
            return self
        code = self.fn.__code__
        pending: dict[int, str] = {line: name for name, (_a, line) in self.anns.items()}
        last: list[int | None] = [None]

        def local(frame: Any, event: str, arg: Any):
            if event in ("line", "return"):
                prev = last[0]
                if prev in pending:  # the annotated assignment at `prev` has just run
                    self._check(frame, pending[prev], prev)
                last[0] = frame.f_lineno if event == "line" else None
            return local

        def glob(frame: Any, event: str, arg: Any):
            if event == "call" and frame.f_code is code:
                return local
            return None

        self._old = sys.gettrace()
        sys.settrace(glob)
        return self

    def _check(self, frame: Any, name: str, line: int) -> None:
        ann, _ = self.anns[name]
        value = frame.f_locals.get(name)
        shape = getattr(value, "shape", None)
        if shape is None or ann.shape is None:
            return
        if tuple(shape) != tuple(ann.shape):
            raise NKIShapeError(
                f"local '{name}' is annotated {ann} but holds a tile of shape {tuple(shape)}",
                code="err_annotation_shape_mismatch",
                loc=SrcLoc(frame.f_code.co_filename, line, 0, frame.f_code.co_name),
            )

    def __exit__(self, *exc: object) -> None:
        if self.anns:
            sys.settrace(self._old)
