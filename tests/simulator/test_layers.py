"""The simulator sits below tracing: it reads the IR and the language's tables, never the
tracer, the public nki.language / nki.isa API, nki.jit or the frontends; its imports are at
module level (only the optional numba imports may wait for first use)."""

import ast
from pathlib import Path

SIM = Path(__file__).resolve().parents[2] / "simulator"
ALLOWED_NKI = {"nki.ir", "nki.errors", "nki.optable", "nki.dtypes", "nki.targets",
               "nki.symbolic", "nki.isa.spec"}  # fmt: skip
# optional dependencies, imported on first use: numba (slow to import, may fail) and matplotlib
# (the ``plot`` extra of the PNG timeline)
LAZY_OK = {"numba", ".numba_rt", "matplotlib", "matplotlib.pyplot"}


def _imports(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node, a.name
        elif isinstance(node, ast.ImportFrom) and node.module == "nki" and not node.level:
            for a in node.names:  # from nki import dtypes -> nki.dtypes
                yield node, f"nki.{a.name}"
        elif isinstance(node, ast.ImportFrom):
            yield node, ("." * node.level) + (node.module or "")


def test_simulator_imports_only_lower_layers():
    bad = []
    for path in sorted(SIM.rglob("*.py")):
        for _, name in _imports(ast.parse(path.read_text())):
            top = name.split(".")[0]
            if top == "frontends" or (top == "nki" and name not in ALLOWED_NKI):
                bad.append(f"{path.relative_to(SIM.parent)}: {name}")
    assert bad == []


def test_simulator_has_no_function_local_imports():
    bad = []
    for path in sorted(SIM.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node, name in _imports(fn):
                if name not in LAZY_OK:
                    bad.append(f"{path.relative_to(SIM.parent)}:{node.lineno}: {name}")
    assert bad == []


def test_simulator_files_stay_small():
    big = [p.name for p in SIM.rglob("*.py") if len(p.read_text().splitlines()) > 600]
    assert big == []
