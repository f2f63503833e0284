"""Every ```python block of the README and of the documentation site's pages runs (the runner is
tests/snippets.py): each in a fresh namespace, all in one subprocess, named by its file and line
so a failure points at it; a block marked as a snippet's expected output is what it prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from snippets import (
    EXPECTED_OUTPUT,
    MAX_OPT_OUTS,
    README,
    ROOT,
    label,
    normalised,
    run,
    site_pages,
    snippets,
)

FILES = [README, *site_pages()]
PARSED = {path: snippets(path.read_text()) for path in FILES}
CASES = [(path, line) for path in FILES for line, _ in PARSED[path][0]]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run(FILES, tmp_path_factory.mktemp("snippets") / "results.json")


def test_the_readme_and_the_site_have_snippets_and_few_opt_outs():
    assert len(PARSED[README][0]) >= 4  # the tour
    assert sum(len(PARSED[p][0]) for p in FILES if p != README) >= 40
    for path in FILES:
        skipped = PARSED[path][1]
        assert len(skipped) <= MAX_OPT_OUTS, f"too many snippets opted out in {path}: {skipped}"


@pytest.mark.parametrize(("path", "line"), CASES, ids=[label(p, n) for p, n in CASES])
def test_snippet_runs(path: Path, line: int, results):
    done, proc = results
    name = label(path, line)
    assert name in done, (
        f"the snippet at {name} never finished (the runner died before it):\n{proc.stderr[-3000:]}"
    )
    error = done[name]["error"]
    if error is not None:
        pytest.fail(f"the snippet at {name} failed:\n{error}", pytrace=False)
    expected = PARSED[path][2]
    if line in expected:
        at, text = expected[line]
        got = normalised(done[name]["stdout"], path)
        assert got == text, (
            f"{path.relative_to(ROOT)} line {at}: the output shown is not what the snippet at "
            f"line {line} prints:\n{got}"
        )


def test_snippet_extraction_reports_lines_opt_outs_and_outputs():
    text = (
        "intro\n```python\nprint(1)\n```\n"
        f"{EXPECTED_OUTPUT}\n```\n1\n```\n"
        "<!-- snippet: not run (needs a GPU) -->\n```python\ny\n```\n"
        "```\nshell\n```\n"
    )
    runnable, skipped, expected = snippets(text)
    assert runnable == [(3, "print(1)\n")]
    assert skipped == [(11, "needs a GPU")]
    assert expected == {3: (7, "1")}


def test_expected_output_is_normalised_to_the_files_lines():
    printed = f"{README}:123:5: [err_x] message, see lines 3, 7  \n  source\n"
    assert normalised(printed) == "README.md:<line>:5: [err_x] message, see lines <line>\n  source"
    page = ROOT / "docs" / "guides" / "debugging.md"
    printed = f"{page}:40:5: [err_x] at line 12\n"
    assert normalised(printed, page) == "debugging.md:<line>:5: [err_x] at line <line>"


def test_a_failing_snippet_is_reported_at_its_file_and_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```python\nprint('ok')\n```\n\n```python\nx = 1\nx / 0\n```\n")
    done, _ = run([page], tmp_path / "results.json")
    assert done[f"{page}:4"] == {"error": None, "stdout": "ok\n"}
    error = done[f"{page}:8"]["error"]
    assert f'File "{page}", line 9' in error and "ZeroDivisionError" in error
    assert "x / 0" in error  # the page's own source line
