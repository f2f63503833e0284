"""Tensors and parameters of the pipeline runtime (the shape of PyBuda's ``Tensor`` and
``Parameter``): thin wrappers around torch tensors, so a module written with the named op set
(:mod:`.ops`) traces into an ordinary torch graph."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..api_errors import invalid, invalid_type
from .config import torch_dtype_of

__all__ = ["Parameter", "Tensor", "SomeTensor", "to_torch"]


class Tensor:
    """A pipeline tensor: ``value()`` is the torch tensor it holds. Arithmetic operators are
    the named ops ``Add`` / ``Subtract`` / ``Multiply`` with automatic names (attached by
    :mod:`.ops`, which builds on this module)."""

    def __init__(self, value: torch.Tensor) -> None:
        self._value = value

    def value(self) -> torch.Tensor:
        """The torch tensor."""
        return self._value

    def to_pytorch(self) -> torch.Tensor:
        return self.value()

    @classmethod
    def create_from_torch(cls, t: torch.Tensor) -> Tensor:
        return cls(t)

    @property
    def shape(self) -> torch.Size:
        return self.value().shape

    @property
    def dtype(self) -> torch.dtype:
        return self.value().dtype

    def __len__(self) -> int:
        return len(self.value())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value()!r})"


class Parameter(Tensor):
    """A trainable tensor of a module: ``Parameter(torch.rand(32, 32), requires_grad=True)``,
    or ``Parameter(32, 32)`` for a shape whose value is set later (``set_value`` /
    ``module.set_parameter``); running a module whose parameter has no value is an error
    naming it."""

    def __init__(
        self,
        *args: Any,
        requires_grad: bool = True,
        name: str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        self.name = name
        self.requires_grad = requires_grad
        if len(args) == 1 and isinstance(args[0], torch.Tensor):
            value = args[0].detach().clone()
            self.shape_ = tuple(value.shape)
            super().__init__(
                torch.nn.Parameter(
                    value.to(dtype) if dtype is not None else value, requires_grad=requires_grad
                )
            )
        elif all(isinstance(a, int) for a in args) and args:
            self.shape_ = tuple(args)
            self._dtype = dtype or torch.float32
            super().__init__(None)  # type: ignore[arg-type]
        else:
            raise invalid_type(
                f"Parameter: expected one torch.Tensor or a shape of ints, got "
                f"{[type(a).__name__ for a in args]}"
            )

    def has_value(self) -> bool:
        return self._value is not None

    def value(self) -> torch.Tensor:
        if self._value is None:
            raise invalid(
                f"parameter {self.name or '(unnamed)'} of shape {self.shape_} has no "
                "value: set it with set_value() or module.set_parameter()"
            )
        return self._value

    def set_value(self, data: Any) -> None:
        """Set the value (a tensor of this parameter's shape)."""
        t = to_torch(data, f"parameter {self.name!r}")
        if tuple(t.shape) != self.shape_:
            raise invalid(f"parameter {self.name!r} has shape {self.shape_}, got {tuple(t.shape)}")
        if self._value is None:
            self._value = torch.nn.Parameter(t.detach().clone(), requires_grad=self.requires_grad)
        else:
            with torch.no_grad():
                self._value.copy_(t)

    def set_data_format(self, df: Any) -> None:
        """Store the parameter in data format ``df`` (Float32, Float16, Float16_b)."""
        dt = torch_dtype_of(df, "Parameter.set_data_format")
        if self._value is None:
            self._dtype = dt
        else:
            with torch.no_grad():
                self._value.data = self._value.data.to(dt)


SomeTensor = Any  # torch.Tensor, Tensor or a NumPy array


def to_torch(x: Any, what: str) -> torch.Tensor:
    """``x`` as a torch tensor (a pipeline ``Tensor``, a torch tensor or a NumPy array)."""
    if isinstance(x, Tensor):
        return x.value()
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    raise invalid_type(f"{what} must be a tensor, got {type(x).__name__}")
