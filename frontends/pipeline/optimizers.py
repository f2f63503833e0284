"""Optimizers and learning-rate schedulers of the pipeline runtime (PyBuda's
``pybuda.optimizers`` / ``pybuda.schedulers``).

An optimizer given to a simulated NeuronCore device updates that device's parameters after
each batch. The update itself runs on the host CPU with the matching ``torch.optim``
optimizer (a documented stand-in for the device-side optimizer: ``device_params`` is
accepted and does not move it), so a pipeline's training steps equal an eager torch loop's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from ..api_errors import invalid

__all__ = ["Adam", "AdamW", "LearningRateScheduler", "Optimizer", "SGD"]


class Optimizer:
    """Base class: ``torch_optimizer(params)`` builds the torch optimizer that runs the
    updates; ``learning_rate`` follows schedulers."""

    def __init__(self, learning_rate: float, device_params: bool = False) -> None:
        if not isinstance(learning_rate, (int, float)) or learning_rate < 0:
            raise invalid(
                f"{type(self).__name__}: learning_rate must be a non-negative number, "
                f"got {learning_rate!r}"
            )
        self._lr = float(learning_rate)
        self.device_params = device_params
        self._torch: torch.optim.Optimizer | None = None

    @property
    def learning_rate(self) -> float:
        return self._lr

    @learning_rate.setter
    def learning_rate(self, lr: float) -> None:
        self._lr = float(lr)
        if self._torch is not None:
            for g in self._torch.param_groups:
                g["lr"] = self._lr

    def set_optimizer_parameters(self, learning_rate: float | None = None) -> None:
        if learning_rate is not None:
            self.learning_rate = learning_rate

    def make(self, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        raise NotImplementedError

    def torch_optimizer(self, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        self._torch = self.make(list(params))
        return self._torch


class SGD(Optimizer):
    """Stochastic gradient descent: ``p -= learning_rate * (grad + weight_decay * p)``."""

    def __init__(
        self,
        learning_rate: float,
        parameters: Any = None,
        device_params: bool = False,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(learning_rate, device_params)
        self.weight_decay = weight_decay

    def make(self, params: list) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=self._lr, weight_decay=self.weight_decay)


class Adam(Optimizer):
    """Adam (``torch.optim.Adam``)."""

    def __init__(
        self,
        learning_rate: float = 0.001,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        parameters: Any = None,
        device_params: bool = False,
        **_: Any,
    ) -> None:
        super().__init__(learning_rate, device_params)
        self.betas, self.eps, self.weight_decay = (beta1, beta2), eps, weight_decay

    def make(self, params: list) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            params, lr=self._lr, betas=self.betas, eps=self.eps, weight_decay=self.weight_decay
        )


class AdamW(Adam):
    """AdamW (``torch.optim.AdamW``)."""

    def make(self, params: list) -> torch.optim.Optimizer:
        return torch.optim.AdamW(
            params, lr=self._lr, betas=self.betas, eps=self.eps, weight_decay=self.weight_decay
        )


class LearningRateScheduler:
    """Steps an :class:`Optimizer`'s learning rate after every epoch: subclass it and return
    the new rate from ``get_lr()``."""

    def __init__(self, optimizer: Optimizer) -> None:
        if not isinstance(optimizer, Optimizer):
            raise invalid(
                f"LearningRateScheduler: expected a pipeline Optimizer, got "
                f"{type(optimizer).__name__}"
            )
        self.optimizer = optimizer
        self.torch_scheduler: Any = None

    def get_lr(self) -> float:
        return self.optimizer.learning_rate

    def step(self) -> None:
        self.optimizer.learning_rate = self.get_lr()

    def get_pytorch_scheduler(self, optimizer: torch.optim.Optimizer) -> Any:
        return self.torch_scheduler
