"""The README stays true: its op list is the op table, its first two lines are the CI commands."""

import re
import sys
from pathlib import Path

from nki import optable

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_op_list_is_generated_from_the_op_table():
    text = README.read_text()
    m = re.search(r"<!-- optable:begin[^>]*-->\n(.*?)\n<!-- optable:end -->", text, re.S)
    assert m, "README lost its optable markers"
    assert m.group(1).strip() == optable.markdown().strip()


def test_readme_opens_with_the_demo_and_test_commands():
    lines = README.read_text().splitlines()
    assert lines[0] == "```"
    demo = "python tutorials/tensor_addition/spmd_tensor_addition.py"
    assert lines[1] == f"pip install -e . && {demo}"
    assert lines[2] == 'pip install -e ".[all]" && python -m pytest'
    ci = (README.parent / ".ci" / "run").read_text()
    assert "grep -m1 -E '^pip install .*pytest' README.md" in ci


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(text: str) -> set[str]:
    return {_anchor(m) for m in re.findall(r"^#+ (.*)$", text, re.M)}


def _generated_pages() -> set[Path]:
    """The site pages docs/hooks.py makes at build time (the tutorial pages)."""
    sys.path.insert(0, str(README.parent / "docs"))
    import hooks

    return {README.parent / "docs" / hooks.page_uri(s) for s in hooks.tutorial_scripts()} | {
        README.parent / "docs" / "tutorials" / "index.md"
    }


def test_readme_and_docs_links_resolve():
    """Links of the README and the top-level docs pages (the site's strict build checks every
    page's links and anchors as the site renders them)."""
    pages = [README, *sorted((README.parent / "docs").glob("*.md"))]
    generated = _generated_pages()
    broken = []
    for page in pages:
        text = page.read_text()
        prose = re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if target.startswith(("http://", "https://")):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if dest in generated:
                continue
            if not dest.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text()):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_readme_has_homes_for_new_material():
    """Sections other work adds to: keep them (or update the headings here and in the notes)."""
    headings = set(re.findall(r"^#+ (.*)$", README.read_text(), re.M))
    for h in (
        "A 5-minute tour",
        "The current API (destination-first)",
        "SPMD grids, LNC=2 and collectives",
        "Troubleshooting",
        "Measured speed",
        "Reference",
    ):
        assert h in headings, h
