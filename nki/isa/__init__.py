"""nki.isa (``import nki.isa as nisa``): the classic NKI instruction set.

Calls take input tiles and return a new tile (classic semantics); ``mask=`` and ``dtype=`` work
as in the classic API. Each instruction checks its engine / dtype / size / buffer rules for the
target being traced (``nki.targets.ISA_RULES``) and records one IR instruction executed by
its executor in ``simulator/isa/<family>.py``. Instructions of the current API only
(``exponential``, ``activate2``, ``topk``, ``rng``, ``quantize_mx``, ...) are in
``current_*.py`` and take only the destination-first form."""

import numpy as np

from .. import isa_spec as _spec
from .. import language as _nl
from ..language.loops import register_alloc, register_load, register_move, register_store
from . import current as _current
from . import enums as _enums
from .current_gpsimd import dma_compute, nc_n_gather, nonzero_with_count, topk
from .current_mx import nc_matmul_mx, quantize_mx
from .current_random import rand2, rand_get_state, rand_set_state, rng, set_rng_seed
from .current_vector import activate2, exponential, tensor_scalar_cumulative
from .dma import dma_copy, dma_transpose
from .enums import (
    dge_mode,
    engine,
    get_nc_version,
    gpsimd_engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
    scalar_engine,
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from .gpsimd import (
    affine_select,
    iota,
    local_gather,
    memset,
    sequence_bounds,
    tensor_partition_reduce,
)
from .scalar import activation, activation_reduce
from .search import bn_aggr, bn_stats, max8, nc_find_index8, nc_match_replace8
from .selection import (
    dropout,
    nc_stream_shuffle,
    range_select,
    reciprocal,
    select_reduce,
    tensor_copy,
    tensor_copy_dynamic_dst,
    tensor_copy_dynamic_src,
    tensor_copy_predicated,
)
from .sync import NkiScalar, core_barrier, dma_engine, scalar_load, scalar_store, sendrecv
from .tensor_ops import nc_matmul, nc_transpose
from .vector import (
    scalar_tensor_tensor,
    tensor_reduce,
    tensor_scalar,
    tensor_scalar_reduce,
    tensor_tensor,
    tensor_tensor_scan,
)


def _take_both_forms() -> None:
    """Every instruction with a destination-first form takes both calling forms
    (nki/isa/current.py)."""
    for n in (
        "activation", "activation_reduce", "affine_select", "bn_aggr", "bn_stats", "dma_copy",
        "dma_transpose", "dropout", "iota", "local_gather", "max8", "memset", "nc_find_index8",
        "nc_match_replace8", "nc_matmul", "nc_stream_shuffle", "nc_transpose", "range_select",
        "reciprocal", "scalar_tensor_tensor", "select_reduce", "sequence_bounds", "tensor_copy",
        "tensor_copy_predicated", "tensor_partition_reduce", "tensor_reduce", "tensor_scalar",
        "tensor_scalar_reduce", "tensor_tensor", "tensor_tensor_scan",
    ):  # fmt: skip
        globals()[n] = _current.both_forms(globals()[n])


_take_both_forms()

__all__ = [
    "NkiScalar",
    "activate2",
    "core_barrier",
    "dma_engine",
    "scalar_load",
    "scalar_store",
    "sendrecv",
    "activation",
    "activation_reduce",
    "affine_select",
    "bn_aggr",
    "bn_stats",
    "dge_mode",
    "dma_compute",
    "dma_copy",
    "dma_transpose",
    "dropout",
    "engine",
    "exponential",
    "get_nc_version",
    "gpsimd_engine",
    "iota",
    "local_gather",
    "matmul_perf_mode",
    "max8",
    "memset",
    "nc_find_index8",
    "nc_match_replace8",
    "nc_matmul",
    "nc_matmul_mx",
    "nc_n_gather",
    "nc_stream_shuffle",
    "nc_transpose",
    "nc_version",
    "nonzero_with_count",
    "oob_mode",
    "quantize_mx",
    "rand2",
    "rand_get_state",
    "rand_set_state",
    "range_select",
    "reciprocal",
    "reduce_cmd",
    "rng",
    "register_alloc",
    "register_load",
    "register_move",
    "register_store",
    "scalar_engine",
    "scalar_tensor_tensor",
    "select_reduce",
    "set_rng_seed",
    "sequence_bounds",
    "tensor_copy",
    "tensor_copy_dynamic_dst",
    "tensor_copy_dynamic_src",
    "tensor_copy_predicated",
    "tensor_engine",
    "tensor_partition_reduce",
    "tensor_reduce",
    "tensor_scalar",
    "tensor_scalar_cumulative",
    "tensor_scalar_reduce",
    "tensor_tensor",
    "tensor_tensor_scan",
    "topk",
    "unknown_engine",
    "vector_engine",
]

_spec.NAMESPACE.update({k: getattr(_enums, k) for k in dir(_enums) if not k.startswith("_")})
_spec.NAMESPACE.update(nl=_nl, np=np, FP32_MIN=float(np.finfo(np.float32).min))
