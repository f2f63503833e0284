"""Imports in the language front end point down: the tracer does not reach up into
nki.language / nki.classic / nki.isa, the front end does not import the simulator (only the
entry points that run kernels and the nki.testing tools do), and the front-end modules import
at module level (no imports hidden inside functions)."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
NKI = ROOT / "nki"


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path) -> list[tuple[str, int, bool]]:
    """(absolute module imported, line, inside a function) for every import in ``path``."""
    tree = ast.parse(path.read_text())
    pkg = _module_name(path).split(".")
    if path.name != "__init__.py":
        pkg = pkg[:-1]
    out: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_func: bool) -> None:
        for child in ast.iter_child_nodes(node):
            func = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, in_func) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = pkg[: len(pkg) - child.level + 1] if child.level else []
                mod = ".".join(base + ([child.module] if child.module else []))
                names = [f"{mod}.{a.name}" for a in child.names] if not child.module else [mod]
                out.extend((n, child.lineno, in_func) for n in names)
            visit(child, func)

    visit(tree, False)
    return out


def _files(*globs: str) -> list[pathlib.Path]:
    return sorted({p for g in globs for p in NKI.glob(g)})


def _under(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


# The entry points that run kernels (the launch in nki.jit, the tools in nki/__init__ and
# nki.classic: nki.estimate, nki.benchmark, nki.profile) and the test tools reach the simulator;
# nothing else in nki/ does. They import it inside the function that runs the kernel, so that
# ``import nki`` does not load the backends.
ENTRY_POINTS = {NKI / "jit.py", NKI / "__init__.py", NKI / "classic.py", NKI / "estimates.py"}


def test_the_front_end_does_not_import_the_simulator():
    allowed = ENTRY_POINTS | set(_files("testing/*.py"))
    bad = [
        f"{p.relative_to(ROOT)}:{line} imports {name}"
        for p in _files("**/*.py")
        if p not in allowed
        for name, line, _ in _imports(p)
        if _under(name, "simulator", "frontends")
    ]
    assert not bad, bad


def test_the_tracer_and_the_modules_below_it_do_not_import_upward():
    above = ("nki.language", "nki.classic", "nki.isa", "nki.jit", "nki.typing", "nki.compiler")
    lower = _files("tracer/*.py", "symbolic.py", "ir.py", "dtypes.py", "errors.py")
    lower += _files("error_codes.py", "optable.py", "targets.py")
    assert len(lower) >= 12
    bad = [
        f"{p.relative_to(ROOT)}:{line} imports {name}"
        for p in lower
        for name, line, _ in _imports(p)
        if _under(name, *above) or (p.parent != NKI / "tracer" and _under(name, "nki.tracer"))
    ]
    assert not bad, bad


def test_front_end_modules_import_at_module_level():
    files = _files("tracer/*.py", "language/*.py", "classic.py", "symbolic.py", "optable.py")
    files += _files("errors.py", "error_codes.py", "dtypes.py", "targets.py", "compiler.py")
    files += [NKI / "isa" / f for f in ("common.py", "enums.py", "rules.py", "tensor_ops.py")]
    bad = [
        f"{p.relative_to(ROOT)}:{line} imports {name} inside a function"
        for p in files
        for name, line, in_func in _imports(p)
        if in_func and not (p in ENTRY_POINTS and _under(name, "simulator", "frontends"))
    ]
    assert not bad, bad
