"""MkDocs hooks of the documentation site (mkdocs.yml names this file).

Nothing the project's tables or tutorials already say is copied into a page by hand:

- a page's ``<!-- generated: NAME -->`` line is replaced by the Markdown the project builds from
  its own tables (``GENERATED``: the op table, the instruction spec, the error catalogue, ...);
- a mkdocstrings block ``::: package.module`` without a ``members`` option documents exactly
  the module's ``__all__`` (its submodules left out), so the reference lists the public names
  and nothing a module merely imports;
- lists written for GitHub (a list right after a paragraph line, items nested by two spaces)
  are laid out as Python-Markdown needs them (a blank line before, four spaces per level), so
  the contributor pages stay as they read on GitHub;
- the Sphinx roles docstrings use (``:class:`X```) show as plain code;
- one page per script under ``tutorials/`` is made at build time (its docstring, then its
  source), listed in the navigation under Tutorials.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "tutorials"

# placeholder name -> (module, function returning Markdown, its keyword arguments)
GENERATED: dict[str, tuple[str, str, dict]] = {
    "optable": ("nki.optable", "markdown", {}),
    "isa-spec": ("nki.isa_spec", "markdown", {}),
    "error-catalogue": ("nki.error_codes", "catalogue_markdown", {}),
    "api-rules": ("nki.api_rules", "markdown", {"checked": True}),
    "api-rules-unchecked": ("nki.api_rules", "markdown", {"checked": False}),
    "torch-backend-ops": ("frontends.torch_registry", "registry_table", {}),
    "pipeline-ops": ("frontends.pipeline.ops", "markdown", {}),
}
ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|obj|exc):(?=<code>)")
PLACEHOLDER = re.compile(r"^<!-- generated: ([\w-]+) -->$", re.M)


def generated(name: str) -> str:
    """The Markdown a placeholder named ``name`` stands for (a KeyError names an unknown one)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    module, function, kwargs = GENERATED[name]
    return getattr(importlib.import_module(module), function)(**kwargs).strip()


def expand(markdown: str) -> str:
    """``markdown`` with every placeholder replaced by what it stands for."""
    return PLACEHOLDER.sub(lambda m: generated(m[1]), markdown)


DIRECTIVE = re.compile(r"^::: ([\w.]+)\n((?:    .*\n|\n(?=    ))*)", re.M)
PROJECT = ("nki", "simulator", "frontends")


def _module(name: str):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        return importlib.import_module(name)
    except ImportError:
        return None  # a function or class path (nki.jit.jit)


def public_members(name: str) -> tuple[list[str], list[str]] | None:
    """The names of ``__all__`` of the module ``name`` (submodules left out), split into those
    mkdocstrings can document and those this hook documents itself: a function named like a
    submodule (which mkdocstrings would take for the submodule), an object made by a decorator
    or factory outside the project (a hypothesis strategy, a generated stub); None when ``name``
    is not a module with an ``__all__``."""
    module = _module(name)
    names = getattr(module, "__all__", None)
    if names is None:
        return None
    documented, own = [], []
    for n in names:
        obj = getattr(module, n)
        if inspect.ismodule(obj):
            continue
        shadowed = hasattr(module, "__path__") and importlib.util.find_spec(f"{name}.{n}")
        home = getattr(obj, "__module__", None) or ""
        made = "<locals>" in getattr(obj, "__qualname__", "")
        routine = inspect.isroutine(obj) or inspect.isclass(obj)
        if shadowed or (routine and (made or home.split(".")[0] not in PROJECT)):
            own.append(n)
        else:
            documented.append(n)
    return documented, own


def entry(module: str, name: str, level: int) -> str:
    """A reference entry for ``module.name`` from its signature and docstring."""
    obj = getattr(_module(module), name)
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        signature = name
    else:  # without annotations, as mkdocstrings shows the other entries
        params = [q.replace(annotation=q.empty) for q in sig.parameters.values()]
        signature = f"{name}{sig.replace(parameters=params, return_annotation=sig.empty)}"
    doc = inspect.getdoc(obj) or ""
    heading = "#" * level + f" `{module}.{name}` {{ #{module}.{name} }}"
    return f"{heading}\n\n```python\n{signature}\n```\n\n{doc}\n"


