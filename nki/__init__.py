"""nki-sim: an open interpreter and tile-level simulator for NKI kernels.

``import nki``, ``import nki.language as nl``, ``import nki.isa as nisa``, then decorate a kernel
with ``@nki.jit`` and call it with NumPy arrays."""

from . import errors, language, typing
from .classic import benchmark, profile, trace  # classic tooling entry points
from .dtypes import NkiDtype as dtype  # the dtype type kernels annotate with (nki.dtype)
from .errors import NKIError
from .estimates import estimate
from .jit import Kernel, Launch, baremetal, jit, simulate, simulate_kernel
from .tracer import NkiTensor as tensor  # the traced tensor type (classic nki.tensor)

__version__ = "0.1.0"


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
    "dtype",
]


def __getattr__(name: str):
    if name in ("isa", "compiler"):
        import importlib

        return importlib.import_module(f"nki.{name}")
    raise AttributeError(f"module 'nki' has no attribute {name!r}")
