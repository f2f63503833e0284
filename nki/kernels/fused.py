"""One kernel for a chain of element-wise ops (and row means / sums over the last dim): each input
tile is loaded once, the chain's steps run on SBUF tiles in order, and the values used outside
the chain are stored. The torch backend fuses chains of its graphs into it
(:mod:`frontends.torch_fusion`).

Every step computes as the separate kernel of :mod:`nki.kernels.elementwise` /
:mod:`nki.kernels.reduce` does (the same tile functions, fp32 math, one rounding to the step's
dtype), so a fused chain gives bit for bit what the chain of separate launches gives. It takes
as few instructions as that allows: identical steps are computed once (``shared_steps``), a sin
and cos of one value share its range reduction, fp32 steps with a scalar operand wait
(``Pending``) to run with their reader as one two-op instruction (``tensor_scalar``,
``scalar_tensor_tensor``: each op rounded to fp32 as its own step would round), and a value read
only by a cat or pad is computed straight into that tile (``Deferred``).

A program is a tuple of steps ``(op, args, dtype)``: ``op`` is ``"unary:<op>"`` (a row of
``UNARY``), ``"binary:<op>"`` (``BINARY``), ``"grad:<op>"`` (``GRAD``), ``"cast"``, ``"mean"``
or ``"sum"`` (over the last dim, keeping it as 1), ``"cat"`` (the operands side by side along
the last dim), ``"expand"`` (``(value, ("s", w))``: a value of one column, or of w, broadcast
to w columns), ``"slice"`` (``(value, ("s", start), ("s", stop))``: columns start..stop),
``"pad"`` (``(value, ("s", start), ("s", w))``: w columns, zero but for the value's from
column start) or ``"colsum"`` (the sum over all rows: one (1, W) row, computed as
``sum_rows_kernel`` computes it; only stored, never an operand of another step); ``args`` are
``("in", i)`` (input ``i``), ``("v", j)`` (the value of step ``j``) or ``("s", x)`` (the Python
scalar ``x``); ``dtype`` is the step's result dtype name (``"float32"``, ``"bfloat16"``,
``"float16"``). Copies (cast to the same dtype, expand, slice, pad, cat) never round."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIShapeError, user_loc

from ._tiles import fit, load_row_vector
from .elementwise import (
    ANGLE,
    BINARY,
    F32,
    GRAD,
    UNARY,
    load_rows,
    reduce_angle,
    rounded,
    row_tiles,
    store_rows,
)
from .matmul import NT, _matmul, _mm_tile, shared_product

# a step's op kind -> tile function of (argument tiles or scalars, result dtype)
STEP: dict[str, Any] = {
    "unary": lambda name, a, dt: rounded(UNARY[name][0](a[0]), dt),
    "binary": lambda name, a, dt: rounded(BINARY[name][0](a[0], a[1], F32), dt),
    "grad": lambda name, a, dt: rounded(GRAD[name][0](a[0], a[1]), dt),
    "cast": lambda name, a, dt: nl.copy(a[0], dtype=dt),
    "mean": lambda name, a, dt: nl.multiply(
        nl.sum(a[0], axis=1, keepdims=True, dtype=F32), 1.0 / a[0].shape[1], dtype=dt
    ),
    "sum": lambda name, a, dt: nl.sum(a[0], axis=1, keepdims=True, dtype=dt),
    "cat": lambda name, a, dt: _side_by_side(a, dt),
    "expand": lambda name, a, dt: nl.broadcast_to(a[0], shape=(a[0].shape[0], int(a[1]))),
    "slice": lambda name, a, dt: _columns(a[0], int(a[1]), int(a[2]), dt),
    "pad": lambda name, a, dt: _padded(a[0], int(a[1]), int(a[2]), dt),
}


# binary steps an engine ALU op computes as BINARY does (fp32 in, fp32 out): a chain of them with
# a scalar operand runs as one two-op instruction (tensor_scalar / scalar_tensor_tensor), which
# rounds to fp32 after each op as the separate steps do
SCALAR_ALU: dict[str, Any] = {
    "add": nl.add, "sub": nl.subtract, "mul": nl.multiply, "div": nl.divide, "pow": nl.power,
    "maximum": nl.maximum, "minimum": nl.minimum,
}  # fmt: skip


@dataclass(frozen=True)
class Pending:
    """An fp32 value not computed yet: ``base`` with up to two ALU ops ``(op, operand,
    reverse)`` applied, each operand a Python scalar or an fp32 (P, 1) tile. A step's value
    waits so when its one use may take its ops into the same instruction."""

    base: Any
    ops: tuple


@dataclass(frozen=True)
class Deferred:
    """A value computed (or loaded) only where its one reader, a cat or a pad, assigns it to
    its columns: the instruction then writes that tile directly (no copy)."""

    make: Any
    shape: tuple[int, int]


def tile_of(v: Any) -> Any:
    """The value as a tile (a pending one computed by its step's own instruction, or two ops by
    one tensor_scalar; a deferred one now); others unchanged."""
    if isinstance(v, Deferred):
        return tile_of(v.make())
    if not isinstance(v, Pending):
        return v
    (f0, o0, r0), *rest = v.ops
    if not rest:  # (the simulator runs a one-op nl instruction faster than a tensor_scalar)
        return f0(o0, v.base, dtype=F32) if r0 else f0(v.base, o0, dtype=F32)
    f1, o1, r1 = rest[0]
    return nisa.tensor_scalar(
        v.base, f0, o0, reverse0=r0, op1=f1, operand1=o1, reverse1=r1, dtype=F32
    )


def shared_steps(program: tuple) -> list[int]:
    """Per step: the first step computing the same op of the same values in the same dtype
    (itself if none), whose value it takes instead of computing it again. Column sums
    accumulate across row tiles and are never shared."""
    first: dict[Any, int] = {}
    same: list[int] = []
    for j, (op, args, dtype) in enumerate(program):
        key = tuple(
            ("v", same[r[1]]) if r[0] == "v" else (r[0], type(r[1]).__name__, r[1]) for r in args
        )
        same.append(j if op == "colsum" else first.setdefault((op, key, dtype), j))
    return same


def _uses(program: tuple, outs: tuple, same: list[int]) -> tuple[list[int], set[int]]:
    """How many steps read each computed step's value, and the steps whose values are stored."""
    uses = [0] * len(program)
    for j, (_, args, _) in enumerate(program):
        for r in args if same[j] == j else ():
            if r[0] == "v":
                uses[same[r[1]]] += 1
    return uses, {same[o] for o in outs}


