"""The cost of one IR instruction on one target: which engine runs it, for how long, how many
bytes it moves and how many FLOPs it does. Static per instruction (shapes are static); the
scheduler adds what depends on order (stationary reuse, dependencies, shared ports)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from nki import dtypes
from nki.ir import Access, Const, Instr, KernelIR, Loop
from nki.optable import OPS
from nki.targets import get_target

from .masks import mask_fraction
from .table import (
    BROADCAST_ENGINES,
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
    # the part of ``ns`` that is a fixed or per-chunk overhead (MIN_II, access overhead, matmul
    # fixed cost, DMA per-chunk cost): the least certain figures, reported as such
    overhead_ns: float = 0.0


def _free(shape: tuple[int, ...]) -> int:
    return math.prod(shape[1:]) if len(shape) > 1 else 1


def _partition_axis(acc: Access, ir: KernelIR) -> int:
    """The access's partition axis: the tensor's ``par_dim`` when the access keeps every
    dimension, else its first axis."""
    d = ir.tensor(acc.tensor)
    return d.par_dim if d.on_chip and len(acc.shape) == len(d.shape) else 0


def per_partition(acc: Access, ir: KernelIR) -> int:
    """Elements per partition of an access."""
    p = _partition_axis(acc, ir)
    return math.prod(acc.shape) // max(1, acc.shape[p]) if acc.shape else 1


def partitions(acc: Access, ir: KernelIR) -> int:
    """Partitions an access spans."""
    return acc.shape[_partition_axis(acc, ir)] if acc.shape else 1


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
    """Bytes between consecutive elements of the innermost free axis of the access (tile
    axes that run along an on-chip tensor's partitions are not free axes)."""
    d = ir.tensor(acc.tensor)
    strides = _tile_strides(acc, ir)
    shape = acc.index[0].shape if acc.index else acc.shape
    partition_axes: set[int] = set()
    if d.on_chip and len(acc.index) > d.par_dim:
        partition_axes = {j for j, c in enumerate(acc.index[d.par_dim].coeffs) if c}
    itemsize = dtypes.itemsize(d.dtype)
    for j in reversed(range(len(shape))):
        if shape[j] > 1 and len(shape) > 1 and j not in partition_axes:
            return abs(strides[j]) * itemsize
    return itemsize


def is_matmul(instr: Instr) -> bool:
    """A matrix multiplication on the Tensor engine (``nl.matmul`` / ``nisa.nc_matmul``)."""
    return instr.kind == "matmul" or instr.op in ("nc_matmul", "nc_matmul_mx")


def engine_of(instr: Instr, ir: KernelIR | None = None) -> str:
    """The engine that runs ``instr`` (``none``: free; with ``ir``, a broadcast across
    partitions is placed by where its result lives)."""
    if instr.kind in FREE_KINDS:
        return "none"
    if ir is not None and instr.kind == "copy" and instr.op == "broadcast_to":
        src = instr.srcs[0]
        assert isinstance(src, Access) and instr.dst is not None
        if partitions(src, ir) == 1 < partitions(instr.dst, ir):
            home = ir.tensor(instr.dst.tensor).buffer
            return BROADCAST_ENGINES["psum" if home == "psum" else "sbuf"]
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
        overhead_ns=t.matmul_fixed_cycles * factor / row.clock_ghz,
    )


def _dma(instr: Instr, ir: KernelIR, t: CostTable, kept: float = 1.0) -> InstrCost:
    """A DMA transfer; ``kept`` is the share of its tile the mask keeps (a masked-off element
    is neither moved nor described)."""
    accs = _accesses(instr)
    hbm = [a for a in accs if not ir.tensor(a.tensor).on_chip]
    chip = [a for a in accs if ir.tensor(a.tensor).on_chip]
    main = instr.dst if instr.dst is not None else accs[0]
    elems = math.prod(main.shape)
    itemsize = max(dtypes.itemsize(ir.tensor(a.tensor).dtype) for a in accs)
    nbytes = round(elems * kept) * itemsize
    side = hbm[0] if hbm else accs[0]
    transposing = instr.op in ("load_transpose2d", "dma_transpose")
    run = max(1, contiguous_run(side, ir, storage_order=transposing))
    chunk = run * dtypes.itemsize(ir.tensor(side.tensor).dtype)
    chunks = max(1, round(elems * kept / max(1, run)))
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
    return InstrCost(
        "dma",
        ns,
        dma_bytes=nbytes,
        bytes_per_partition=per_part,
        chunk_bytes=chunk,
        overhead_ns=max(0.0, ns - nbytes / t.dma_bytes_per_ns),
    )


def streamed_inputs(instr: Instr, ir: KernelIR) -> int:
    """Input tiles an instruction streams element by element: sources with more than one
    element per partition (a one-element-per-partition operand is a per-partition scalar, as
    in ``tensor_scalar``), plus the destination when the instruction accumulates into it."""
    n = sum(isinstance(s, Access) and per_partition(s, ir) > 1 for s in instr.srcs)
    if instr.accumulate and instr.dst is not None and ir.tensor(instr.dst.tensor).on_chip:
        n += 1  # read-modify-write of the destination
    return n


