"""The tile-level kernel IR: frozen dataclasses produced by tracing and consumed by executors.

A kernel is a list of nodes (tensor allocations, instructions and loops). Every instruction reads
and writes *accesses*: a tensor plus one affine index expression per tensor dimension, evaluated
over the instruction's tile shape. Index expressions are affine in

* the tile axes (``i0, i1, ...``: what ``nl.arange`` / slices range over),
* loop iterators of ``affine_range`` / ``sequential_range`` (``l<id>``), and
* SPMD program ids (``pid<axis>``).

Because accesses are affine and loops are explicit, the IR can be interpreted directly (the NumPy
reference executor) or compiled into loop nests, and it can be analysed statically (bounds,
capacity, loop-carried dependencies) without running the kernel.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Union

from .affine import Affine, IndexExpr, LoopSym, PidSym, Sym, SymRange  # noqa: F401 (the IR's)
from .errors import SrcLoc
from .isa_spec import OUTPUT_ATTRS

# --------------------------------------------------------------------------------------------
# Tensors, accesses, masks, operands
# --------------------------------------------------------------------------------------------

BUFFERS = ("sbuf", "psum", "hbm", "private_hbm", "shared_hbm")
HBM_BUFFERS = ("hbm", "private_hbm", "shared_hbm")


@dataclass(frozen=True)
class TensorDecl:
    """A tensor the kernel uses. ``kind``: param | output | local. ``par_dim`` is the partition
    dimension for on-chip tensors (dims before it are block dims)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    buffer: str
    kind: str = "local"
    par_dim: int = 0
    loc: SrcLoc | None = None
    alias_of: str | None = None  # reshape views of another tensor (same storage)
    # direct allocation (nki.compiler ``alloc`` / ``mod_alloc``): the PSUM banks or the SBUF
    # byte range [start, end) per partition the kernel placed the tensor at; None = automatic
    placement: tuple[int, ...] | None = None
    # current API ``nl.ndarray(address=(partition_offset, byte_offset))``; its placement is
    # the byte range / banks above and partitions [partition_offset, + shape[0])
    address: tuple[int, int] | None = None

    @property
    def on_chip(self) -> bool:
        return self.buffer in ("sbuf", "psum")

    def __str__(self) -> str:
        dims = [str(n) for n in self.shape]
        if self.on_chip and self.par_dim:
            dims[self.par_dim] = f"par_dim({dims[self.par_dim]})"
        alias = f" = reshape({self.alias_of})" if self.alias_of else ""
        return f"{self.kind} {self.name}: {self.buffer} {self.dtype}[{', '.join(dims)}]{alias}"


@dataclass(frozen=True)
class Access:
    """A tile-shaped access to a tensor: ``tensor[index[0], index[1], ...]`` over ``shape``.

    ``indirect`` maps a tensor dimension to an access whose *values* (an SBUF tile of indices)
    are added to that dimension's affine index (indirect DMA)."""

    tensor: str
    shape: tuple[int, ...]
    index: tuple[IndexExpr, ...]
    indirect: tuple[tuple[int, Access], ...] = ()

    def __str__(self) -> str:
        idx = []
        ind = dict(self.indirect)
        for d, e in enumerate(self.index):
            s = str(e)
            if d in ind:
                s = f"{ind[d]} + {s}" if s != "0" else str(ind[d])
            idx.append(s)
        return f"{self.tensor}[{', '.join(idx)}]"


@dataclass(frozen=True)
class Cond:
    """``expr <op> 0`` with op one of < <= > >= == !=."""

    expr: IndexExpr
    op: str

    def __str__(self) -> str:
        return f"{self.expr} {self.op} 0"


@dataclass(frozen=True)
class Mask:
    """A conjunction of affine conditions, evaluated over the instruction's tile axes."""

    conds: tuple[Cond, ...]

    def __str__(self) -> str:
        return " & ".join(f"({c})" for c in self.conds)


@dataclass(frozen=True)
class Const:
    """A scalar operand."""

    value: Any

    def __str__(self) -> str:
        return repr(self.value)


Operand = Union[Access, Const, IndexExpr]


@dataclass(frozen=True)
class Use:
    """One access an instruction makes (see :meth:`Instr.uses`). ``role``: ``"src"`` (a source
    operand), ``"dst"`` (the destination), the key of the attribute holding it
    (``"reduce_res"``, ``"idx_dst"``...) or ``"index"`` (the tile an indirect access reads its
    offsets from). ``read`` / ``write``: what the instruction does to it (an accumulating
    destination: both)."""

    access: Access
    role: str
    read: bool
    write: bool

    @property
    def operand(self) -> bool:
        """A source or the destination (not an attribute operand, not an index tile)."""
        return self.role in ("src", "dst")


