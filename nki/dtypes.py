"""NKI data types, backed by NumPy and ml_dtypes, and the classic type-promotion rules.

Dtypes are identified in the IR by their NKI name (``"bfloat16"``, ``"float8_e4m3"``...). Any
NumPy / ml_dtypes dtype, type object or name is accepted where a dtype is expected; 64-bit and
complex types are rejected (NKI has none).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .errors import NKITypeError


@dataclass(frozen=True)
class DTypeInfo:
    name: str
    np_dtype: np.dtype  # storage dtype
    kind: str  # "f" float, "i" signed, "u" unsigned, "b" bool
    bits: int
    exp_bits: int = 0
    man_bits: int = 0


_INFOS = [
    DTypeInfo("float32", np.dtype(np.float32), "f", 32, 8, 23),
    DTypeInfo("tfloat32", np.dtype(np.float32), "f", 32, 8, 10),
    DTypeInfo("bfloat16", np.dtype(ml_dtypes.bfloat16), "f", 16, 8, 7),
    DTypeInfo("float16", np.dtype(np.float16), "f", 16, 5, 10),
    DTypeInfo("float8_e4m3", np.dtype(ml_dtypes.float8_e4m3), "f", 8, 4, 3),
    DTypeInfo("float8_e4m3fn", np.dtype(ml_dtypes.float8_e4m3fn), "f", 8, 4, 3),
    DTypeInfo("float8_e5m2", np.dtype(ml_dtypes.float8_e5m2), "f", 8, 5, 2),
    DTypeInfo("float8_e8m0fnu", np.dtype(ml_dtypes.float8_e8m0fnu), "f", 8, 8, 0),
    DTypeInfo("int8", np.dtype(np.int8), "i", 8),
    DTypeInfo("int16", np.dtype(np.int16), "i", 16),
    DTypeInfo("int32", np.dtype(np.int32), "i", 32),
    DTypeInfo("uint8", np.dtype(np.uint8), "u", 8),
    DTypeInfo("uint16", np.dtype(np.uint16), "u", 16),
    DTypeInfo("uint32", np.dtype(np.uint32), "u", 32),
    DTypeInfo("bool_", np.dtype(np.bool_), "b", 8),
    # Microscaling (MX) packed types: four fp8 / fp4 values in one 32- / 16-bit element (value
    # i of element k is logical element 4k + i, in byte / nibble i, little-endian). nki-sim
    # stores them as their raw bits: an unsigned integer dtype tagged with the packed name
    # (NumPy metadata, kept by views and copies), so an array of them says what it holds.
    DTypeInfo("float8_e5m2_x4", np.dtype(np.uint32, metadata={"nki": "float8_e5m2_x4"}), "u", 32),
    DTypeInfo(
        "float8_e4m3fn_x4", np.dtype(np.uint32, metadata={"nki": "float8_e4m3fn_x4"}), "u", 32
    ),
    DTypeInfo(
        "float4_e2m1fn_x4", np.dtype(np.uint16, metadata={"nki": "float4_e2m1fn_x4"}), "u", 16
    ),
]
PACKED_X4 = {  # packed MX dtype -> the dtype of each of its four values
    "float8_e5m2_x4": "float8_e5m2",
    "float8_e4m3fn_x4": "float8_e4m3fn",
    "float4_e2m1fn_x4": "float4_e2m1fn",
}
INFO: dict[str, DTypeInfo] = {i.name: i for i in _INFOS}
# NumPy knows the packed names, as AWS's dtype package registers them: a test's
# ``np.zeros(shape, dtype=nl.float8_e4m3fn_x4)`` makes the tagged raw-bits array a kernel takes
for _name in PACKED_X4:
    np.sctypeDict.setdefault(_name, INFO[_name].np_dtype)
_BY_NP: dict[np.dtype, str] = {}
for _i in _INFOS:
    _BY_NP.setdefault(_i.np_dtype, _i.name)  # float32 wins over tfloat32

ALIASES = {
    "fp32": "float32",
    "float": "float32",
    "tf32": "tfloat32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "bool": "bool_",
    "fp8_e4m3": "float8_e4m3",
    "fp8_e5m2": "float8_e5m2",
}


class NkiDtype(str):
    """An NKI dtype name that also behaves like the NumPy dtype it is stored as.

    ``nl.bfloat16 == np.dtype(ml_dtypes.bfloat16)`` holds, as in classic NKI, and
    ``nl.float32.min`` gives the dtype's most negative finite value."""

    @property
    def np(self) -> np.dtype:
        return INFO[str(self)].np_dtype

    @property
    def itemsize(self) -> int:
        return 4 if str(self) == "tfloat32" else self.np.itemsize

    @property
    def min(self):
        return _limits(str(self))[0]

    @property
    def max(self):
        return _limits(str(self))[1]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return str.__eq__(self, ALIASES.get(other, other))
        try:
            return name_of(other) == str(self)
        except NKITypeError:
            return NotImplemented

    def __hash__(self) -> int:
        return str.__hash__(self)

    def __repr__(self) -> str:
        return f"nl.{str(self)}"


