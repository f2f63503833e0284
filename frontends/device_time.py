"""Estimated device time of the kernels the current thread launched through the
``torch.compile(backend="nki")`` backend (the cost model's estimate per launch, summed per
thread), so a runtime that runs several simulated NeuronCores - one per thread, or one
after another - can account each call: ``before = launched_us(); ...; launched_us() - before``."""

from __future__ import annotations

import threading

from . import torch_backend as tb

__all__ = ["launched_us", "launches"]

_ACCOUNT = threading.local()


def _on_launch(name: str, us: float | None) -> None:
    _ACCOUNT.n = getattr(_ACCOUNT, "n", 0) + 1
    if us is not None:
        _ACCOUNT.us = getattr(_ACCOUNT, "us", 0.0) + us


def launches() -> int:
    """How many kernels this thread launched so far."""
    return getattr(_ACCOUNT, "n", 0)


def launched_us() -> float:
    """Estimated device microseconds of every kernel this thread launched so far."""
    return getattr(_ACCOUNT, "us", 0.0)


if _on_launch not in tb.LAUNCH_HOOKS:
    tb.LAUNCH_HOOKS.append(_on_launch)
