"""``nki.isa.constants`` (current API): the enumerations real kernels import from here
(``from nki.isa.constants import oob_mode, dge_mode``); the same objects as ``nki.isa.*``."""

from .enums import dependency, dge_mode, engine, matmul_perf_mode, nc_version, oob_mode, reduce_cmd

__all__ = [
    "dependency",
    "dge_mode",
    "engine",
    "matmul_perf_mode",
    "nc_version",
    "oob_mode",
    "reduce_cmd",
]
