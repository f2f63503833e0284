"""Independent NumPy formulations of the op table's element-wise rows, for tests and for
``check_kernel`` references.

``NUMPY_OPS[name]`` computes ``nl.<name>`` the textbook way on float64 (or int64) inputs, written
from the documented formulas rather than from the simulator's implementation in
``nki.optable`` (so a test that compares the two can fail). Comparison and logical rows return
bool; bit-vector rows work on integer arrays. The shifts are not here: their result depends on
the storage width (see ``tests/ops``).

Example::

    from nki.testing import check_kernel
    from nki.testing.reference import NUMPY_OPS

    check_kernel(gelu_kernel, NUMPY_OPS["gelu"], shapes=[(128, 512)], dtypes="float32")
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

__all__ = ["NUMPY_OPS"]

_erf = np.vectorize(math.erf, otypes=[np.float64])
_SQRT2 = math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def _gelu_dx(x: np.ndarray) -> np.ndarray:
    # d/dx [x * Phi(x)] = Phi(x) + x * phi(x)
    return 0.5 * (1.0 + _erf(x / _SQRT2)) + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _nonzero(a: np.ndarray) -> np.ndarray:
    return np.asarray(a) != 0


NUMPY_OPS: dict[str, Callable[..., np.ndarray]] = {
    # unary
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "reciprocal": lambda x: 1.0 / x,
    "abs": np.abs,
    "negative": np.negative,
    "sign": np.sign,
    "ceil": np.ceil,
    "floor": np.floor,
    "trunc": np.trunc,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "arctan": np.arctan,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / _SQRT2)),
    "gelu_dx": _gelu_dx,
    "gelu_apprx_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3))),
    "gelu_apprx_sigmoid": lambda x: x * _sigmoid(1.702 * x),
    # (a central difference of gelu_apprx_sigmoid in float64: independent of the closed form)
    "gelu_apprx_sigmoid_dx": lambda x: (
        ((x + 1e-6) * _sigmoid(1.702 * (x + 1e-6)) - (x - 1e-6) * _sigmoid(1.702 * (x - 1e-6)))
        / 2e-6
    ),
    "silu": lambda x: x * _sigmoid(x),
    "silu_dx": lambda x: _sigmoid(x) * (1.0 + x * (1.0 - _sigmoid(x))),
    "erf": _erf,
    "erf_dx": lambda x: 2.0 / math.sqrt(math.pi) * np.exp(-x * x),
    "softplus": _softplus,
    "mish": lambda x: x * np.tanh(_softplus(x)),
    "square": np.square,
    "copy": lambda x: x,
    "logical_not": lambda x: ~_nonzero(x),
    "invert": np.invert,
    # binary
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.true_divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "abs_max": lambda x, y: np.where(np.abs(y) >= np.abs(x), y, x),  # (y on a tie)
    "abs_min": lambda x, y: np.where(np.abs(y) <= np.abs(x), y, x),
    "power": np.power,
    "fmod": np.fmod,
    "mod": np.mod,
    "equal": np.equal,
    "not_equal": np.not_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "logical_and": lambda a, b: _nonzero(a) & _nonzero(b),
    "logical_or": lambda a, b: _nonzero(a) | _nonzero(b),
    "logical_xor": lambda a, b: _nonzero(a) ^ _nonzero(b),
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
}
