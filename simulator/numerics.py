"""Engine numerics: fp32 compute, round-to-nearest-even on write, saturating float->int.

Engines compute in fp32 and convert on input and output. Integer-only arithmetic is done
exactly (int64) and saturated on write, as the GpSimd engine's native integer path does."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from nki import dtypes
from nki.ir import Access, Const


def storage_dtype(name: str, precise_fp: bool = True) -> np.dtype:
    """The NumPy dtype a tensor of NKI dtype ``name`` is stored as."""
    if not precise_fp and dtypes.is_float(name) and dtypes.INFO[name].bits < 32:
        return np.dtype(np.float32)
    return dtypes.storage(name)


def to_compute(x: np.ndarray, *, exact_int: bool = False) -> np.ndarray:
    """fp32 view of a tile for engine math (int64 when ``exact_int`` and ``x`` is integral)."""
    if x.dtype.kind in "iub" and exact_int:
        return x.astype(np.int64)
    if x.dtype == np.float32:
        return x
    return x.astype(np.float32)


def cast(x: np.ndarray, name: str, precise_fp: bool = True) -> np.ndarray:
    """Convert computed values to storage for NKI dtype ``name``.

    Floats round to nearest-even (ml_dtypes). Float -> int rounds to nearest-even, NaN -> 0,
    and saturates at the type's limits; int -> narrower int saturates too."""
    target = storage_dtype(name, precise_fp)
    x = np.asarray(x)
    if x.dtype == target:
        return x
    kind = dtypes.INFO[name].kind
    if kind == "b":
        return x != 0
    if kind in ("i", "u"):
        info = np.iinfo(target)
        if x.dtype.kind == "f":
            xf = x.astype(np.float64) if x.dtype != np.float64 else x
            xf = np.nan_to_num(np.rint(xf), nan=0.0, posinf=info.max, neginf=info.min)
            return np.clip(xf, info.min, info.max).astype(target)
        xi = x.astype(np.int64)
        return np.clip(xi, info.min, info.max).astype(target)
    if x.dtype.kind in "iub" or x.dtype == np.float64:
        x = x.astype(np.float32)  # engines see fp32 values
    if name == "tfloat32":
        return round_tf32(x.astype(np.float32))
    return x.astype(target)


def dma_copies_bits(src: str, dst: str) -> bool:
    """A DMA between integer types of the same width copies the bits (an int32 tile of -1
    lands as 0xFFFFFFFF in uint32 and back; AWS's find-index kernel stores nc_find_index8's
    all-ones "not found" into int32 as -1); other conversions go through ``cast``."""
    a, b = dtypes.INFO[src], dtypes.INFO[dst]
    return a.kind in "iu" and b.kind in "iu" and a.kind != b.kind and a.bits == b.bits


def round_tf32(x: np.ndarray) -> np.ndarray:
    """Round fp32 to the 10-bit mantissa of tfloat32 (nearest-even), kept in fp32 storage."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    finite = np.isfinite(x)
    lsb = (bits >> 13) & 1
    rounded = ((bits + 0xFFF + lsb) >> 13) << 13
    out = np.where(finite, rounded, bits).astype(np.uint32).view(np.float32)
    return out


def fill_value(name: str) -> object:
    """What fresh on-chip memory holds: NaN for floats (so uninitialised reads show), else a
    recognisable sentinel."""
    kind = dtypes.INFO[name].kind
    if kind == "f":
        return np.nan
    if kind == "b":
        return True
    return 4


def operand_dtype(src: object, decl: Callable[[str], Any]) -> str | None:
    """The NKI dtype of an instruction operand: a tile's declared dtype or a scalar's weak
    type (Python int -> int32, float -> float32, bool -> uint8)."""
    if isinstance(src, Access):
        return decl(src.tensor).dtype
    if isinstance(src, Const):
        try:
            return dtypes.scalar_dtype(src.value)
        except Exception:  # a non-numeric attribute smuggled as a Const
            return None
    return None


def bit_dtype(srcs: Iterable[object], decl: Callable[[str], Any]) -> str | None:
    """The integer type whose bit pattern a bit-vector op works on: the promoted type of its
    integer operands (None when an operand is not integral)."""
    out: str | None = None
    for s in srcs:
        d = operand_dtype(s, decl)
        if d is None:
            continue
        if dtypes.is_float(d):
            return None
        out = d if out is None else dtypes.promote(out, d)
    if out == "bool_":
        out = "uint8"
    return out
