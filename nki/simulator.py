"""``nki.simulator.simulate_kernel(func, args, kwargs, _lnc)``: the entry point vLLM's Neuron
plugin calls to run a kernel on the CPU (``NKI_SIMULATOR=1``), with the arguments as one tuple
and one dict and the logical-core count apart; the same run as ``nki.simulate(func[_lnc])``."""

from __future__ import annotations

from typing import Any

from .errors import NKITypeError, user_loc
from .simulation import as_launch

__all__ = ["simulate_kernel"]


def simulate_kernel(
    func: Any, args: Any = (), kwargs: dict[str, Any] | None = None, _lnc: Any = None
) -> Any:
    """Run ``func`` (an ``@nki.jit`` kernel, a launch ``k[2]`` or a plain function) in the
    simulator on ``*args, **kwargs`` (NumPy arrays in, NumPy arrays out). ``_lnc`` (1 or 2)
    launches it on that many logical cores, as ``func[_lnc]``; a launch that has its own
    grid takes only ``_lnc=None`` or the same count."""
    if not isinstance(args, (tuple, list)) or not isinstance(kwargs, (dict, type(None))):
        raise NKITypeError(
            "nki.simulator.simulate_kernel(func, args, kwargs, _lnc) takes the kernel's "
            f"arguments as a tuple and a dict, got {type(args).__name__} and "
            f"{type(kwargs).__name__}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    launch = as_launch(func)
    if _lnc is not None:
        if type(_lnc) is not int or _lnc < 1:
            raise NKITypeError(
                f"_lnc must be a positive int (the logical cores: 1 or 2), got {_lnc!r}",
                code="err_invalid_argument",
                loc=user_loc(),
            )
        if launch.grid.dims and launch.grid.shape != (_lnc,):
            raise NKITypeError(
                f"_lnc={_lnc} given for a launch on grid {launch.grid.shape}",
                code="err_invalid_argument",
                loc=user_loc(),
            )
        if not launch.grid.dims and _lnc > 1:
            launch = launch.kernel[_lnc]
    return launch(*args, **(kwargs or {}))
