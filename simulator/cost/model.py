"""The cost of one IR instruction on one target: which engine runs it, for how long, how many
bytes it moves and how many FLOPs it does. Static per instruction (shapes are static); the
scheduler adds what depends on order (stationary reuse, dependencies, shared ports)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from nki import dtypes
from nki.ir import Access, Instr, KernelIR
from nki.optable import OPS

from .table import (
    FAST_COPY_OPS,
    FREE_KINDS,
    ISA_ENGINES,
    KIND_ENGINES,
    OP_EXTRA_CYCLES,
    OP_FACTORS,
    CostTable,
)


@dataclass(frozen=True)
class InstrCost:
    """One instruction's cost. For DMA, ``ns`` is the transfer time on the shared DMA bandwidth
    (the fixed start latency is added by the scheduler); for matmul, ``ns`` excludes the
    stationary load, whose cycles are in ``stationary_ns``."""

    engine: str  # tensor | vector | scalar | gpsimd | dma | none
    ns: float
    dma_bytes: int = 0
    bytes_per_partition: int = 0  # DMA: SBUF-side bytes per partition
    chunk_bytes: int = 0  # DMA: contiguous HBM-side run
    flops: float = 0.0
    stationary: object = None  # matmul: identity of the stationary operand (reuse detection)
    stationary_ns: float = 0.0
    moving_free: int = 0  # matmul: moving free size
    stride_penalty: bool = False
    buffers: tuple[str, ...] = ()  # on-chip buffers touched (shared-port rules)


def _free(shape: tuple[int, ...]) -> int:
    return math.prod(shape[1:]) if len(shape) > 1 else 1


def per_partition(acc: Access, ir: KernelIR) -> int:
    """Elements per partition of an access (its partition axis is the tensor's ``par_dim``
    when the access keeps every dimension, else its first axis)."""
    d = ir.tensor(acc.tensor)
    p = d.par_dim if d.on_chip and len(acc.shape) == len(d.shape) else 0
    return math.prod(acc.shape) // max(1, acc.shape[p]) if acc.shape else 1


def _accesses(instr: Instr) -> list[Access]:
    """The tiles an instruction streams: its sources, then its destination. Attribute operands
    (per-partition scalars, secondary outputs) and index tiles do not set its duration."""
    return [u.access for u in instr.uses() if u.operand]


def _row_strides(shape: tuple[int, ...]) -> list[int]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return strides[::-1]


def _tile_strides(acc: Access, ir: KernelIR) -> list[int]:
    """Element stride in the tensor's row-major storage of each tile axis of the access."""
    shape = ir.tensor(acc.tensor).shape
    rs = _row_strides(shape)
    if not acc.index:
        return [1] * len(acc.shape)
    naxes = len(acc.index[0].coeffs)
    out = [0] * naxes
    for d, e in enumerate(acc.index):
        for j, c in enumerate(e.coeffs):
            out[j] += rs[d] * c
    return out


def contiguous_run(acc: Access, ir: KernelIR, storage_order: bool = False) -> int:
    """Elements of the longest contiguous run the access reads, innermost tile axes first (or
    in storage order, for a transposing DMA that reorders the elements itself)."""
    strides = _tile_strides(acc, ir)
    shape = acc.shape if len(acc.shape) == len(strides) else acc.index[0].shape
    axes = list(zip(strides, shape))
    if storage_order:
        axes.sort(key=lambda a: -abs(a[0]))
    run = 1
    for st, n in reversed(axes):
        if n == 1:
            continue
        if st != run:
            break
        run *= n
    return run


def _innermost_stride_bytes(acc: Access, ir: KernelIR) -> int:
    strides = _tile_strides(acc, ir)
    shape = acc.index[0].shape if acc.index else acc.shape
    itemsize = dtypes.itemsize(ir.tensor(acc.tensor).dtype)
    for st, n in zip(reversed(strides), reversed(shape)):
        if n > 1 and len(shape) > 1:
            return abs(st) * itemsize
    return itemsize


def _engine(instr: Instr) -> str:
    if instr.kind in FREE_KINDS:
        return "none"
    eng = instr.attr("engine")
    if instr.kind == "isa":
        if isinstance(eng, str) and eng in ("vector", "scalar", "gpsimd", "tensor", "dma"):
            return eng
        return ISA_ENGINES.get(instr.op, "vector")
    if instr.kind == "ew":
        row = OPS.get(instr.op)
        # unary math runs as a Scalar-engine activation; ALU ops on the Vector engine
        return "scalar" if row is not None and row.arity == 1 and row.activation else "vector"
    return KIND_ENGINES.get(instr.kind, "vector")


def _dtype(acc: Access, ir: KernelIR) -> str:
    return ir.tensor(acc.tensor).dtype


