"""Element-wise kernels: unary math and activations, binary arithmetic and comparisons (with the
row/column broadcasts a framework needs), scalar forms, activation backward kernels, where and
casts.

Every kernel here works on 2-D (N, D) HBM tensors: rows go on the partition axis 128 at a
time (the last, ragged tile under a row mask) and D stays whole in the free axis
(D <= ``FREE_MAX`` = 4096). Float inputs are computed in fp32 and rounded once to the output
dtype (the input dtype: float32, bfloat16 or float16); int32 inputs of the exact integer ops
(add, sub, mul, maximum, minimum, neg, abs, copy, comparisons) are computed in int32.

The kernels are generated from tables (``UNARY``, ``BINARY``, ``GRAD``): one row per op, one
``@nki.jit`` kernel per row, named ``<op>_kernel``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import nki
import nki.isa as nisa
import nki.language as nl

from . import _tiles
from ._tiles import fit

F32 = nl.float32
TWO_PI_HI = 6.28125  # 2*pi split for an exact range reduction: k * TWO_PI_HI is exact in fp32
TWO_PI_LO = 2 * math.pi - 6.28125


# row tiles of min(128, N) partitions: a tensor of fewer rows is one tile with no padding
def row_tiles(n: int) -> int:
    return _tiles.row_tiles(n, fit(n))


def load_rows(x: Any, t: Any, n: int, d: int, dtype: Any = None) -> Any:
    return _tiles.load_rows(x, t, n, d, dtype, p=fit(n))


def store_rows(out: Any, t: Any, n: int, d: int, value: Any) -> None:
    _tiles.store_rows(out, t, n, d, value, p=fit(n))


def load_operand(y: Any, t: Any, n: int, d: int) -> Any:
    return _tiles.load_operand(y, t, n, d, p=fit(n))


def rounded(res: Any, dtype: Any) -> Any:
    """``res`` in ``dtype`` (one rounding; no copy when it already is)."""
    return res if res.dtype == dtype else nl.copy(res, dtype=dtype)


def reduce_angle(x: Any) -> Any:
    """x - 2*pi*round(x / 2*pi) in fp32 (Cody-Waite): the Scalar engine's sin takes
    [-pi, pi]. Each two-op instruction rounds after each op to fp32, as separate ops would:
    k = floor(x * (1/2pi) + 0.5), then (x - k * TWO_PI_HI) - k * TWO_PI_LO."""
    q = nisa.tensor_scalar(x, nl.multiply, 1.0 / (2 * math.pi), op1=nl.add, operand1=0.5, dtype=F32)
    k = nl.floor(q, dtype=F32)
    r = nisa.scalar_tensor_tensor(
        data=k, op0=nl.multiply, operand0=TWO_PI_HI, op1=nl.subtract, operand1=x, reverse1=True,
        dtype=F32,
    )  # fmt: skip
    return nisa.scalar_tensor_tensor(
        data=k, op0=nl.multiply, operand0=TWO_PI_LO, op1=nl.subtract, operand1=r, reverse1=True,
        dtype=F32,
    )  # fmt: skip


def cos_reduced(r: Any) -> Any:
    """cos of a reduced angle r (|r| <= pi): sin(pi/2 - |r|), whose argument is in
    [-pi/2, pi/2]."""
    return nl.sin(
        nisa.tensor_scalar(
            r, nl.abs, None, op1=nl.subtract, operand1=math.pi / 2, reverse1=True, dtype=F32
        ),
        dtype=F32,
    )


# sin / cos of a reduced angle (``reduce_angle``): a fused chain reduces an angle once for both
ANGLE: dict[str, Callable[[Any], Any]] = {
    "sin": lambda r: nl.sin(r, dtype=F32),
    "cos": cos_reduced,
}


def _gelu_tanh_dx(x: Any) -> Any:
    """d/dx of 0.5 x (1 + tanh(c (x + 0.044715 x^3))), c = sqrt(2/pi), in fp32."""
    c = math.sqrt(2.0 / math.pi)
    x2 = nl.multiply(x, x, dtype=F32)
    inner = nl.multiply(
        nl.add(nl.multiply(x2, 0.044715 * c, dtype=F32), c, dtype=F32), x, dtype=F32
    )
    th = nl.tanh(inner, dtype=F32)
    dinner = nl.add(nl.multiply(x2, 3 * 0.044715 * c, dtype=F32), c, dtype=F32)
    sech2 = nl.subtract(1.0, nl.multiply(th, th, dtype=F32), dtype=F32)
    left = nl.multiply(nl.add(th, 1.0, dtype=F32), 0.5, dtype=F32)
    right = nl.multiply(nl.multiply(nl.multiply(x, 0.5, dtype=F32), sech2, dtype=F32), dinner)
    return nl.add(left, right, dtype=F32)


# op -> (tile function computing in fp32, meaning)
UNARY: dict[str, tuple[Callable[[Any], Any], str]] = {
    "neg": (lambda x: nl.negative(x, dtype=F32), "-x"),
    "abs": (lambda x: nl.abs(x, dtype=F32), "|x|"),
    "reciprocal": (lambda x: nl.reciprocal(x, dtype=F32), "1 / x"),
    "sqrt": (lambda x: nl.sqrt(x, dtype=F32), "sqrt(x)"),
    "rsqrt": (lambda x: nl.rsqrt(x, dtype=F32), "1 / sqrt(x)"),
    "exp": (lambda x: nl.exp(x, dtype=F32), "e ** x"),
    "log": (lambda x: nl.log(x, dtype=F32), "natural log"),
    "tanh": (lambda x: nl.tanh(x, dtype=F32), "tanh(x)"),
    "sigmoid": (lambda x: nl.sigmoid(x, dtype=F32), "1 / (1 + e ** -x)"),
    "relu": (lambda x: nl.relu(x, dtype=F32), "max(x, 0)"),
    "gelu": (lambda x: nl.gelu(x, dtype=F32), "x * Phi(x) (exact, erf)"),
    "gelu_tanh": (lambda x: nl.gelu_apprx_tanh(x, dtype=F32), "tanh approximation of gelu"),
    "silu": (lambda x: nl.silu(x, dtype=F32), "x * sigmoid(x)"),
    "sin": (lambda x: ANGLE["sin"](reduce_angle(x)), "sine (range-reduced to [-pi, pi])"),
    "cos": (lambda x: ANGLE["cos"](reduce_angle(x)), "cosine (range-reduced)"),
    "erf": (lambda x: nl.erf(x, dtype=F32), "error function"),
}

# unary ops that are exact on int32 (computed in the input dtype, no fp32 round trip)
EXACT_UNARY: dict[str, tuple[Callable[[Any, Any], Any], str]] = {
    "copy": (lambda x, dt: nl.copy(x, dtype=dt), "x (a copy)"),
    "neg_int": (lambda x, dt: nl.negative(x, dtype=dt), "-x"),
    "abs_int": (lambda x, dt: nl.abs(x, dtype=dt), "|x|"),
    "logical_not": (lambda x, dt: nl.equal(x, 0, dtype=dt), "x == 0 (0 or 1)"),
}

# op -> (tile function of (x, y, compute dtype), meaning); floats compute in fp32, int32 inputs
# of the ops in INT_EXACT in int32
BINARY: dict[str, tuple[Callable[[Any, Any, Any], Any], str]] = {
    "add": (lambda x, y, dt: nl.add(x, y, dtype=dt), "x + y"),
    "sub": (lambda x, y, dt: nl.subtract(x, y, dtype=dt), "x - y"),
    "mul": (lambda x, y, dt: nl.multiply(x, y, dtype=dt), "x * y"),
    "div": (lambda x, y, dt: nl.divide(x, y, dtype=dt), "x / y"),
    "pow": (lambda x, y, dt: nl.power(x, y, dtype=dt), "x ** y"),
    "maximum": (lambda x, y, dt: nl.maximum(x, y, dtype=dt), "max(x, y)"),
    "minimum": (lambda x, y, dt: nl.minimum(x, y, dtype=dt), "min(x, y)"),
}
INT_EXACT = ("add", "sub", "mul", "maximum", "minimum")

# comparison and logic ops: (tile function of (x, y) -> 0/1, meaning); the result is bool
COMPARE: dict[str, tuple[Callable[[Any, Any], Any], str]] = {
    "eq": (lambda x, y: nl.equal(x, y, dtype=nl.bool_), "x == y"),
    "ne": (lambda x, y: nl.not_equal(x, y, dtype=nl.bool_), "x != y"),
    "lt": (lambda x, y: nl.less(x, y, dtype=nl.bool_), "x < y"),
    "le": (lambda x, y: nl.less_equal(x, y, dtype=nl.bool_), "x <= y"),
    "gt": (lambda x, y: nl.greater(x, y, dtype=nl.bool_), "x > y"),
    "ge": (lambda x, y: nl.greater_equal(x, y, dtype=nl.bool_), "x >= y"),
    "logical_and": (lambda x, y: nl.minimum(x, y, dtype=nl.bool_), "x and y (0/1 inputs)"),
    "logical_or": (lambda x, y: nl.maximum(x, y, dtype=nl.bool_), "x or y (0/1 inputs)"),
}


def _compute_dtype(op: str, dtype: Any) -> Any:
    return dtype if op in INT_EXACT and dtype == nl.int32 else F32


def _sig_grad(g: Any, y: Any) -> Any:
    return nl.multiply(g, nl.multiply(y, nl.subtract(1.0, y, dtype=F32), dtype=F32), dtype=F32)


# backward op -> (tile function of (grad, saved) in fp32, meaning); saved is the forward
# input x or output y as the ATen backward op takes it
GRAD: dict[str, tuple[Callable[[Any, Any], Any], str]] = {
    "silu_backward": (
        lambda g, x: nl.multiply(g, nl.silu_dx(x, dtype=F32), dtype=F32),
        "g * silu'(x)",
    ),
    "gelu_backward": (
        lambda g, x: nl.multiply(g, nl.gelu_dx(x, dtype=F32), dtype=F32),
        "g * gelu'(x) (exact)",
    ),
    "gelu_tanh_backward": (
        lambda g, x: nl.multiply(g, _gelu_tanh_dx(x), dtype=F32),
        "g * d/dx gelu_tanh(x)",
    ),
    "sigmoid_backward": (_sig_grad, "g * y * (1 - y), y = sigmoid(x)"),
    "tanh_backward": (
        lambda g, y: nl.multiply(
            g, nl.subtract(1.0, nl.multiply(y, y, dtype=F32), dtype=F32), dtype=F32
        ),
        "g * (1 - y ** 2), y = tanh(x)",
    ),
    "relu_backward": (
        lambda g, y: nl.multiply(g, nl.greater(y, 0.0, dtype=F32), dtype=F32),
        "g where y > 0, else 0 (y = relu(x))",
    ),
}


def _named(fn: Callable[..., Any], name: str, doc: str) -> Any:
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return nki.jit(fn)


def _unary(op: str) -> Any:
    f, meaning = UNARY[op]

    def kernel(x):
        n, d = x.shape
        out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
        for t in nl.affine_range(row_tiles(n)):
            xt = load_rows(x, t, n, d)
            store_rows(out, t, n, d, rounded(f(xt), x.dtype))
        return out

    return _named(
        kernel,
        f"{op}_kernel",
        f"out[N, D] = {meaning}, element-wise.\n\nShapes: x (N, D), any N, D <= 4096. Dtypes: "
        "float32, bfloat16, float16 (computed in fp32, rounded once to x's dtype).",
    )


def _binary(op: str) -> Any:
    f, meaning = BINARY[op]

    def kernel(x, y):
        n, d = x.shape
        out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
        dt = _compute_dtype(op, x.dtype)
        for t in nl.affine_range(row_tiles(n)):
            res = f(load_rows(x, t, n, d), load_operand(y, t, n, d), dt)
            store_rows(out, t, n, d, rounded(res, x.dtype))
        return out

    return _named(
        kernel,
        f"{op}_kernel",
        f"out[N, D] = {meaning}, element-wise.\n\nShapes: x (N, D), y (N, D), (N, 1), (1, D) or "
        "(1, 1) (broadcast); any N, D <= 4096. Dtypes: float32, bfloat16, float16, y of x's "
        "dtype (computed in fp32, rounded once to x's dtype)"
        + ("; int32 (exact)." if op in INT_EXACT else "."),
    )


def _compare(op: str) -> Any:
    f, meaning = COMPARE[op]

    def kernel(x, y):
        n, d = x.shape
        out = nl.ndarray((n, d), dtype=nl.bool_, buffer=nl.shared_hbm)
        for t in nl.affine_range(row_tiles(n)):
            store_rows(out, t, n, d, f(load_rows(x, t, n, d), load_operand(y, t, n, d)))
        return out

    return _named(
        kernel,
        f"{op}_kernel",
        f"out[N, D] = {meaning} as bool.\n\nShapes: x (N, D), y (N, D), (N, 1), (1, D) or "
        "(1, 1) (broadcast); any N, D <= 4096. Dtypes: float32, bfloat16, float16, int32 or "
        "bool, y of x's dtype (compared in fp32 for floats, exactly for int32).",
    )


def _compare_scalar(op: str) -> Any:
    f, meaning = COMPARE[op]

    def kernel(x, s=0.0):
        n, d = x.shape
        out = nl.ndarray((n, d), dtype=nl.bool_, buffer=nl.shared_hbm)
        for t in nl.affine_range(row_tiles(n)):
            store_rows(out, t, n, d, f(load_rows(x, t, n, d), s))
        return out

    return _named(
        kernel,
        f"{op}_scalar_kernel",
        f"out[N, D] = {meaning} as bool, y the Python scalar s.\n\nShapes: x (N, D), any N, "
        "D <= 4096. Dtypes: float32, bfloat16, float16, int32 or bool.",
    )


def _exact_unary(op: str) -> Any:
    f, meaning = EXACT_UNARY[op]

    def kernel(x):
        n, d = x.shape
        out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
        for t in nl.affine_range(row_tiles(n)):
            store_rows(out, t, n, d, f(load_rows(x, t, n, d), x.dtype))
        return out

    return _named(
        kernel,
        f"{op}_kernel",
        f"out[N, D] = {meaning}, element-wise, exact.\n\nShapes: x (N, D), any N, D <= 4096. "
        "Dtypes: float32, bfloat16, float16, int32, uint8 or bool (out in x's dtype).",
    )


def _scalar(op: str) -> Any:
    f, meaning = BINARY[op]

    def kernel(x, s=0.0, reverse=False):
        n, d = x.shape
        out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
        dt = _compute_dtype(op, x.dtype)
        for t in nl.affine_range(row_tiles(n)):
            xt = load_rows(x, t, n, d)
            res = f(s, xt, dt) if reverse else f(xt, s, dt)
            store_rows(out, t, n, d, rounded(res, x.dtype))
        return out

    return _named(
        kernel,
        f"{op}_scalar_kernel",
        f"out[N, D] = {meaning} with y the Python float s (x and s swapped with reverse=True)."
        "\n\nShapes: x (N, D), any N, D <= 4096. Dtypes: float32, bfloat16, float16 (computed "
        "in fp32, rounded once to x's dtype).",
    )


def _grad(op: str) -> Any:
    f, meaning = GRAD[op]

    def kernel(g, saved):
        n, d = g.shape
        out = nl.ndarray((n, d), dtype=g.dtype, buffer=nl.shared_hbm)
        for t in nl.affine_range(row_tiles(n)):
            gt = load_rows(g, t, n, d)
            st = load_rows(saved, t, n, d)
            store_rows(out, t, n, d, rounded(f(gt, st), g.dtype))
        return out

    return _named(
        kernel,
        f"{op}_kernel",
        f"grad_in[N, D] = {meaning}.\n\nShapes: g and the saved tensor (N, D), any N, "
        "D <= 4096. Dtypes: float32, bfloat16, float16, both the same (fp32 math, rounded once).",
    )


@nki.jit
def where_kernel(cond, x, y):
    """out[N, D] = x where cond != 0 else y (torch.where / masked_fill).

    Shapes: cond, x and y each (N, D), (N, 1), (1, D) or (1, 1) (broadcast to (N, D), the
    largest of their shapes); any N, D <= 4096. Dtypes: cond bool/uint8 (or any numeric); x and
    y float32, bfloat16, float16 or int32, the same (result in x's dtype)."""
    n = max(cond.shape[0], x.shape[0], y.shape[0])
    d = max(cond.shape[1], x.shape[1], y.shape[1])
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(row_tiles(n)):
        ct = nl.copy(load_operand(cond, t, n, d), dtype=nl.float32)
        xt = load_operand(x, t, n, d)
        yt = load_operand(y, t, n, d)
        store_rows(out, t, n, d, nl.where(ct, xt, yt, dtype=x.dtype))
    return out


@nki.jit
def cast_kernel(x, dtype="float32"):
    """out[N, D] = x converted to ``dtype`` (``"float32"``, ``"bfloat16"``, ``"float16"``,
    ``"int32"``, ``"bool_"``), floats rounded to nearest-even once (float -> int rounds toward
    zero, as torch does).

    Shapes: x (N, D), any N, D <= 4096. Dtypes: x float32, bfloat16, float16, int32 or bool."""
    n, d = x.shape
    out_dtype = getattr(nl, dtype)
    out = nl.ndarray((n, d), dtype=out_dtype, buffer=nl.shared_hbm)
    to_int = out_dtype == nl.int32 and x.dtype in (nl.float32, nl.bfloat16, nl.float16)
    for t in nl.affine_range(row_tiles(n)):
        xt = load_rows(x, t, n, d)
        if to_int:  # torch truncates; the engines round to nearest-even
            xt = nl.trunc(xt, dtype=F32)
        elif out_dtype == nl.bool_:
            xt = nl.not_equal(xt, 0, dtype=F32)
        store_rows(out, t, n, d, nl.copy(xt, dtype=out_dtype))
    return out


UNARY_KERNELS: dict[str, Any] = {op: _unary(op) for op in UNARY}
BINARY_KERNELS: dict[str, Any] = {op: _binary(op) for op in BINARY}
SCALAR_KERNELS: dict[str, Any] = {op: _scalar(op) for op in BINARY}
COMPARE_KERNELS: dict[str, Any] = {op: _compare(op) for op in COMPARE}
COMPARE_SCALAR_KERNELS: dict[str, Any] = {op: _compare_scalar(op) for op in COMPARE}
EXACT_KERNELS: dict[str, Any] = {op: _exact_unary(op) for op in EXACT_UNARY}
GRAD_KERNELS: dict[str, Any] = {op: _grad(op) for op in GRAD}
