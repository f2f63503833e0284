"""nki-sim: an open interpreter and tile-level simulator for NKI kernels.

``import nki``, ``import nki.language as nl``, ``import nki.isa as nisa``, then decorate a kernel
with ``@nki.jit`` and call it with NumPy arrays.

The package's names load on first use (PEP 562): the foundation modules (``nki.ir``,
``nki.errors``, ``nki.dtypes``, ``nki.targets``, ``nki.optable``, ``nki.isa_spec``) are read by
the simulator, and importing one of them must not load the tracer or the language."""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__version__ = "0.1.0"

# public name -> (module, attribute); attribute None: the module itself
_LAZY: dict[str, tuple[str, str | None]] = {
    "jit": ("nki.jit", "jit"),
    "simulate_kernel": ("nki.simulation", "simulate_kernel"),
    "simulate": ("nki.simulation", "simulate"),
    "baremetal": ("nki.jit", "baremetal"),
    "Kernel": ("nki.jit", "Kernel"),
    "Launch": ("nki.jit", "Launch"),
    "benchmark": ("nki.classic", "benchmark"),
    "profile": ("nki.classic", "profile"),
    "trace": ("nki.classic", "trace"),
    "estimate": ("nki.estimates", "estimate"),
    "NKIError": ("nki.errors", "NKIError"),
    "dtype": ("nki.dtype", None),  # the dtype constants; kernels annotate with it too
    "tensor": ("nki.tracer", "NkiTensor"),  # the traced tensor type (classic nki.tensor)
    "errors": ("nki.errors", None),
    "language": ("nki.language", None),
    "typing": ("nki.typing", None),
    "isa": ("nki.isa", None),
    "compiler": ("nki.compiler", None),
    "meta": ("nki.meta", None),
    "simulator": ("nki.simulator", None),
}

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


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'nki' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """The ``nki`` package, whose ``jit`` is the decorator even after ``nki.jit`` the module loads
    (the import system binds every loaded submodule on its package)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "jit" and isinstance(value, types.ModuleType):
            value = value.jit
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