class Bfp16(NkiDtype):
    """``nl.bfp16``: bfloat16, whose classic ``.min`` constant is the bit pattern 0xff80
    (documented as the bf16 minimum; it decodes to -inf)."""

    @property
    def min(self):
        return np.uint16(0xFF80).view(ml_dtypes.bfloat16)


def _limits(name: str):
    info = INFO[name]
    if info.kind == "f":
        fi = ml_dtypes.finfo(info.np_dtype) if info.bits < 16 or name == "bfloat16" else None
        fi = fi or np.finfo(info.np_dtype)
        return info.np_dtype.type(fi.min), info.np_dtype.type(fi.max)
    if info.kind == "b":
        return False, True
    ii = np.iinfo(info.np_dtype)
    return ii.min, ii.max


def name_of(dtype: object) -> str:
    """The NKI name of any accepted dtype spelling; a clear error for unsupported ones."""
    if isinstance(dtype, NkiDtype):
        return str(dtype)
    if isinstance(dtype, str):
        n = ALIASES.get(dtype, dtype)
        if n in INFO:
            return n
    try:
        npd = np.dtype(dtype)  # type: ignore[arg-type]
    except TypeError:
        npd = None
    packed = packed_name(npd) if npd is not None else None
    if packed is not None:
        return packed
    if npd is not None and npd in _BY_NP:
        return _BY_NP[npd]
    raise NKITypeError(
        f"unsupported data type {dtype!r}: NKI supports "
        + ", ".join(INFO)
        + " (no 64-bit or complex types)",
        code="err_unsupported_dtype",
    )


def packed_name(npd: np.dtype) -> str | None:
    """The packed MX dtype a NumPy dtype is tagged with (None: untagged; a tagged dtype is equal
    to its storage dtype otherwise)."""
    name = (npd.metadata or {}).get("nki")
    return name if name in PACKED_X4 else None


_X4_ELEMENT = {  # packed MX dtype -> (NumPy dtype of one value, bits of one value)
    "float8_e5m2_x4": (np.dtype(ml_dtypes.float8_e5m2), 8),
    "float8_e4m3fn_x4": (np.dtype(ml_dtypes.float8_e4m3fn), 8),
    "float4_e2m1fn_x4": (np.dtype(ml_dtypes.float4_e2m1fn), 4),
}


def unpack_x4(raw: np.ndarray, packed: str | None = None) -> np.ndarray:
    """The values of packed MX elements as fp32, shape ``(*raw.shape, 4)`` (value ``i`` of an
    element in its byte / nibble ``i``). ``packed``: the MX dtype (default: the one ``raw``'s
    dtype is tagged with)."""
    packed = packed or name_of(np.asarray(raw).dtype)
    if packed not in PACKED_X4:
        raise NKITypeError(f"unpack_x4 needs a packed MX dtype ({', '.join(PACKED_X4)}), "
                           f"not {packed}", code="err_unsupported_dtype")  # fmt: skip
    elem, width = _X4_ELEMENT[packed]
    bits = np.asarray(raw).astype(np.uint32)
    parts = (bits[..., None] >> (width * np.arange(4, dtype=np.uint32))) & ((1 << width) - 1)
    return parts.astype(np.uint8).view(elem).astype(np.float32)


def pack_x4(values: np.ndarray, packed: str) -> np.ndarray:
    """Values ``(..., 4)`` rounded to the MX dtype ``packed``'s element (to nearest even, as
    ml_dtypes converts) and packed four to an element, in ``packed``'s tagged storage dtype."""
    packed = name_of(packed)
    if packed not in PACKED_X4:
        raise NKITypeError(f"pack_x4 packs into {', '.join(PACKED_X4)}, not {packed}",
                           code="err_unsupported_dtype")  # fmt: skip
    v = np.asarray(values, dtype=np.float32)
    if v.shape[-1:] != (4,):
        raise NKITypeError(f"pack_x4 takes values of shape (..., 4), not {v.shape}",
                           code="err_invalid_argument")  # fmt: skip
    elem, width = _X4_ELEMENT[packed]
    parts = v.astype(elem).view(np.uint8).astype(np.uint32) & ((1 << width) - 1)
    bits = np.bitwise_or.reduce(parts << (width * np.arange(4, dtype=np.uint32)), axis=-1)
    return bits.astype(INFO[packed].np_dtype)


def dtype(d: object) -> NkiDtype:
    return NkiDtype(name_of(d))


def is_float(name: str) -> bool:
    return INFO[name].kind == "f"


