"""Element-wise kernels: unary math and activations, binary arithmetic (with the row/column
broadcasts a framework needs), scalar forms, activation backward kernels and where.

Every kernel here works on 2-D (N, D) HBM tensors: rows go on the partition axis 128 at a
time (the last, ragged tile under a row mask) and D stays whole in the free axis
(D <= ``FREE_MAX`` = 4096). Engines compute in fp32; the result is rounded once to the
output dtype (the input dtype: float32, bfloat16 or float16).

The kernels are generated from tables (``UNARY``, ``BINARY``, ``GRAD``): one row per op, one
``@nki.jit`` kernel per row, named ``<op>_kernel``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import nki
import nki.language as nl

from ._tiles import load_row_vector, load_rows, row_tiles, store_rows

F32 = nl.float32


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
}

# op -> (tile function of (x, y) in fp32, meaning)
BINARY: dict[str, tuple[Callable[[Any, Any], Any], str]] = {
    "add": (lambda x, y: nl.add(x, y, dtype=F32), "x + y"),
    "sub": (lambda x, y: nl.subtract(x, y, dtype=F32), "x - y"),
    "mul": (lambda x, y: nl.multiply(x, y, dtype=F32), "x * y"),
    "div": (lambda x, y: nl.divide(x, y, dtype=F32), "x / y"),
    "pow": (lambda x, y: nl.power(x, y, dtype=F32), "x ** y"),
    "maximum": (lambda x, y: nl.maximum(x, y, dtype=F32), "max(x, y)"),
    "minimum": (lambda x, y: nl.minimum(x, y, dtype=F32), "min(x, y)"),
}


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
            store_rows(out, t, n, d, nl.copy(f(xt), dtype=x.dtype))
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
        yn, yd = y.shape
        for t in nl.affine_range(row_tiles(n)):
            xt = load_rows(x, t, n, d)
            if yn == n and yd == d:
                yt = load_rows(y, t, n, d)
            elif yn == n:  # (N, 1): one value per row, broadcast along the free axis
                yt = load_rows(y, t, n, 1)
            elif yd == d:  # (1, D): one row, broadcast to every partition
                yt = load_row_vector(y, d)
            else:  # (1, 1)
                yt = load_row_vector(y, 1)
            store_rows(out, t, n, d, nl.copy(f(xt, yt), dtype=x.dtype))
        return out

    return _named(
        kernel,
        f"{op}_kernel",
        f"out[N, D] = {meaning}, element-wise.\n\nShapes: x (N, D), y (N, D), (N, 1), (1, D) or "
        "(1, 1) (broadcast); any N, D <= 4096. Dtypes: float32, bfloat16, float16, y of x's "
        "dtype (computed in fp32, rounded once to x's dtype).",
    )


def _scalar(op: str) -> Any:
    f, meaning = BINARY[op]

    def kernel(x, s=0.0, reverse=False):
        n, d = x.shape
        out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
        for t in nl.affine_range(row_tiles(n)):
            xt = load_rows(x, t, n, d)
            res = f(s, xt) if reverse else f(xt, s)
            store_rows(out, t, n, d, nl.copy(res, dtype=x.dtype))
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
            store_rows(out, t, n, d, nl.copy(f(gt, st), dtype=g.dtype))
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

    Shapes: cond, x, y all (N, D), any N, D <= 4096. Dtypes: cond bool/uint8 (or any
    numeric); x and y float32, bfloat16 or float16, the same (result in x's dtype)."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(row_tiles(n)):
        ct = load_rows(cond, t, n, d, dtype=nl.float32)
        xt = load_rows(x, t, n, d)
        yt = load_rows(y, t, n, d)
        store_rows(out, t, n, d, nl.where(ct, xt, yt, dtype=x.dtype))
    return out


@nki.jit
def cast_kernel(x, dtype="float32"):
    """out[N, D] = x converted to ``dtype`` (``"float32"``, ``"bfloat16"``, ``"float16"``),
    rounded to nearest-even once.

    Shapes: x (N, D), any N, D <= 4096. Dtypes: x float32, bfloat16 or float16."""
    n, d = x.shape
    out_dtype = getattr(nl, dtype)
    out = nl.ndarray((n, d), dtype=out_dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(row_tiles(n)):
        store_rows(out, t, n, d, nl.copy(load_rows(x, t, n, d), dtype=out_dtype))
    return out


UNARY_KERNELS: dict[str, Any] = {op: _unary(op) for op in UNARY}
BINARY_KERNELS: dict[str, Any] = {op: _binary(op) for op in BINARY}
SCALAR_KERNELS: dict[str, Any] = {op: _scalar(op) for op in BINARY}
GRAD_KERNELS: dict[str, Any] = {op: _grad(op) for op in GRAD}
