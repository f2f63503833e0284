"""nki.language (``import nki.language as nl``): the classic NKI language surface."""

import ml_dtypes as _ml_dtypes
import numpy as _np

from ..dtypes import Bfp16 as _Bfp16
from ..dtypes import NkiDtype as _D
from ..dtypes import name_of as _name_of
from ..dtypes import storage as _storage
from ..tracer import TILE_OPERATORS as _TILE_OPERATORS
from . import ops as _ops
from .collectives import all_reduce
from .core import (
    Buffer,
    affine_range,
    arange,
    copy,
    device_print,
    ds,
    empty_like,
    full,
    hbm,
    load,
    mgrid,
    nc,
    ndarray,
    num_programs,
    ones,
    ones_like,
    par_dim,
    private_hbm,
    program_id,
    program_ndim,
    psum,
    sbuf,
    sequential_range,
    shared_hbm,
    spmd_dim,
    static_range,
    store,
    tile_size,
    zeros,
    zeros_like,
)
from .current import (  # (tiles, blocks, alloc_*: located err_not_simulated when called)
    MemoryRegion,
    NKIObject,
    NkiTensor,
    alloc_blocks,
    alloc_tiles,
    blocks,
    is_hbm,
    is_on_chip,
    is_psum,
    is_sbuf,
    range,  # noqa: A004 - the current API's nl.range
    tiles,
)
from .hbm_ops import atomic_rmw, shared_constant, shared_identity_matrix
from .loop_reduce import loop_reduce
from .loops import dynamic_range, fori_loop, no_reorder, while_loop
from .matmul import load_transpose2d, matmul, transpose
from .ops import *  # noqa: F401,F403 - every op-table row (nl.add, nl.exp, ...)
from .randomness import dropout, rand, random_seed
from .reductions import all, max, mean, min, prod, sum, var  # noqa: A004 - classic names
from .shaping import (
    broadcast_to,
    expand_dims,
    gather_flattened,
    rms_norm,
    softmax,
    static_cast,
    where,
)
from .tokens import average, bypass, prelu  # op tokens of the current API

# Python operators and methods on tiles (``a + b``, ``t.astype(dt)``) call these
_TILE_OPERATORS.update(
    {
        name: getattr(_ops, name)
        for name in (
            "add",
            "subtract",
            "multiply",
            "divide",
            "negative",
            "power",
            "less",
            "less_equal",
            "greater",
            "greater_equal",
            "equal",
            "not_equal",
            "bitwise_and",
            "bitwise_or",
            "bitwise_xor",
            "invert",
            "left_shift",
            "right_shift",
        )
    },  # fmt: skip
    copy=copy,
    broadcast_to=broadcast_to,
    expand_dims=expand_dims,
)


def finfo(dtype: object):
    """Machine limits of a float dtype (``nl.finfo(nl.bfloat16).min``): NumPy's ``finfo``,
    through ml_dtypes for bfloat16 / fp8."""
    return _ml_dtypes.finfo(_storage(_name_of(dtype)))


def iinfo(dtype: object):
    """Machine limits of an integer dtype (``nl.iinfo(nl.int32).max``): NumPy's ``iinfo``."""
    return _np.iinfo(_storage(_name_of(dtype)))


DType = _D  # (NKI 0.7 names the dtype type for annotations: every nl dtype is one)
float32 = _D("float32")
tfloat32 = _D("tfloat32")
bfloat16 = _D("bfloat16")
float16 = _D("float16")
float8_e4m3 = _D("float8_e4m3")
float8_e4m3fn = _D("float8_e4m3fn")
float8_e5m2 = _D("float8_e5m2")
int8 = _D("int8")
int16 = _D("int16")
int32 = _D("int32")
uint8 = _D("uint8")
uint16 = _D("uint16")
uint32 = _D("uint32")
float8_e8m0fnu = _D("float8_e8m0fnu")  # MX scales (current API)
float8_e5m2_x4 = _D("float8_e5m2_x4")  # MX packed data (current API)
float8_e4m3fn_x4 = _D("float8_e4m3fn_x4")
float4_e2m1fn_x4 = _D("float4_e2m1fn_x4")
bool_ = _D("bool_")
fp32 = float32
bfp16 = _Bfp16("bfloat16")

__all__ = [
    "DType",
    "MemoryRegion",
    "NKIObject",
    "NkiTensor",
    "is_hbm",
    "is_on_chip",
    "is_psum",
    "is_sbuf",
    "range",
    "loop_reduce",
    "fori_loop",
    "while_loop",
    "dynamic_range",
    "no_reorder",
    "all_reduce",
    "finfo",
    "iinfo",
    "Buffer",
    "affine_range",
    "arange",
    "copy",
    "device_print",
    "ds",
    "empty_like",
    "full",
    "hbm",
    "load",
    "mgrid",
    "nc",
    "ndarray",
    "num_programs",
    "ones",
    "ones_like",
    "par_dim",
    "private_hbm",
    "program_id",
    "program_ndim",
    "psum",
    "sbuf",
    "sequential_range",
    "shared_hbm",
    "spmd_dim",
    "static_range",
    "store",
    "tile_size",
    "zeros",
    "zeros_like",
    "float32",
    "tfloat32",
    "bfloat16",
    "float16",
    "float8_e4m3",
    "float8_e4m3fn",
    "float8_e5m2",
    "int8",
    "int16",
    "int32",
    "uint8",
    "uint16",
    "uint32",
    "float8_e8m0fnu",
    "float8_e5m2_x4",
    "float8_e4m3fn_x4",
    "float4_e2m1fn_x4",
    "bool_",
    "fp32",
    "bfp16",
    *_ops.__all__,
    "all",
    "atomic_rmw",
    "broadcast_to",
    "dropout",
    "expand_dims",
    "gather_flattened",
    "load_transpose2d",
    "matmul",
    "max",
    "mean",
    "min",
    "prod",
    "rand",
    "random_seed",
    "rms_norm",
    "shared_constant",
    "shared_identity_matrix",
    "softmax",
    "static_cast",
    "sum",
    "transpose",
    "var",
    "where",
    "average",
    "bypass",
    "prelu",
    "tiles",
    "blocks",
    "alloc_tiles",
    "alloc_blocks",
]

from .classic_only import mark as _mark_classic_only  # noqa: E402
from .keywords import check_module as _check_module  # noqa: E402

_check_module(globals(), __all__)  # unknown keywords of nl.* calls are located errors
_mark_classic_only(globals())  # nl.arange, nl.mgrid, ...: a kernel using them is classic-API