def _shape(v: Any) -> tuple[int, int]:
    return tuple(v.base.shape if isinstance(v, Pending) else v.shape)  # type: ignore[return-value]


def _width(v: Any) -> int | None:
    return _shape(v)[1] if hasattr(v, "shape") or isinstance(v, Pending) else None


def _is_scalar(v: Any, width: int) -> bool:
    """A Python number, or an fp32 (P, 1) tile against a wider value (a per-row scalar)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return True
    return not isinstance(v, Pending) and width > 1 and _width(v) == 1 and v.dtype == F32


def _binary_step(name: str, a: list, width: int, dtype: Any, lazy: bool) -> Any:
    """A binary step of ``SCALAR_ALU``: pending when ``lazy`` (an fp32 value with one use, not
    stored) and one operand is a scalar; one scalar_tensor_tensor when an operand is pending
    with one op and the other is a tile of its shape; else as BINARY computes it."""
    fn = SCALAR_ALU[name]
    for i in (1, 0):  # (i: the scalar's position; at 0 the op's operands are reversed)
        s, d = a[i], a[1 - i]
        if lazy and _is_scalar(s, width) and _width(d) == width:
            op = (fn, s, i == 0)
            if isinstance(d, Pending) and len(d.ops) == 1:
                return Pending(d.base, (*d.ops, op))
            return Pending(tile_of(d), (op,))
    for i in (0, 1):
        pend, other = a[i], a[1 - i]
        if isinstance(pend, Pending) and len(pend.ops) == 1 and _width(other) == width:
            other = tile_of(other)
            if other.shape == pend.base.shape and pend.base.shape[1] == width:
                ((f0, o0, r0),) = pend.ops
                return nisa.scalar_tensor_tensor(
                    data=pend.base, op0=f0, operand0=o0, reverse0=r0, op1=fn, operand1=other,
                    reverse1=i == 1, dtype=dtype,
                )  # fmt: skip
    return STEP["binary"](name, [tile_of(v) for v in a], dtype)


def _columns(tile: Any, start: int, stop: int, dtype: Any) -> Any:
    """Columns start..stop of the tile (a view: no instruction)."""
    return tile[nl.arange(tile.shape[0])[:, None], start + nl.arange(stop - start)[None, :]]


def _padded(value: Any, start: int, width: int, dtype: Any) -> Any:
    """A zero tile of ``width`` columns holding the value from column ``start`` (the gradient
    of a slice); a Deferred value is computed straight into its columns."""
    p, w = _shape(value)
    out = nl.zeros((p, width), dtype=dtype, buffer=nl.sbuf)
    i_p = nl.arange(p)[:, None]
    out[i_p, start + nl.arange(w)[None, :]] = tile_of(value)
    return out


def _side_by_side(parts: list, dtype: Any) -> Any:
    """The parts next to each other along the free axis (torch.cat of the last dim): copies,
    no rounding (the parts have the result's dtype); a Deferred part is computed straight
    into its columns."""
    widths = [_width(v) for v in parts]
    p = _shape(parts[0])[0]
    out = nl.ndarray((p, sum(widths)), dtype=dtype, buffer=nl.sbuf)
    i_p = nl.arange(p)[:, None]
    off = 0
    for v, w in zip(parts, widths):
        out[i_p, off + nl.arange(w)[None, :]] = tile_of(v)
        off += w
    return out


def widths(program: tuple, in_widths: tuple[int, ...]) -> list[int]:
    """Per step: the number of columns of its value (1 for a row statistic, or math on such
    values only; the parts' sum for a cat)."""
    w: list[int] = []
    for op, args, _ in program:
        kind = op.split(":")[0]
        if any(r[0] == "v" and program[r[1]][0] == "colsum" for r in args):
            raise NKIShapeError(
                f"fused_elementwise_kernel: step {len(w)} ({op}) reads a colsum step's value, "
                "which is only complete after the last row tile (colsum values are only stored)",
                code="err_invalid_shape",
                loc=user_loc(),
            )
        refs = [in_widths[r[1]] if r[0] == "in" else w[r[1]] for r in args if r[0] != "s"]
        if kind in ("mean", "sum"):
            w.append(1)
        elif kind in ("expand", "pad"):
            w.append(int(args[-1][1]))
        elif kind == "slice":
            w.append(int(args[2][1]) - int(args[1][1]))
        else:
            w.append(sum(refs) if kind == "cat" else max(refs))
    return w


@nki.jit
def fused_elementwise_kernel(ins, program=(), outs=(), segments=()):
    """The values ``outs`` (step indices) of ``program`` (see the module) computed on the
    rows of the inputs ``ins``, each loaded once per 128-row tile.

    Shapes: each input (N, W) (one row per row of the result, any W: D, 1 or a part of D that a
    cat step joins) or (1, W) (one row, broadcast to every row); N the largest row count; any
    N, W <= 4096. A step's value has the columns of its widest operand, one for a row mean /
    sum, the parts' sum for a cat. Dtypes: float32, bfloat16, float16 (fp32 math, each step
    rounded to its dtype as its separate kernel rounds).

    ``segments``: several independent programs in one launch instead of ``program`` /
    ``outs``, each ``(inputs, program, outs)`` where ``inputs`` are the indices into ``ins`` of
    the segment's inputs (its ``("in", i)`` refer to them in that order); each segment has its
    own row count N and runs as the one-program kernel does; the results are every segment's
    ``outs`` in order."""
    if segments and (program or outs):
        raise NKIShapeError(
            "fused_elementwise_kernel: give program and outs, or segments, not both",
            code="err_invalid_shape",
            loc=user_loc(),
        )
    results: list[Any] = []
    for idx, prog, out in segments or ((tuple(range(len(ins))), program, outs),):
        results += _segment([ins[i] for i in idx], prog, out)
    return tuple(results)


def _segment(ins: list, program: tuple, outs: tuple) -> list:
    """The stored values ``outs`` of one program on the rows of ``ins`` (new HBM tensors)."""
    n = max(x.shape[0] for x in ins)
    prog = _Program(program, outs, n, [x.shape[1] for x in ins], [x.shape[0] == n for x in ins])
    for t in nl.affine_range(row_tiles(n)):
        prog.tile(t, [_input(x, t, n, prog.p, -1 - i in prog.into_cat) for i, x in enumerate(ins)])
    return prog.finish()


class _Program:
    """One program over ``n`` rows whose inputs have the columns ``in_widths`` (``full_rows``:
    whether each input has every row, else one broadcast row): its result tensors, decided once,
    and the steps run on each row tile of its inputs (``tile``)."""

    def __init__(
        self, program: tuple, outs: tuple, n: int, in_widths: list, full_rows: list
    ) -> None:
        self.program, self.outs, self.n, self.p = program, outs, n, fit(n)
        self.w = w = widths(program, tuple(in_widths))
        self.results = [
            nl.ndarray(
                (1 if program[o][0] == "colsum" else n, w[o]),
                dtype=getattr(nl, program[o][2]),
                buffer=nl.shared_hbm,
            )
            for o in outs
        ]
        # a colsum step sums its rows into one fp32 PSUM row over all row tiles
        self.sums = {
            j: nl.zeros((1, w[j]), F32, buffer=nl.psum)
            for j, (op, _, _) in enumerate(program)
            if op == "colsum"
        }
        self.ones = {
            program[j][2]: nl.ones((self.p, 1), getattr(nl, program[j][2]), buffer=nl.sbuf)
            for j in self.sums
        }
        self.same = shared_steps(program)
        self.uses, self.kept = _uses(program, outs, self.same)
        self.into_cat = _cat_parts(program, self.same, self.kept, full_rows)

    def tile(self, t: Any, tiles: list) -> None:
        """The steps on row tile ``t`` (``tiles``: its inputs' values), stored values stored."""
        program, same, w, n = self.program, self.same, self.w, self.n
        vals: list[Any] = []
        angles: dict[int, Any] = {}  # the reduced angle of a value, for its sin and cos
        for j, (op, args, dtype) in enumerate(program):
            a = [tiles[r[1]] if r[0] == "in" else vals[r[1]] if r[0] == "v" else r[1] for r in args]
            lazy = dtype == "float32" and self.uses[j] == 1 and j not in self.kept
            if same[j] != j:
                vals.append(vals[same[j]])
            elif op == "colsum":
                self.sums[j] += nl.matmul(
                    self.ones[dtype], _rows_below(tile_of(a[0]), t, n), transpose_x=True
                )
                vals.append(None)
            elif j in self.into_cat:
                make = functools.partial(_value, program[j], a, w[j], lazy, angles)
                vals.append(Deferred(make, (self.p, w[j])))
            else:
                vals.append(_value(program[j], a, w[j], lazy, angles))
        for res, o in zip(self.results, self.outs):
            if o not in self.sums:
                store_rows(res, t, n, w[o], vals[o])

    def finish(self) -> list:
        """The result tensors, the column sums stored."""
        for res, o in zip(self.results, self.outs):
            if o in self.sums:
                i_f = nl.arange(self.w[o])[None, :]
                nl.store(res[nl.arange(1)[:, None], i_f], nl.copy(self.sums[o], dtype=res.dtype))
        return self.results


@nki.jit
def matmul_epilogue_kernel(lhs, rhs, ins=(), program=(), outs=(), read=(), keep=(), shared=False):
    """The products ``lhs[i] @ rhs[i]`` and ``program`` (as :func:`fused_elementwise_kernel`
    runs it) on the products ``read`` and the inputs ``ins``, in one launch: each 128-row tile
    of a read product is computed as :func:`matmul_kernel` computes it (with ``shared``, the read
    products side by side as :func:`matmul_shared_kernel` computes them), rounded to its dtype,
    and the program's steps run on it in SBUF. The program's ``("in", j)`` is product
    ``read[j]`` for j < len(read), else ``ins[j - len(read)]``. A read product is stored only
    when it is in ``keep``; the others are computed and stored as :func:`matmul_pairs_kernel`
    computes them. Returns the stored products (in product order), then the program's ``outs``.

    Shapes: each lhs[i] (Mi, Ki) with rhs[i] (Ki, Ni); the read products have one M and at most
    512 columns each (with ``shared``: one left operand, ``lhs[read[0]]``, and 512 columns in
    all: one PSUM bank); each input (M, W) or (1, W). Dtypes: each pair float32, bfloat16 or
    float16, both the same; inputs and steps as :func:`fused_elementwise_kernel`."""
    if len(lhs) != len(rhs) or not set(keep) <= set(read) <= set(range(len(lhs))):
        raise NKIShapeError(
            f"matmul_epilogue_kernel takes one rhs per lhs ({len(lhs)} lhs, {len(rhs)} rhs), "
            f"read indices among them ({list(read)}) and keep indices among those read "
            f"({list(keep)})",
            code="err_invalid_shape",
            loc=user_loc(),
        )
    m = lhs[read[0]].shape[0] if read else 0
    ns = [rhs[r].shape[1] for r in read]
    limit = sum(ns) if shared else max(ns, default=0)
    if (
        not read
        or limit > NT
        or any(lhs[r].shape[0] != m for r in read)
        or any(x.shape[0] not in (1, m) for x in ins)
    ):
        raise NKIShapeError(
            f"matmul_epilogue_kernel: read products {list(read)} of {ns} columns (at most {NT} "
            f"{'in all' if shared else 'each'}) and {m} rows, inputs of "
            f"{[tuple(x.shape) for x in ins]} (rows {m} or 1)",
            code="err_invalid_shape",
            loc=user_loc(),
        )
    stored = [i for i in range(len(lhs)) if i not in read or i in keep]
    results = [_matmul(lhs[i], rhs[i]) for i in stored if i not in read]
    kept = {r: nl.ndarray((m, n), dtype=lhs[r].dtype, buffer=nl.shared_hbm)
            for r, n in zip(read, ns) if r in keep}  # fmt: skip
    full = [True] * len(read) + [x.shape[0] == m for x in ins]
    prog = _Program(program, outs, m, ns + [x.shape[1] for x in ins], full)
    i_p = nl.arange(prog.p)[:, None]
    # fp32 products only the program reads: its steps read the PSUM accumulator (the engines
    # read PSUM; a copy to SBUF would not round)
    psum = not keep and all(lhs[r].dtype == F32 for r in read)
    for mi in nl.affine_range(row_tiles(m)):
        tiles = _read_tiles(lhs, rhs, read, shared, mi, i_p, psum)
        for r, tile, n in zip(read, tiles, ns):
            if r in kept:
                store_rows(kept[r], mi, m, n, tile)
        first = len(read)
        tiles += [
            _input(x, mi, m, prog.p, -1 - (first + i) in prog.into_cat) for i, x in enumerate(ins)
        ]
        prog.tile(mi, tiles)
    out = [kept[i] if i in kept else results.pop(0) for i in stored]
    return tuple(out + prog.finish())


def _read_tiles(
    lhs: Any, rhs: Any, read: tuple, shared: bool, mi: Any, i_p: Any, psum: bool
) -> list:
    """M tile ``mi`` of each read product, rounded to its dtype in SBUF (with ``psum``: the fp32
    accumulators themselves), one side-by-side product when ``shared``."""
    if shared:
        ns = [rhs[r].shape[1] for r in read]
        res = shared_product(lhs[read[0]], [rhs[r] for r in read], mi, to_sbuf=not psum)
        offs = [sum(ns[:i]) for i in range(len(ns))]
        return [res[i_p, off + nl.arange(n)[None, :]] for n, off in zip(ns, offs)]
    tiles = []
    for r in read:
        (m, k), n = lhs[r].shape, rhs[r].shape[1]
        acc = _mm_tile(lhs[r], rhs[r], mi, 0, m, k, n)
        tiles.append(acc if psum else nl.copy(acc, dtype=lhs[r].dtype))
    return tiles


def _value(step: tuple, a: list, width: int, lazy: bool, angles: dict) -> Any:
    """The value of a step (a tile, Pending or Deferred) from its operands' values ``a``."""
    op, args, dtype = step
    kind, _, name = op.partition(":")
    dt = getattr(nl, dtype)
    if kind == "binary" and name in SCALAR_ALU:
        return _binary_step(name, a, width, dt, lazy)
    if kind == "mean" and lazy:  # the sum's scale waits for the ops that follow
        total = nl.sum(tile_of(a[0]), axis=1, keepdims=True, dtype=F32)
        return Pending(total, ((nl.multiply, 1.0 / _width(a[0]), False),))
    if kind == "unary" and name in ANGLE:
        if id(a[0]) not in angles:  # (a shared step's value is the one object)
            angles[id(a[0])] = reduce_angle(tile_of(a[0]))
        return rounded(ANGLE[name](angles[id(a[0])]), dt)
    return STEP[kind](name, a if kind in ("cat", "pad") else [tile_of(v) for v in a], dt)


def _input(x: Any, t: Any, n: int, p: int, deferred: bool) -> Any:
    """Row tile t of input x (its one row broadcast for a (1, W) input)."""
    if x.shape[0] != n:
        return load_row_vector(x, x.shape[1], p)
    if deferred:
        return Deferred(functools.partial(load_rows, x, t, n, x.shape[1]), (p, x.shape[1]))
    return load_rows(x, t, n, x.shape[1])


def _cat_parts(program: tuple, same: list[int], kept: set[int], rows: list[bool]) -> set[int]:
    """The steps (j) and inputs of full rows (-1 - i) read once, by a cat or a pad, and not
    stored: computed (loaded) straight into its tile instead of copied there."""
    readers: dict[int, list[str]] = {}
    for j, (op, args, _) in enumerate(program):
        for r in args if same[j] == j else ():
            if r[0] == "v" or (r[0] == "in" and rows[r[1]]):
                key = same[r[1]] if r[0] == "v" else -1 - r[1]
                readers.setdefault(key, []).append(op)
    return {
        k
        for k, ops in readers.items()
        if ops in (["cat"], ["pad"]) and k not in kept and (k < 0 or program[k][0] != "colsum")
    }


def _rows_below(tile: Any, t: Any, n: int) -> Any:
    """The tile with the rows past ``n`` (of a ragged last tile) zero."""
    p, w = tile.shape
    if n % p == 0:
        return tile
    i_p = nl.arange(p)[:, None]
    out = nl.zeros((p, w), dtype=tile.dtype, buffer=nl.sbuf)
    out[i_p, nl.arange(w)[None, :]] = nl.copy(tile, mask=t * p + i_p < n)
    return out