def _elementwise(instr: Instr, ir: KernelIR, t: CostTable, engine: str) -> InstrCost:
    row = t.engines[engine]
    accs = _accesses(instr)
    n = max((per_partition(a, ir) for a in accs), default=1)
    name = instr.op if instr.kind == "isa" else instr.kind
    factor = OP_FACTORS.get(name, 1.0)
    if name not in OP_FACTORS and streamed_inputs(instr, ir) >= 2:
        factor = 2.0  # two tensor inputs stream through the engine one after the other
    srcs_psum = any(ir.tensor(a.tensor).buffer == "psum" for a in accs[:-1] if a is not None)
    if factor == 2.0 and srcs_psum:
        factor = 1.0  # one operand read from PSUM streams alongside the SBUF one [isa-cost]
    dts = {ir.tensor(a.tensor).dtype for a in accs}
    buffers = {ir.tensor(a.tensor).buffer for a in accs}
    penalty = any(_innermost_stride_bytes(a, ir) > t.stride_penalty_bytes for a in accs)
    if dts and all(dtypes.itemsize(d) == 2 for d in dts):
        fast = name in FAST_COPY_OPS and not srcs_psum and "psum" not in buffers
        general = factor / (row.bf16_copy_speedup if fast else row.bf16_speedup)
        rule = _bf16_rule(instr, name, dts, "psum" in buffers or penalty)
        factor = general if rule is None else min(general, rule)  # (the faster, not both)
    stream = factor * n * (2.0 if penalty else 1.0)
    cycles = max(row.min_ii_cycles, factor * n) * (2.0 if penalty else 1.0)
    cycles += OP_EXTRA_CYCLES.get(name, 0) + row.access_overhead_cycles
    if any(a.indirect for a in accs):
        cycles = max(cycles, t.dynamic_offset_cycles)
    return InstrCost(
        engine,
        cycles / row.clock_ghz,
        stride_penalty=penalty,
        buffers=tuple(sorted({ir.tensor(a.tensor).buffer for a in accs})),
        overhead_ns=max(0.0, cycles - stream) / row.clock_ghz,
    )


def _bf16_rule(instr: Instr, name: str, dts: set[str], slow: bool) -> float | None:
    """The cycles per element the instruction cost notes give some 2-byte instructions on every
    generation [isa-cost]: an all-bf16 SBUF contiguous add / multiply / subtract streams both
    inputs at N; a bf16 add / max reduction N/2; a bf16 / fp16 memset of zero N/2 (None:
    none applies)."""
    op = instr.attr("op")
    if name == "tensor_tensor" and dts == {"bfloat16"} and not slow:
        return 1.0 if op in ("add", "multiply", "subtract") else None
    if name == "tensor_reduce" and dts == {"bfloat16"}:
        return 0.5 if op in ("add", "maximum", "max") else None
    if name == "memset" and dts <= {"bfloat16", "float16"}:
        c = instr.srcs[0] if instr.srcs else None
        return 0.5 if isinstance(c, Const) and c.value == 0 else None
    return None


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


def _partition_broadcast(instr: Instr, ir: KernelIR, t: CostTable) -> InstrCost:
    """A broadcast across partitions on the Tensor engine: a matmul with a ones stationary per
    moving chunk of at most one PSUM bank (512 fp32) [arch-v2], fp32 data at the fp32 rate."""
    assert instr.dst is not None
    n = per_partition(instr.dst, ir)
    chunk = get_target(ir.target).psum_bank_bytes // 4
    fp32 = ir.tensor(instr.dst.tensor).dtype == "float32"
    factor = t.fp32_matmul_factor if fp32 else 1
    cycles = 0
    for start in range(0, n, chunk):
        cycles += (
            max(min(chunk, n - start), t.matmul_fixed_cycles) + t.matmul_fixed_cycles
        ) * factor
    return InstrCost(
        "tensor",
        cycles / t.engines["tensor"].clock_ghz,
        moving_free=min(n, chunk),
        buffers=tuple(ir.tensor(a.tensor).buffer for a in _accesses(instr)),
    )


def _spill(instr: Instr, t: CostTable) -> InstrCost:
    """A compiler spill: the excess bytes per partition saved to HBM and reloaded, one
    contiguous chunk per partition each way, on the core's DMA bandwidth [dma-bw]."""
    per_part = int(instr.attr("bytes_per_partition"))
    parts = int(instr.attr("partitions"))
    nbytes = 2 * per_part * parts
    ns = nbytes / t.dma_bytes_per_ns + 2 * parts * t.dma_descriptor_ns / t.dma_queues
    return InstrCost(
        "dma", ns, dma_bytes=nbytes, bytes_per_partition=per_part, chunk_bytes=per_part
    )


def cost_of(instr: Instr, ir: KernelIR, t: CostTable, loops: tuple[Loop, ...] = ()) -> InstrCost:
    """The static cost of ``instr`` on the table's target (inside ``loops``, over which a
    mask's share is averaged)."""
    engine = engine_of(instr, ir)
    if engine == "none":
        return InstrCost("none", 0.0)
    if instr.kind == "spill":
        return _spill(instr, t)
    if engine == "dma":
        return _dma(instr, ir, t, mask_fraction(instr, loops))
    if engine == "tensor":
        if is_matmul(instr):
            return _matmul(instr, ir, t)
        if instr.kind == "copy":
            return _partition_broadcast(instr, ir, t)
        return _transpose(instr, ir, t)
    if engine == BROADCAST_ENGINES["sbuf"] and instr.kind == "copy" and instr.op == "broadcast_to":
        # a broadcast wider than a PSUM bank: the Tensor engine's matmuls fill the banks while
        # the Scalar engine copies them to SBUF, so it takes the longer of the two
        copy, mm = _elementwise(instr, ir, t, engine), _partition_broadcast(instr, ir, t)
        return replace(copy, ns=max(copy.ns, mm.ns))
    return _elementwise(instr, ir, t, engine)
