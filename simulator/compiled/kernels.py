"""The Numba backend's library of small compiled kernels, one per instruction kind and access
shape, shared by every traced kernel.

A kernel runs one instruction over its tile. It is specialised only on what changes the loop
body (the op expression, how each operand is read: fp32, bfloat16 bits, bool bytes or a
scalar; accumulation; masking; two-phase writes) and parameterised by everything else, so a
kernel of 250 unrolled instructions uses a handful of them:

* tiles are padded to rank 4 (leading axes of size 1); ``P[po:]`` (int64) holds the tile
  shape, a mask block, a bounds-check block and each array's flat strides per tile axis;
* every access is an offset into the tensor's flat (C-contiguous) storage: a base (the part
  depending on program ids and loop iterators, computed by the driver into ``D[do:]``) plus
  strides per tile axis. Offsets are unsigned (numba then skips negative-index wrapping; a
  negative stride wraps around modulo 2**64 and still lands on the right element);
* scalar operands are fp32 values in ``FC[fo:]``.

Kernels return 0, or 1 when a masked-in element would leave its tensor (checked before
anything is written; the caller re-runs the instruction on the interpreter for the error).

Each kernel's source is written to the disk cache (``numba_backend.cache_dir()``) under a hash
of its text and compiled with ``cache=True``, so a new process loads it instead of compiling.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from nki.parsing import PARSE_LOCK

RANK = 4
MASK_OPS = {"<": 0, "<=": 1, ">": 2, ">=": 3, "==": 4, "!=": 5}
_VERSION = "7"  # bump when generated code changes meaning

HEADER = """# nki-sim Numba backend library kernel
import numpy as np
from numba import njit
from simulator.compiled.rt import (checks_box_fail, checks_fail, fmax, fmin, from_bf16, fsign,
                                   mask_ok, mask_ranges, to_bf16)

U = np.uint64


@njit(cache=True, error_model="numpy", boundscheck=False)
"""

# how compiled code reads a tensor element as fp32 / writes an fp32 value with the
# interpreter's rounding, by kind: 'f' fp32, 'h' bfloat16 bits, 'b' bool bytes
READ = {"f": "{x}", "h": "from_bf16({x})", "b": "np.float32({x})"}
STORE = {"f": "{x} = {v}", "h": "{x} = to_bf16({v})", "b": "{x} = np.uint8(({v}) != 0)"}
IDENT = {"sum": "np.float32(0.0)", "max": "np.float32(-np.inf)", "min": "np.float32(np.inf)"}

# the parameter block every kernel starts with (tile shape, mask block, check block), the
# mask's per-axis ranges (l, h) and whether conditions remain to test per element (res)
_PRELUDE_T = """    n0, n1, n2, n3 = P[po], P[po + 1], P[po + 2], P[po + 3]
    mp = po + 4
    cp = mp + 1 + 5 * P[mp]
    sp = cp + 1 + 5 * P[cp]
    md = do
    cd = md + P[mp]
    bd = cd + P[cp]
    {ranges}
    ts3 = U(1)
    ts2 = U(n3)
    ts1 = U(n2 * n3)
    ts0 = U(n1 * n2 * n3)
