"""The cost model's estimated device time of each kernel launch of the ``"nki"`` torch.compile
backend (``nki.estimate`` on the launch's argument shapes), once per traced kernel. The graph
reports sum it per kernel; where no launch hook needs the number at once, a launch's estimate
waits until its report's sums are read (the cost model then runs only for reports someone
reads)."""

from __future__ import annotations

import functools
from typing import Any

import torch

from nki.errors import NKIError
from nki.estimates import estimate
from nki.ir import KernelIR

from .common import placeholder
from .torch_report import DeviceUs
from .torch_tensors import np_dtype

__all__ = ["device_us"]

ESTIMATES: dict[int, tuple[KernelIR, float | None]] = {}  # id(IR) -> (IR kept alive, us)
# id(IR) -> (IR kept alive, the function estimating it): one per IR not estimated yet, so a
# launch of a traced kernel whose estimate waits costs a dict lookup, not placeholder arrays
WAITING: dict[int, tuple[KernelIR, functools.partial]] = {}


def _placeholders(v: Any) -> Any:
    """Tensors (also inside lists) as read-only NumPy placeholders of their shape and dtype."""
    if isinstance(v, torch.Tensor):
        return placeholder(tuple(v.shape), np_dtype(v, "argument")[0])
    if isinstance(v, (tuple, list)):
        return type(v)(_placeholders(x) for x in v)
    return v


def device_us(runner: Any, ir: KernelIR, args: tuple, kwargs: dict, now: bool) -> DeviceUs:
    """The estimated device microseconds of the launch ``runner(*args, **kwargs)`` just ran,
    whose traced kernel is ``ir``; None where the cost model cannot estimate the kernel. An IR
    not estimated yet gives, unless ``now``, a function that estimates it when called (the
    arguments kept as placeholders of their shapes and dtypes, not as tensors)."""
    hit = ESTIMATES.get(id(ir))
    if hit is not None and hit[0] is ir:
        return hit[1]
    waits = WAITING.get(id(ir))
    if waits is None or waits[0] is not ir:
        if len(WAITING) >= 512:  # (bounded; a dropped entry's launches keep their function)
            WAITING.clear()
        waits = (ir, functools.partial(_estimate, runner, ir, _placeholders(args),
                                       _placeholders(kwargs)))  # fmt: skip
        WAITING[id(ir)] = waits
    return waits[1]() if now else waits[1]


def _estimate(runner: Any, ir: KernelIR, shapes: tuple, kw: dict) -> float | None:
    hit = ESTIMATES.get(id(ir))
    if hit is not None and hit[0] is ir:
        return hit[1]
    try:
        us: float | None = estimate(runner)(*shapes, **kw).latency_us
    except (NKIError, NotImplementedError):
        us = None
    ESTIMATES[id(ir)] = (ir, us)
    WAITING.pop(id(ir), None)
    return us
