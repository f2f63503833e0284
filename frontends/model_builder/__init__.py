"""A ModelBuilder API on simulated NeuronCores (the shape of AWS NxD's ModelBuilderV2).

``ModelBuilder(model).trace(args=..., tag=...).compile()`` (or the fundamental units
``trace`` and ``compile`` with ``NxDModel.add``) gives an :class:`NxDModel`: one bucket per
traced input shape, each a ``torch.export`` graph whose parts run through
``torch.compile(backend="nki")`` (ATen ops as NKI kernels on the simulator) and whose
tensor-parallel collectives run across the ranks with the simulator's collective kernels.
Weights are set per rank (``shard_checkpoint`` -> ``set_weights``), state buffers (a KV cache)
persist between calls, and ``save`` / ``load`` keep the whole artifact set in one
hash-checked archive. What is simulated and what stands in for the Neuron compiler is in the
docs/guides/models.md, "ModelBuilder"."""

from .builder import ModelBuilder, ModelBuilderConstants
from .collectives import all_gather, all_reduce, scatter
from .compiling import CompilationArtifacts, compile
from .model import NxDModel, RunInfo
from .parallel import (
    ColumnParallelLinear,
    NxDParallelState,
    RowParallelLinear,
    get_tensor_model_parallel_size,
    init_on_device,
    shard_checkpoint,
)
from .tracing import (
    Metaneff,
    ModelParamInfo,
    ProvidedArgInfo,
    TensorSpec,
    TraceArtifacts,
    TracedGraph,
    trace,
)
from .weights import StateInitializer

__all__ = [
    "ColumnParallelLinear",
    "CompilationArtifacts",
    "Metaneff",
    "ModelBuilder",
    "ModelBuilderConstants",
    "ModelParamInfo",
    "NxDModel",
    "NxDParallelState",
    "ProvidedArgInfo",
    "RowParallelLinear",
    "RunInfo",
    "StateInitializer",
    "TensorSpec",
    "TraceArtifacts",
    "TracedGraph",
    "all_gather",
    "all_reduce",
    "compile",
    "get_tensor_model_parallel_size",
    "init_on_device",
    "scatter",
    "shard_checkpoint",
    "trace",
]
