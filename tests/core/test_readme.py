"""The README stays true: its first two lines are the CI commands, its links resolve, and the
pages other work adds to keep their place."""

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


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


def test_readme_and_site_have_homes_for_new_material():
    """Pages and sections other work adds to: keep them (or update them here and in the notes).
    The README is short; the manual is the site's pages under docs/."""
    homes = {
        "README.md": ("A 5-minute tour", "What it does", "Where to read more"),
        "docs/getting-started.md": ("A 5-minute tour",),
        "docs/guides/writing-kernels.md": ("The current API (destination-first)",),
        "docs/guides/multi-core.md": ("Grids, two cores and collectives",),
        "docs/guides/troubleshooting.md": ("Troubleshooting",),
        "docs/guides/speed.md": ("Measured speed",),
        "docs/reference/isa.md": ("nki.isa instructions",),
        "docs/reference/checks.md": ("What the simulator checks",),
    }
    for page, wanted in homes.items():
        headings = set(re.findall(r"^#+ (.*)$", (README.parent / page).read_text(), re.M))
        for h in wanted:
            assert h in headings, (page, h)
