"""Run the end-to-end examples of the model-level reference documents through ``nki-compat``.

The examples are AWS's and Tenstorrent's, not ours: they are never copied into this
repository. This script finds the reference documents (``shared/reference/seeds/`` next to the
repository or one of its parent directories, or ``$NKI_REFERENCE_SEEDS``), extracts every code
block of their usage-example sections at run time into a temporary directory, and runs each
one unmodified as ``python -m frontends.compat example.py``. An example passes when it exits
cleanly and, where it leaves ``cpu_out`` and ``neuron_out`` (its CPU reference and the
simulated model's output), the two agree under ``torch.testing.assert_close``'s default
tolerances (checked by ``example_check.py`` after the example's own asserts).

    python tests/frontends/reference_examples.py [--max-world N] [--list] [name-substring]

Without the reference documents it prints SKIPPED and exits 0."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("modelbuilder-v2.txt", "pybuda-api.txt")


@dataclass(frozen=True)
class Example:
    doc: str
    name: str
    code: str

    @property
    def world_size(self) -> int:
        """The largest ``world_size=`` the example asks for (1 if none)."""
        return max([1, *map(int, re.findall(r"world_size=(\d+)", self.code))])

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "_", f"{self.doc[:-4]} {self.name}".lower()).strip("_")


def seeds_dir() -> Path | None:
    """The reference documents' folder, or None where it is absent."""
    env = os.environ.get("NKI_REFERENCE_SEEDS")
    if env:
        return Path(env) if Path(env).is_dir() else None
    for base in (ROOT, *ROOT.parents):
        d = base / "shared" / "reference" / "seeds"
        if d.is_dir():
            return d
    return None


def _title(lines: list[str], i: int) -> str:
    """The bold line or heading nearest above line ``i``."""
    for j in range(i - 1, -1, -1):
        s = lines[j].strip()
        if re.fullmatch(r"\*\*(.+)\*\*", s):
            return s.strip("*").replace("``", "")
        if j + 1 < len(lines) and re.fullmatch(r"[~^=\-]{3,}", lines[j + 1].strip()) and s:
            return s
    return "example"


def extract(doc: Path) -> list[Example]:
    """The code blocks (``::`` followed by an indented block) after the document's
    usage-examples heading, with the section and title each appears under."""
    lines = doc.read_text().splitlines()
    start = next((i for i, s in enumerate(lines) if s.strip() == "Usage Examples"), None)
    if start is None:
        return []
    out, section, i = [], "", start + 1
    while i < len(lines):
        s = lines[i]
        if i + 1 < len(lines) and re.fullmatch(r"~{3,}", lines[i + 1].strip()) and s.strip():
            section = s.strip()
        if s.strip() == "::":
            block, j = [], i + 1
            while j < len(lines) and (not lines[j].strip() or lines[j].startswith("   ")):
                block.append(lines[j][3:] if lines[j].startswith("   ") else "")
                j += 1
            code = "\n".join(block).strip("\n") + "\n"
            if "import" in code:
                title = _title(lines, i)
                out.append(Example(doc.name, f"{section}: {title}" if section else title, code))
            i = j
            continue
        i += 1
    return out


def examples() -> list[Example]:
    d = seeds_dir()
    if d is None:
        return []
    return [e for name in DOCS if (d / name).exists() for e in extract(d / name)]


def run(batch: list[Example], workdir: Path, timeout: float = 3600) -> tuple[bool, str, float]:
    """Run examples unmodified through one nki-compat process, one after another, each in a
    fresh namespace; (all passed, output tail, seconds)."""
    scripts = []
    for example in batch:
        scripts.append(workdir / f"{example.slug}.py")
        scripts[-1].write_text(example.code)
    check = Path(__file__).with_name("example_check.py")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.setdefault("NKI_SIM_CACHE_DIR", str(workdir / "cache"))
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "frontends.compat", str(check), *map(str, scripts)],
        capture_output=True,
        text=True,
        env=env,
        cwd=workdir,
        timeout=timeout,
    )
    dt = time.perf_counter() - t0
    ok = proc.returncode == 0 and all(f"EXAMPLE OK {s}" in proc.stdout for s in scripts)
    return ok, (proc.stdout + proc.stderr)[-4000:], dt


def main(argv: list[str]) -> int:
    max_world = None
    if "--max-world" in argv:
        k = argv.index("--max-world")
        max_world = int(argv[k + 1])
        del argv[k : k + 2]
    found = examples()
    if seeds_dir() is None:
        print("SKIPPED: the reference documents (shared/reference/seeds) are absent")
        return 0
    words = [a for a in argv if not a.startswith("--")]
    picked = [e for e in found if not words or any(w in e.slug for w in words)]
    if max_world is not None:
        picked = [e for e in picked if e.world_size <= max_world]
    print(f"{len(found)} example(s) in {', '.join(DOCS)}; running {len(picked)}")
    if "--list" in argv:
        for e in picked:
            print(f"  {e.slug} (world_size {e.world_size})")
        return 0
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for e in picked:
            ok, tail, dt = run([e], Path(tmp))
            print(f"{'PASS' if ok else 'FAIL'} {e.slug} ({dt:.1f} s)")
            if not ok:
                failed += 1
                print(tail)
    print("PASS" if not failed else f"FAIL: {failed} example(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
