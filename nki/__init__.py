"""nki-sim: an open interpreter and tile-level simulator for NKI kernels.

``import nki``, ``import nki.language as nl``, ``import nki.isa as nisa``, then decorate a kernel
with ``@nki.jit`` and call it with NumPy arrays."""

from . import errors, language, typing
from .classic import benchmark, profile, trace  # classic tooling entry points
from .errors import NKIError
from .jit import Kernel, Launch, baremetal, jit, simulate, simulate_kernel
from .tracer import NkiTensor as tensor  # the traced tensor type (classic nki.tensor)

__version__ = "0.1.0"


def estimate(kernel, target=None):
    """``nki.estimate(kernel)(*args)``: the estimated performance report of ``kernel`` (a
    function, ``@nki.jit`` kernel or ``kernel[grid]``) on ``target`` (default: the kernel's),
    from the arguments' shapes and dtypes alone; no numerics run. See README "Performance
    estimates"."""
    from simulator.cost import estimate as _estimate

    return _estimate(kernel, target)


__all__ = [
    "jit",
    "simulate_kernel",
    "simulate",
    "baremetal",
    "benchmark",
    "profile",
    "estimate",
    "trace",
    "Kernel",
    "Launch",
    "NKIError",
    "errors",
    "language",
    "typing",
    "tensor",
]


def __getattr__(name: str):
    if name in ("isa", "compiler"):
        import importlib

        return importlib.import_module(f"nki.{name}")
    raise AttributeError(f"module 'nki' has no attribute {name!r}")
