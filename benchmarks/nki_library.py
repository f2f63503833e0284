"""Run AWS's NKI library tests (aws-neuron/nki-library: current-API kernels with torch
references) on nki-sim, from a snapshot fetched at run time (never committed here).

    python benchmarks/nki_library.py --repo PATH [--per-function 2] [--timeout 300] [--only TEXT]

``PATH`` is a checkout of the library or a bare git directory of it. The snapshot is copied to
a temporary directory, its ``test/conftest.py`` is replaced by ``nki_library_conftest.py``
(kernels run on the simulator, outputs compared with the tests' torch references by the
library's own comparator), the ``fast`` tests are collected, and the first (and the middle)
case of each test function is run, skipping shapes of 8192 or more. The harness needs
``allpairspy`` and ``attrs`` (``pip install allpairspy attrs``); ``pytest-timeout`` is used when
installed. Prints pytest's summary: each failure with its first error line."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _snapshot(repo: Path, dest: Path) -> None:
    if (repo / "src").is_dir():
        shutil.copytree(repo, dest, ignore=shutil.ignore_patterns(".git"))
        return
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "--git-dir", str(repo), "archive", "HEAD"],
                             check=True, capture_output=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


def _select(collected: str, per_function: int) -> list[str]:
    by_function: dict[str, list[str]] = {}
    for line in collected.splitlines():
        if "::" not in line or line.startswith("ERROR"):
            continue
        params = line.split("[", 1)[1] if "[" in line else ""
        if any(int(n) >= 8192 for n in re.findall(r"\d+", params)):
            continue  # (minutes each on the simulator)
        line = line if line.startswith("test/") else f"test/{line}"  # (ids relative to test/)
        by_function.setdefault(line.split("[")[0], []).append(line)
    picked = []
    for ids in by_function.values():
        picked += [ids[0], ids[len(ids) // 2]][: min(per_function, len(ids))]
    return sorted(set(picked), key=picked.index)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, required=True)
    ap.add_argument("--per-function", type=int, default=2, choices=(1, 2))
    ap.add_argument("--timeout", type=int, default=300, help="seconds per test")
    ap.add_argument("--only", default="", help="run the test ids containing this text")
    args = ap.parse_args()
    missing = [m for m in ("allpairspy", "attr") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"needs {missing}: pip install allpairspy attrs", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        lib = Path(tmp) / "nki-library"
        _snapshot(args.repo.resolve(), lib)
        shutil.copy(HERE / "nki_library_conftest.py", lib / "test" / "conftest.py")
        env_path = os.pathsep.join(
            [str(ROOT), str(lib / "src"), str(lib), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "fast"]
        env = {**os.environ, "PYTHONPATH": env_path}
        collect = [*base, "--collect-only", "-q", "test/integration"]
        collected = subprocess.run(collect, cwd=lib, env=env, capture_output=True, text=True).stdout
        ids = [i for i in _select(collected, args.per_function) if args.only in i]
        print(f"{len(ids)} test cases selected from the library's fast tests", flush=True)
        has_timeout = importlib.util.find_spec("pytest_timeout") is not None
        timeout = ["--timeout", str(args.timeout)] if has_timeout else []
        run = [*base, *timeout, "-q", "-rfEs", "--tb=line", *ids]
        return subprocess.run(run, cwd=lib, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
