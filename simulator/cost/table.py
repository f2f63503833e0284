"""Per-target cost rows: clocks, engine throughputs, fixed overheads and DMA figures as data.

Every number cites where it comes from. ``[arch-v2]``/``[arch-v3]``/``[arch-v4]`` are the NKI
architecture guides for NeuronCore-v2/v3/v4 (Trainium, Trainium2, Trainium3); ``[isa-cost]`` the
"Estimated instruction cost" notes of the classic ``nki.isa`` reference; ``[perf]`` the NKI
performance guide; ``[dma-bw]`` the NKI DMA bandwidth guide. ``[fit]`` marks the one parameter
that no document states and that was chosen against the published matmul tutorial (README
"Performance estimates" lists the calibration)."""

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


# Vector/Scalar/GpSimd: MIN_II = 64 cycles, ~60-cycle static access overhead [isa-cost], [arch-v2].
# GpSimd start cost GPSIMD_START ~150 cycles [isa-cost].
_V2 = {
    "tensor": EngineRow(2.8, 64, 0),  # 2.8 GHz systolic array, MM_INIT 64 cycles [arch-v2]
    "vector": EngineRow(1.12, 64, 60),  # 1.12 GHz, 128 lanes [arch-v2]
    "scalar": EngineRow(1.4, 64, 60),  # 1.4 GHz, 128 elems/cycle [arch-v2]
    "gpsimd": EngineRow(1.4, 150, 60),  # 1.4 GHz, 8 cores x 16 partitions [arch-v2]
}
_V3 = {
    "tensor": EngineRow(2.4, 64, 0),  # 2.4 GHz [arch-v3]
    "vector": EngineRow(0.96, 64, 60, 2.0, 4.0),  # 512 bf16 / 256 other per cycle [arch-v3]
    "scalar": EngineRow(1.2, 64, 60),  # 1.2 GHz, 128 elems/cycle [arch-v3]
    "gpsimd": EngineRow(1.2, 150, 60),  # 1.2 GHz [arch-v3]
}
_V4 = {
    "tensor": EngineRow(2.4, 64, 0),  # 2.4 GHz [arch-v4]
    "vector": EngineRow(1.2, 64, 60, 2.0, 4.0),  # 512 bf16 / 256 other per cycle [arch-v4]
    "scalar": EngineRow(1.2, 64, 60, 2.0),  # 256 bf16 / 128 other elems per cycle [arch-v4]
    "gpsimd": EngineRow(1.2, 150, 60),  # 1.2 GHz, 128 elems/cycle [arch-v4]
}

TABLES: dict[str, CostTable] = {
    "trn1": CostTable(
        "trn1",
        _V2,
        fp32_matmul_factor=4,
        stationary_load_cycles=64,
        matmul_fixed_cycles=64,
        dma_queues=16,  # 16 DMA engines per core [arch-v2]
        dma_bytes_per_ns_per_queue=17.0,  # 16 x 17 B/ns = 272 GB/s per core [dma-bw]
        dma_fixed_latency_ns=1300.0,  # ~1.3 us to start a transfer [dma-bw]
        dma_descriptor_ns=64.0,  # [fit] 2 KiB chunks reach ~65% of peak, as [dma-bw] advises
        dma_transpose_factor=0.5,  # transposing DMAs: half throughput [arch-v3] (no v2 figure)
        dynamic_offset_cycles=600,
        stride_penalty_bytes=16,
        # Vector and GpSimd share the SBUF port; Vector and Scalar share PSUM access [arch-v2]
        shared_ports=(
            ("sbuf_port", ("vector", "gpsimd"), "sbuf"),
            ("psum_port", ("vector", "scalar"), "psum"),
        ),
    ),
    "trn2": CostTable(
        "trn2",
        _V3,
        fp32_matmul_factor=4,
        stationary_load_cycles=64,
        matmul_fixed_cycles=64,
        dma_queues=16,
        dma_bytes_per_ns_per_queue=23.0,  # 16 x 23 B/ns = 368 GB/s per core [dma-bw]
        dma_fixed_latency_ns=1300.0,
        dma_descriptor_ns=64.0,  # [fit] same per-chunk cost as trn1
        dma_transpose_factor=0.9,  # DMA transpose HBM->SBUF up to 90% of DMA throughput [arch-v3]
        dynamic_offset_cycles=600,
        stride_penalty_bytes=16,
        shared_ports=(),  # the NC-v2 port limits are lifted [arch-v3]
    ),
    "trn3": CostTable(
        "trn3",
        _V4,
        fp32_matmul_factor=4,
        stationary_load_cycles=64,
        matmul_fixed_cycles=64,
        dma_queues=16,
        dma_bytes_per_ns_per_queue=33.0,  # 16 x 33 B/ns = 528 GB/s per core [dma-bw]
        dma_fixed_latency_ns=1300.0,
        dma_descriptor_ns=64.0,  # [fit]
        dma_transpose_factor=0.9,
        dynamic_offset_cycles=600,
        stride_penalty_bytes=16,
        shared_ports=(),
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


def table_for(target: str) -> CostTable:
    """The cost table of a target name (trn1 / trn2 / trn3)."""
    return TABLES[target]
