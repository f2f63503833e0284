"""IR -> Python source of the Numba backend's driver: one function that walks the kernel and
calls a small library kernel (``numba_kernels``) per instruction.

The driver takes every tensor as a flat array argument (bfloat16 storage as ``uint16`` bits,
bool as ``uint8``), the SPMD instance order, preallocated scratch buffers, the library kernels'
parameter arrays (``P`` static ints, ``D`` per-call bases, ``FC`` fp32 scalars) and a call-back
into Python; it loops over the instances, keeps ``affine_range`` / ``sequential_range`` loops as
loops, refills per-instance tiles at their ``Alloc`` (NaN, unless the next instruction
overwrites the whole tile), writes the bases of each instruction's accesses (affine in the
program ids and loop iterators) into ``D`` and calls its kernel. Its size, and so its compile
time, grows linearly with the kernel; the kernels are shared and cached on disk. Above
``PY_DRIVER_MIN`` instructions the same source runs as plain Python (no compile at all), as
does a driver generated with ``defer`` (library kernels the compile budget left for a later
launch, ``numba_budget``): the instructions calling them are hosted.

This module walks the kernel (loops, allocations, instructions); ``numba_access.py`` lowers
accesses and ``numba_lowering.py`` the instruction kinds it compiles natively, on fp32 /
bfloat16 / bool tiles. Every other instruction (matmul, nki.isa, gathers, integer / fp8
tiles...) is *hosted*: compiled code calls the interpreter's own executor for it
(``interpreter.execute_instruction``), on the same arrays.

The driver returns 0; 1 when a masked access would leave its tensor (checked before the
instruction writes anything; the caller re-runs that instruction on the interpreter, which
raises the exact error); 2 when a call-back raised (the caller re-raises it); 3 when a signal
handler raised (Ctrl-C: loops run Python's pending signal handlers every ``TICK`` elements).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np

from nki.ir import Alloc, Instr, KernelIR, Loop, Node, Sym, TensorDecl

from .. import numerics
from ..config import SimConfig
from ..executors import COLLECTIVES, lowering_of
from . import isa_lowering  # noqa: F401 (registers the nki.isa lowerings)
from .access import Buffer, Emitter, Unsupported, f32_literal, sym, view_dtype
from .kernels import Spec, module_name
from .lowering import ACCUMULATE, NATIVE

# kernels with more instructions than this run their driver as plain Python (each instruction
# one call of its compiled library kernel) instead of compiling it
PY_DRIVER_MIN = 40
JIT = '@njit(cache=True, error_model="numpy")'  # the compiled driver's decorator
TICK = 1 << 20  # tile elements between two polls for KeyboardInterrupt

__all__ = ["NATIVE", "Buffer", "Plan", "Unsupported", "generate", "ir_key"]


@dataclass
class Plan:
    """A generated kernel: its source, array arguments and the instructions it hands to the
    interpreter (``hosted[k]`` = (instruction, symbols in scope, tensor names passed))."""

    source: str
    func: str
    key: str  # hash of the IR (names the instruction table of hosted instructions)
    args: list[Buffer]
    work: int  # instruction executions per launch (grid x loop trip counts)
    native_work: int  # of which compiled natively (the rest run the interpreter's executors)
    native_elements: int  # tile elements those native executions compute, per launch
    instrs: list[tuple[Instr, tuple[Sym, ...], tuple[str, ...]]] = field(default_factory=list)
    hosted_ops: list[str] = field(default_factory=list)  # "kind.op" run by the interpreter
    # instruction index -> (op, tile shape, operands: scratch names / fp32 constants, result)
    ew_calls: dict[int, tuple] = field(default_factory=dict)
    alloc_slots: dict[str, int] = field(default_factory=dict)  # tensor -> allocation counter
    P: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    D: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))  # constant bases
    FC: np.ndarray = field(default_factory=lambda: np.zeros(1, np.float32))
    kernels: list[Spec] = field(default_factory=list)  # library kernels the driver calls
    python: bool = False  # the driver runs as plain Python
    # (library kernel, the driver's argument names it is called with; '#' an int)
    calls: list[tuple[Spec, tuple[str, ...]]] = field(default_factory=list)
    # library kernel key -> executions of the native instructions calling it, per instance
    uses: dict[str, int] = field(default_factory=dict)

    @property
    def py_source(self) -> str:
        """The driver's source as plain Python (the same code, not compiled)."""
        return self.source.replace(JIT + "\n", "", 1)