"""
_MASKED = "l0, l1, l2, l3, h0, h1, h2, h3, res = mask_ranges(P, mp, D, md, n0, n1, n2, n3)"
# (zeros computed, not literal: numba would specialise callees on a literal 0)
_WHOLE = "l0 = l1 = l2 = l3 = n0 - n0\n    h0, h1, h2, h3, res = n0, n1, n2, n3, False"


def _prelude(s: Spec) -> str:
    return _PRELUDE_T.replace("{ranges}", _MASKED if s.mask or s.kind == "check" else _WHOLE)


RESIDUAL = "if res and not mask_ok(P, mp, D, md, i0, i1, i2, i3):"
IN_MASK = (
    "(l0 <= i0 < h0 and l1 <= i1 < h1 and l2 <= i2 < h2 and l3 <= i3 < h3 and "
    "(not res or mask_ok(P, mp, D, md, i0, i1, i2, i3)))"
)


@dataclass(frozen=True)
class Spec:
    """What a kernel is specialised on; ``source()`` is its code and ``key`` names it."""

    kind: str  # 'ew' | 'copy' | 'reduce' | 'check'
    expr: str = ""  # ew: fp32 expression over {v0}, {v1}...; reduce: 'sum' | 'max' | 'min'
    dst: str = ""  # kind of the destination ('f' / 'h' / 'b')
    operands: tuple[str, ...] = ()  # ew: kind of each operand, 'c' for a scalar in FC
    acc: str = ""  # ew: accumulation expression over {a} (old value) and {b}, or ''
    mask: int = 0  # 0 unmasked, 1 masked-out lanes skipped, 2 masked-out lanes set to 0
    two_phase: bool = False  # compute the whole tile into ``tmp`` before writing any of it
    checks: bool = False  # bounds-check masked-in elements before writing anything
    unit: bool = False  # ew / copy: every array's innermost stride is 1

    def source(self) -> str:
        return HEADER + {"ew": _ew, "copy": _copy, "reduce": _reduce, "check": _check}[self.kind](
            self
        )

    @property
    def key(self) -> str:
        import numba

        text = f"{_VERSION}\n{numba.__version__}\n{np.__version__}\n{self.source()}"
        return hashlib.sha256(text.encode()).hexdigest()[:20]


def _loops(
    body: list[str],
    offsets: list[tuple[str, str, str]],
    depth: int = 1,
    full: bool = False,
    unit: bool = False,
) -> list[str]:
    """A rank-4 loop nest over the mask's ranges (``full``: the whole tile); ``offsets`` =
    (name, base, stride prefix): ``name`` is the unsigned flat offset
    ``base + sum(u_k * stride_k)`` at the innermost point (computed level by level). ``unit``:
    every innermost stride is 1 (LLVM can then vectorise the innermost loop)."""
    out = []
    for k in range(RANK):
        ind = "    " * (depth + k)
        out.append(f"{ind}for i{k} in range({f'n{k}' if full else f'l{k}, h{k}'}):")
        out.append(f"{ind}    u{k} = U(i{k})")
        for name, base, st in offsets:
            prev = base if k == 0 else f"{name}_{k - 1}"
            here = name if k == RANK - 1 else f"{name}_{k}"
            step = f"u{k}" if unit and k == RANK - 1 else f"u{k} * {st}{k}"
            out.append(f"{ind}    {here} = {prev} + {step}")
    ind = "    " * (depth + RANK)
    return out + [ind + line for line in body]


def _strides(prefix: str, at: str) -> str:
    return "\n".join(f"    {prefix}{k} = U(P[{at} + {k}])" for k in range(RANK)) + "\n"


def _check_pass(s: Spec) -> str:
    """Return 1 when a masked-in element's index leaves its tensor: over the mask's box at
    once, or per element when conditions remain to test."""
    if not s.checks:
        return ""
    body = [
        RESIDUAL,
        "    continue",
        "if checks_fail(P, cp, D, cd, i0, i1, i2, i3):",
        "    return 1",
    ]
    box = "checks_box_fail(P, cp, D, cd, l0, l1, l2, l3, h0, h1, h2, h3)"
    head = f"    if not res:\n        if {box}:\n            return 1\n    else:\n"
    return head + "\n".join(_loops(body, [], depth=2)) + "\n"


def _ew(s: Spec) -> str:
    arrays = [j for j, k in enumerate(s.operands) if k != "c"]
    consts = [j for j, k in enumerate(s.operands) if k == "c"]
    args = ", ".join(["P, po, D, do, FC, fo, dst"] + [f"x{j}" for j in arrays] + ["tmp"])
    src = f"def kern({args}):\n" + _prelude(s) + _check_pass(s)
    src += _strides("ds", "sp") + "    db = U(D[bd])\n"
    for n, j in enumerate(arrays):
        src += _strides(f"a{j}s", f"sp + {4 * (n + 1)}") + f"    a{j}b = U(D[bd + {n + 1}])\n"
    for n, j in enumerate(consts):
        src += f"    v{j} = FC[fo + {n}]\n"
    if s.mask == 2:  # masked-out lanes of the (whole, dense) destination read as 0
        src += "    dst[:] = np.float32(0.0)\n"
    body = [RESIDUAL, "    continue"] if s.mask else []
    body += [f"v{j} = " + READ[s.operands[j]].format(x=f"x{j}[o{j}]") for j in arrays]
    body.append("v = " + s.expr.format(**{f"v{j}": f"v{j}" for j in range(len(s.operands))}))
    if s.acc:
        body.append("v = " + s.acc.format(a=READ[s.dst].format(x="dst[d]"), b="v"))
    body.append("tmp[q] = v" if s.two_phase else STORE[s.dst].format(x="dst[d]", v="v"))
    offs = [("d", "db", "ds")] + [(f"o{j}", f"a{j}b", f"a{j}s") for j in arrays]
    if s.two_phase:
        offs.append(("q", "U(0)", "ts"))
    src += "\n".join(_loops(body, offs, unit=s.unit)) + "\n"
    if s.two_phase:
        body = [RESIDUAL, "    continue"] if s.mask else []
        body.append(STORE[s.dst].format(x="dst[d]", v="tmp[q]"))
        offs = [("d", "db", "ds"), ("q", "U(0)", "ts")]
        src += "\n".join(_loops(body, offs, unit=s.unit)) + "\n"
    return src + "    return 0\n"


def _copy(s: Spec) -> str:
    """A same-storage move: bits are copied (NaN payloads included), as NumPy does."""
    src = "def kern(P, po, D, do, dst, x0, tmp):\n" + _prelude(s) + _check_pass(s)
    src += _strides("ds", "sp") + _strides("a0s", "sp + 4")
    src += "    db = U(D[bd])\n    a0b = U(D[bd + 1])\n"
    mask = [RESIDUAL, "    continue"] if s.mask else []
    target = "tmp[q]" if s.two_phase else "dst[d]"
    offs = [("d", "db", "ds"), ("o0", "a0b", "a0s")]
    if s.two_phase:
        offs.append(("q", "U(0)", "ts"))
    src += "\n".join(_loops(mask + [f"{target} = x0[o0]"], offs, unit=s.unit)) + "\n"
    if s.two_phase:
        offs = [("d", "db", "ds"), ("q", "U(0)", "ts")]
        src += "\n".join(_loops(mask + ["dst[d] = tmp[q]"], offs, unit=s.unit)) + "\n"
    return src + "    return 0\n"


def _check(s: Spec) -> str:
    return "def kern(P, po, D, do):\n" + _prelude(s) + _check_pass(s) + "    return 0\n"


def _reduce(s: Spec) -> str:
    """``sum`` / ``max`` / ``min`` over the trailing ``nin`` (padded) tile axes; the outer
    points map, in C order, onto the destination tile (shape ``e``). Masked-out elements count
    as the identity and are not read; a destination element is written only when some element
    of its row is masked in (every one when unmasked)."""
    op, masked = s.expr, bool(s.mask)
    ident = IDENT[op]
    src = "def kern(P, po, D, do, dst, x0, row):\n" + _prelude(s)
    src += """    nin = P[sp]
    e0, e1, e2, e3 = P[sp + 1], P[sp + 2], P[sp + 3], P[sp + 4]