def is_int(name: str) -> bool:
    return INFO[name].kind in ("i", "u")


def is_bool(name: str) -> bool:
    return INFO[name].kind == "b"


def storage(name: str) -> np.dtype:
    return INFO[name].np_dtype


def itemsize(name: str) -> int:
    return 4 if name == "tfloat32" else INFO[name].np_dtype.itemsize


# --------------------------------------------------------------------------------------------
# Classic promotion
# --------------------------------------------------------------------------------------------

_FLOAT_WIDENING = ("bfloat16", "float16", "float32")  # candidates for a new common float type
_SIGNED_BY_BITS = {8: "int8", 16: "int16", 32: "int32"}


def _contains(a: str, b: str) -> bool:
    ia, ib = INFO[a], INFO[b]
    return ia.exp_bits >= ib.exp_bits and ia.man_bits >= ib.man_bits


def promote(a: str, b: str) -> str:
    """The classic NKI result type of an arithmetic op on dtypes ``a`` and ``b``.

    float+int -> the float; float+float -> the one containing the other, else the smallest of
    bf16 / fp16 / fp32 containing both (fp16+bf16 -> fp32, e4m3+e5m2 -> bf16); int+int -> the
    wider, or a widened signed type (int8+uint8 -> int16), int32+uint32 -> fp32."""
    if a == b:
        return a
    ia, ib = INFO[a], INFO[b]
    if ia.kind == "b":
        a, ia = "uint8", INFO["uint8"]
    if ib.kind == "b":
        b, ib = "uint8", INFO["uint8"]
    if a == b:
        return a
    if ia.kind == "f" and ib.kind != "f":
        return a
    if ib.kind == "f" and ia.kind != "f":
        return b
    if ia.kind == "f":
        if _contains(a, b):
            return a
        if _contains(b, a):
            return b
        for cand in _FLOAT_WIDENING:
            if _contains(cand, a) and _contains(cand, b):
                return cand
        return "float32"
    # integers
    if ia.kind == ib.kind:
        return a if ia.bits >= ib.bits else b
    signed, unsigned = (ia, ib) if ia.kind == "i" else (ib, ia)
    if signed.bits > unsigned.bits:
        return signed.name
    wider = _SIGNED_BY_BITS.get(unsigned.bits * 2)
    return wider if wider is not None else "float32"


def scalar_dtype(value: object) -> str:
    """Python scalars are typed as int32 / float32 / uint8 (bool); NumPy scalars keep theirs,
    except NumPy's 64-bit ones (``np.float64``, what ``1 / np.sqrt(d)`` gives; ``np.int64``),
    which are taken as the Python numbers they stand for (no NKI dtype is 64-bit)."""
    if isinstance(value, (bool, np.bool_)):
        return "uint8"
    if isinstance(value, np.generic):
        if value.dtype.itemsize == 8 and value.dtype.kind in "fiu":
            return "float32" if value.dtype.kind == "f" else "int32"
        return name_of(value.dtype)
    if isinstance(value, int):
        return "int32"
    if isinstance(value, float):
        return "float32"
    raise NKITypeError(
        f"expected a number, got {type(value).__name__}", code="err_invalid_argument"
    )


# --------------------------------------------------------------------------------------------
# Value conversion on write (the same rules everywhere a value lands in a typed tensor)
# --------------------------------------------------------------------------------------------


def storage_dtype(name: str, precise_fp: bool = True) -> np.dtype:
    """The NumPy dtype a tensor of NKI dtype ``name`` is stored as."""
    if not precise_fp and is_float(name) and INFO[name].bits < 32:
        return np.dtype(np.float32)
    return storage(name)


def cast(x: np.ndarray, name: str, precise_fp: bool = True) -> np.ndarray:
    """Convert computed values to storage for NKI dtype ``name``.

    Floats round to nearest-even (ml_dtypes). Float -> int rounds to nearest-even, NaN -> 0,
    and saturates at the type's limits; int -> narrower int saturates too."""
    target = storage_dtype(name, precise_fp)
    x = np.asarray(x)
    if name == "tfloat32" and precise_fp:  # (fp32 storage: its values are rounded all the same)
        return round_tf32(x if x.dtype == np.float32 else x.astype(np.float32))
    if x.dtype == target:
        return x
    kind = INFO[name].kind
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
    return x.astype(target)


def round_tf32(x: np.ndarray) -> np.ndarray:
    """Round fp32 to the 10-bit mantissa of tfloat32 (nearest-even), kept in fp32 storage."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    finite = np.isfinite(x)
    lsb = (bits >> 13) & 1
    rounded = ((bits + 0xFFF + lsb) >> 13) << 13
    out = np.where(finite, rounded, bits).astype(np.uint32).view(np.float32)
    return out