def _accesses_in(value: object) -> Iterator[Access]:
    """The accesses an operand or attribute value holds (lists of tiles included)."""
    if isinstance(value, Access):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _accesses_in(v)


# --------------------------------------------------------------------------------------------
# Nodes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Alloc:
    """An on-chip / private allocation comes into existence here (fresh each time it runs)."""

    tensor: str
    loc: SrcLoc | None = None

    def __str__(self) -> str:
        return f"alloc {self.tensor}"


@dataclass(frozen=True)
class Instr:
    """One instruction. ``kind`` selects the executor handler, ``op`` the operation within it.

    ``accumulate`` names the read-modify-write op (``'add'`` for ``+=``) or is None."""

    kind: str
    op: str
    dst: Access | None
    srcs: tuple[Operand, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    mask: Mask | None = None
    loc: SrcLoc | None = None
    accumulate: str | None = None
    api: str = ""  # the user-facing call, e.g. "nl.load"

    def __post_init__(self) -> None:
        # ``attrs`` as a dict (the first value of a repeated key) for ``attr``, which executors
        # call several times per instruction on every run; not a field (``fields``, ``replace``)
        object.__setattr__(self, "_by_key", dict(reversed(self.attrs)))

    def attr(self, key: str, default: Any = None) -> Any:
        return self._by_key.get(key, default)

    # ---- the access model: what the instruction reads and writes ----------------------------
    @property
    def accumulates(self) -> bool:
        """The destination is read, combined and written back: ``+=`` / an accumulating matmul
        (``accumulate``), a DMA's ``dst_rmw_op`` (attribute ``rmw``), an atomic update."""
        return self.accumulate is not None or bool(self.attr("rmw")) or self.kind == "atomic_rmw"

    def uses(self) -> tuple[Use, ...]:
        """Every access the instruction makes, in order: its sources (read), the accesses its
        attributes hold (the outputs the instruction spec names, ``isa_spec.OUTPUT_ATTRS``:
        ``reduce_res``, ``idx_dst``..., written; any other, read), its destination (written;
        read too when it accumulates); each followed by the index tiles of its indirect
        dimensions (read). A mask selects lanes by affine conditions over the tile axes and
        symbols: it reads no memory, and a masked write writes only its lanes (it does not
        read the others)."""
        return self._model[0]

    def reads(self) -> tuple[Access, ...]:
        """The accesses the instruction reads (see :meth:`uses`)."""
        return self._model[1]

    def writes(self) -> tuple[Access, ...]:
        """The accesses the instruction writes: its outputs held in attributes, its destination."""
        return self._model[2]

    @cached_property
    def _model(self) -> tuple[tuple[Use, ...], tuple[Access, ...], tuple[Access, ...]]:
        # (cached in the instance's __dict__: not a field, so equality and hashing ignore it)
        uses: list[Use] = []

        def add(acc: Access, role: str, read: bool, write: bool) -> None:
            uses.append(Use(acc, role, read, write))
            for _, ind in acc.indirect:
                add(ind, "index", True, False)

        for s in self.srcs:
            for a in _accesses_in(s):
                add(a, "src", True, False)
        for k, v in self.attrs:
            for a in _accesses_in(v):
                add(a, k, k not in OUTPUT_ATTRS, k in OUTPUT_ATTRS)
        if self.dst is not None:
            add(self.dst, "dst", self.accumulates, True)
        reads = tuple(u.access for u in uses if u.read)
        return tuple(uses), reads, tuple(u.access for u in uses if u.write)

    def __str__(self) -> str:
        srcs = ", ".join(str(s) for s in self.srcs)
        attrs = "".join(f", {k}={v!r}" for k, v in self.attrs)
        mask = f" mask {self.mask}" if self.mask else ""
        arrow = f" {self.accumulate}=" if self.accumulate else " ="
        head = f"{self.dst}{arrow} " if self.dst is not None else ""
        return f"{head}{self.kind}.{self.op}({srcs}{attrs}){mask}"


@dataclass(frozen=True)
class Loop:
    """A symbolic loop (``affine_range`` or ``sequential_range``); the body is traced once."""

    sym: LoopSym
    start: int
    stop: int
    step: int
    kind: str
    body: tuple[Node, ...]
    loc: SrcLoc | None = None

    @property
    def trip_count(self) -> int:
        return len(range(self.start, self.stop, self.step))

    @property
    def is_runtime(self) -> bool:
        """A device loop (:class:`RuntimeLoop`) whose trips are known only when it runs:
        ``start`` / ``stop`` describe one trip, not the loop (see ``static_trips``)."""
        return False

    @property
    def static_trips(self) -> range | None:
        """The iteration values when known at trace time (None: only at run time)."""
        return range(self.start, self.stop, self.step)

    @property
    def sym_range(self) -> SymRange:
        """The values of the loop's iterator (a device loop's: its one symbolic trip)."""
        return SymRange(self.start, self.stop, self.step, self.is_runtime)


@dataclass(frozen=True)
class RuntimeLoop(Loop):
    """A loop whose trip count is known only on the device (``nl.fori_loop`` with a register
    bound, ``nl.while_loop``). The interpreter reads ``lower`` / ``upper`` (one-element register
    tiles, else the constants) when the loop starts, or ``cond`` before every iteration of a
    while loop.

    It is a :class:`Loop` so that every pass walks and checks its body (bounds, capacity,
    races see one symbolic trip: ``start=0, stop=1``). A pass that runs or counts iterations
    must not read ``start`` / ``stop`` / ``trip_count`` of it: it asks ``is_runtime`` /
    ``static_trips`` on the loop, or ``KernelIR.has_runtime_loops`` on the kernel (the
    backends that batch or compile loops decline such kernels there)."""

    lower: Access | None = None
    upper: Access | None = None
    lower_const: int = 0
    upper_const: int = 0
    cond: Access | None = None
    max_iterations: int = 1 << 20

    @property
    def is_runtime(self) -> bool:
        return True

    @property
    def static_trips(self) -> range | None:
        if self.cond is None and self.lower is None and self.upper is None:
            return range(self.lower_const, self.upper_const, self.step)  # constant bounds
        return None


Node = Union[Alloc, Instr, Loop]


# --------------------------------------------------------------------------------------------
# SPMD grid
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GridDim:
    """One launch-grid dimension, split into factors (outer first); ``True`` marks an
    ``nl.nc(k)`` factor that places instances on physical cores."""

    factors: tuple[tuple[int, bool], ...]

    @property
    def size(self) -> int:
        n = 1
        for f, _ in self.factors:
            n *= f
        return n

    def __str__(self) -> str:
        parts = [f"nc({f})" if core else str(f) for f, core in self.factors]
        return parts[0] if len(parts) == 1 else f"spmd_dim({', '.join(parts)})"


@dataclass(frozen=True)
class Grid:
    dims: tuple[GridDim, ...] = ()

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(d.size for d in self.dims)

    @property
    def num_cores(self) -> int:
        n = 1
        for d in self.dims:
            for f, core in d.factors:
                if core:
                    n *= f
        return n

    def instances(self) -> Iterator[tuple[int, ...]]:
        """All instance indices in row-major order."""
        return itertools.product(*(range(n) for n in self.shape))

    def core_of(self, instance: tuple[int, ...]) -> int:
        """Physical core of an instance: the mixed-radix number formed by its nc() digits."""
        core = 0
        for d, idx in zip(self.dims, instance):
            digits = []
            rem = idx
            for f, is_core in reversed(d.factors):
                digits.append((rem % f, f, is_core))
                rem //= f
            for digit, f, is_core in reversed(digits):
                if is_core:
                    core = core * f + digit
        return core

    def __str__(self) -> str:
        return "(" + ", ".join(str(d) for d in self.dims) + ")"


# --------------------------------------------------------------------------------------------
# Kernel
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelIR:
    name: str
    params: tuple[str, ...]
    tensors: tuple[TensorDecl, ...]
    body: tuple[Node, ...]
    outputs: tuple[str, ...]
    returns_outputs: bool
    grid: Grid
    target: str
    loc: SrcLoc | None = None
    # input parameters a current-API kernel writes: copied back to the caller's arrays
    writes_back: tuple[str, ...] = ()
    # the API generation the trace decided ("classic" / "current"; None: undecided)
    generation: str | None = None
    # a current-API launch on two physical cores whose cores differ (Python control flow on
    # nl.program_id) or interact (core_barrier, sendrecv, collectives): one trace per core,
    # core c runs ``cores[c]`` (a one-instance IR whose program id was a plain int). ``body``
    # is core 0's; ``walk`` visits every core's. Empty: every instance runs ``body``.
    cores: tuple[KernelIR, ...] = ()
    _by_name: dict[str, TensorDecl] = field(default_factory=dict, compare=False, repr=False)
    # loop nest (ids of its loops) -> the symbols in scope inside it (``symbol_ranges``)
    _scopes: dict[tuple[int, ...], Mapping[Sym, SymRange]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def tensor(self, name: str) -> TensorDecl:
        return (self._by_name or self.by_name())[name]

    def by_name(self) -> dict[str, TensorDecl]:
        """Every tensor's declaration by name (built once; read-only)."""
        if not self._by_name:
            self._by_name.update({t.name: t for t in self.tensors})
        return self._by_name

    def storage_of(self, name: str) -> str:
        """The tensor whose storage ``name`` is: itself, or the base of a reshape / dtype view."""
        return self.tensor(name).alias_of or name

    def label(self, name: str) -> str:
        """How messages name tensor ``name``: see :func:`tensor_label`."""
        try:
            return tensor_label(self.tensor(name))
        except KeyError:
            return f"'{name}'"

    def walk(self) -> Iterator[tuple[Node, tuple[Loop, ...]]]:
        """Every node with the loops that enclose it (outermost first)."""

        def rec(nodes: tuple[Node, ...], loops: tuple[Loop, ...]):
            for n in nodes:
                yield n, loops
                if isinstance(n, Loop):
                    yield from rec(n.body, loops + (n,))

        if self.cores:
            return itertools.chain.from_iterable(rec(c.body, ()) for c in self.cores)
        return rec(self.body, ())

    def symbol_ranges(self, loops: tuple[Loop, ...] = ()) -> Mapping[Sym, SymRange]:
        """The symbols in scope inside ``loops`` (the loops around an instruction, outermost
        first, as :meth:`walk` gives them) and the values each takes: the program ids, then the
        loops' iterators. Computed once per loop nest: the ranges belong to the loops, not to
        the symbols alone (each core's trace of an LNC launch numbers its loops from 0)."""
        key = tuple(id(lp) for lp in loops)
        got = self._scopes.get(key)
        if got is None:
            out = {PidSym(a): SymRange(0, n) for a, n in enumerate(self.grid.shape)}
            out.update((lp.sym, lp.sym_range) for lp in loops)
            got = self._scopes[key] = out
        return got

    @property
    def has_runtime_loops(self) -> bool:
        """Whether any loop of the kernel (any core's) is a device loop (``Loop.is_runtime``):
        the one question a backend that batches or compiles loops asks before taking it."""
        return any(isinstance(n, Loop) and n.is_runtime for n, _ in self.walk())

    def instructions(self) -> Iterator[tuple[Instr, tuple[Loop, ...]]]:
        for n, loops in self.walk():
            if isinstance(n, Instr):
                yield n, loops

    def __str__(self) -> str:
        lines = [f"kernel {self.name} grid={self.grid} target={self.target}"]
        for t in self.tensors:
            if t.kind == "param":
                lines.append(f"  {t}")

        def rec(nodes: tuple[Node, ...], indent: str) -> None:
            for n in nodes:
                if isinstance(n, Loop):
                    rng = f"{n.start}, {n.stop}" + (f", {n.step}" if n.step != 1 else "")
                    lines.append(f"{indent}for {n.sym} in {n.kind}_range({rng}):")
                    rec(n.body, indent + "  ")
                elif isinstance(n, Alloc):
                    lines.append(f"{indent}{self.tensor(n.tensor)}")
                else:
                    text = f"{indent}{n}"
                    if n.loc is not None:  # where the instruction came from in the kernel
                        text = f"{text:<72s}  # line {n.loc.line}"
                    lines.append(text)

        if self.cores:  # one trace per physical core
            for c, one in enumerate(self.cores):
                lines.append(f"  core {c}:")
                rec(one.body, "    ")
        else:
            rec(self.body, "  ")
        outs = ", ".join(self.outputs)
        lines.append(f"  return {outs}" if self.returns_outputs else f"  # writes {outs}")
        return "\n".join(lines)


_ASSIGNED = re.compile(r"\s*([A-Za-z_]\w*)\s*(?::[^=]+)?=\s*")
_NAME_KW = re.compile(r"\bname\s*=\s*[\"']([^\"']+)[\"']")


def tensor_label(decl: TensorDecl) -> str:
    """The user's name for a tensor in messages: a parameter's name, the ``name=`` given at
    creation, or the variable the creating call is assigned to (``out = nl.ndarray(...)``);
    otherwise the internal name with the line that created it (``'sb3' (created at line 12)``)."""
    if decl.kind == "param" or decl.loc is None:
        return f"'{decl.name}'"
    line = decl.loc.source_line()
    m = _NAME_KW.search(line)
    if m is not None:
        return f"'{m.group(1)}'"
    name = assigned_name(decl.loc)  # (the tensor is the assigned value itself)
    if name is not None:
        return f"'{name}'"
    return f"'{decl.name}' (created at line {decl.loc.line})"


def assigned_name(loc: SrcLoc) -> str | None:
    """The variable a statement ``name = <call at loc>`` (or ``name: T = ...``) binds: the
    call starts right after its ``=``; None for any other statement."""
    m = _ASSIGNED.match(loc.source_line())
    return m.group(1) if m is not None and m.end() == loc.col else None
