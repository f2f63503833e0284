"""One lock for every conversion of Python source to code objects in a process.

CPython 3.11's AST conversion is not safe in concurrent threads: ``ast.parse``, ``compile`` of
source text or of an AST, importing a generated module and Numba's compiler (which builds and
compiles ASTs for array expressions) can fail with ``SystemError: AST constructor recursion
depth mismatch`` when two threads do it at once. Kernels traced in parallel, and the Numba
backend building kernels for launches made from several threads, do all of these under
:data:`PARSE_LOCK` (reentrant: a compile may import a module that parses)."""

from __future__ import annotations

import ast
import threading

PARSE_LOCK = threading.RLock()


def parse(source: str) -> ast.Module:
    """``ast.parse(source)`` under :data:`PARSE_LOCK`."""
    with PARSE_LOCK:
        return ast.parse(source)