class _Gen(Emitter):
    """The kernel walk: loops stay loops, allocations refill their tile, each instruction is
    lowered natively (``numba_lowering``) or hosted."""

    def tick(self, body: tuple[Node, ...]) -> None:
        """Count this iteration's elements; every ``TICK`` of them, poll for Ctrl-C."""
        w = 1 + sum(math.prod(n.dst.shape) for n in body if isinstance(n, Instr) and n.dst)
        self.emit(f"tick += {w}")
        self.emit(f"if tick > {TICK}:")
        self.emit("    tick = 0")
        self.emit("    if SIGCHECK() != 0:")  # a signal handler raised (Ctrl-C)
        self.emit("        SIGCLEAR()")
        self.emit("        return 3")

    def nodes(self, nodes: tuple[Node, ...], trips: int) -> None:
        for n in nodes:
            if isinstance(n, Loop):
                self.pending.clear()  # fills before a loop stay (conservative)
                self.emit(f"for {sym(n.sym)} in range({n.start}, {n.stop}, {n.step}):")
                self.depth += 1
                self.tick(n.body)
                self.ranges[n.sym] = n.sym_range.bounds
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
        vd = view_dtype(sd)
        fill = np.full(1, numerics.fill_value(d.dtype), dtype=sd).view(vd)[0]
        if vd == np.float32:
            lit = f32_literal(fill)
        elif vd.kind == "f":
            raise Unsupported(f"tensors of dtype {d.dtype}")
        else:
            lit = f"np.{vd.name}({int(fill)})"
        # count allocations: hosted executors that track a tile per allocation (classic PSUM
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
        if dst.indirect or tuple(dst.shape) != tuple(shape):
            return None
        root = self.ir.storage_of(dst.tensor)  # (read in place too, `dst=t, data=t`: the fill)
        if any(u.read and u.role != "dst" and self.ir.storage_of(u.access.tensor) == root
               for u in ins.uses()):  # fmt: skip
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
        names = tuple(dict.fromkeys(u.access.tensor for u in ins.uses()))
        self.instrs.append((ins, tuple(self.scope), names))
        mark = (len(self.lines), dict(self.args), self.uid, self.depth)
        pmark = (len(self.P), len(self.D), len(self.FC), dict(self.kernels), set(self.calls))
        self.emit(f"# {str(ins)[:90]}")
        self.cur_specs = []
        try:
            self.native(ins)
            for k in set(self.cur_specs):
                self.uses[k] = self.uses.get(k, 0) + trips
            self.native_work += trips
            self.native_elements += trips * (math.prod(ins.dst.shape) if ins.dst else 1)
            full = self.covers(ins)
        except Unsupported:  # undo what was generated, host the instruction instead
            self.lines = self.lines[: mark[0]]
            self.args, self.uid, self.depth = mark[1], mark[2], mark[3]
            del self.P[pmark[0] :], self.D[pmark[1] :], self.FC[pmark[2] :]
            self.kernels = pmark[3]
            self.calls = pmark[4]
            self.ew_calls.pop(self.cur, None)
            self.host(ins, names)
            full = None
        for n in names:  # a tile's first use decides whether its NaN fill is needed
            at = self.pending.pop(n, None)
            if at is not None and n == full:
                self.lines[at] = self.lines[at].replace(self.lines[at].strip(), "pass  # no fill")

    def host(self, ins: Instr, names: tuple[str, ...]) -> None:
        """Run the instruction with the interpreter's executor, called back from compiled code."""
        self.hosted.append(f"{ins.kind}.{ins.op}")
        for n in names:
            self.arg(n)
        self.emit(f"# hosted: {str(ins)[:82]}")
        self.callback(0)

    def native(self, ins: Instr) -> None:
        fn = lowering_of(ins)
        if fn is None:
            raise Unsupported(f"instruction kind '{ins.kind}'")
        if ins.dst is None:
            raise Unsupported("instruction without destination")
        if ins.accumulate is not None and ins.accumulate not in ACCUMULATE:
            raise Unsupported(f"accumulation with '{ins.accumulate}'")
        if ins.accumulate is not None and self.kind(ins.dst.tensor) == "b":
            raise Unsupported("accumulation into a bool tile")
        fn(self, ins)


def ir_key(ir: KernelIR, config: SimConfig) -> str:
    """A hash of the IR (and the storage setting), stable across processes."""
    text = f"{config.precise_fp}\n{ir!r}"
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def generate(
    ir: KernelIR,
    config: SimConfig,
    func: str = "nki_kernel",
    defer: frozenset[str] = frozenset(),
) -> Plan:
    """Python source of the driver for ``ir``; raises :class:`Unsupported` when the kernel
    cannot run this way at all. Instructions calling a library kernel in ``defer`` (keys of
    kernels not compiled yet) are hosted, and the driver is then plain Python."""
    if any(ins.kind in COLLECTIVES for ins, _ in ir.instructions()):
        raise Unsupported("collectives (nl.all_reduce): instances wait for each other")
    key = ir_key(ir, config)
    g = _Gen(ir, config, key)
    g.defer = defer
    g.depth = 2
    g.tick(ir.body)
    for a in range(len(ir.grid.shape)):
        g.emit(f"pid{a} = order[k, {a}]")
    g.nodes(ir.body, 1)
    python = len(g.instrs) > PY_DRIVER_MIN or bool(defer)
    args = list(g.args.values())
    extra = ["order", "ERR", "ENV", "EPOCH", "CB", "P", "D", "FC", "Z", "SIGCHECK", "SIGCLEAR"]
    sig = ", ".join([b.arg for b in args] + extra)
    specs = list(g.kernels.values())
    head = [
        f"# nki-sim Numba backend: driver of kernel {ir.name}, IR {key}",
        "import numpy as np",
        "from numba import njit",
        "",
        "I = np.int64",
        *[f"from {module_name('nki_k_' + sp.key)} import kern as {name}" for sp, name in specs],
        "",
        "",
        "" if python else JIT,
        f"def {func}({sig}):",
        "    tick = 0",
        "    for k in range(order.shape[0]):",
    ]
    src = "\n".join(head + g.lines + ["    return 0", ""])
    grid = int(np.prod(ir.grid.shape)) if ir.grid.dims else 1
    D = np.array([b.const if b.is_const else 0 for b in g.D] or [0], dtype=np.int64)
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
        np.array(g.P or [0], dtype=np.int64),
        D,
        np.array(g.FC or [0.0], dtype=np.float32),
        [sp for sp, _ in specs],
        python,
        [(g.kernels[k][0], a) for k, a in sorted(g.calls)],
        g.uses,
    )
