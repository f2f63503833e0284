"""Framework adapters: run NKI kernels on PyTorch tensors and JAX arrays.

* ``frontends.torch``: ``nki_jit``, ``autograd_function``, ``custom_op`` (needs torch).
* ``frontends.jax``: ``nki_call``, ``custom_vjp`` (needs jax).
* ``frontends.compat``: ``neuronxcc.nki`` / ``torch_neuronx`` / ``jax_neuronx`` aliases and
  ``python -m frontends.compat script.py`` (``nki-compat script.py``).

torch and jax are imported only when one of their frontends is used, so ``import frontends``
works without either. Any ``@nki.jit`` kernel called with torch tensors or JAX arrays is routed
here by :func:`dispatch`.
"""

from __future__ import annotations

from typing import Any

from .pair import KernelPair

__all__ = ["KernelPair", "dispatch"]


def dispatch(launch: Any, frameworks: set[str], args: tuple, kwargs: dict) -> Any:
    """Called by ``nki.jit`` when a kernel receives framework tensors instead of NumPy arrays:
    torch tensors run through :func:`frontends.torch.launch` (torch tensors back), JAX arrays
    (also under ``jax.jit`` / ``jax.vmap``) through :func:`frontends.jax.nki_call` with the
    output shapes found by tracing the kernel. Mixing frameworks in one call is an error."""
    from nki.errors import NKIError

    from .common import boundary_loc

    if len(frameworks) > 1:
        raise NKIError(
            f"kernel '{launch.kernel.fn.__name__}' was called with a mix of "
            f"{' and '.join(sorted(frameworks))} tensors; pass tensors of one framework",
            code="err_invalid_argument",
            loc=boundary_loc(),
        )
    (fw,) = frameworks
    if fw == "torch":
        from . import torch as torch_frontend

        return torch_frontend.launch(launch, args, kwargs)
    from . import jax as jax_frontend

    return jax_frontend.call(launch, tuple(args), dict(kwargs))
