"""Random numbers: ``nl.random_seed``, ``nl.rand`` and ``nl.dropout``.

Each SPMD instance has its own generator (PCG64), seeded by default from the instance index so
runs are reproducible; ``nl.random_seed(seed)`` reseeds it, and the same seed then gives the
same sequence (as the hardware generator does)."""

from __future__ import annotations

import math
from typing import Any

from .. import dtypes
from ..errors import NKIShapeError, NKITypeError, user_loc
from ..tracer import (
    NkiTensor,
    TileOps,
    _Assigned,
    check_start_partition,
    const_operand,
    emit,
    operand,
    result_tile,
    to_mask,
)
from .core import _shape, ndarray, no_initial_values_in_hbm


def random_seed(seed: Any, *, mask: Any = None, **_kw: Any) -> None:
    """Reseed this instance's generator with a 32-bit ``seed``: a Python int or a ``(1, 1)``
    on-chip tile holding it."""
    api = "nl.random_seed"
    if isinstance(seed, _Assigned):
        seed = seed.view
    if isinstance(seed, TileOps):
        acc, _t = operand(seed, api, "seed")
        if math.prod(acc.shape) != 1:  # (the page: "a [1,1] tensor")
            raise NKIShapeError(
                f"seed of '{api}' must be a (1, 1) tile, got shape {list(acc.shape)}",
                code="err_invalid_shape",
                loc=user_loc(),
            )
        src: Any = acc
    elif isinstance(seed, int) or (hasattr(seed, "dtype") and getattr(seed, "shape", None) == ()):
        src = const_operand(seed)
    else:
        raise NKITypeError(
            f"seed of '{api}' must be an int or a (1, 1) tile, got {type(seed).__name__}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    emit("seed", "random_seed", None, (src,), api=api)


def rand(
    shape: Any, dtype: Any = "float32", buffer: Any = None, name: str = "", **_kw: Any
) -> NkiTensor:
    """A new on-chip tile (SBUF unless ``buffer`` says PSUM) of uniform random values in [0, 1)
    (drawn in fp32, then cast). As with ``nl.full``, an HBM buffer is an error
    (``err_hbm_tensor_with_init_value_not_supported``): fill an SBUF tile and store it."""
    api = "nl.rand"
    if buffer is None and not name:
        dims, _par = _shape(shape)
        out = result_tile(dims, dtypes.name_of(dtype), "sbuf", api)
    else:
        no_initial_values_in_hbm(buffer)
        out = ndarray(shape, dtype, buffer=buffer, name=name)
    emit("rand", "rand", out.access_(), (), api=api)
    return out


def dropout(x: Any, rate: Any, *, dtype: Any = None, mask: Any = None, **_kw: Any) -> NkiTensor:
    """Zero each element of ``x`` with probability ``rate`` (a scalar or a ``(P, 1)`` tile of
    per-partition rates); kept elements are passed through unscaled, as the hardware does."""
    api = "nl.dropout"
    if isinstance(x, _Assigned):
        x = x.view
    acc, t = operand(x, api, "x")
    check_start_partition(acc, t, api, "x")
    if isinstance(rate, _Assigned):
        rate = rate.view
    if isinstance(rate, TileOps):
        racc, _rt = operand(rate, api, "rate")
        if tuple(racc.shape) != (acc.shape[0], 1):
            raise NKIShapeError(
                f"rate of '{api}' must be a scalar or an (x.shape[0], 1) = ({acc.shape[0]}, 1) "
                f"tile of per-partition rates, got shape {list(racc.shape)}",
                code="err_invalid_shape",
                loc=user_loc(),
            )
        r: Any = racc
    else:
        r = const_operand(float(rate))
    out_dt = dtypes.name_of(dtype) if dtype is not None else t.decl.dtype
    out = result_tile(acc.shape, out_dt, "sbuf", api)
    emit("dropout", "dropout", out.access_(), (acc, r), mask=to_mask(mask, acc.shape, api),
         api=api)  # fmt: skip
    return out


__all__ = ["dropout", "rand", "random_seed"]
