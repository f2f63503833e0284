"""Access lowering for the Numba backend's code generator: the generated function's array
arguments (tensors in the dtype numba sees: bfloat16 as ``uint16`` bits, bool as ``uint8``),
index expressions at a tile point, fp32 reads and rounded writes of a tensor element, masks,
loop nests over a tile, run-time bounds checks of masked instructions and call-backs into
Python. :class:`Emitter` holds the code being generated; the per-kind instruction lowerings
(``numba_lowering.py``) and the kernel walk (``numba_codegen.py``) write through it."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from nki import dtypes
from nki.ir import Access, Affine, IndexExpr, Instr, KernelIR, LoopSym, Mask, PidSym, Sym

from . import numerics
from .config import SimConfig


class Unsupported(Exception):
    """Something the Numba backend does not compile natively (the reason is the text): an
    instruction raising it is hosted; a kernel-level one sends the kernel to the interpreter."""


@dataclass
class Buffer:
    """An array argument the caller allocates: ``kind`` is 'tensor' (IR tensor), 'scratch'."""

    arg: str
    tensor: str | None
    shape: tuple[int, ...]
    dtype: np.dtype


def ident(name: str) -> str:
    return "T_" + re.sub(r"\W", "_", name)


def sym(s: LoopSym | PidSym) -> str:
    return f"pid{s.axis}" if isinstance(s, PidSym) else f"l{s.id}"


def affine(a: Affine) -> list[str]:
    parts = [sym(s) if c == 1 else f"{c} * {sym(s)}" for s, c in a.terms]
    if a.const:
        parts.append(str(a.const))
    return parts


def index_expr(e: IndexExpr, ivars: list[str]) -> str:
    """``e`` at the tile point ``ivars`` (the iteration axes, right-aligned to ``e``'s axes)."""
    off = len(ivars) - len(e.shape)
    if off < 0:
        raise Unsupported("index expression of higher rank than its instruction")
    parts = affine(e.base)
    for d, c in enumerate(e.coeffs):
        if c and e.shape[d] != 1:
            v = ivars[d + off]
            parts.append(v if c == 1 else f"{c} * {v}")
    return " + ".join(parts) if parts else "0"


def f32_literal(v: object) -> str:
    x = float(np.float32(v))  # the interpreter makes every scalar operand an np.float32
    if math.isnan(x):
        return "np.float32(np.nan)"
    if math.isinf(x):
        return f"np.float32({'-' if x < 0 else ''}np.inf)"
    return f"np.float32({x!r})"


def broadcastable(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    off = len(to) - len(shape)
    return off >= 0 and all(n in (1, to[d + off]) for d, n in enumerate(shape))


def accesses(obj: object) -> list[Access]:
    """Every access an instruction operand / attribute holds (indirect index tiles included)."""
    out: list[Access] = []
    if isinstance(obj, Access):
        out.append(obj)
        for _, ind in obj.indirect:
            out.extend(accesses(ind))
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            out.extend(accesses(o))
    return out


# storage dtype -> the numeric dtype numba sees (ml_dtypes floats as raw unsigned bits)
_BITS = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.uint16),
    4: np.dtype(np.uint32),
    8: np.dtype(np.uint64),
}


def view_dtype(sd: np.dtype) -> np.dtype:
    if sd == np.float32 or sd == np.float64 or (sd.kind in "iu"):
        return np.dtype(sd)
    return _BITS[sd.itemsize]


