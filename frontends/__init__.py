"""Framework adapters: run NKI kernels on PyTorch tensors and JAX arrays."""

from __future__ import annotations

from typing import Any


def dispatch(launch: Any, frameworks: set[str], args: tuple, kwargs: dict) -> Any:
    """Called when a kernel receives framework tensors instead of NumPy arrays."""
    from nki.errors import NKIError

    raise NKIError(
        f"kernel '{launch.kernel.fn.__name__}' was called with {', '.join(sorted(frameworks))} "
        "tensors; use frontends.torch.nki_jit / frontends.jax.nki_call to launch it from a "
        "framework",
        code="err_framework_not_supported",
    )
