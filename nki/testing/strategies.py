"""Hypothesis strategies for NKI kernels: on-chip tile shapes inside a target's budgets, HBM
tensor shapes built from tiles, NKI dtypes, arrays with safe or special values, SPMD grids.

Every strategy shrinks towards the smallest, simplest case (1 partition, short free axes, a
one-instance grid, zeros), so a failing property reports a minimal example."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

from simulator.config import SimConfig

from .. import dtypes as _dt
from .. import isa_spec as spec
from ..grids import parse_grid
from ..language.core import nc, spmd_dim
from ..targets import get_target, isa_rules

# dtypes a kernel's HBM arrays can hold (tfloat32 is a compute format stored as float32)
FLOAT_DTYPES = ("float32", "bfloat16", "float16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2")
INT_DTYPES = ("int8", "int16", "int32")
UINT_DTYPES = ("uint8", "uint16", "uint32")
BOOL_DTYPES = ("bool_",)
_KINDS = {"float": FLOAT_DTYPES, "int": INT_DTYPES, "uint": UINT_DTYPES, "bool": BOOL_DTYPES}

# size limits the strategies draw within: the keyed limits of the instruction spec, by the
# dimension they bound, plus the fp32 columns of one PSUM bank (a target fact)
_FREE_LIMITS: dict[str, Any] = {
    lim.key: lim.value
    for i in spec.INSTRUCTIONS
    for lim in i.limits
    if lim.key and lim.dim == "free"
}
_FREE_LIMITS["psum_bank_fp32"] = lambda t, r: t.psum_bank_bytes // 4
_PART_LIMITS: dict[str, Any] = {
    lim.key: lim.value
    for i in spec.INSTRUCTIONS
    for lim in i.limits
    if lim.key and lim.dim == "partition"
}

SMALL_ARRAY = 64  # arrays up to this many elements are printed in full in reports


def _target(target: str | None):
    name = target if target is not None else SimConfig.from_env().target
    return get_target(name), isa_rules(name)


def free_limit(instruction: str, target: str | None = None) -> int:
    """The largest free size (elements per partition) ``instruction`` accepts on ``target``.

    ``instruction`` is one of ``nc_matmul.stationary``, ``nc_matmul.moving``, ``bn_stats``,
    ``nc_transpose.tensor``, ``nc_transpose.vector``, ``psum_bank_fp32`` (fp32 columns in one
    PSUM bank). Example: ``free_limit("nc_matmul.moving", "trn3") == 4096``."""
    if instruction not in _FREE_LIMITS:
        raise ValueError(
            f"unknown instruction {instruction!r} for a free-size limit; expected one of "
            f"{sorted(_FREE_LIMITS)}"
        )
    t, r = _target(target)
    return int(_FREE_LIMITS[instruction](t, r))


def sbuf_budget(target: str | None = None) -> int:
    """Usable SBUF bytes per partition on ``target`` (default: the configured target)."""
    return int(_target(target)[0].sbuf_usable_per_partition)


def _dims(lo: int, hi: int, pow2: bool) -> st.SearchStrategy[int]:
    if hi < lo:
        raise ValueError(f"empty dimension range [{lo}, {hi}]")
    if not pow2:
        return st.integers(lo, hi)
    exps = [e for e in range(0, hi.bit_length()) if lo <= 2**e <= hi]
    if not exps:
        raise ValueError(f"no power of two in [{lo}, {hi}]")
    return st.sampled_from([2**e for e in exps])


@st.composite
def tile_shapes(
    draw: Any,
    *,
    free_dims: int = 1,
    dtype: Any = "float32",
    target: str | None = None,
    max_partitions: int | None = None,
    min_partitions: int = 1,
    max_free: int | None = 512,
    min_free: int = 1,
    instruction: str | None = None,
    budget_bytes: int | None = None,
    powers_of_two: bool = False,
) -> tuple[int, ...]:
    """On-chip tile shapes ``(P, F1, ..., Fk)`` inside the hardware budgets.

    Enforced: ``P <= max_partitions`` (default and at most the target's 128 partitions, or the
    instruction's partition limit); the product of the free sizes ``<= max_free`` and ``<=`` the
    free-size limit of ``instruction`` (see ``free_limit``); bytes per partition
    (``prod(F) * itemsize(dtype)``) ``<= budget_bytes`` (default: the target's usable SBUF per
    partition). ``max_free=None`` lifts the default 512-element cap that keeps tests fast.

    Example: ``tile_shapes(dtype="bfloat16", instruction="nc_matmul.moving")``."""
    t, r = _target(target)
    pmax = t.pmax
    if instruction is not None:
        if instruction in _PART_LIMITS:
            pmax = min(pmax, _PART_LIMITS[instruction](t, r))
        fl = free_limit(instruction, t.name)
        max_free = fl if max_free is None else min(max_free, fl)
    if max_partitions is not None:
        if max_partitions > t.pmax:
            raise ValueError(
                f"max_partitions={max_partitions} exceeds the {t.pmax} partitions of {t.name}"
            )
        pmax = min(pmax, max_partitions)
    item = _dt.itemsize(_dt.name_of(dtype))
    budget = t.sbuf_usable_per_partition if budget_bytes is None else budget_bytes
    fcap = budget // item
    if max_free is not None:
        fcap = min(fcap, max_free)
    if free_dims < 1:
        raise ValueError("a tile has a partition dimension and at least one free dimension")
    if fcap < min_free:
        raise ValueError(f"no free size fits: min_free={min_free} > budget {fcap} elements")
    p = draw(_dims(min_partitions, pmax, powers_of_two))
    free: list[int] = []
    left = fcap
    for k in range(free_dims):
        rest = free_dims - k - 1
        hi = max(1, left)
        lo = min_free if k == 0 else 1
        f = draw(_dims(min(lo, hi), hi, powers_of_two))
        free.append(f)
        left = max(1, left // f) if rest else left
    assert math.prod(free) * item <= budget
    return (p, *free)


@st.composite
def hbm_shapes(
    draw: Any,
    tile: Sequence[int] = (128, 512),
    *,
    max_tiles: int | Sequence[int] = 4,
    multiple: bool | None = True,
) -> tuple[int, ...]:
    """HBM tensor shapes measured in tiles of shape ``tile``.

    ``multiple=True``: every dimension is ``k * tile[d]`` with ``1 <= k <= max_tiles``.
    ``multiple=False``: at least one dimension is deliberately *not* a multiple of its tile size
    (a ragged last tile; needs a tile dimension > 1). ``multiple=None``: either.
    Example: ``hbm_shapes((128, 64), max_tiles=(3, 2), multiple=False)``."""
    tile = tuple(int(t) for t in tile)
    mt = (max_tiles,) * len(tile) if isinstance(max_tiles, int) else tuple(max_tiles)
    if len(mt) != len(tile):
        raise ValueError(f"max_tiles {max_tiles!r} does not match the tile rank {len(tile)}")
    if multiple is False and all(t == 1 for t in tile):
        raise ValueError(f"every size is a multiple of tile {tile}; cannot draw a ragged shape")
    dims = []
    for t, m in zip(tile, mt):
        if multiple is True or t == 1:
            dims.append(draw(st.integers(1, m)) * t)
        else:
            dims.append(draw(st.integers(1, m * t)))
    if multiple is False and all(d % t == 0 for d, t in zip(dims, tile)):
        # make the first dimension that can be ragged ragged (shrinks to 1 element short)
        k = next(i for i, t in enumerate(tile) if t > 1)
        dims[k] -= draw(st.integers(1, tile[k] - 1))
    return tuple(dims)


def dtypes(
    *,
    kinds: Sequence[str] = ("float", "int", "uint"),
    float_only: bool = False,
    include: Sequence[Any] | None = None,
    exclude: Sequence[Any] = (),
    fp8: bool = True,
) -> st.SearchStrategy[_dt.NkiDtype]:
    """NKI dtypes (``nl.float32``-style objects, equal to their NumPy dtype).

    ``kinds`` picks from ``float``, ``int``, ``uint``, ``bool``; ``float_only=True`` is
    ``kinds=("float",)``; ``fp8=False`` drops the 8-bit floats; ``include`` gives the list
    explicitly; ``exclude`` removes names. Shrinks towards float32.
    Example: ``dtypes(float_only=True, exclude=["float8_e4m3fn"])``."""
    if include is not None:
        names = [_dt.name_of(d) for d in include]
    else:
        kinds = ("float",) if float_only else tuple(kinds)
        bad = set(kinds) - set(_KINDS)
        if bad:
            raise ValueError(f"unknown dtype kinds {sorted(bad)}; expected {sorted(_KINDS)}")
        names = [n for k in kinds for n in _KINDS[k]]
        if not fp8:
            names = [n for n in names if not n.startswith("float8")]
        if float_only:
            names = [n for n in names if _dt.is_float(n)]
    drop = {_dt.name_of(d) for d in exclude}
    names = [n for n in names if n not in drop]
    if not names:
        raise ValueError("dtypes(): the filters leave no dtype")
    return st.sampled_from([_dt.dtype(n) for n in names])


def special_values(dtype: Any) -> list[Any]:
    """The special values of ``dtype`` (stored in that dtype): for floats NaN, +-inf (where
    representable), -0.0, the smallest and largest subnormals, the smallest normal, the finite
    extremes; for integers 0, -1 (signed), 1 and the extremes; for bool False / True."""
    name = _dt.name_of(dtype)
    sd = _dt.storage(name)
    info = _dt.INFO[name]
    if info.kind == "b":
        return [np.False_, np.True_]
    if info.kind in "iu":
        ii = np.iinfo(sd)
        vals = {0, 1, int(ii.min), int(ii.max)} | ({-1} if info.kind == "i" else set())
        return [sd.type(v) for v in sorted(vals)]
    fi = ml_dtypes.finfo(sd) if name != "float32" and name != "float16" else np.finfo(sd)
    cands = [
        np.nan,
        np.inf,
        -np.inf,
        -0.0,
        float(fi.smallest_subnormal),
        float(fi.smallest_normal) - float(fi.smallest_subnormal),  # largest subnormal
        float(fi.smallest_normal),
        float(fi.max),
        float(fi.min),
        float(fi.eps),
    ]
    out = []
    with np.errstate(all="ignore"):
        for v in cands:
            x = np.array([v], dtype=np.float64).astype(np.float32).astype(sd)
            xf = float(x[0])
            if np.isinf(v) and not np.isinf(xf):
                continue  # no infinity in this format (e.g. float8_e4m3fn)
            out.append(x[0])
    return out


def _bounds(name: str, min_value: float | None, max_value: float | None) -> tuple[float, float]:
    info = _dt.INFO[name]
    if info.kind == "b":
        return 0, 1
    if info.kind in "iu":
        ii = np.iinfo(_dt.storage(name))
        # (by default within half the dtype's range: a sum of two stays in it, as the engines
        # saturate where NumPy references wrap)
        lo = max(ii.min // 2, -100) if min_value is None else max(ii.min, math.ceil(min_value))
        hi = min(ii.max // 2, 100) if max_value is None else min(ii.max, math.floor(max_value))
        return lo, hi
    fmax = float(ml_dtypes.finfo(_dt.storage(name)).max)  # (the format's largest finite)
    lo = -4.0 if min_value is None else max(-fmax, float(min_value))
    hi = 4.0 if max_value is None else min(fmax, float(max_value))
    return lo, hi


def _next_value(x: np.ndarray, up: bool) -> np.ndarray:
    """The neighbour of each finite ``x`` in its own float format (float32 ``nextafter`` does
    not step bfloat16 / float8): one step of the sign-magnitude bit pattern."""
    if x.dtype.isbuiltin == 1:
        return np.nextafter(x, x.dtype.type(np.inf if up else -np.inf))
    u = np.dtype(f"u{x.dtype.itemsize}")
    bits = x.view(u).astype(np.int64)
    sign = 1 << (8 * x.dtype.itemsize - 1)
    neg, mag = (bits & sign) != 0, bits & (sign - 1)
    grow = neg != up  # (up: a positive value grows, a negative one shrinks towards zero)
    stepped = (bits & sign) | np.where(grow, mag + 1, mag - 1)
    from_zero = 1 if up else sign | 1  # (the smallest subnormal of the direction's sign)
    return np.where(mag == 0, from_zero, stepped).astype(u).view(x.dtype)


def _elements(name: str, lo: float, hi: float) -> st.SearchStrategy[Any]:
    info = _dt.INFO[name]
    if info.kind == "b":
        return st.booleans()
    if info.kind in "iu":
        return st.integers(int(lo), int(hi))
    # bounds rounded inwards to float32 (hypothesis needs them representable at width 32)
    lo32, hi32 = np.float32(lo), np.float32(hi)
    if lo32 < lo:
        lo32 = np.nextafter(lo32, np.float32(np.inf))
    if hi32 > hi:
        hi32 = np.nextafter(hi32, np.float32(-np.inf))
    return st.floats(float(lo32), float(hi32), width=32, allow_nan=False, allow_infinity=False)


def _finish(vals: np.ndarray, name: str, lo: float, hi: float) -> np.ndarray:
    sd = _dt.storage(name)
    if _dt.is_float(name):
        pre = vals.astype(np.float32)
        out = pre.astype(sd)
        # rounding into a narrow format may step just outside [lo, hi]: clip those back in
        # that format (special values, drawn outside the range on purpose, are kept)
        f = out.astype(np.float32)
        with np.errstate(invalid="ignore"):
            stepped = (pre >= lo) & (pre <= hi) & ((f < lo) | (f > hi))
        if not stepped.any():
            return out
        inside = np.clip(f, lo, hi).astype(sd)
        # the clipped value may round outside again: one value of the format inwards then
        fi = inside.astype(np.float32)
        inside = np.where(fi > hi, _next_value(inside, up=False), inside)
        inside = np.where(fi < lo, _next_value(inside, up=True), inside)
        return np.where(stepped, inside, out).astype(sd)
    return vals.astype(sd)


@st.composite
def arrays(
    draw: Any,
    dtype: Any,
    shape: Any,
    *,
    min_value: float | None = None,
    max_value: float | None = None,
    special: bool = False,
) -> np.ndarray:
    """Arrays of ``shape`` and ``dtype`` (NumPy / ml_dtypes storage).

    By default the values are finite and safe: floats in ``[-4, 4]``, integers in
    ``[-100, 100]`` clipped to half the dtype's range (int8: ``[-64, 63]``, so a sum of two
    does not saturate); override with ``min_value`` / ``max_value``, which are clipped to the
    dtype's finite range.
    ``special=True`` mixes in the dtype's special values (NaN, +-inf, -0.0, subnormals,
    extremes; see ``special_values``). ``dtype`` and ``shape`` may be strategies.
    Values are a background (all zeros, or seeded uniform values in the range) with up to 8
    drawn elements on top, so arrays of any size are fast to draw. Shrinking goes to a zero
    background and fewer, simpler drawn elements where that still fails.
    Example: ``arrays("bfloat16", (128, 64), special=True)``."""
    if isinstance(dtype, st.SearchStrategy):
        dtype = draw(dtype)
    if isinstance(shape, st.SearchStrategy):
        shape = draw(shape)
    shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
    name = _dt.name_of(dtype)
    lo, hi = _bounds(name, min_value, max_value)
    if lo > hi:
        raise ValueError(f"arrays(): empty value range [{min_value}, {max_value}] for {name}")
    elems = _elements(name, lo, hi)
    if special:
        elems = st.one_of(elems, st.sampled_from(special_values(name)))
    size = math.prod(shape)
    kind = "f" if _dt.is_float(name) else ("b" if _dt.is_bool(name) else "i")
    # The background: seed 0 (where shrinking goes first) is all zeros (or the value of the range
    # nearest zero); any other seed gives seeded uniform values. The seed is drawn first for
    # every size, so shrinking a shape keeps the background and a value-dependent failure.
    seed = draw(st.integers(0, 2**32 - 1))
    if seed == 0:
        base = np.full(size, min(max(0, lo), hi), dtype=np.float64)
    else:
        rng = np.random.default_rng(seed)
        if kind == "f":
            base = rng.uniform(lo, hi, size)
        else:
            base = rng.integers(int(lo), int(hi) + 1, size).astype(np.float64)
    # a few drawn elements on top (the special values enter here); the choice sequence has the
    # same structure for every shape, so hypothesis can shrink shapes and values independently
    for i, v in draw(st.lists(st.tuples(st.integers(0, max(0, size - 1)), elems), max_size=8)):
        if size:
            base[i] = float(v)
    base = base.reshape(shape)
    if kind == "f":
        return _finish(base.astype(np.float32), name, lo, hi)
    return base.astype(_dt.storage(name))


@st.composite
def grids(
    draw: Any,
    *,
    max_ndim: int = 2,
    max_instances: int = 8,
    min_instances: int = 1,
    cores: bool = False,
    target: str | None = None,
) -> tuple[Any, ...]:
    """SPMD launch grids: a tuple for ``kernel[grid]`` with 1..``max_ndim`` dimensions and
    ``min_instances <= prod <= max_instances`` instances. ``cores=True`` may place the first
    dimension on the target's physical cores (``nl.spmd_dim(g, nl.nc(2))`` or
    ``nl.nc(2) * g``) when the target has more than one core per logical core (not trn1).
    Shrinks towards ``(1,)``. Example: ``grids(max_ndim=1, max_instances=4)``."""
    if max_instances < min_instances or min_instances < 1:
        raise ValueError(f"bad instance range [{min_instances}, {max_instances}]")
    ndim = draw(st.integers(1, max_ndim))
    dims: list[int] = []
    left = max_instances
    for _ in range(ndim):
        d = draw(st.integers(1, max(1, left)))
        dims.append(d)
        left = max(1, left // d)
    if math.prod(dims) < min_instances:  # (rarely: the first dimension grows to the minimum)
        rest = math.prod(dims[1:])
        lo = -(-min_instances // rest)
        dims[0] = lo if lo * rest <= max_instances else min_instances
        if lo * rest > max_instances:  # (no first dimension fits between the bounds)
            dims[1:] = [1] * (len(dims) - 1)
    out: list[Any] = list(dims)
    lnc = _target(target)[0].max_lnc
    if cores and lnc > 1 and dims[0] % lnc == 0 and draw(st.booleans()):
        g = dims[0] // lnc
        if draw(st.booleans()):
            out[0] = spmd_dim(g, nc(lnc))  # interleaved: core = instance % lnc
        else:
            out[0] = spmd_dim(nc(lnc), g)  # blocked: contiguous halves per core
    return tuple(out)


def grid_size(grid: Any) -> int:
    """Number of instances in a launch grid (an int, tuple, ``nl.nc`` or ``nl.spmd_dim``)."""
    return int(math.prod(parse_grid(grid).shape)) if grid not in ((), None) else 1
