"""IR -> Python source of one ``@numba.njit`` function (the Numba backend's code generator).

The generated function takes every tensor as an array argument (bfloat16 storage as ``uint16``
bits, bool as ``uint8``), the SPMD instance order, preallocated scratch buffers and a call-back
into Python; it loops over the instances, keeps ``affine_range`` / ``sequential_range`` loops as
loops, refills per-instance tiles at their ``Alloc`` (NaN, unless the next instruction
overwrites the whole tile) and turns each instruction into a loop nest over its tile.

Compiled natively (bit-identical to the interpreter): DMA / copy with affine, masked or
broadcast accesses (no indirect DMA), memset, the exact op-table rows in ``NATIVE`` (fp32 math,
one rounding), ``nl.where``, ``sum`` / ``max`` / ``min`` over trailing free axes (NumPy's
pairwise summation order), with ``+=``-style accumulation, on fp32 / bfloat16 / bool tiles.
The other op-table rows (exp, tanh, gelu, ...) gather their operands and call NumPy back
(numba's libm differs from NumPy's SIMD functions by 1-3 ulp). Every other instruction (matmul,
nki.isa, gathers, integer / fp8 tiles...) is *hosted*: compiled code calls the interpreter's own
handler for it, on the same arrays.

The function returns 0; 1 when a masked access would leave its tensor (checked before the
instruction writes anything; the caller re-runs that instruction on the interpreter, which
raises the exact error); 2 when a call-back raised (the caller re-raises it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from nki import dtypes
from nki.ir import (
    Access,
    Affine,
    Alloc,
    Const,
    IndexExpr,
    Instr,
    KernelIR,
    Loop,
    LoopSym,
    Mask,
    Node,
    PidSym,
    Sym,
    TensorDecl,
)
from nki.optable import OPS

from . import numerics


class Unsupported(Exception):
    """Something the Numba backend does not compile natively (the reason is the text): an
    instruction raising it is hosted; a kernel-level one sends the kernel to the interpreter."""


# op-table rows computed natively in fp32: each is exact IEEE arithmetic (one rounding), so the
# result equals NumPy's. ``{a}`` / ``{b}`` are fp32 scalar expressions.
_ONE, _ZERO = "np.float32(1.0)", "np.float32(0.0)"


def _cmp(expr: str) -> str:
    return f"({_ONE} if ({expr}) else {_ZERO})"


NATIVE: dict[str, str] = {
    "add": "np.float32({a} + {b})",
    "subtract": "np.float32({a} - {b})",
    "multiply": "np.float32({a} * {b})",
    "divide": "np.float32({a} / {b})",
    "maximum": "fmax({a}, {b})",
    "minimum": "fmin({a}, {b})",
    "equal": _cmp("{a} == {b}"),
    "not_equal": _cmp("{a} != {b}"),
    "greater": _cmp("{a} > {b}"),
    "greater_equal": _cmp("{a} >= {b}"),
    "less": _cmp("{a} < {b}"),
    "less_equal": _cmp("{a} <= {b}"),
    "logical_and": _cmp("({a} != 0) and ({b} != 0)"),
    "logical_or": _cmp("({a} != 0) or ({b} != 0)"),
    "logical_xor": _cmp("({a} != 0) != ({b} != 0)"),
    "logical_not": _cmp("{a} == 0"),
    "abs": "np.float32(abs({a}))",
    "negative": "np.float32(-{a})",
    "sign": "fsign({a})",
    "ceil": "np.float32(np.ceil({a}))",
    "floor": "np.float32(np.floor({a}))",
    "trunc": "np.float32(np.trunc({a}))",
    "sqrt": "np.float32(np.sqrt({a}))",
    "rsqrt": "np.float32(np.float32(1.0) / np.float32(np.sqrt({a})))",
    "reciprocal": "np.float32(np.float32(1.0) / {a})",
    "square": "np.float32({a} * {a})",
    "relu": "fmax({a}, np.float32(0.0))",
    "copy": "{a}",
}
# rows the interpreter runs in exact int64 when every operand is integral (bool tiles, small
# integer constants): on 0/1 values and integers below 2**24 fp32 gives the same numbers
_EXACT_OK = {
    "add", "subtract", "multiply", "maximum", "minimum", "equal", "not_equal", "greater",
    "greater_equal", "less", "less_equal", "logical_and", "logical_or", "logical_xor",
    "logical_not", "abs", "negative", "sign", "square", "copy",
}  # fmt: skip
ACCUMULATE = ("add", "subtract", "multiply", "maximum", "minimum")
REDUCE = ("sum", "max", "min")


@dataclass
class Buffer:
    """An array argument the caller allocates: ``kind`` is 'tensor' (IR tensor), 'scratch'."""

    arg: str
    tensor: str | None
    shape: tuple[int, ...]
    dtype: np.dtype


@dataclass
class Plan:
    """A generated kernel: its source, array arguments and the instructions it hands to the
    interpreter (``hosted[k]`` = (instruction, symbols in scope, tensor names passed))."""

    source: str
    func: str
    key: str  # hash of the IR (names the instruction table of hosted instructions)
    args: list[Buffer]
    work: int  # instruction executions per launch (grid x loop trip counts)
    native_work: int  # of which compiled natively (the rest run the interpreter's handlers)
    native_elements: int  # tile elements those native executions compute, per launch
    instrs: list[tuple[Instr, tuple[Sym, ...], tuple[str, ...]]] = field(default_factory=list)
    hosted_ops: list[str] = field(default_factory=list)  # "kind.op" run by the interpreter
    # instruction index -> (op, tile shape, operands: scratch names / fp32 constants, result)
    ew_calls: dict[int, tuple] = field(default_factory=dict)
    alloc_slots: dict[str, int] = field(default_factory=dict)  # tensor -> allocation counter


def _ident(name: str) -> str:
    return "T_" + re.sub(r"\W", "_", name)


def _sym(s: LoopSym | PidSym) -> str:
    return f"pid{s.axis}" if isinstance(s, PidSym) else f"l{s.id}"


def _affine(a: Affine) -> list[str]:
    parts = [_sym(s) if c == 1 else f"{c} * {_sym(s)}" for s, c in a.terms]
    if a.const:
        parts.append(str(a.const))
    return parts


def _index(e: IndexExpr, ivars: list[str]) -> str:
    """``e`` at the tile point ``ivars`` (the iteration axes, right-aligned to ``e``'s axes)."""
    off = len(ivars) - len(e.shape)
    if off < 0:
        raise Unsupported("index expression of higher rank than its instruction")
    parts = _affine(e.base)
    for d, c in enumerate(e.coeffs):
        if c and e.shape[d] != 1:
            v = ivars[d + off]
            parts.append(v if c == 1 else f"{c} * {v}")
    return " + ".join(parts) if parts else "0"


def _f32_literal(v: object) -> str:
    x = float(np.float32(v))  # the interpreter makes every scalar operand an np.float32
    if math.isnan(x):
        return "np.float32(np.nan)"
    if math.isinf(x):
        return f"np.float32({'-' if x < 0 else ''}np.inf)"
    return f"np.float32({x!r})"


def _broadcastable(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    off = len(to) - len(shape)
    return off >= 0 and all(n in (1, to[d + off]) for d, n in enumerate(shape))


def _accesses(obj: object) -> list[Access]:
    """Every access an instruction operand / attribute holds (indirect index tiles included)."""
    out: list[Access] = []
    if isinstance(obj, Access):
        out.append(obj)
        for _, ind in obj.indirect:
            out.extend(_accesses(ind))
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            out.extend(_accesses(o))
    return out


# storage dtype -> the numeric dtype numba sees (ml_dtypes floats as raw unsigned bits)
_BITS = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.uint16),
    4: np.dtype(np.uint32),
    8: np.dtype(np.uint64),
}


