"""Per-target cost rows: clocks, engine throughputs, fixed overheads and DMA figures as data.

Every number cites where it comes from, by tag. Paths are in github:aws-neuron/aws-neuron-sdk
(public documentation; the figures are facts, recorded here in our own words):

- ``[arch-v2]`` nki/guides/architecture/trainium_inferentia2_arch.rst (NeuronCore-v2, trn1):
  the "Data-path Width / Frequency" table, the Tensor / Vector engine "Cost Model" paragraphs,
  "Tensor access overhead", the access-pattern and concurrent-access paragraphs.
- ``[arch-v3]`` nki/guides/architecture/trainium2_arch.rst (NeuronCore-v3, trn2): its
  "Compute Engine Specifications" table, "Vector Engine Performance Mode", "Data Movement".
- ``[arch-v4]`` nki/guides/architecture/trainium3_arch.rst (NeuronCore-v4, trn3): the same.
- ``[core-v2..v4]`` about-neuron/arch/neuron-hardware/neuron-core-v2/v3/v4.rst: engine
  TFLOPS, used as a cross-check. Vector and Scalar FP32 TFLOPS per cycle are equal on every
  generation (v3: 1.0 TFLOPS / 0.96 GHz vs 1.2 / 1.2 GHz; v4: 1.2 / 1.2 vs 1.2 / 1.2; v2:
  2.3 / 1.12 vs 2.9 / 1.4), and the Scalar engine streams 128 fp32 elements per cycle, so
  the Vector engine is modelled at 128 fp32 elements per cycle on v3/v4 too (their tables'
  "256 for other data types" is not read as 2 fp32 elements per lane per cycle).
- ``[isa-cost]`` the "Estimated instruction cost" notes of the classic ``nki.isa`` reference
  (general/nki/api/nki/isa/__init__.py at commit 0521004c): MIN_II ~64 cycles,
  ``tensor_tensor`` 2N (N with one PSUM input), matmul ``max(min(64, N_st), N_mov)`` and
  4x for fp32, GPSIMD_START ~150, MIN_II_DYNAMIC ~600, per-instruction factors.
- ``[dma-bw]`` nki/deep-dives/nki-dma-bandwidth-guide.rst: 16 DMA engines per core at
  17 / 23 / 33 B/ns (trn1 / trn2 / trn3), ~1300 ns to start a transfer. (The trn1
  architecture guide says 27 GiB/s per DMA engine; the newer bandwidth guide is used.)
- ``[mm-tut]`` / ``[mamba-tut]`` the matrix multiplication and fused Mamba tutorials.
- ``[fit]`` a parameter no document states, chosen against the figures the calibration
  harness (benchmarks/calibrate.py) marks ``fit``; ``[assumption]`` a modelling choice that
  no document states and no figure fitted.

Per core, trn2 is slower than trn1 for BF16 matmul (79 vs 92 TFLOPS: 2.4 vs 2.8 GHz) and for
FP32 Vector / Scalar work (0.96 vs 1.12 GHz, 1.2 vs 1.4 GHz), as the pages say; a trn2 chip
has 8 cores to trn1's 2. Its DMA (368 vs 272 GB/s) and 2-byte Vector work are faster."""

from __future__ import annotations

from dataclasses import dataclass

from nki.isa_spec import INSTRUCTIONS


@dataclass(frozen=True)
class EngineRow:
    """One compute engine of one NeuronCore generation."""

    clock_ghz: float
    min_ii_cycles: int  # minimum initiation interval of a small instruction
    access_overhead_cycles: int  # static cost of starting an SBUF/PSUM access
    bf16_speedup: float = 1.0  # elements per lane per cycle for 2-byte types vs fp32
    bf16_copy_speedup: float = 1.0  # perf mode: 2-byte SBUF copy / tensor_scalar [arch-v3]


@dataclass(frozen=True)
class CostTable:
    """The cost model's figures for one target (one row per engine plus the DMA figures)."""

    target: str
    engines: dict[str, EngineRow]
    fp32_matmul_factor: int  # fp32 matmul passes through the array 4 times [isa-cost]
    stationary_load_cycles: int  # LoadStationary of a 128-column stationary [isa-cost]
    matmul_fixed_cycles: int  # per-matmul fixed cost, MM_INIT_LATENCY [isa-cost]
    dma_queues: int  # DMA engines per core [arch-v2..v4]
    dma_bytes_per_ns_per_queue: float  # [dma-bw]
    dma_fixed_latency_ns: float  # descriptor / semaphore latency before a transfer [dma-bw]
    dma_descriptor_ns: float  # per contiguous chunk processing cost on one DMA engine [fit]
    dma_transpose_factor: float  # DMA transpose runs at this fraction of DMA bandwidth [arch-v3]
    dynamic_offset_cycles: int  # MIN_II_DYNAMIC: register-offset instruction [isa-cost]
    stride_penalty_bytes: int  # innermost stride above this halves SBUF streaming [isa-cost]
    shared_ports: tuple[tuple[str, tuple[str, ...], str], ...]  # (port, engines, buffer)
    tensor_tile: int = 128  # PE array rows / columns [arch-v2]

    @property
    def dma_bytes_per_ns(self) -> float:
        return self.dma_queues * self.dma_bytes_per_ns_per_queue

    def peak_matmul_flops_per_ns(self) -> float:
        """Peak bf16 Tensor-engine FLOP/ns: 128 x 128 MACs per cycle."""
        return 2.0 * self.tensor_tile * self.tensor_tile * self.engines["tensor"].clock_ghz


