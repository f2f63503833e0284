"""Access lowering for the Numba backend's code generator: the driver's array arguments
(tensors in the dtype numba sees: bfloat16 as ``uint16`` bits, bool as ``uint8``), accesses as
flat offsets (a base affine in the program ids and loop iterators, a stride per tile axis),
mask and bounds-check parameter blocks, library kernel calls, whole-tile bounds checks of
masked instructions and call-backs into Python. :class:`Emitter` holds the driver being
generated; the per-kind instruction lowerings (``numba_lowering.py``) and the kernel walk
(``numba_codegen.py``) write through it."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from nki import dtypes
from nki.ir import Access, Affine, IndexExpr, Instr, KernelIR, LoopSym, Mask, PidSym, Sym

from .. import numerics
from ..config import SimConfig
from .kernels import MASK_OPS, RANK, Spec


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
        # the library kernels' parameters: static ints, per-call bases (affine in the symbols;
        # constant ones are filled in before the run), fp32 scalars
        self.P: list[int] = []
        self.D: list[Affine] = []
        self.FC: list[float] = []
        self.kernels: dict[str, tuple[Spec, str]] = {}  # spec key -> (spec, name in the driver)
        self.calls: set[tuple[str, tuple[str, ...]]] = set()  # (spec key, argument names)
        # library kernels not built yet: an instruction calling one is hosted instead
        self.defer: frozenset[str] = frozenset()
        self.cur_specs: list[str] = []  # library kernels the current instruction calls
        self.uses: dict[str, int] = {}  # library kernel -> executions of its instructions

    def emit(self, s: str) -> None:
        self.lines.append("    " * self.depth + s)

    def new(self, prefix: str) -> str:
        self.uid += 1
        return f"{prefix}{self.uid}"

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

    # ---- library kernel calls ----------------------------------------------------------------

    def tensor_strides(self, name: str) -> list[int]:
        shape = self.ir.tensor(name).shape
        out, acc = [], 1
        for n in reversed(shape):
            out.append(acc)
            acc *= n
        return out[::-1]

    def flat(self, acc: Access, rank: int) -> tuple[Affine, list[int]]:
        """``acc`` as a flat offset into its tensor's storage: (base, stride per padded tile
        axis) for an instruction tile of rank ``rank``."""
        if acc.indirect:
            raise Unsupported("indirect (data-dependent) DMA")
        d = self.ir.tensor(acc.tensor)
        if len(acc.index) != len(d.shape):
            raise Unsupported("access rank differs from the tensor rank")
        self.kind(acc.tensor)
        base, strides = Affine(), [0] * RANK
        for e, st in zip(acc.index, self.tensor_strides(acc.tensor)):
            base = base + e.base.scale(st)
            for axis, c in self.axis_coeffs(e, rank):
                strides[axis] += c * st
        return base, strides

    @staticmethod
    def axis_coeffs(e: IndexExpr, rank: int) -> list[tuple[int, int]]:
        """(padded tile axis, coefficient) of ``e`` (right-aligned to the tile's axes)."""
        if len(e.shape) > rank:
            raise Unsupported("index expression of higher rank than its instruction")
        off = RANK - len(e.shape)
        return [(off + d, c) for d, c in enumerate(e.coeffs) if c and e.shape[d] != 1]

    def coeffs4(self, e: IndexExpr, rank: int) -> list[int]:
        out = [0] * RANK
        for axis, c in self.axis_coeffs(e, rank):
            out[axis] += c
        return out

    @staticmethod
    def dense(shape: tuple[int, ...]) -> tuple[Affine, list[int]]:
        """A scratch tile of ``shape`` in C order (the whole array, base 0)."""
        strides, acc = [0] * RANK, 1
        for k, n in zip(range(RANK - 1, -1, -1), reversed(shape)):
            strides[k] = acc if n != 1 else 0
            acc *= n
        return Affine(), strides

    def bound_checks(self, accs: list[Access], rank: int) -> list[tuple[Affine, int, list[int]]]:
        """(base, extent, coefficients) of every index of ``accs`` not proven in bounds."""
        out = []
        for a in accs:
            for e, n in zip(a.index, self.ir.tensor(a.tensor).shape):
                if not self._in_bounds(e, n):
                    out.append((e.base, n, self.coeffs4(e, rank)))
        return out

    @staticmethod
    def unit(shape: tuple[int, ...], blocks: list[tuple[Affine, list[int]]]) -> bool:
        """Every block steps by one element along the innermost tile axis (or it has size 1)."""
        return (not shape or shape[-1] == 1) or all(st[-1] == 1 for _, st in blocks)

    def call(
        self,
        spec: Spec,
        shape: tuple[int, ...],
        rank: int,
        args: list[str],
        blocks: list[tuple[Affine, list[int]]],
        mask: Mask | None = None,
        checks: list[tuple[Affine, int, list[int]]] = (),  # type: ignore[assignment]
        extra: list[int] = (),  # type: ignore[assignment]
        consts: list[float] | None = None,
    ) -> None:
        """Emit a call of the library kernel ``spec`` over a tile of ``shape``: its parameter
        block (shape, mask, checks, ``extra``, each block's strides) goes to P, the bases to D
        (written by the driver when they depend on symbols)."""
        if len(shape) > RANK:
            raise Unsupported(f"tiles of rank {len(shape)}")
        if spec.key in self.defer:
            raise Unsupported("library kernel not compiled yet (compile budget)")
        self.cur_specs.append(spec.key)
        po, do = len(self.P), len(self.D)
        P = [1] * (RANK - len(shape)) + [int(n) for n in shape]
        conds = mask.conds if mask is not None else ()
        P.append(len(conds))
        bases: list[Affine] = []
        for c in conds:
            P += [MASK_OPS[c.op], *self.coeffs4(c.expr, rank)]
            bases.append(c.expr.base)
        P.append(len(checks))
        for base, n, co in checks:
            P += [n, *co]
            bases.append(base)
        P += list(extra)
        for base, strides in blocks:
            P += strides
            bases.append(base)
        self.P += P
        self.D += bases
        for j, b in enumerate(bases):
            if not b.is_const:
                self.emit(f"D[{do + j}] = {' + '.join(affine(b))}")
        name = self.kernels.setdefault(spec.key, (spec, f"K{len(self.kernels)}"))[1]
        # offsets as int64 values, not literals: numba would compile a kernel per literal
        head = ["P", f"I({po})", "D", f"I({do})"]
        if consts is not None:
            head += ["FC", f"I({len(self.FC)})"]
            self.FC += consts
        call = f"{name}({', '.join(head + args)})"
        self.calls.add((spec.key, tuple("#" if a.startswith("I(") else a for a in head + args)))
        if checks:
            st = self.new("st")
            self.emit(f"{st} = {call}")
            self.fail(f"{st} != 0")
        else:
            self.emit(call)

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
        dst_root = self.ir.storage_of(ins.dst.tensor)  # type: ignore[union-attr]
        return any(
            isinstance(s, Access) and self.ir.storage_of(s.tensor) == dst_root and s != ins.dst
            for s in ins.srcs
        )
