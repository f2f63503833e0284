"""The runner of the documentation's examples: every ```python block of the README and of the
site's Markdown pages (docs/**/*.md), each in a fresh namespace, all in one subprocess started at
the repository root (imports are paid once), compiled under its own file's name and line numbers
so a failure, and any NKIError it raises, points at that line of that file. A plain ``` block
marked as a snippet's expected output must be what that snippet prints. ``site_table`` gives
the tests of the project's tables the table a site page shows.

Test files import this module as ``snippets`` (``tests/conftest.py`` puts ``tests/`` on
``sys.path``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

# A snippet may opt out only when it needs something this machine does not have; the marker goes
# on the line just before its fence and must give the reason.
OPT_OUT = re.compile(r"<!-- snippet: not run \((?P<reason>[^)]+)\) -->")
MAX_OPT_OUTS = 2  # per file
# On the line before a plain ``` block: that block is what the snippet above it prints, with
# the file's line numbers written as <file name>:<line> (README.md:<line>, debugging.md:<line>).
EXPECTED_OUTPUT = "<!-- expected output of the snippet above -->"
# simulator settings taken from the environment (NKI_HYPOTHESIS_PROFILE is kept)
SETTINGS = ("NKI_SIM_", "NKI_CLASSIC", "NKI_PRECISE_FP", "NEURON_")

RUNNER = r"""
import contextlib, io, json, linecache, sys, traceback
results = sys.argv[1]
given = json.load(sys.stdin)
out = {}
for path, text, snippets in given:
    # Source lines (carets, variable names in messages) come from the text the snippets were
    # taken from, even if the file changes while they run (mtime None: never re-read).
    linecache.cache[path] = (len(text), None, text.splitlines(True), path)
    for line, code in snippets:
        # Padding to the snippet's line makes tracebacks (and the tracer's locations) name
        # <file>:<line>, and linecache then shows the file's own source lines.
        source = "\n" * (line - 1) + code
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(source, path, "exec"), {"__name__": "__snippet__"})
            error = None
        except BaseException:  # a snippet's failure is reported, whatever it is
            error = traceback.format_exc()
        out[f"{path}:{line}"] = {"error": error, "stdout": printed.getvalue()}
        with open(results, "w") as f:
            json.dump(out, f)
"""


def site_pages() -> list[Path]:
    """The site's Markdown pages, in path order."""
    return sorted(DOCS.rglob("*.md"))


def label(path: Path, line: int) -> str:
    """How a snippet is named in test ids and messages: ``docs/guides/testing.md:12``."""
    name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    return f"{name}:{line}"


def _block_end(lines: list[str], start: int) -> int:
    return next(j for j in range(start + 1, len(lines)) if lines[j].strip() == "```")


def snippets(
    text: str,
) -> tuple[list[tuple[int, str]], list[tuple[int, str]], dict[int, tuple[int, str]]]:
    """(line of the first code line, code) of every ```python block; the opted-out ones as
    (line, reason); and the expected outputs as {snippet line: (output line, text)}."""
    lines = text.splitlines()
    runnable, skipped, expected = [], [], {}
    i = 0
    while i < len(lines):
        fence = lines[i].strip()
        marker = lines[i - 1].strip() if i else ""
        if fence == "```python":
            end = _block_end(lines, i)
            m = OPT_OUT.fullmatch(marker)
            if m:
                skipped.append((i + 2, m["reason"]))
            else:
                runnable.append((i + 2, "\n".join(lines[i + 1 : end]) + "\n"))
            i = end
        elif fence.startswith("```") and marker == EXPECTED_OUTPUT:
            end = _block_end(lines, i)
            assert runnable, f"line {i + 1}: an expected output with no snippet above it"
            expected[runnable[-1][0]] = (i + 2, "\n".join(lines[i + 1 : end]))
            i = end
        elif fence.startswith("```"):
            i = _block_end(lines, i)
        i += 1
    return runnable, skipped, expected


def normalised(printed: str, path: Path = README) -> str:
    """What a snippet printed, with the file's line numbers as <file name>:<line>."""
    text = printed.replace(str(path), path.name)
    text = re.sub(rf"{re.escape(path.name)}:\d+", f"{path.name}:<line>", text)
    text = re.sub(r"\b(lines?) \d+(?:, \d+)*", r"\1 <line>", text)  # "at line 12" in messages
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def run(paths: list[Path], results: Path) -> tuple[dict, subprocess.CompletedProcess]:
    """Run every runnable snippet of ``paths`` in one subprocess at the repository root; return
    {label: {"error", "stdout"}} of the snippets that finished, and the process."""
    given = []
    for path in paths:
        text = path.read_text()
        given.append((str(path), text, snippets(text)[0]))
    # the pages describe the defaults: settings other tests (or the shell) left in the
    # environment are not the reader's
    env = {k: v for k, v in os.environ.items() if not k.startswith(SETTINGS)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env.setdefault("MPLBACKEND", "Agg")
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(results)],
        input=json.dumps(given),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    done = json.loads(results.read_text()) if results.exists() else {}
    named = {}
    for key, result in done.items():
        path, _, line = key.rpartition(":")
        named[label(Path(path), int(line))] = result
    return named, proc


def site_table(page: str, name: str) -> str:
    """The generated table the site page ``docs/<page>`` shows: the page must hold the line
    ``<!-- generated: name -->``, which ``docs/hooks.py`` replaces at build time with the
    Markdown its ``GENERATED`` entry builds from the project's own table."""
    text = (DOCS / page).read_text()
    assert f"<!-- generated: {name} -->" in text.splitlines(), f"docs/{page} lost its {name} table"
    if str(DOCS) not in sys.path:
        sys.path.insert(0, str(DOCS))
    import hooks

    return hooks.generated(name)
