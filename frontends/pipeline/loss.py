"""Loss modules written with the named op set (PyBuda's ``pybuda.op.loss``). Place one on the
last device with ``place_loss_module``; it gets the last module's outputs, then the targets."""

from __future__ import annotations

from typing import Any

from ..api_errors import invalid
from .module import OpModule
from .ops import Abs, Constant, Exp, Log, Multiply, ReduceAvg, ReduceSum, Subtract

__all__ = ["CrossEntropyLoss", "L1Loss", "MSELoss"]

REDUCTIONS = ("avg", "sum", "none")


def _reduce(x: Any, reduction: str) -> Any:
    """Reduce the last two dims ('avg': mean, 'sum': sum, 'none': as is)."""
    if reduction == "none":
        return x
    op = ReduceAvg if reduction == "avg" else ReduceSum
    return op("reduce_cols", op("reduce_rows", x, -2), -1)


class _Reducing(OpModule):
    def __init__(self, name: str, reduction: str = "avg") -> None:
        super().__init__(name)
        if reduction not in REDUCTIONS:
            raise invalid(
                f"{type(self).__name__} {name!r}: reduction={reduction!r}; expected "
                "'avg', 'sum' or 'none'"
            )
        self.reduction = reduction


class L1Loss(_Reducing):
    """``|prediction - labels|`` reduced over the last two dims (mean by default)."""

    def forward(self, prediction: Any, labels: Any) -> Any:
        return _reduce(Abs("abs", Subtract("diff", prediction, labels)), self.reduction)


class MSELoss(_Reducing):
    """``(prediction - labels)^2`` reduced over the last two dims (mean by default)."""

    def forward(self, prediction: Any, labels: Any) -> Any:
        d = Subtract("diff", prediction, labels)
        return _reduce(Multiply("square", d, d), self.reduction)


class CrossEntropyLoss(OpModule):
    """Cross entropy of logits ``predictions`` (..., rows, classes) against target
    probabilities ``labels`` of the same shape: the mean over rows of
    ``-sum(labels * log_softmax(predictions))``."""

    def forward(self, predictions: Any, labels: Any) -> Any:
        lse = Log("log_sum_exp", ReduceSum("sum_exp", Exp("exp", predictions), -1))
        neg_logp = Multiply(
            "neg", Subtract("log_softmax", predictions, lse), Constant("minus_one", constant=-1.0)
        )
        per_row = ReduceSum("per_row", Multiply("weighted", neg_logp, labels), -1)
        return ReduceAvg("mean", per_row, -2)
