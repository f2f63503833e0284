"""Every ```python block of the README runs: each in a fresh namespace, all in one subprocess
started at the repository root (imports are paid once), compiled under README.md's own name
and line numbers so a failure, and any NKIError it raises, points at the README line."""

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

RUNNER = r"""
import json, sys, traceback
readme, results = sys.argv[1], sys.argv[2]
snippets = json.load(sys.stdin)
out = {}
for line, code in snippets:
    # Padding to the snippet's line makes tracebacks (and the tracer's locations) name
    # README.md:<line>, and linecache then shows the README's own source lines.
    source = "\n" * (line - 1) + code
    try:
        exec(compile(source, readme, "exec"), {"__name__": "__readme__"})
        out[str(line)] = None
    except BaseException:  # a snippet's failure is reported, whatever it is
        out[str(line)] = traceback.format_exc()
    with open(results, "w") as f:
        json.dump(out, f)
"""


def snippets(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(line of the first code line, code) of every ```python block, and the opted-out ones
    as (line, reason)."""
    lines = text.splitlines()
    runnable, skipped = [], []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            code = "\n".join(lines[i + 1 : end]) + "\n"
            m = OPT_OUT.fullmatch(lines[i - 1].strip()) if i else None
            if m:
                skipped.append((i + 2, m["reason"]))
            else:
                runnable.append((i + 2, code))
            i = end
        i += 1
    return runnable, skipped


RUNNABLE, SKIPPED = snippets(README.read_text())


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    path = tmp_path_factory.mktemp("readme") / "results.json"
    path_entries = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path_entries))
    env.setdefault("MPLBACKEND", "Agg")
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(README), str(path)],
        input=json.dumps(RUNNABLE),
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
    if done[str(line)] is not None:
        pytest.fail(f"the README snippet at line {line} failed:\n{done[str(line)]}", pytrace=False)


def test_snippet_extraction_reports_lines_and_opt_outs():
    text = (
        "intro\n```python\nx = 1\n```\n<!-- snippet: not run (needs a GPU) -->\n```python\ny\n```\n"
    )
    runnable, skipped = snippets(text)
    assert runnable == [(3, "x = 1\n")]
    assert skipped == [(7, "needs a GPU")]
