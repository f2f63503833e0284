"""nki.typing (``import nki.typing as nt``): parameter annotations checked at trace time.

* ``nt.tensor[128, 512]``: the parameter must have exactly this shape.
* ``nt.mutable_tensor`` (optionally ``nt.mutable_tensor[128, 512]``): a parameter the kernel may
  write. A kernel that returns its outputs may write no other parameter."""

from __future__ import annotations

import ast
import inspect
import sys
from typing import Any

from .errors import NKIShapeError, SrcLoc, source_tree
from .parsing import PARSE_LOCK, nodes_of
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


def annotation_of(ann: Any) -> _TensorType | None:
    """The nt annotation behind a parameter annotation (strings are resolved by name)."""
    if isinstance(ann, _TensorType):
        return ann
    if isinstance(ann, str):
        s = ann.replace(" ", "")
        for prefix, base in (
            ("nt.mutable_tensor", mutable_tensor),
            ("nt.tensor", tensor),
            ("mutable_tensor", mutable_tensor),
            ("tensor", tensor),
        ):
            if s.startswith(prefix):
                rest = s[len(prefix) :]
                if rest.startswith("[") and rest.endswith("]"):
                    try:
                        dims = tuple(int(x) for x in rest[1:-1].split(",") if x)
                    except ValueError:
                        return base
                    return base[dims]
                return base
    return None


# --------------------------------------------------------------------------------------------
# Annotated locals: ``x: nt.tensor[128, 512] = nl.load(...)`` checked while the kernel traces
# --------------------------------------------------------------------------------------------


def _function_node(fn: Any) -> ast.AST | None:
    """The ``def`` of ``fn`` parsed from its whole file, so that a nested function, a method, a
    decorated one or one with lines indented less than its ``def`` (a docstring or a string
    continued at column 0, which defeat dedenting the function's own lines) is found as the
    file's parser sees it. Line numbers of the result are the file's."""
    code = inspect.unwrap(fn).__code__
    tree = source_tree(code.co_filename)
    if tree is None:
        return None
    for node in nodes_of(tree, ast.FunctionDef) + nodes_of(tree, ast.AsyncFunctionDef):
        if node.name == code.co_name:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if code.co_firstlineno in (first, node.lineno):
                return node
    return None


def _local_annotations(fn: Any) -> dict[str, tuple[_TensorType, int]]:
    """Annotated local assignments of ``fn`` whose annotation is an nt type with a shape:
    name -> (annotation, line of the assignment)."""
    out: dict[str, tuple[_TensorType, int]] = {}
    with PARSE_LOCK:  # parsing and compiling the annotations both convert ASTs
        try:
            node = _function_node(fn)
        except (AttributeError, TypeError):  # not a Python function: nothing to read
            return {}
        if node is None:
            return {}
        for n in ast.walk(node):
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                ann = _eval_annotation(n.annotation, fn)
                if ann is not None and ann.shape is not None:
                    out[n.target.id] = (ann, n.lineno)
    return out


def _eval_annotation(expr: Any, fn: Any) -> _TensorType | None:
    try:
        value = eval(  # noqa: S307 - the kernel's own annotation, in the kernel's globals
            compile(ast.Expression(expr), "<annotation>", "eval"), dict(fn.__globals__)
        )
    except Exception:
        return annotation_of(ast.unparse(expr))
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