# Every engine: MIN_II = 64 cycles for a small instruction [isa-cost]; Vector / Scalar /
# GpSimd: ~60-cycle static overhead to start an SBUF / PSUM access [arch-v2 "Tensor access
# overhead"]; GpSimd: GPSIMD_START ~150 cycles [isa-cost]. Clocks: each guide's
# "Frequency (GHz)" column; 2-byte speed-ups: its "Data-path Width" column and performance mode.
_V2 = {
    "tensor": EngineRow(2.8, 64, 0),  # 2.8 GHz, MM_INIT_LATENCY 64 cycles [arch-v2]
    "vector": EngineRow(1.12, 64, 60),  # 1.12 GHz, 128 elements/cycle [arch-v2]
    "scalar": EngineRow(1.4, 64, 60),  # 1.4 GHz, 128 elements/cycle [arch-v2]
    "gpsimd": EngineRow(1.4, 150, 60),  # 1.4 GHz, 128 elements/cycle [arch-v2]
}
_V3 = {
    "tensor": EngineRow(2.4, 64, 0),  # 2.4 GHz, 2x128 BF16 input as v2 [arch-v3]
    # 0.96 GHz; 2-byte data: 512 elements/cycle, 4x v2 for SBUF-contiguous tensor_copy /
    # tensor_scalar, 2x for the rest (tensor_tensor, PSUM operands) [arch-v3 performance mode];
    # fp32: 128 elements/cycle [core-v3 cross-check above]
    "vector": EngineRow(0.96, 64, 60, 2.0, 4.0),
    "scalar": EngineRow(1.2, 64, 60),  # 1.2 GHz, 128 elements/cycle [arch-v3]
    "gpsimd": EngineRow(1.2, 150, 60),  # 1.2 GHz [arch-v3]
}
_V4 = {
    "tensor": EngineRow(2.4, 64, 0),  # 2.4 GHz, 2x128 non-MXFP8 input [arch-v4]
    "vector": EngineRow(1.2, 64, 60, 2.0, 4.0),  # 1.2 GHz, as v3 [arch-v4]
    "scalar": EngineRow(1.2, 64, 60, 2.0),  # 1.2 GHz, 256 2-byte / 128 other per cycle [arch-v4]
    "gpsimd": EngineRow(1.2, 150, 60),  # 1.2 GHz, 128 elements/cycle [arch-v4]
}

TABLES: dict[str, CostTable] = {
    "trn1": CostTable(
        "trn1",
        _V2,
        fp32_matmul_factor=4,  # fp32 matmul ~4x the BF16 cost [arch-v2], [isa-cost]
        stationary_load_cycles=64,  # min(64, N_stationary) [isa-cost]
        matmul_fixed_cycles=64,  # MM_INIT_LATENCY, 64 cycles on NeuronCore-v2 [arch-v2]
        dma_queues=16,  # 16 DMA engines per core [arch-v2], [dma-bw]
        dma_bytes_per_ns_per_queue=17.0,  # 16 x 17 B/ns = 272 GB/s per core [dma-bw]
        dma_fixed_latency_ns=1300.0,  # ~1.3 us to start a transfer [dma-bw]
        dma_descriptor_ns=64.0,  # [fit] 2 KiB chunks reach ~65% of peak, as [dma-bw] advises
        # no v2 figure: the v3 SBUF-to-SBUF transpose rate (<= 50%) [arch-v3], [assumption]
        dma_transpose_factor=0.5,
        dynamic_offset_cycles=600,  # MIN_II_DYNAMIC [isa-cost]
        stride_penalty_bytes=16,  # above 16 B, half the streaming bandwidth [arch-v2]
        # Vector and GpSimd share the SBUF port; Vector and Scalar share PSUM access [arch-v2]
        shared_ports=(
            ("sbuf_port", ("vector", "gpsimd"), "sbuf"),
            ("psum_port", ("vector", "scalar"), "psum"),
        ),
    ),
    "trn2": CostTable(
        "trn2",
        _V3,
        fp32_matmul_factor=4,  # 20 FP32 vs 79 BF16 TFLOPS [arch-v3]
        stationary_load_cycles=64,  # [isa-cost]; no newer figure
        matmul_fixed_cycles=64,  # [arch-v2]; no newer figure [assumption]
        dma_queues=16,  # [arch-v3], [dma-bw]
        dma_bytes_per_ns_per_queue=23.0,  # 16 x 23 B/ns = 368 GB/s per core [dma-bw]
        dma_fixed_latency_ns=1300.0,  # [dma-bw]
        dma_descriptor_ns=64.0,  # [fit] on trn1 figures; taken as the same per chunk
        dma_transpose_factor=0.9,  # DMA transpose HBM->SBUF up to 90% of DMA throughput [arch-v3]
        dynamic_offset_cycles=600,  # [isa-cost]
        stride_penalty_bytes=16,  # [arch-v2]; no newer figure
        shared_ports=(),  # the NC-v2 port limits are lifted [arch-v3]
    ),
    "trn3": CostTable(
        "trn3",
        _V4,
        fp32_matmul_factor=4,  # 20 FP32 vs 79 BF16 TFLOPS [arch-v4]
        stationary_load_cycles=64,  # [isa-cost]; no newer figure
        matmul_fixed_cycles=64,  # [arch-v2]; no newer figure [assumption]
        dma_queues=16,  # [arch-v4], [dma-bw]
        dma_bytes_per_ns_per_queue=33.0,  # 16 x 33 B/ns = 528 GB/s per core [dma-bw]
        dma_fixed_latency_ns=1300.0,  # [dma-bw]
        dma_descriptor_ns=64.0,  # [fit] on trn1 figures; taken as the same per chunk
        dma_transpose_factor=0.9,  # as trn2 [arch-v3], [assumption]
        dynamic_offset_cycles=600,  # [isa-cost]
        stride_penalty_bytes=16,  # [arch-v2]; no newer figure
        shared_ports=(),  # as trn2 [arch-v4]
    ),
}

