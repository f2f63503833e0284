"""The framework adapters ("frontends") kernels dispatch to: a kernel called with torch or JAX
tensors runs through the frontend registered for that tensor type's top-level module."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from .errors import NKIError, user_loc

# Framework adapters ("frontends"): each registers the call that runs a launch on its
# tensors, under the top-level modules of the tensor types it takes. Installed frontends are
# found through the "nki.frontends" entry-point group (name: such a module, value: the frontend
# module, which registers itself on import), loaded when such a tensor first reaches a kernel.
FrontendCall = Callable[[Any, tuple, dict], Any]  # (launch, args, kwargs)
FRONTENDS: dict[str, tuple[str, FrontendCall]] = {}  # tensor module -> (framework, call)
ENTRY_POINT_GROUP = "nki.frontends"
_entry_points: dict[str, Any] | None = None


def register_frontend(framework: str, modules: tuple[str, ...], call: FrontendCall) -> None:
    """Route kernel calls whose arguments are tensors of a type defined under ``modules``
    (top-level module names, e.g. ``("jax", "jaxlib")``) to ``call(launch, args, kwargs)``."""
    for m in modules:
        FRONTENDS[m] = (framework, call)


def _installed_frontends() -> dict[str, Any]:
    global _entry_points
    if _entry_points is None:
        _entry_points = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return _entry_points


# The project's own frontends, for a source checkout run without installed package metadata
# (no entry points): a torch tensor must never reach np.asarray (bfloat16 has no NumPy type).
OWN_FRONTENDS = {"torch": "frontends.torch", "jax": "frontends.jax", "jaxlib": "frontends.jax"}


def framework_of(x: object) -> str | None:
    """The top-level module of ``x``'s type when a frontend takes such tensors."""
    mod = type(x).__module__.partition(".")[0]
    if mod in FRONTENDS:
        return mod
    if mod in ("numpy", "builtins"):
        return None
    if mod in _installed_frontends():
        _installed_frontends()[mod].load()  # the frontend registers itself on import
    elif mod in OWN_FRONTENDS:
        importlib.import_module(OWN_FRONTENDS[mod])
    return mod if mod in FRONTENDS else None


def dispatch(launch: Any, modules: set[str], args: tuple, kwargs: dict) -> Any:
    """Run a launch whose arguments are framework tensors through that framework's frontend;
    tensors of two frameworks in one call are an error."""
    frameworks = {FRONTENDS[m][0] for m in modules}
    if len(frameworks) > 1:
        raise NKIError(
            f"kernel '{launch.kernel.fn.__name__}' was called with a mix of "
            f"{' and '.join(sorted(frameworks))} tensors; pass tensors of one framework",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    return FRONTENDS[next(iter(modules))][1](launch, args, kwargs)