def _matmul(instr: Instr, ir: KernelIR, t: CostTable) -> InstrCost:
    x, y = instr.srcs[0], instr.srcs[1]
    assert isinstance(x, Access) and isinstance(y, Access)
    if instr.kind == "matmul" and not instr.attr("transpose_x", False):
        m = x.shape[0]  # x is [M, K]: the compiler feeds it transposed
        k = _free(x.shape)
    else:
        k, m = x.shape[0], _free(x.shape)
    n = _free(y.shape)
    row = t.engines["tensor"]
    fp32 = "float32" in (_dtype(x, ir), _dtype(y, ir))
    factor = t.fp32_matmul_factor if fp32 else 1
    # back-to-back matmul: max(min(64, N_stationary), N_moving) cycles [isa-cost]; the
    # stationary load (min(64, N_stationary)) overlaps the previous multiply unless the moving
    # side is too short to hide it, which the scheduler decides from reuse
    # plus the fixed per-matmul cost, which is why moving sizes below 128 are overhead-bound
    cycles = (max(n, 1) + t.matmul_fixed_cycles) * factor
    st_cycles = (min(t.stationary_load_cycles, m) + t.matmul_fixed_cycles) * factor
    return InstrCost(
        "tensor",
        cycles / row.clock_ghz,
        flops=2.0 * k * m * n,
        stationary=(x.tensor, str(x)),
        stationary_ns=st_cycles / row.clock_ghz,
        moving_free=n,
        buffers=tuple(ir.tensor(a.tensor).buffer for a in _accesses(instr)),
    )


def _dma(instr: Instr, ir: KernelIR, t: CostTable) -> InstrCost:
    accs = _accesses(instr)
    hbm = [a for a in accs if not ir.tensor(a.tensor).on_chip]
    chip = [a for a in accs if ir.tensor(a.tensor).on_chip]
    main = instr.dst if instr.dst is not None else accs[0]
    elems = math.prod(main.shape)
    itemsize = max(dtypes.itemsize(ir.tensor(a.tensor).dtype) for a in accs)
    nbytes = elems * itemsize
    side = hbm[0] if hbm else accs[0]
    transposing = instr.op in ("load_transpose2d", "dma_transpose")
    run = max(1, contiguous_run(side, ir, storage_order=transposing))
    chunk = run * dtypes.itemsize(ir.tensor(side.tensor).dtype)
    chunks = max(1, elems // max(1, run))
    per_part = per_partition(chip[0], ir) * itemsize if chip else nbytes
    # the transfer is spread over all DMA engines: bytes at aggregate bandwidth plus the
    # per-chunk processing cost shared by the engines [dma-bw]
    ns = nbytes / t.dma_bytes_per_ns + chunks * t.dma_descriptor_ns / t.dma_queues
    if transposing:
        ns /= t.dma_transpose_factor
    if instr.kind == "atomic_rmw":
        ns *= 2  # read, modify, write back
    if any(a.indirect for a in accs):  # descriptors generated from register values
        ns += t.dynamic_offset_cycles / t.engines["gpsimd"].clock_ghz
    return InstrCost("dma", ns, dma_bytes=nbytes, bytes_per_partition=per_part, chunk_bytes=chunk)


def _elementwise(instr: Instr, ir: KernelIR, t: CostTable, engine: str) -> InstrCost:
    row = t.engines[engine]
    accs = _accesses(instr)
    n = max((per_partition(a, ir) for a in accs), default=1)
    name = instr.op if instr.kind == "isa" else instr.kind
    factor = OP_FACTORS.get(name, 1.0)
    if instr.kind in ("ew", "select") and sum(isinstance(s, Access) for s in instr.srcs) >= 2:
        factor = 2.0  # two tensor inputs stream through the engine one after the other
    srcs_psum = any(ir.tensor(a.tensor).buffer == "psum" for a in accs[:-1] if a is not None)
    if factor == 2.0 and srcs_psum:
        factor = 1.0  # one operand read from PSUM streams alongside the SBUF one [isa-cost]
    dts = {ir.tensor(a.tensor).dtype for a in accs}
    buffers = {ir.tensor(a.tensor).buffer for a in accs}
    if dts and all(dtypes.itemsize(d) == 2 for d in dts):
        fast = name in FAST_COPY_OPS and not srcs_psum and "psum" not in buffers
        factor /= row.bf16_copy_speedup if fast else row.bf16_speedup
    penalty = any(_innermost_stride_bytes(a, ir) > t.stride_penalty_bytes for a in accs)
    cycles = max(row.min_ii_cycles, factor * n) * (2.0 if penalty else 1.0)
    cycles += OP_EXTRA_CYCLES.get(name, 0) + row.access_overhead_cycles
    if any(a.indirect for a in accs):
        cycles = max(cycles, t.dynamic_offset_cycles)
    return InstrCost(
        engine,
        cycles / row.clock_ghz,
        stride_penalty=penalty,
        buffers=tuple(sorted({ir.tensor(a.tensor).buffer for a in accs})),
    )


def _transpose(instr: Instr, ir: KernelIR, t: CostTable) -> InstrCost:
    src = instr.srcs[0]
    assert isinstance(src, Access)
    p, f = src.shape[0], _free(src.shape)
    cycles = max(p, min(64, f))  # Tensor-engine transpose: max(P, min(64, F)) [isa-cost]
    return InstrCost(
        "tensor",
        cycles / t.engines["tensor"].clock_ghz,
        buffers=tuple(ir.tensor(a.tensor).buffer for a in _accesses(instr)),
    )


def cost_of(instr: Instr, ir: KernelIR, t: CostTable) -> InstrCost:
    """The static cost of ``instr`` on the table's target."""
    engine = _engine(instr)
    if engine == "none":
        return InstrCost("none", 0.0)
    if engine == "dma":
        return _dma(instr, ir, t)
    if engine == "tensor":
        if instr.kind == "matmul" or instr.op in ("nc_matmul", "nc_matmul_mx"):
            return _matmul(instr, ir, t)
        return _transpose(instr, ir, t)
    return _elementwise(instr, ir, t, engine)
