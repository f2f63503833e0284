"""The layering of docs/architecture.md stays true: imports point down, no import cycle between
the project's modules, no hidden function-local imports between them, a foundation that loads
nothing above it, no grab-bag files."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from collections import deque
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
    "nki.environment": "foundation",
    "nki.ir": "foundation",
    "nki.affine": "foundation",
    "nki.optable": "foundation",
    "nki.seqsum": "foundation",
    "nki.isa_spec": "foundation",
    "nki.parsing": "foundation",
    "nki.api_rules": "foundation",
    "simulator": "simulator",
    "nki.tracer": "tracer",
    "nki.symbolic": "tracer",
    "nki.language": "language",
    "nki.isa": "language",
    "nki.typing": "language",
    "nki.compiler": "language",
    "nki.meta": "language",
    "nki.collectives": "language",
    "nki.classic": "launch",
    "nki.estimates": "launch",
    "nki.jit": "launch",
    "nki.grids": "launch",
    "nki.cores": "launch",
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
FOUNDATION = sorted(m for m, layer_ in LAYER_OF_PREFIX.items() if layer_ == "foundation")
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


MODULES = {module_name(p): p for p in sources()}  # every project module, named from its file


def resolve(name: str, modules: dict | set) -> str | None:
    """The project module an import of ``name`` loads: ``name`` itself or, for a name inside a
    module (``nki.ir.Instr``), the longest prefix that is a module."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in modules:
            return ".".join(parts[:n])
    return None


def imports_in(
    source: str, module: str, is_package: bool, modules: dict | set, filename: str = "<src>"
) -> list[tuple[str, int, bool]]:
    """(imported project module, line, inside a function) for each import in ``source``, the
    text of ``module``: module-level, function-level and ``TYPE_CHECKING`` imports alike, relative
    ones resolved, ``from pkg import sub`` naming the submodule when ``sub`` is one."""
    tree = ast.parse(source, filename)
    package = module if is_package else module.rpartition(".")[0]
    found: set[tuple[str, int, bool]] = set()

    def add(name: str, line: int, local: bool) -> None:
        hit = resolve(name, modules)
        if hit is not None and hit != module:
            found.add((hit, line, local))

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                for a in child.names:
                    add(a.name, child.lineno, local)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    target = ".".join([*base, child.module] if child.module else base)
                else:
                    target = child.module or ""
                for a in child.names:
                    sub = f"{target}.{a.name}"
                    add(sub if sub in modules else target, child.lineno, local)
            visit(child, inner)

    visit(tree, False)
    return sorted(found)


@functools.cache  # every test reads the same files
def imports(path: Path) -> list[tuple[str, int, bool]]:
    return imports_in(
        path.read_text(), module_name(path), path.name == "__init__.py", MODULES, str(path)
    )


def test_every_project_module_has_a_layer():
    missing = [m for m in MODULES if layer(m) is None]
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


# --- import cycles ------------------------------------------------------------------------------

Graph = dict[str, dict[str, str]]  # module -> {imported module: "file:line" of the import}


def import_graph() -> Graph:
    return {
        mod: {t: f"{path.relative_to(ROOT)}:{line}" for t, line, _local in imports(path)}
        for mod, path in MODULES.items()
    }


def cycles(graph: Graph) -> list[list[str]]:
    """One shortest cycle per strongly connected group of modules (Tarjan's algorithm, then a
    breadth-first search from the group's first module back to itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    found = []
    for group in groups:
        start = min(group)
        came_from: dict[str, str] = {}
        todo = deque([start])
        while todo:
            v = todo.popleft()
            if start in graph[v]:
                path = [v]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                found.append([*reversed(path), start])
                break
            for w in sorted(graph[v]):
                if w in group and w not in came_from and w != start:
                    came_from[w] = v
                    todo.append(w)
    return sorted(found)


def describe(cycle: list[str], graph: Graph) -> str:
    steps = [f"{a} ({graph[a][b]}) -> " for a, b in zip(cycle, cycle[1:])]
    return "".join(steps) + cycle[-1]


def test_no_import_cycle_between_project_modules():
    # Any import counts (module level, inside a function, under TYPE_CHECKING): a module that
    # needs one above it reaches it through a table or a registry the upper module fills.
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(describe(c, graph) for c in found)


def test_the_cycle_finder_reports_the_path_of_each_cycle():
    mods = {"p", "p.a", "p.b", "p.c", "p.d", "q", "q.x"}
    src = {
        ("p.a", False): "from . import b\n",
        ("p.b", False): "def f():\n    from .c import thing\n",  # function level
        ("p.c", False): "import p.a\nfrom p import d\n",
        ("p.d", False): "from ..q import x\n",
        (
            "q.x",
            False,
        ): "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.d import y\n",
    }
    graph = {
        mod: {t: f"{mod}:{line}" for t, line, _ in imports_in(text, mod, pkg, mods)}
        for (mod, pkg), text in src.items()
    }
    assert graph["p.b"] == {"p.c": "p.b:2"} and graph["p.d"] == {"q.x": "p.d:1"}
    assert cycles(graph) == [["p.a", "p.b", "p.c", "p.a"], ["p.d", "q.x", "p.d"]]
    assert describe(cycles(graph)[0], graph) == "p.a (p.a:1) -> p.b (p.b:2) -> p.c (p.c:1) -> p.a"
    del graph["p.c"]["p.a"], graph["q.x"]["p.d"]
    assert cycles(graph) == []


# --- what importing a module loads --------------------------------------------------------------


def loaded_by(module: str) -> list[str]:
    """The project modules a fresh interpreter has loaded after ``import module``."""
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [m for m in out if m.split(".")[0] in PACKAGES]


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def beyond_layers(module: str) -> list[str]:
    """What ``import module`` loads from layers its own may not import. A package is loaded with
    any module inside it, whatever its layer (the modules its ``__init__`` imports are listed and
    checked themselves)."""
    allowed = MAY_IMPORT[layer(module)]
    loaded = loaded_by(module)
    holders = {m for m in loaded for x in loaded if x != m and within(x, m)}
    return [m for m in loaded if layer(m) not in allowed and m not in holders]


def test_importing_simulator_memory_loads_no_tracer_language_or_isa_module():
    loaded = loaded_by("simulator.memory")
    assert "simulator.memory" in loaded and "nki.ir" in loaded
    front = [
        m for m in loaded if any(within(m, p) for p in ("nki.tracer", "nki.language", "nki.isa"))
    ]
    assert not front, front
    assert not beyond_layers("simulator.memory")


@pytest.mark.parametrize("module", FOUNDATION)
def test_a_foundation_module_loads_only_foundation_modules(module):
    assert module in loaded_by(module)
    assert not beyond_layers(module)


# --- function-local imports and long files ------------------------------------------------------

# Project modules that may be imported inside a function, and why.
LAZY_OK = {
    "simulator.compiled.rt": "imports numba, an optional dependency that is slow to import",
    "nki.seqsum": "imports numba (slow to import) for the op table's large sums only",
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
        if p.relative_to(ROOT).as_posix() not in LAZY_FILES
        for target, line, is_local in imports(p)
        if is_local and target not in LAZY_OK
    ]
    assert not local, "\n".join(local)


@pytest.mark.parametrize("pkg", PACKAGES)
def test_no_module_is_a_grab_bag(pkg):
    long = []
    for p in sorted((ROOT / pkg).rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        n = len(p.read_text().splitlines())
        if n > MAX_LINES and rel not in TABLES:
            long.append(f"{rel}: {n} lines")
    assert not long, "\n".join(long)