"""
    src += _strides("ds", "sp + 5") + _strides("a0s", "sp + 9")
    src += "    db = U(D[bd])\n    a0b = U(D[bd + 1])\n"
    src += """    ninner = 1
    for k in range(4 - nin, 4):
        ninner *= (n0, n1, n2, n3)[k]
"""
    dst_point = [
        "j3 = o % e3",
        "t = o // e3",
        "j2 = t % e2",
        "t //= e2",
        "j1 = t % e1",
        "j0 = t // e1",
    ]
    if s.checks:  # the destination elements of rows with a masked-in element must be in bounds
        body = [
            f"if {IN_MASK}:",
            "    hit = True",
            "cnt += 1",
            "if cnt == ninner:",
            "    if hit:",
            *["        " + x for x in dst_point],
            "        if checks_fail(P, cp, D, cd, j0, j1, j2, j3):",
            "            return 1",
            "    o += 1",
            "    cnt = 0",
            "    hit = False",
        ]
        src += "    cnt = 0\n    o = 0\n    hit = False\n"
        src += "\n".join(_loops(body, [], full=True)) + "\n"
    src += f"    cnt = 0\n    o = 0\n    hit = False\n    acc = {ident}\n"
    read = "x = " + READ[s.operands[0]].format(x="x0[o0]")
    if masked:
        body = [f"if {IN_MASK}:", "    hit = True", "    " + read, "else:", f"    x = {ident}"]
    else:
        body = ["hit = True", read]
    fold = "fmax" if op == "max" else "fmin"
    # (a sum adds the elements one after another in fp32, from the first, as the engines do)
    add = "acc = x if cnt == 0 else np.float32(acc + x)"
    body += [add] if op == "sum" else [f"acc = {fold}(acc, x)"]
    body += ["cnt += 1", "if cnt == ninner:"]
    body += ["    if hit:"] + ["        " + x for x in dst_point]
    body.append("        d = db + U(j0) * ds0 + U(j1) * ds1 + U(j2) * ds2 + U(j3) * ds3")
    body.append("        " + STORE[s.dst].format(x="dst[d]", v="acc"))
    body += ["    o += 1", "    cnt = 0", "    hit = False", f"    acc = {ident}"]
    src += "\n".join(_loops(body, [("o0", "a0b", "a0s")], full=True)) + "\n"
    return src + "    return 0\n"


# ---- the disk cache of generated modules (kernels and drivers) ---------------------------------

_MODULES: dict[str, ModuleType] = {}  # module name -> loaded module


def cache_dir() -> Path:
    """Where generated modules (and numba's cache files next to them) are kept."""
    d = os.environ.get("NKI_SIM_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "nki-sim"
    )
    return Path(d) / "numba"


def _private_name(stem: str) -> str:
    """A temporary file name no other process or thread uses at the same time."""
    return f".{stem}.{os.getpid()}.{threading.get_ident()}.{uuid.uuid4().hex[:8]}.tmp"


_PROBED: dict[Path, bool] = {}  # cache directory -> writable (probed once per process)


def writable_dir() -> Path:
    """The cache directory, or a temporary one when it cannot be written."""
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        if d not in _PROBED:
            probe = d / _private_name("probe")
            probe.write_text("")
            probe.unlink()
            _PROBED[d] = True
        return d
    except OSError:
        d = Path(tempfile.gettempdir()) / "nki-sim-numba"
        d.mkdir(parents=True, exist_ok=True)
        return d


def module_name(stem: str) -> str:
    return f"nki_sim_{stem}"


def load(stem: str, source: str) -> ModuleType:
    """The module of generated ``source`` saved as ``<stem>.py`` in the cache directory
    (imported once per process; numba's cache files sit next to it)."""
    name = module_name(stem)
    mod = _MODULES.get(name)
    if mod is not None:
        return mod
    with PARSE_LOCK:  # (one thread imports a module; importing compiles its source)
        mod = _MODULES.get(name)
        if mod is not None:
            return mod
        d = writable_dir()
        path = d / f"{stem}.py"
        if not path.exists() or path.read_text() != source:
            tmp = d / _private_name(stem)
            tmp.write_text(source)
            os.replace(tmp, path)  # atomic: concurrent processes see a whole file
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        _MODULES[name] = mod
        return mod


def forget() -> None:
    """Unload every generated module (the disk cache stays)."""
    for name in _MODULES:
        sys.modules.pop(name, None)
    _MODULES.clear()


def kernel(spec: Spec):  # type: ignore[no-untyped-def]
    """The numba dispatcher of a library kernel (loaded or compiled on its first call)."""
    return load(f"nki_k_{spec.key}", spec.source()).kern


def loaded(stem: str) -> bool:
    return module_name(stem) in _MODULES


def on_disk(stem: str) -> bool:
    """Numba's compiled code of the module is in the disk cache."""
    return any((cache_dir() / "__pycache__").glob(f"{stem}.*.nbi"))


def disk_stems() -> set[str]:
    """The stems of every module with compiled code in the disk cache (one directory read)."""
    try:
        names = os.listdir(cache_dir() / "__pycache__")
    except OSError:
        return set()
    return {n.split(".", 1)[0] for n in names if n.endswith(".nbi")}


def built(stem: str) -> bool:
    """The module's kernel is compiled (or loaded from the disk cache) in this process."""
    mod = _MODULES.get(module_name(stem))
    return mod is not None and bool(mod.kern.overloads)


def purge(stem: str) -> bool:
    """Forget module ``stem`` and delete its disk-cache files; False when numba had no cache
    entry for it on disk."""
    files = sorted((cache_dir() / "__pycache__").glob(f"{stem}.*"))
    name = module_name(stem)
    _MODULES.pop(name, None)
    sys.modules.pop(name, None)
    for f in [*files, cache_dir() / f"{stem}.py"]:
        try:
            f.unlink()
        except OSError:
            pass
    return bool(files)
