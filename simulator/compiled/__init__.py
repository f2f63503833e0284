"""The Numba backend ("numba"): a kernel runs as a thin compiled driver that calls small cached
compiled library kernels, one per instruction kind and access shape.

``backend`` (``execute``, the compile-or-host decision), ``codegen`` (the driver), ``access``
(accesses lowered to index arithmetic), ``lowering`` (per-instruction lowerings), ``kernels``
(the library and its disk cache), ``budget`` (the per-launch compile budget), ``rt`` (helpers
the generated code calls). The package is not named ``numba`` so that it never shadows the
library it compiles with."""

from .backend import execute

__all__ = ["execute"]
