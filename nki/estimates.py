"""``nki.estimate``: trace a kernel launch from argument shapes alone and estimate its
performance with the cost model of ``simulator/cost``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from simulator.cost import Report, estimate_ir

from . import dtypes
from .errors import NKIError, NKITypeError, user_facing
from .grids import check_grid_fits
from .ir import KernelIR
from .jit import Kernel
from .simulation import as_launch
from .typing import _TensorType


def shape_only(arg: Any) -> Any:
    """An argument with its shape and dtype but no data: a read-only zero-stride array (so a
    4096 x 8192 input costs no memory). Accepts arrays, torch / jax arrays, objects with
    ``shape`` and ``dtype`` (``jax.ShapeDtypeStruct``) and classic ``nt.tensor[[P, F], dtype]``
    placeholders; anything else (scalars, options) is returned as is."""
    if isinstance(arg, _TensorType) and arg.shape:
        spec = arg.shape
        if len(spec) == 2 and isinstance(spec[0], (list, tuple)):
            shape, dt = tuple(int(d) for d in spec[0]), spec[1]
        else:
            shape, dt = tuple(int(d) for d in spec), "float32"
        return np.broadcast_to(np.zeros((), dtypes.storage(dtypes.name_of(dt))), shape)
    if isinstance(arg, np.ndarray):
        return arg
    shape, dt = getattr(arg, "shape", None), getattr(arg, "dtype", None)
    if shape is None or dt is None or np.isscalar(arg):
        return arg
    name = str(dt).replace("torch.", "")
    try:
        storage = dtypes.storage(dtypes.name_of(name))
    except NKITypeError:
        storage = np.dtype(name)
    return np.broadcast_to(np.zeros((), storage), tuple(int(d) for d in shape))


def trace_launch(launch: Any, args: tuple, kwargs: dict, target: str | None = None) -> KernelIR:
    """The IR of ``launch(*args, **kwargs)`` (a kernel or ``kernel[grid]``), traced without
    running it; ``target`` overrides the kernel's platform target."""
    lch = as_launch(launch)
    k = lch.kernel
    cfg = k.config(target=target)
    args = tuple(shape_only(a) for a in args)
    kwargs = {n: shape_only(v) for n, v in kwargs.items()}
    bound = k.bind(args, kwargs)
    bound.apply_defaults()
    check_grid_fits(lch.grid, cfg.target)
    return k.trace(lch.grid, bound, cfg.target)


def estimate(kernel: Any, target: str | None = None) -> Callable[..., Report]:
    """``nki.estimate(kernel)(*args)``: the kernel's estimated performance on ``target``
    (default: the kernel's platform target), from the arguments' shapes and dtypes alone; no
    numerics run. ``kernel`` may be a function, an ``@nki.jit`` kernel or ``kernel[grid]``."""

    def run(*args: Any, **kwargs: Any) -> Report:
        try:
            ir = trace_launch(kernel, args, kwargs, target)
            return estimate_ir(ir)
        except NKIError as e:
            raise user_facing(e) from e.__cause__  # keep the real cause of an err_runtime

    return run


@contextlib.contextmanager
def record_launches() -> Iterator[list[KernelIR]]:
    """Collect the IR of every kernel launch traced inside the block (``nki-compat --profile``)."""
    original = Kernel.trace
    seen: list[KernelIR] = []

    def trace(self: Kernel, *a: Any, **kw: Any) -> KernelIR:
        ir = original(self, *a, **kw)
        if not any(x is ir for x in seen):
            seen.append(ir)
        return ir

    Kernel.trace = trace  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        Kernel.trace = original  # type: ignore[method-assign]
