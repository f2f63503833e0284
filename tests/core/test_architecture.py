"""The layering of docs/architecture.md stays true: imports point down, no hidden function-local
imports between the project's own modules, no grab-bag files."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("nki", "simulator", "frontends")

# Longest prefix wins. Each layer lists the layers it may import from (itself included).
LAYER_OF_PREFIX = {
    "nki.errors": "foundation",
    "nki.error_codes": "foundation",
    "nki.dtypes": "foundation",
    "nki.targets": "foundation",
    "nki.ir": "foundation",
    "nki.affine": "foundation",
    "nki.optable": "foundation",
    "nki.isa_spec": "foundation",
    "simulator": "simulator",
    "nki.tracer": "tracer",
    "nki.symbolic": "tracer",
    "nki.language": "language",
    "nki.isa": "language",
    "nki.typing": "language",
    "nki.compiler": "language",
    "nki.classic": "launch",
    "nki.estimates": "launch",
    "nki.jit": "launch",
    "nki": "launch",
    "nki.testing": "tools",
    "nki.kernels": "tools",
    "frontends": "tools",
}
MAY_IMPORT = {
    "foundation": {"foundation"},
    "simulator": {"foundation", "simulator"},
    "tracer": {"foundation", "tracer"},
    "language": {"foundation", "tracer", "language"},
    "launch": {"foundation", "simulator", "tracer", "language", "launch"},
    "tools": {"foundation", "simulator", "tracer", "language", "launch", "tools"},
}
# Files that are tables (data, one row per op / instruction / code) may be long.
TABLES = {"nki/optable.py", "nki/isa_spec.py", "nki/errors.py", "nki/error_codes.py"}
MAX_LINES = 600


def layer(module: str) -> str | None:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        hit = LAYER_OF_PREFIX.get(".".join(parts[:n]))
        if hit:
            return hit
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for each import of a project module."""
    tree = ast.parse(path.read_text(), str(path))
    mod = module_name(path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend((a.name, child.lineno, local) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    target = ".".join([*base, child.module] if child.module else base)
                else:
                    target = child.module or ""
                # `from pkg import submodule` imports the submodule
                for a in child.names:
                    sub = f"{target}.{a.name}"
                    found.append(
                        (sub if layer(sub) != layer(target) else target, child.lineno, local)
                    )
            visit(child, inner)

    visit(tree, False)
    return sorted({(m, ln, loc) for m, ln, loc in found if m.split(".")[0] in PACKAGES})


def test_every_project_module_has_a_layer():
    missing = [module_name(p) for p in sources() if layer(module_name(p)) is None]
    assert not missing


def test_imports_point_down_the_layers():
    wrong = []
    for path in sources():
        mine = layer(module_name(path))
        for target, line, _local in imports(path):
            theirs = layer(target)
            if theirs not in MAY_IMPORT[mine]:
                wrong.append(
                    f"{path.relative_to(ROOT)}:{line} ({mine}) imports {target} ({theirs})"
                )
    assert not wrong, "\n".join(wrong)


# Project modules that may be imported inside a function, and why.
LAZY_OK = {
    "simulator.compiled.rt": "imports numba, an optional dependency that is slow to import",
}
# Files whose project imports all wait for first use, and why.
LAZY_FILES = {
    "nki/testing/pytest_plugin.py": "loaded by every pytest session in the environment",
}


def test_no_function_local_imports_between_project_modules():
    # A function-local import hides a cycle; only optional dependencies (torch, jax, numba,
    # matplotlib) wait for first use.
    local = [
        f"{p.relative_to(ROOT)}:{line} imports {target}"
        for p in sources()
        if p.parts[len(ROOT.parts)] in ("nki", "simulator")
        and p.relative_to(ROOT).as_posix() not in LAZY_FILES
        for target, line, is_local in imports(p)
        if is_local and target not in LAZY_OK
    ]
    assert not local, "\n".join(local)


@pytest.mark.parametrize("pkg", ["nki", "simulator"])
def test_no_module_is_a_grab_bag(pkg):
    long = []
    for p in sorted((ROOT / pkg).rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        n = len(p.read_text().splitlines())
        if n > MAX_LINES and rel not in TABLES:
            long.append(f"{rel}: {n} lines")
    assert not long, "\n".join(long)