def _view_dtype(sd: np.dtype) -> np.dtype:
    if sd == np.float32 or sd == np.float64 or (sd.kind in "iu"):
        return np.dtype(sd)
    return _BITS[sd.itemsize]


class _Gen:
    def __init__(self, ir: KernelIR, config, key: str) -> None:
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

    # ---- helpers ------------------------------------------------------------------------------
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
            self.args[name] = Buffer(_ident(name), name, d.shape, _view_dtype(sd))
        return _ident(name)

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
        idx = ", ".join(_index(e, ivars) for e in acc.index)
        return f"{_ident(acc.tensor)}[{idx}]"

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
        return " and ".join(f"({_index(c.expr, ivars)}) {c.op} 0" for c in mask.conds)

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
            self.emit(f"    ERR[{j + 1}] = {_sym(s)}")
        self.emit("    return 1")

    def elem_checks(self, accs: list[Access], ivars: list[str]) -> list[str]:
        return [
            f"not (0 <= {_index(e, ivars)} < {n})"
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
                base = " + ".join(_affine(e.base)) or "0"
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

    # ---- nodes --------------------------------------------------------------------------------
    def nodes(self, nodes: tuple[Node, ...], trips: int) -> None:
        for n in nodes:
            if isinstance(n, Loop):
                self.pending.clear()  # fills before a loop stay (conservative)
                self.emit(f"for {_sym(n.sym)} in range({n.start}, {n.stop}, {n.step}):")
                self.depth += 1
                self.emit("pass")
                self.ranges[n.sym] = n.value_range()
                self.scope.append(n.sym)
                self.nodes(n.body, trips * n.trip_count)
                self.scope.pop()
                del self.ranges[n.sym]
                self.depth -= 1
            elif isinstance(n, Alloc):
                self.alloc(self.ir.tensor(n.tensor))
            else:
                self.work += trips
                self.instr(n, trips)

    def alloc(self, d: TensorDecl) -> None:
        if d.buffer == "shared_hbm":
            return  # allocated once per launch by the caller
        if d.alias_of is not None:
            raise Unsupported("views of per-instance tensors")
        sd = numerics.storage_dtype(d.dtype, self.precise)
        vd = _view_dtype(sd)
        fill = np.full(1, numerics.fill_value(d.dtype), dtype=sd).view(vd)[0]
        if vd == np.float32:
            lit = _f32_literal(fill)
        elif vd.kind == "f":
            raise Unsupported(f"tensors of dtype {d.dtype}")
        else:
            lit = f"np.{vd.name}({int(fill)})"
        # count allocations: hosted handlers that track a tile per allocation (classic PSUM
        # accumulation groups) must see a new array object after each one
        slot = self.alloc_slots.setdefault(d.name, len(self.alloc_slots))
        self.emit(f"EPOCH[{slot}] += 1")
        # the fill is dropped when the next instruction using the tile overwrites all of it
        self.pending[d.name] = len(self.lines)
        self.emit(f"{self.arg(d.name)}[...] = {lit}")

    def covers(self, ins: Instr) -> str | None:
        """The tensor an unmasked, non-accumulating write of ``ins`` overwrites entirely."""
        dst = ins.dst
        if dst is None or ins.mask is not None or ins.accumulate is not None:
            return None
        shape = self.ir.tensor(dst.tensor).shape
        if dst.indirect or tuple(dst.shape) != tuple(shape) or self._overlaps(ins):
            return None
        for k, (e, n) in enumerate(zip(dst.index, shape)):
            if not e.base.is_const or e.base.const != 0 or len(e.coeffs) != len(shape):
                return None
            want = tuple(1 if d == k and n > 1 else 0 for d in range(len(shape)))
            if tuple(c if m > 1 else 0 for c, m in zip(e.coeffs, e.shape)) != want:
                return None
        return dst.tensor

    def instr(self, ins: Instr, trips: int) -> None:
        self.cur = len(self.instrs)
        names = tuple(dict.fromkeys(a.tensor for a in _accesses((ins.dst, ins.srcs, ins.attrs))))
        self.instrs.append((ins, tuple(self.scope), names))
        mark = (len(self.lines), dict(self.args), self.uid, self.depth)
        self.emit(f"# {str(ins)[:90]}")
        try:
            self.native(ins)
            self.native_work += trips
            self.native_elements += trips * (math.prod(ins.dst.shape) if ins.dst else 1)
            full = self.covers(ins)
        except Unsupported:  # undo what was generated, host the instruction instead
            self.lines = self.lines[: mark[0]]
            self.args, self.uid, self.depth = mark[1], mark[2], mark[3]
            self.ew_calls.pop(self.cur, None)
            self.host(ins, names)
            full = None
        for n in names:  # a tile's first use decides whether its NaN fill is needed
            at = self.pending.pop(n, None)
            if at is not None and n == full:
                self.lines[at] = self.lines[at].replace(self.lines[at].strip(), "pass  # no fill")

    def host(self, ins: Instr, names: tuple[str, ...]) -> None:
        """Run the instruction with the interpreter's handler, called back from compiled code."""
        self.hosted.append(f"{ins.kind}.{ins.op}")
        for n in names:
            self.arg(n)
        self.emit(f"# hosted: {str(ins)[:82]}")
        self.callback(0)

    def callback(self, kind: int) -> None:
        """Call back into Python (``kind`` 0: hosted instruction, 1: NumPy op-table row) with
        the current instruction and the values of the symbols in scope (in ``ENV``)."""
        for j, s in enumerate(self.scope):
            self.emit(f"ENV[{j}] = {_sym(s)}")
        st = self.new("st")
        self.emit(f"{st} = CB({kind}, {self.cur})")
        self.emit(f"if {st} != 0:")
        self.emit(f"    return {st}")

    def native(self, ins: Instr) -> None:
        fn = getattr(self, "_i_" + ins.kind, None)
        if fn is None:
            raise Unsupported(f"instruction kind '{ins.kind}'")
        if ins.dst is None:
            raise Unsupported("instruction without destination")
        if ins.accumulate is not None and ins.accumulate not in ACCUMULATE:
            raise Unsupported(f"accumulation with '{ins.accumulate}'")
        if ins.accumulate is not None and self.kind(ins.dst.tensor) == "b":
            raise Unsupported("accumulation into a bool tile")
        fn(ins)

    def _overlaps(self, ins: Instr) -> bool:
        dst_root = self.root(ins.dst.tensor)  # type: ignore[union-attr]
        return any(
            isinstance(s, Access) and self.root(s.tensor) == dst_root and s != ins.dst
            for s in ins.srcs
        )

    # ---- element-wise family: one value per destination element ------------------------------
    def _elementwise(self, ins: Instr, value_of, operands: list[Access]) -> None:
        """``value_of(ivars) -> fp32 expression``; ``operands`` are the Access operands."""
        dst = ins.dst
        assert dst is not None
        S = dst.shape
        for a in operands:
            if not _broadcastable(a.shape, S):
                raise Unsupported("operand shape does not broadcast to the destination")
        masked = ins.mask is not None
        if masked:  # operands not of the mask's shape are read whole
            self.tile_checks([a for a in operands if a.shape != S])
            self.precheck(ins, S, [a for a in operands if a.shape == S] + [dst])
        two_phase = ins.accumulate is not None or self._overlaps(ins)
        tmp = self.scratch(S) if two_phase else ""
        iv = self.loops(S)
        if masked:
            self.emit(f"if not ({self.mask_cond(ins.mask, iv)}): continue")
        v = value_of(iv)
        if ins.accumulate is not None:
            v = NATIVE[ins.accumulate].format(a=self.read(dst, iv), b=f"({v})")
        if two_phase:
            self.emit(f"{tmp}[{', '.join(iv)}] = {v}")
        else:
            self.store(dst, iv, v)
        self.close(len(S))
        if two_phase:
            iv = self.loops(S)
            if masked:
                self.emit(f"if not ({self.mask_cond(ins.mask, iv)}): continue")
            self.store(dst, iv, f"{tmp}[{', '.join(iv)}]")
            self.close(len(S))

    def _raw_copy(self, ins: Instr, src: Access) -> bool:
        """Same-storage moves copy bits (NaN payloads included), as NumPy does."""
        dst = ins.dst
        assert dst is not None
        if ins.accumulate is not None or self.kind(src.tensor) != self.kind(dst.tensor):
            return False
        S = dst.shape
        if not _broadcastable(src.shape, S):
            raise Unsupported("source shape does not broadcast to the destination")
        masked = ins.mask is not None
        if masked:
            self.precheck(ins, S, [src, dst])
        two_phase = self._overlaps(ins)
        tmp = self.scratch(S, self.args[dst.tensor].dtype) if two_phase else ""
        iv = self.loops(S)
        if masked:
            self.emit(f"if not ({self.mask_cond(ins.mask, iv)}): continue")
        target = f"{tmp}[{', '.join(iv)}]" if two_phase else self.access(dst, iv)
        self.emit(f"{target} = {self.access(src, iv)}")
        self.close(len(S))
        if two_phase:
            iv = self.loops(S)
            if masked:
                self.emit(f"if not ({self.mask_cond(ins.mask, iv)}): continue")
            self.emit(f"{self.access(dst, iv)} = {tmp}[{', '.join(iv)}]")
            self.close(len(S))
        return True

    def _move(self, ins: Instr) -> None:
        src = ins.srcs[0] if len(ins.srcs) == 1 else None
        if not isinstance(src, Access) or ins.attrs:
            raise Unsupported(f"{ins.kind} with attributes / non-tile operand")
        if ins.mask is not None and src.shape != ins.dst.shape:  # type: ignore[union-attr]
            raise Unsupported("masked move between tiles of different shapes")
        if not self._raw_copy(ins, src):
            self._elementwise(ins, lambda iv: self.read(src, iv), [src])

    _i_dma = _move
    _i_copy = _move

    def _i_memset(self, ins: Instr) -> None:
        c = ins.srcs[0]
        if len(ins.srcs) != 1 or not isinstance(c, Const) or ins.attrs:
            raise Unsupported("memset form")
        if not isinstance(c.value, (bool, int, float, np.generic)):
            raise Unsupported("memset of a non-scalar")
        lit = _f32_literal(c.value)
        self._elementwise(ins, lambda iv: lit, [])

    def _operand(self, s: object, iv: list[str]) -> str:
        if isinstance(s, Access):
            return self.read(s, iv)
        if isinstance(s, Const) and isinstance(s.value, (bool, int, float, np.generic)):
            return _f32_literal(s.value)
        raise Unsupported(f"operand {s!s}")

    def _is_int_operand(self, s: object) -> bool:
        if isinstance(s, Access):
            d = self.ir.tensor(s.tensor).dtype
            return dtypes.is_int(d) or dtypes.is_bool(d)
        v = getattr(s, "value", None)
        return not (isinstance(v, float) or (isinstance(v, np.generic) and v.dtype.kind == "f"))

    def _check_exact(self, ins: Instr, op_ok: bool) -> None:
        """The interpreter's exact-int64 path must give the same numbers as fp32 here."""
        if not all(self._is_int_operand(s) for s in ins.srcs):
            return
        if not op_ok:
            raise Unsupported(f"exact integer '{ins.op}'")
        for s in ins.srcs:
            if isinstance(s, Const):
                v = s.value
                if isinstance(v, bool):
                    continue
                if not isinstance(v, (int, np.integer)) or abs(int(v)) >= 2**24:
                    raise Unsupported("large integer constant in exact integer math")

    def _i_ew(self, ins: Instr) -> None:
        op = OPS.get(ins.op)
        if op is None or op.bitvec or len(ins.srcs) != op.arity or ins.attrs:
            raise Unsupported(f"element-wise op '{ins.op}'")
        for s in ins.srcs:
            if not isinstance(s, (Access, Const)):
                raise Unsupported(f"operand {s!s}")
        if op.exact_int:
            self._check_exact(ins, ins.op in _EXACT_OK)
        accs = [s for s in ins.srcs if isinstance(s, Access)]
        if ins.op in NATIVE:
            tpl = NATIVE[ins.op]

            def value(iv: list[str]) -> str:
                vals = [self._operand(s, iv) for s in ins.srcs]
                return tpl.format(a=f"({vals[0]})", b=f"({vals[-1]})")

            self._elementwise(ins, value, accs)
        else:
            self._numpy_ew(ins)

    def _numpy_ew(self, ins: Instr) -> None:
        """Gather the operands, run the op-table row with NumPy (call back), write back."""
        dst = ins.dst
        assert dst is not None
        S = dst.shape
        masked = ins.mask is not None
        accs = [s for s in ins.srcs if isinstance(s, Access)]
        for s in accs:
            if not _broadcastable(s.shape, S):
                raise Unsupported("operand shape does not broadcast to the destination")
        if masked:
            self.tile_checks([a for a in accs if a.shape != S])
            self.precheck(ins, S, [a for a in accs if a.shape == S] + [dst])
        args: list[object] = []  # scratch names (gathered tiles) or fp32 constants
        for s in ins.srcs:
            if isinstance(s, Const):
                args.append(float(np.float32(s.value)))
                continue
            assert isinstance(s, Access)
            g = self.scratch(s.shape)
            args.append(g)
            iv = self.loops(s.shape)
            if masked and s.shape == S:  # masked-out lanes are not read (their value is unused)
                self.emit(f"if not ({self.mask_cond(ins.mask, iv)}):")
                self.emit(f"    {g}[{', '.join(iv)}] = np.float32(0.0)")
                self.emit("    continue")
            self.emit(f"{g}[{', '.join(iv)}] = {self.read(s, iv)}")
            self.close(len(s.shape))
        r = self.scratch(S)
        self.ew_calls[self.cur] = (ins.op, tuple(S), tuple(args), r)
        self.callback(1)
        iv = self.loops(S)
        if masked:
            self.emit(f"if not ({self.mask_cond(ins.mask, iv)}): continue")
        if ins.accumulate is not None:  # old values are all read before any is written
            v = NATIVE[ins.accumulate].format(a=self.read(dst, iv), b=f"{r}[{', '.join(iv)}]")
            self.emit(f"{r}[{', '.join(iv)}] = {v}")
            self.close(len(S))
            iv = self.loops(S)
            if masked:
                self.emit(f"if not ({self.mask_cond(ins.mask, iv)}): continue")
        self.store(dst, iv, f"{r}[{', '.join(iv)}]")
        self.close(len(S))

    def _i_select(self, ins: Instr) -> None:
        if len(ins.srcs) != 3 or ins.attrs:
            raise Unsupported("select form")
        if all(self._is_int_operand(s) for s in ins.srcs[1:]):
            raise Unsupported("exact integer select")
        accs = [s for s in ins.srcs if isinstance(s, Access)]

        def value(iv: list[str]) -> str:
            c, a, b = (self._operand(s, iv) for s in ins.srcs)
            return f"(({a}) if ({c}) != 0 else ({b}))"

        self._elementwise(ins, value, accs)

    # ---- reductions over trailing free axes ---------------------------------------------------
    def _i_reduce(self, ins: Instr) -> None:
        src, dst = ins.srcs[0], ins.dst
        assert dst is not None
        if ins.op not in REDUCE or not isinstance(src, Access) or len(ins.srcs) != 1:
            raise Unsupported(f"reduction '{ins.op}'")
        if set(k for k, _ in ins.attrs) - {"axes", "keepdims"}:
            raise Unsupported("reduction attributes")
        if self.kind(src.tensor) == "b":
            raise Unsupported("reduction of a bool tile")
        if ins.accumulate is not None or self._overlaps(ins):
            raise Unsupported("accumulating / in-place reduction")
        rank = len(src.shape)
        axes = tuple(sorted(int(a) for a in ins.attr("axes")))
        k = rank - len(axes)
        if not axes or axes != tuple(range(k, rank)) or (ins.op == "sum" and len(axes) != 1):
            raise Unsupported(f"reduction over axes {axes}")
        outer, inner = src.shape[:k], src.shape[k:]
        if int(np.prod(outer)) != int(np.prod(dst.shape)):
            raise Unsupported("reduction result shape")
        masked = ins.mask is not None
        ident = {
            "sum": "np.float32(0.0)",
            "max": "np.float32(-np.inf)",
            "min": "np.float32(np.inf)",
        }
        if masked:
            self.tile_checks([src])  # read whole; the destination where any input is selected
            self._reduce_loops(ins, outer, inner, dst, None, check=True)
        row = self.scratch((max(1, int(np.prod(inner))),)) if ins.op == "sum" else ""
        acc, n, x = self.new("acc"), self.new("n"), self.new("x")

        def per_element(iv: list[str]) -> None:
            if masked:
                self.emit(f"if {self.mask_cond(ins.mask, iv)}:")
                self.emit(f"    {x} = {self.read(src, iv)}")
                self.emit("else:")
                self.emit(f"    {x} = {ident[ins.op]}")
            else:
                self.emit(f"{x} = {self.read(src, iv)}")
            if ins.op == "sum":
                self.emit(f"{row}[{n}] = {x}")
                self.emit(f"{n} += 1")
            else:
                self.emit(f"{acc} = {'fmax' if ins.op == 'max' else 'fmin'}({acc}, {x})")

        def start() -> None:
            self.emit(f"{acc} = {ident[ins.op]}")
            self.emit(f"{n} = 0")

        def finish(dv: list[str]) -> None:
            if ins.op == "sum":
                self.emit(f"{acc} = pairwise_sum({row}, 0, {n})")
            self.store(dst, dv, acc)

        self._reduce_loops(ins, outer, inner, dst, (start, per_element, finish), check=False)

    def _reduce_loops(self, ins, outer, inner, dst, parts, check: bool) -> None:
        """Loop over the outer points; per point over the reduced axes; then the destination
        element (the C-order position of the outer point in the destination tile)."""
        fo, hit = self.new("fo"), self.new("any")
        self.emit(f"{fo} = 0")
        ov = self.loops(outer, "o")
        self.emit(f"{hit} = False")
        if parts:
            parts[0]()
        iv = ov + self.loops(inner, "r")
        if ins.mask is not None:
            self.emit(f"if {self.mask_cond(ins.mask, iv)}:")
            self.emit(f"    {hit} = True")
        if parts:
            parts[1](iv)
        self.close(len(inner))
        dv = [self.new("d") for _ in dst.shape]
        q = self.new("q")
        self.emit(f"{q} = {fo}")
        for v, m in zip(reversed(dv), reversed(dst.shape)):
            self.emit(f"{v} = {q} % {m}")
            self.emit(f"{q} //= {m}")
        self.emit(f"{fo} += 1")
        if ins.mask is not None:
            self.emit(f"if {hit}:")
            self.depth += 1
        if check:
            conds = self.elem_checks([dst], dv)
            if conds:
                self.fail(" or ".join(conds))
            else:
                self.emit("pass")
        else:
            parts[2](dv)
        if ins.mask is not None:
            self.depth -= 1
        self.close(len(outer))


def ir_key(ir: KernelIR, config) -> str:
    """A hash of the IR (and the storage setting), stable across processes."""
    import hashlib

    text = f"{config.precise_fp}\n{ir!r}"
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def generate(ir: KernelIR, config, func: str = "nki_kernel") -> Plan:
    """Python source of one njit function for ``ir``; raises :class:`Unsupported` when the
    kernel cannot run this way at all."""
    from .interpreter import COLLECTIVES

    if any(ins.kind in COLLECTIVES for ins, _ in ir.instructions()):
        raise Unsupported("collectives (nl.all_reduce): instances wait for each other")
    key = ir_key(ir, config)
    g = _Gen(ir, config, key)
    g.depth = 2
    for a in range(len(ir.grid.shape)):
        g.emit(f"pid{a} = order[k, {a}]")
    g.nodes(ir.body, 1)
    args = list(g.args.values())
    sig = ", ".join([b.arg for b in args] + ["order", "ERR", "ENV", "EPOCH", "CB"])
    head = [
        f"# nki-sim Numba backend: kernel {ir.name}, IR {key}",
        "import numpy as np",
        "from numba import njit",
        "from simulator.numba_rt import fmax, fmin, from_bf16, fsign, pairwise_sum, to_bf16",
        "",
        "",
        '@njit(cache=True, error_model="numpy")',
        f"def {func}({sig}):",
        "    for k in range(order.shape[0]):",
        "        pass",
    ]
    src = "\n".join(head + g.lines + ["    return 0", ""])
    grid = int(np.prod(ir.grid.shape)) if ir.grid.dims else 1
    return Plan(
        src,
        func,
        key,
        args,
        g.work * grid,
        g.native_work * grid,
        g.native_elements * grid,
        g.instrs,
        g.hosted,
        g.ew_calls,
        g.alloc_slots,
    )
