"""Engine numerics: fp32 compute, round-to-nearest-even on write, saturating float->int.

Engines compute in fp32 and convert on input and output. Integer-only arithmetic is done
exactly (int64) and saturated on write, as the GpSimd engine's native integer path does."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from nki import dtypes
from nki.ir import Access, Const

# value conversion on write is a dtype fact (nki.dtypes); the executors use it from here
storage_dtype = dtypes.storage_dtype
cast = dtypes.cast
round_tf32 = dtypes.round_tf32


def to_compute(x: np.ndarray, *, exact_int: bool = False) -> np.ndarray:
    """fp32 view of a tile for engine math (int64 when ``exact_int`` and ``x`` is integral)."""
    if x.dtype.kind in "iub" and exact_int:
        return x.astype(np.int64)
    if x.dtype == np.float32:
        return x
    return x.astype(np.float32)


def dma_copies_bits(src: str, dst: str) -> bool:
    """A DMA between integer types of the same width copies the bits (an int32 tile of -1
    lands as 0xFFFFFFFF in uint32 and back; AWS's find-index kernel stores nc_find_index8's
    all-ones "not found" into int32 as -1; uint32 <-> the packed MX types, stored as their raw
    bits); other conversions go through ``cast``."""
    a, b = dtypes.INFO[src], dtypes.INFO[dst]
    return a.kind in "iu" and b.kind in "iu" and a.bits == b.bits


def fill_value(name: str) -> object:
    """What fresh on-chip memory holds: NaN for floats (so uninitialised reads show), else a
    recognisable sentinel."""
    kind = dtypes.INFO[name].kind
    if kind == "f":
        return np.nan
    if kind == "b":
        return True
    return 4


def filled(shape: tuple[int, ...], value: object, dtype: np.dtype) -> np.ndarray:
    """``np.full(shape, value, dtype)``: a value whose bits are all clear (+0) from
    ``np.zeros``, any other filled in place (each several times cheaper than ``np.full``)."""
    v = np.asarray(value, dtype=dtype)
    if not any(v.tobytes()):
        return np.zeros(shape, dtype)
    out = np.empty(shape, dtype)
    out.fill(v)
    return out


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
