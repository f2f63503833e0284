"""Every ```python block of the README runs: each in a fresh namespace, all in one subprocess
started at the repository root (imports are paid once), compiled under README.md's own name
and line numbers so a failure, and any NKIError it raises, points at the README line. A plain
``` block marked as a snippet's expected output must be what that snippet prints."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

# A snippet may opt out only when it needs something this machine does not have; the marker goes
# on the line just before its fence and must give the reason.
OPT_OUT = re.compile(r"<!-- snippet: not run \((?P<reason>[^)]+)\) -->")
MAX_OPT_OUTS = 2
# On the line before a plain ``` block: that block is what the snippet above it prints, with
# README line numbers written as README.md:<line>.
EXPECTED_OUTPUT = "<!-- expected output of the snippet above -->"
# simulator settings taken from the environment (NKI_HYPOTHESIS_PROFILE is kept)
SETTINGS = ("NKI_SIM_", "NKI_CLASSIC", "NKI_PRECISE_FP", "NEURON_")

RUNNER = r"""
import contextlib, io, json, linecache, sys, traceback
readme, results = sys.argv[1], sys.argv[2]
given = json.load(sys.stdin)
snippets, text = given["snippets"], given["readme"]
# Source lines (carets, variable names in messages) come from the README text the snippets were
# taken from, even if the file changes while they run (mtime None: never re-read).
linecache.cache[readme] = (len(text), None, text.splitlines(True), readme)
out = {}
for line, code in snippets:
    # Padding to the snippet's line makes tracebacks (and the tracer's locations) name
    # README.md:<line>, and linecache then shows the README's own source lines.
    source = "\n" * (line - 1) + code
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(source, readme, "exec"), {"__name__": "__readme__"})
        error = None
    except BaseException:  # a snippet's failure is reported, whatever it is
        error = traceback.format_exc()
    out[str(line)] = {"error": error, "stdout": printed.getvalue()}
    with open(results, "w") as f:
        json.dump(out, f)
"""


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
            assert runnable, f"README line {i + 1}: an expected output with no snippet above it"
            expected[runnable[-1][0]] = (i + 2, "\n".join(lines[i + 1 : end]))
            i = end
        elif fence.startswith("```"):
            i = _block_end(lines, i)
        i += 1
    return runnable, skipped, expected


def normalised(printed: str) -> str:
    """What a snippet printed, with README line numbers as README.md:<line>."""
    text = printed.replace(str(README), "README.md")
    text = re.sub(r"README\.md:\d+", "README.md:<line>", text)
    text = re.sub(r"\b(lines?) \d+(?:, \d+)*", r"\1 <line>", text)  # "at line 12" in messages
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


README_TEXT = README.read_text()
RUNNABLE, SKIPPED, EXPECTED = snippets(README_TEXT)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    path = tmp_path_factory.mktemp("readme") / "results.json"
    # the README describes the defaults: settings other tests (or the shell) left in the
    # environment are not the reader's
    env = {k: v for k, v in os.environ.items() if not k.startswith(SETTINGS)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env.setdefault("MPLBACKEND", "Agg")
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(README), str(path)],
        input=json.dumps({"snippets": RUNNABLE, "readme": README_TEXT}),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    done = json.loads(path.read_text()) if path.exists() else {}
    return done, proc


def test_the_readme_has_snippets_and_few_opt_outs():
    assert len(RUNNABLE) >= 10
    assert len(SKIPPED) <= MAX_OPT_OUTS, f"too many snippets opted out: {SKIPPED}"


@pytest.mark.parametrize("line", [line for line, _ in RUNNABLE], ids=lambda n: f"README.md:{n}")
def test_readme_snippet_runs(line, results):
    done, proc = results
    assert str(line) in done, (
        f"the README snippet at line {line} never finished (the runner died before it):\n"
        f"{proc.stderr[-3000:]}"
    )
    error = done[str(line)]["error"]
    if error is not None:
        pytest.fail(f"the README snippet at line {line} failed:\n{error}", pytrace=False)
    if line in EXPECTED:
        at, text = EXPECTED[line]
        got = normalised(done[str(line)]["stdout"])
        assert got == text, (
            f"README line {at}: the output shown is not what the snippet at line {line} prints:"
            f"\n{got}"
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


def test_expected_output_is_normalised_to_readme_lines():
    printed = f"{README}:123:5: [err_x] message, see lines 3, 7  \n  source\n"
    assert normalised(printed) == "README.md:<line>:5: [err_x] message, see lines <line>\n  source"
