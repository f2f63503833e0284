"""Running a kernel in the simulator by name: ``nki.simulate_kernel(kernel, *arrays)`` and
``nki.simulate(kernel)(*arrays)``, for a plain function, an ``@nki.jit`` kernel or a grid
launch ``kernel[2, 2]``."""

from __future__ import annotations

import functools
from typing import Any

from .errors import NKITypeError, user_loc
from .ir import Grid
from .jit import Kernel, Launch


def as_launch(kernel: Any) -> Launch:
    """``kernel`` as a launch: itself, its default grid's, or a plain function's on no grid."""
    if isinstance(kernel, Launch):
        return kernel
    if isinstance(kernel, Kernel):
        return Launch(kernel, kernel.default_grid)
    if callable(kernel):
        return Launch(Kernel(kernel), Grid(()))
    raise NKITypeError(
        f"expected a kernel, got {type(kernel).__name__}", code="err_invalid_mode", loc=user_loc()
    )


def simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """Run ``kernel`` (a function, an ``@nki.jit`` kernel or a grid launch ``k[2, 2]``) in the
    simulator with NumPy inputs; returns NumPy outputs."""
    return as_launch(kernel)(*args, **kwargs)


def simulate(kernel: Any) -> Any:
    """``nki.simulate(kernel)(*args)``: a callable that runs the kernel in the simulator."""
    launch = as_launch(kernel)

    @functools.wraps(launch.kernel.fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        return launch(*args, **kwargs)

    return run