def with_public_members(markdown: str) -> str:
    """``markdown`` with a ``members`` option added to each ``::: module`` block that has none,
    followed by the entries of the public names mkdocstrings cannot resolve."""

    def add(m: re.Match) -> str:
        name, options = m[1], m[2]
        split = public_members(name)
        if split is None or re.search(r"^      members:", options, re.M):
            return m[0]
        documented, own = split
        line = f"      members: [{', '.join(documented)}]\n"
        if re.search(r"^    options:\n", options, re.M):
            options = options.replace("    options:\n", "    options:\n" + line, 1)
        else:
            options = "    options:\n" + line + options
        level = re.search(r"^      heading_level: (\d)", options, re.M)
        level = int(level[1]) if level else 2
        if not re.search(r"^      show_root_heading: false", options, re.M):
            level += 1
        entries = "".join("\n" + entry(name, n, level) for n in own)
        return f"::: {name}\n{options.rstrip()}\n{entries}\n"

    return DIRECTIVE.sub(add, markdown)


ITEM = re.compile(r"^( *)(?:[-*]|\d+\.) ")


def python_markdown_lists(markdown: str) -> str:
    """``markdown`` (GitHub-style lists) with a blank line before a list that follows a
    paragraph line and with items nested by 2-3 spaces (and their text) indented by four."""
    out: list[str] = []
    fence = in_list = nested = False
    last = "blank"  # blank, item (an item and its lazy lines), para (a paragraph in a list), other
    for line in markdown.split("\n"):
        if line.lstrip().startswith("```"):
            fence = not fence
            out.append(line)
            last = "other"
            continue
        if fence:
            out.append(line)
            continue
        m = ITEM.match(line)
        if m:
            if last in ("para", "other"):
                out.append("")
            indent = len(m[1])
            nested = in_list and 1 <= indent <= 3
            if nested:
                line = "    " + line.lstrip()
            in_list, last = True, "item"
        elif not line.strip():
            last = "blank"
        elif in_list and line.startswith(" "):
            if last == "blank" and re.match(r"^ {2,3}\S", line):
                line, last, nested = "    " + line.lstrip(), "para", False
            elif last == "para" and re.match(r"^ {2,3}\S", line):
                line = "    " + line.lstrip()
            elif nested and re.match(r"^ {4}\S", line):
                line = "  " + line
        else:
            if last == "blank":
                in_list = nested = False
            last = "other" if not in_list or last == "blank" else last
        out.append(line)
    return "\n".join(out)


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
        lines.append(f"| [{name}]({page_uri(script).removeprefix('tutorials/')}) | {first} |")
    return "\n".join(lines) + "\n"


def page_uri(script: Path) -> str:
    """The site path of a tutorial script's page (``tutorials/matmul/tiled_matmul.md``)."""
    return "tutorials/" + script.relative_to(TUTORIALS).with_suffix(".md").as_posix()


def on_config(config):
    """List every tutorial page under the Tutorials entry of the navigation."""
    pages = [{"Overview": "tutorials/index.md"}]
    pages += [{s.relative_to(TUTORIALS).as_posix(): page_uri(s)} for s in tutorial_scripts()]
    for i, entry in enumerate(config["nav"]):
        if isinstance(entry, dict) and "Tutorials" in entry:
            config["nav"][i] = {"Tutorials": pages}
    return config


def on_files(files, config):
    """Add the generated tutorial pages to the site's files."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, "tutorials/index.md", content=tutorials_index()))
    for script in tutorial_scripts():
        files.append(File.generated(config, page_uri(script), content=tutorial_page(script)))
    return files


def on_page_markdown(markdown, page, config, files):
    """Expand the generated-content placeholders and the API blocks of a page."""
    return python_markdown_lists(with_public_members(expand(markdown)))


def on_page_content(html, page, config, files):
    """Drop the Sphinx role prefixes docstrings carry (``:class:``) before their code."""
    return ROLE.sub("", html)
