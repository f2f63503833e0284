"""``nki.dtype``: the NKI data types as a module of their own (``import nki.dtype as nt``, as
AWS's NKI library tests do). Each name is the ``nki.language`` constant: an NKI dtype that NumPy
also accepts (``np.zeros(shape, dtype=nt.float8_e4m3)``). Kernels annotate with ``nki.dtype``
too; an annotation is not checked."""

from __future__ import annotations

from .language import (
    bfloat16,
    bool_,
    float4_e2m1fn_x4,
    float8_e4m3,
    float8_e4m3fn,
    float8_e4m3fn_x4,
    float8_e5m2,
    float8_e5m2_x4,
    float8_e8m0fnu,
    float16,
    float32,
    int8,
    int16,
    int32,
    tfloat32,
    uint8,
    uint16,
    uint32,
)

__all__ = [
    "bfloat16", "bool_", "float4_e2m1fn_x4", "float8_e4m3", "float8_e4m3fn", "float8_e4m3fn_x4",
    "float8_e5m2", "float8_e5m2_x4", "float8_e8m0fnu", "float16", "float32", "int8", "int16",
    "int32", "tfloat32", "uint8", "uint16", "uint32",
]  # fmt: skip