class Emitter:
    """The code of one generated function being written, and the lowering of accesses."""

    def __init__(self, ir: KernelIR, config: SimConfig, key: str) -> None:
        self.ir = ir
        self.key = key
        self.precise = config.precise_fp
        self.lines: list[str] = []
        self.depth = 1
        self.args: dict[str, Buffer] = {}
        self.uid = 0
        self.work = 0
        self.native_work = 0
        self.native_elements = 0
        self.scope: list[Sym] = [PidSym(a) for a in range(len(ir.grid.shape))]
        self.ranges: dict = {PidSym(a): (0, n - 1) for a, n in enumerate(ir.grid.shape)}
        self.instrs: list[tuple[Instr, tuple[Sym, ...], tuple[str, ...]]] = []
        self.hosted: list[str] = []
        self.cur = 0  # index of the instruction being generated
        self.ew_calls: dict[int, tuple] = {}
        self.alloc_slots: dict[str, int] = {}  # per-instance tensor -> its EPOCH counter
        self.pending: dict[str, int] = {}  # tile -> line of its NaN fill, until first used

    def emit(self, s: str) -> None:
        self.lines.append("    " * self.depth + s)

    def new(self, prefix: str) -> str:
        self.uid += 1
        return f"{prefix}{self.uid}"

    def root(self, name: str) -> str:
        return self.ir.tensor(name).alias_of or name

    def arg(self, name: str) -> str:
        """Register tensor ``name`` as an array argument; its identifier."""
        if name not in self.args:
            d = self.ir.tensor(name)
            if d.alias_of is not None:
                base = self.ir.tensor(d.alias_of)
                if base.buffer != "shared_hbm" or base.alias_of is not None:
                    raise Unsupported("views of per-instance tensors")
            sd = numerics.storage_dtype(d.dtype, self.precise)
            self.args[name] = Buffer(ident(name), name, d.shape, view_dtype(sd))
        return ident(name)

    def kind(self, name: str) -> str:
        """'f' fp32, 'h' bfloat16 bits, 'b' bool bytes: how compiled code reads tensor ``name``."""
        d = self.ir.tensor(name)
        if d.dtype == "tfloat32":
            raise Unsupported("tfloat32 tensors")
        sd = numerics.storage_dtype(d.dtype, self.precise)
        if sd == np.float32:
            k = "f"
        elif d.dtype == "bfloat16" and sd == dtypes.storage("bfloat16"):
            k = "h"
        elif sd == np.bool_:
            k = "b"
        else:
            raise Unsupported(f"tensor '{name}' of dtype {d.dtype}")
        self.arg(name)
        return k

    def scratch(self, shape: tuple[int, ...], dtype=np.float32) -> str:
        name = self.new("S_")
        self.args[name] = Buffer(name, None, tuple(shape), np.dtype(dtype))
        return name

    def access(self, acc: Access, ivars: list[str]) -> str:
        if acc.indirect:
            raise Unsupported("indirect (data-dependent) DMA")
        d = self.ir.tensor(acc.tensor)
        if len(acc.index) != len(d.shape):
            raise Unsupported("access rank differs from the tensor rank")
        self.kind(acc.tensor)
        idx = ", ".join(index_expr(e, ivars) for e in acc.index)
        return f"{ident(acc.tensor)}[{idx}]"

    def read(self, acc: Access, ivars: list[str]) -> str:
        """fp32 value of ``acc`` at the tile point (the interpreter's ``to_compute``)."""
        k = self.kind(acc.tensor)
        a = self.access(acc, ivars)
        return {"f": a, "h": f"from_bf16({a})", "b": f"np.float32({a})"}[k]

    def store(self, acc: Access, ivars: list[str], value: str) -> None:
        """Write an fp32 value with the interpreter's rounding (``numerics.cast``)."""
        k = self.kind(acc.tensor)
        a = self.access(acc, ivars)
        v = {"f": value, "h": f"to_bf16({value})", "b": f"np.uint8(({value}) != 0)"}[k]
        self.emit(f"{a} = {v}")

    def mask_cond(self, mask: Mask, ivars: list[str]) -> str:
        return " and ".join(f"({index_expr(c.expr, ivars)}) {c.op} 0" for c in mask.conds)

    def loops(self, shape: tuple[int, ...], prefix: str = "i") -> list[str]:
        ivars = [f"{prefix}{d}" for d in range(len(shape))]
        for v, n in zip(ivars, shape):
            self.emit(f"for {v} in range({n}):")
            self.depth += 1
        return ivars

    def close(self, n: int) -> None:
        self.depth -= n

    # ---- run-time bounds checks of masked instructions (before the instruction writes) -------

    def _in_bounds(self, e: IndexExpr, n: int) -> bool:
        """``e`` stays inside ``[0, n)`` over the whole tile, loops and grid (no check needed)."""
        lo, hi = e.bounds(self.ranges)
        return lo >= 0 and hi < n

    def fail(self, cond: str) -> None:
        """``if cond``: stop with code 1, recording the instruction and its symbols' values (the
        caller re-runs that instruction on the interpreter, which raises the exact error)."""
        self.emit(f"if {cond}:")
        self.emit(f"    ERR[0] = {self.cur}")
        for j, s in enumerate(self.scope):
            self.emit(f"    ERR[{j + 1}] = {sym(s)}")
        self.emit("    return 1")

    def elem_checks(self, accs: list[Access], ivars: list[str]) -> list[str]:
        return [
            f"not (0 <= {index_expr(e, ivars)} < {n})"
            for a in accs
            for e, n in zip(a.index, self.ir.tensor(a.tensor).shape)
            if not self._in_bounds(e, n)
        ]

    def tile_checks(self, accs: list[Access]) -> None:
        """Whole-tile checks of operands the interpreter reads without the mask."""
        for a in accs:
            for e, n in zip(a.index, self.ir.tensor(a.tensor).shape):
                if self._in_bounds(e, n):
                    continue
                base = " + ".join(affine(e.base)) or "0"
                lo = sum(min(0, c * (m - 1)) for c, m in zip(e.coeffs, e.shape) if m > 0)
                hi = sum(max(0, c * (m - 1)) for c, m in zip(e.coeffs, e.shape) if m > 0)
                self.fail(f"({base}) + {lo} < 0 or ({base}) + {hi} >= {n}")

    def precheck(self, ins: Instr, S: tuple[int, ...], masked_accs: list[Access]) -> None:
        """Masked-in elements of ``masked_accs`` (all of shape ``S``) must be in bounds."""
        assert ins.mask is not None
        iv = [f"i{d}" for d in range(len(S))]
        conds = self.elem_checks(masked_accs, iv)
        if not conds:
            return
        self.loops(S)
        self.emit(f"if not ({self.mask_cond(ins.mask, iv)}): continue")
        self.fail(" or ".join(conds))
        self.close(len(S))

    def callback(self, kind: int) -> None:
        """Call back into Python (``kind`` 0: hosted instruction, 1: NumPy op-table row) with
        the current instruction and the values of the symbols in scope (in ``ENV``)."""
        for j, s in enumerate(self.scope):
            self.emit(f"ENV[{j}] = {sym(s)}")
        st = self.new("st")
        self.emit(f"{st} = CB({kind}, {self.cur})")
        self.emit(f"if {st} != 0:")
        self.emit(f"    return {st}")

    def overlaps(self, ins: Instr) -> bool:
        """A source of ``ins`` other than its destination tile reads the destination's tensor."""
        dst_root = self.root(ins.dst.tensor)  # type: ignore[union-attr]
        return any(
            isinstance(s, Access) and self.root(s.tensor) == dst_root and s != ins.dst
            for s in ins.srcs
        )
