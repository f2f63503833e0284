"""The documentation site builds in strict mode (a broken link, anchor, reference or nav entry
fails the build), and its generated pages hold what the project's tables and tutorials say."""

from __future__ import annotations

import html
import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from snippets import ROOT

pytest.importorskip("mkdocs", reason="mkdocs (the [docs] extra) is absent")
pytest.importorskip("material", reason="mkdocs-material (the [docs] extra) is absent")
pytest.importorskip("mkdocstrings", reason="mkdocstrings (the [docs] extra) is absent")

sys.path.insert(0, str(ROOT / "docs"))
import hooks  # noqa: E402 - docs/hooks.py, the site's generator

from nki import error_codes, isa_spec  # noqa: E402


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    proc = build(ROOT / "mkdocs.yml", out)
    assert proc.returncode == 0, f"the strict build failed:\n{proc.stderr[-6000:]}"
    return out


def page(site: Path, uri: str) -> str:
    """The HTML of a page of the built site."""
    return (site / uri / "index.html").read_text()


def text_of(site: Path, uri: str) -> str:
    """The text of a page of the built site (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", page(site, uri)))


def test_the_site_builds_in_strict_mode(site):
    for uri in ("getting-started", "guides/writing-kernels", "reference/isa", "changelog"):
        assert (site / uri / "index.html").is_file(), uri


def test_the_error_page_gives_every_codes_meaning_and_fix(site):
    rows = {}
    for row in page(site, "reference/error-codes").split("<tr>")[1:]:
        code = re.search(r'<span id="(err_\w+)"', row)
        if code:
            rows[code[1]] = html.unescape(re.sub(r"<[^>]+>", "", row))
    assert list(rows) == list(error_codes.ERROR_CODES)
    for code, text in rows.items():
        assert error_codes.ERROR_CODES[code].replace("`", "") in text, code
        assert error_codes.FIXES[code].replace("`", "") in text, code


# module -> the reference page that lists its __all__
REFERENCE = {
    "nki": "reference/nki",
    "nki.language": "reference/language",
    "nki.isa": "reference/isa",
    "nki.testing": "reference/testing",
    "frontends.torch": "reference/frontends",
    "frontends.jax": "reference/frontends",
    "frontends.compat": "reference/frontends",
    "frontends.model_builder": "reference/frontends",
    "frontends.pipeline": "reference/frontends",
}


@pytest.mark.parametrize("name", REFERENCE)
def test_the_api_reference_documents_every_public_name(site, name):
    module = importlib.import_module(name)
    text = page(site, REFERENCE[name])
    for member in module.__all__:
        if inspect.ismodule(getattr(module, member)):
            continue
        ident = "nki.jit.jit" if f"{name}.{member}" == "nki.jit" else f"{name}.{member}"
        assert f'id="{ident}"' in text, ident


def test_a_reference_entry_shows_its_docstring(site):
    text = page(site, "reference/language")

    def entry(ident: str) -> str:
        return html.unescape(re.sub(r"<[^>]+>", "", text[text.index(f'id="{ident}"') :][:6000]))

    assert "partition dim <= 128" in entry("nki.language.load")  # nl.load's partition limit
    # a function named like its module, documented by the site's hook
    matmul = entry("nki.language.matmul")
    assert "matmul(x, y, *, transpose_x=False" in matmul and "y's free dim <= 512" in matmul
    assert ":class:" not in text_of(site, "reference/isa")


def test_the_generated_tables_are_the_projects_tables(site):
    isa = page(site, "reference/isa")
    for name in isa_spec.names():
        assert f"<td><code>{name}</code></td>" in isa, name
    language = page(site, "reference/language")
    for line in hooks.generated("optable").splitlines()[2:]:
        op = line.split("`")[1]
        assert f"<td><code>{op}</code></td>" in language, op


def test_every_tutorial_has_a_page_with_its_source(site):
    scripts = hooks.tutorial_scripts()
    assert len(scripts) >= 20
    index = page(site, "tutorials")
    for script in scripts:
        rel = script.relative_to(ROOT / "tutorials").with_suffix("")
        code = text_of(site, f"tutorials/{rel.as_posix()}")
        for line in script.read_text().splitlines():  # the whole source is on the page
            assert line.strip() in code, (rel, line)
        assert f'href="{rel.as_posix()}/"' in index, rel


def test_a_placeholder_is_replaced_and_an_unknown_one_fails():
    text = hooks.expand("intro\n<!-- generated: error-catalogue -->\nend\n")
    assert text == f"intro\n{error_codes.catalogue_markdown()}\nend\n"
    with pytest.raises(KeyError):
        hooks.expand("<!-- generated: no-such-table -->\n")


def test_github_lists_are_laid_out_for_python_markdown(site):
    text = "Intro:\n- a\n  - nested\n    more\n\n  Para in item\n- b\n```\n- code\n```\n"
    assert hooks.python_markdown_lists(text) == (
        "Intro:\n\n- a\n    - nested\n      more\n\n    Para in item\n\n- b\n```\n- code\n```\n"
    )
    backends = page(site, "backends")
    assert re.search(r"What runs batched:</p>\s*<ul>", backends)
    assert re.search(
        r"every backend:</p>\s*<ul>\s*<li>parameters the kernel never writes", backends
    )


def test_a_broken_link_or_anchor_fails_the_strict_build(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(
        "# Home\n\n[a page](missing.md), [a heading](other.md#nowhere)\n"
    )
    (docs / "other.md").write_text("# Other\n\n## Somewhere\n")
    config = (ROOT / "mkdocs.yml").read_text()
    config = re.sub(r"(?ms)^hooks:.*?(?=^\S)", "", config)
    config = re.sub(r"(?ms)^nav:.*", "nav:\n  - index.md\n  - other.md\n", config)
    config = re.sub(r"(?m)^  - mkdocstrings:.*?(?=^\S)", "", config, flags=re.S)
    (tmp_path / "mkdocs.yml").write_text(config.replace("docs_dir: docs", f"docs_dir: {docs}"))
    proc = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode != 0
    assert "missing.md" in proc.stderr and "nowhere" in proc.stderr, proc.stderr[-3000:]
