"""nki.isa (``import nki.isa as nisa``): the NKI instruction set, in both calling forms.

One module per instruction family (the spec row's ``family`` column, ``nki/isa_spec.py``):
``dma``, ``gpsimd``, ``scalar``, ``tensor`` (the PE array), ``mx`` (microscaling), ``vector``
(element-wise), ``reductions``, ``search``, ``selection``, ``random``, ``registers`` and
``collectives`` (LNC=2 core synchronisation). Each function takes the calling forms its spec row
has (``forms.instruction``): the classic one returns a new tile (``mask=`` and ``dtype=`` as in
the classic API), the destination-first one of the current API writes ``dst``. Each call checks
its engine / dtype / size / buffer rules for the target being traced (``nki.targets.ISA_RULES``)
and records one IR instruction, executed by ``simulator/isa/<family>.py``."""

import numpy as np

from .. import isa_spec as _spec
from .. import language as _nl
from ..errors import NKIError as NkiValidationError  # (every rule nki-sim checks raises one)
from . import (
    collectives,
    dma,
    gpsimd,
    mx,
    random,
    reductions,
    registers,
    scalar,
    search,
    selection,
    tensor,
    vector,
)
from . import enums as _enums
from .collectives import dma_engine
from .common import Instruction as NkiInstruction
from .enums import (
    dependency,
    dge_mode,
    engine,
    get_nc_sub_version,
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
from .registers import NkiScalar, VirtualRegister

_FAMILIES = {
    m.__name__.rpartition(".")[2]: m
    for m in (
        collectives, dma, gpsimd, mx, random, reductions, registers, scalar, search, selection,
        tensor, vector,
    )
}  # fmt: skip
# nisa.<name> for every row of the spec: the function its family's module defines
for _row in _spec.INSTRUCTIONS:
    globals()[_row.name] = getattr(_FAMILIES[_row.family], _row.name)

__all__ = [
    "NkiInstruction",
    "NkiScalar",
    "NkiValidationError",
    "VirtualRegister",
    "dependency",
    "dge_mode",
    "dma_engine",
    "engine",
    "get_nc_sub_version",
    "get_nc_version",
    "gpsimd_engine",
    "matmul_perf_mode",
    "nc_version",
    "oob_mode",
    "reduce_cmd",
    "scalar_engine",
    "tensor_engine",
    "unknown_engine",
    "vector_engine",
]
__all__ += _spec.names()

_spec.NAMESPACE.update({k: getattr(_enums, k) for k in dir(_enums) if not k.startswith("_")})
_spec.NAMESPACE.update(nl=_nl, np=np, FP32_MIN=float(np.finfo(np.float32).min))
