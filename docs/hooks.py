"""MkDocs hooks of the documentation site (mkdocs.yml names this file).

Nothing the project's tables or tutorials already say is copied into a page by hand:

- a page's ``<!-- generated: NAME -->`` line is replaced by the Markdown the project builds from
  its own tables (``GENERATED``: the op table, the instruction spec, the error catalogue, ...);
- one page per script under ``tutorials/`` is made at build time (its docstring, then its
  source), listed in the navigation under Tutorials.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "tutorials"

# placeholder name -> (module, function returning Markdown)
GENERATED: dict[str, tuple[str, str]] = {
    "optable": ("nki.optable", "markdown"),
    "isa-spec": ("nki.isa_spec", "markdown"),
    "error-catalogue": ("nki.error_codes", "catalogue_markdown"),
    "torch-backend-ops": ("frontends.torch_registry", "registry_table"),
    "pipeline-ops": ("frontends.pipeline.ops", "markdown"),
}
PLACEHOLDER = re.compile(r"^<!-- generated: ([\w-]+) -->$", re.M)


def generated(name: str) -> str:
    """The Markdown a placeholder named ``name`` stands for (a KeyError names an unknown one)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    module, function = GENERATED[name]
    return getattr(importlib.import_module(module), function)().strip()


def expand(markdown: str) -> str:
    """``markdown`` with every placeholder replaced by what it stands for."""
    return PLACEHOLDER.sub(lambda m: generated(m[1]), markdown)


def tutorial_scripts() -> list[Path]:
    """The tutorial scripts the site renders, in path order."""
    return sorted(p for p in TUTORIALS.rglob("*.py") if not p.name.startswith("_"))


def tutorial_page(script: Path) -> str:
    """A tutorial's page: its docstring as the introduction, then the whole script."""
    rel = script.relative_to(ROOT).as_posix()
    source = script.read_text()
    doc = ast.get_docstring(ast.parse(source)) or ""
    title = rel.removeprefix("tutorials/")
    runs = "__main__" in source
    lines = [f"# {title}", ""]
    if doc:
        lines += [doc, ""]
    if runs:
        lines += [
            f"Run it from the repository root with `python {rel}`: it checks its results "
            "against a reference and prints PASS (the test suite runs it too).",
            "",
        ]
    else:
        lines += ["A module the other scripts of this folder import.", ""]
    lines += [f'````python title="{rel}"', source.rstrip("\n"), "````", ""]
    return "\n".join(lines)


def tutorials_index() -> str:
    """The Tutorials page: every script with the first line of its docstring."""
    lines = [
        "# Tutorials",
        "",
        "Each script under `tutorials/` is a complete program: it builds inputs, runs its kernels "
        "in the simulator and compares the results with NumPy, PyTorch or JAX. Run one from the "
        "repository root, e.g. `python tutorials/tensor_addition/spmd_tensor_addition.py`.",
        "",
        "| script | what it shows |",
        "|---|---|",
    ]
    for script in tutorial_scripts():
        doc = ast.get_docstring(ast.parse(script.read_text())) or ""
        first = " ".join(doc.split("\n\n")[0].split())
        name = script.relative_to(TUTORIALS).as_posix()
        lines.append(f"| [{name}]({_page_uri(script).removeprefix('tutorials/')}) | {first} |")
    return "\n".join(lines) + "\n"


def _page_uri(script: Path) -> str:
    return "tutorials/" + script.relative_to(TUTORIALS).with_suffix(".md").as_posix()


def on_config(config):
    """List every tutorial page under the Tutorials entry of the navigation."""
    pages = [{"Overview": "tutorials/index.md"}]
    pages += [{s.relative_to(TUTORIALS).as_posix(): _page_uri(s)} for s in tutorial_scripts()]
    for i, entry in enumerate(config["nav"]):
        if isinstance(entry, dict) and "Tutorials" in entry:
            config["nav"][i] = {"Tutorials": pages}
    return config


def on_files(files, config):
    """Add the generated tutorial pages to the site's files."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, "tutorials/index.md", content=tutorials_index()))
    for script in tutorial_scripts():
        files.append(File.generated(config, _page_uri(script), content=tutorial_page(script)))
    return files


def on_page_markdown(markdown, page, config, files):
    """Expand the generated-content placeholders of a page."""
    return expand(markdown)
