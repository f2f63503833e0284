"""One lock for every conversion of Python source to code objects in a process.

CPython 3.11's AST conversion is not safe in concurrent threads: ``ast.parse``, ``compile`` of
source text or of an AST, importing a generated module and Numba's compiler (which builds and
compiles ASTs for array expressions) can fail with ``SystemError: AST constructor recursion
depth mismatch`` when two threads do it at once. Kernels traced in parallel, and the Numba
backend building kernels for launches made from several threads, do all of these under
:data:`PARSE_LOCK` (reentrant: a compile may import a module that parses)."""

from __future__ import annotations

import ast
import functools
import linecache
import threading

PARSE_LOCK = threading.RLock()


def parse(source: str) -> ast.Module:
    """``ast.parse(source)`` under :data:`PARSE_LOCK`."""
    with PARSE_LOCK:
        return ast.parse(source)


def parse_file(file: str) -> ast.Module | None:
    """The module ``file`` holds (through ``linecache``, so a kernel defined in a notebook cell
    or an exec'd string with cached lines parses too), parsed once per content; None when it
    has no source or does not parse. The tree is shared: callers must not change it."""
    lines = linecache.getlines(file)
    return _parsed(file, hash(tuple(lines))) if lines else None


@functools.lru_cache(maxsize=64)
def _parsed(file: str, _stamp: int) -> ast.Module | None:
    try:
        return parse("".join(linecache.getlines(file)))
    except SyntaxError:
        return None