# Elements-per-partition multipliers of Vector/GpSimd instructions (cycles = factor * N)
# [isa-cost]: two-input ops stream both inputs (2N; N when one input is in PSUM), reciprocal 8N,
# bn_aggr 13N/3, scans 2N; everything else N.
OP_FACTORS: dict[str, float] = {
    "tensor_tensor": 2.0,
    "scalar_tensor_tensor": 2.0,
    "tensor_tensor_scan": 2.0,
    "reciprocal": 8.0,
    "bn_aggr": 13.0 / 3.0,
    "select_reduce": 2.0,
    "tensor_copy_predicated": 2.0,
    # topk: 4n + K GpSimd cycles for n snake elements, 16 per source column [isa-cost]
    "topk": 64.0,
    # the composite nl ops, charged on one engine as the passes over the tile their lowering
    # makes: softmax a max, an exp with its sum and a scaling; rms_norm a sum of squares, the
    # scaling and the weight [assumption]
    "softmax": 3.0,
    "rms_norm": 3.0,
}
# Vector ops that run 4x on 2-byte SBUF data in the NC-v3+ performance mode [arch-v3]
FAST_COPY_OPS = frozenset({"copy", "tensor_copy", "tensor_scalar", "memset"})
# Extra cycles on top of max(MIN_II, N) [isa-cost]: tensor_scalar_reduce / activation_reduce +64.
OP_EXTRA_CYCLES: dict[str, int] = {"tensor_scalar_reduce": 64, "activation_reduce": 64}

# IR op -> engine of an nki.isa instruction recorded without an engine attribute: the spec row's
# default engine (its first; nki/isa_spec.py, from the nki.isa reference pages)
ISA_ENGINES: dict[str, str] = {}
for _row in INSTRUCTIONS:
    if _row.ir_op:
        ISA_ENGINES.setdefault(_row.ir_op, _row.default_engine)
# IR instruction kinds (nki.language level) -> engine the compiler uses for them
KIND_ENGINES: dict[str, str] = {
    "matmul": "tensor",
    "transpose": "tensor",
    "dma": "dma",
    "atomic_rmw": "dma",
    "const": "dma",
    "gather": "gpsimd",
    "rand": "gpsimd",
    "dropout": "gpsimd",
    "seed": "gpsimd",
    "softmax": "scalar",
    "rms_norm": "scalar",
    "all_reduce": "dma",
}
# Kinds that cost nothing on the device (trace-time views, host-side prints)
FREE_KINDS = frozenset({"reshape", "print"})
SPILL = "spill"  # kind of the save + reload instruction compiler spills insert (compiler.py)
KIND_ENGINES[SPILL] = "dma"
# A broadcast across partitions (``t.broadcast_to((P, F))`` of a one-partition tile) by where
# its result lives: a Tensor-engine matmul with a ones stationary writing PSUM [arch-v2,
# "Alternative use case"]; a result wider than one PSUM bank is evacuated to SBUF by a copy on
# the Scalar engine (which reads PSUM; the matmuls writing the banks overlap it) [assumption]
BROADCAST_ENGINES = {"psum": "tensor", "sbuf": "scalar"}
# Instructions the compiler does not hoist out of loops: random numbers change per call
NOT_HOISTED_OPS = frozenset({"rand", "rand2", "random", "dropout", "seed", "rand_set_state"})


def table_for(target: str) -> CostTable:
    """The cost table of a target name (trn1 / trn2 / trn3)."""
    return TABLES[target]
