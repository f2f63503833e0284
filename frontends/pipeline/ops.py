"""The named op set of the pipeline runtime (PyBuda's ``pybuda.op``): ``Matmul(name, a, b)``,
``Add``, ``ReduceSum``, ``HSlice``, ``Relu``, ``Softmax``, ... Each op is a row of :data:`OPS`
(what it computes, on torch tensors); the public functions keep the reference signatures.

On a simulated NeuronCore a module's forward (these ops) is compiled with
``torch.compile(backend="nki")``: each op's ATen operations run as NKI kernels of the kernel
library where one applies (the backend's report says which), and training differentiates
through them with the backward kernels. ``name`` is the op's name, unique within a module's
forward (blank: set automatically); a repeated name is an error naming it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..api_errors import invalid
from .tensor import Tensor

__all__ = [
    "Abs",
    "Add",
    "Argmax",
    "AvgPool2d",
    "BinaryStack",
    "Buffer",
    "Clip",
    "Concatenate",
    "Constant",
    "Conv2d",
    "Conv2dTranspose",
    "Exp",
    "Gelu",
    "HSlice",
    "HStack",
    "Heaviside",
    "Identity",
    "Index",
    "Layernorm",
    "Log",
    "Matmul",
    "Max",
    "MaxPool2d",
    "Multiply",
    "OPS",
    "Pad",
    "Reciprocal",
    "ReduceAvg",
    "ReduceSum",
    "Relu",
    "Reshape",
    "Select",
    "Sigmoid",
    "Softmax",
    "Sqrt",
    "Subtract",
    "Tanh",
    "Transpose",
    "VSlice",
    "VStack",
]


@dataclass(frozen=True)
class Op:
    """One named op: ``compute(*torch operands, **attributes)`` and what it does."""

    name: str
    compute: Callable[..., Any]
    doc: str


OPS: dict[str, Op] = {}


def _op(name: str, doc: str) -> Callable[[Callable], Callable]:
    def deco(fn: Callable) -> Callable:
        OPS[name] = Op(name, fn, doc)
        return fn

    return deco


class Recorder:
    """Op names seen in one forward of a module (set while a module is first run, eagerly)."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.names: dict[str, str] = {}

    def record(self, kind: str, name: str) -> None:
        if not name:
            name = f"{kind.lower()}_{len(self.names)}"
        if name in self.names:
            raise invalid(
                f"op name {name!r} is used twice in module {self.module!r} "
                f"({self.names[name]} and {kind}); names are unique within a module"
            )
        self.names[name] = kind


RECORDING: list[Recorder] = []


def _torch(x: Any) -> Any:
    return x.value() if isinstance(x, Tensor) else x


def _apply(kind: str, name: str, *operands: Any, **attrs: Any) -> Any:
    if not isinstance(name, str):
        raise invalid(
            f"{kind}: the first argument is the op's name (a string), got {type(name).__name__}"
        )
    if RECORDING:
        RECORDING[-1].record(kind, name)
    out = OPS[kind].compute(*(_torch(o) for o in operands), **attrs)
    return tuple(Tensor(o) for o in out) if isinstance(out, tuple) else Tensor(out)


def _dim(x: torch.Tensor, dim: int) -> int:
    return dim + x.dim() if dim < 0 else dim


# ---- general ---------------------------------------------------------------------------------

_op("Matmul", "a @ b (+ bias)")(
    lambda a, b, bias=None: torch.matmul(a, b) if bias is None else torch.matmul(a, b) + bias
)
_op("Add", "a + b (broadcast)")(lambda a, b: a + b)
_op("Subtract", "a - b (broadcast)")(lambda a, b: a - b)
_op("Multiply", "a * b (broadcast)")(lambda a, b: a * b)
_op("Max", "elementwise maximum of a and b")(lambda a, b: torch.maximum(a, b))
_op("Heaviside", "1 where a > 0, b where a == 0, 0 where a < 0")(
    lambda a, b: torch.where(a > 0, torch.ones_like(a), torch.where(a == 0, b + 0 * a, 0 * a))
)
_op("ReduceSum", "sum over dim, keeping it (size 1)")(lambda a, dim: a.sum(dim=dim, keepdim=True))
_op("ReduceAvg", "mean over dim, keeping it (size 1)")(lambda a, dim: a.mean(dim=dim, keepdim=True))
_op("Constant", "a scalar constant (broadcasts)")(lambda constant: torch.tensor(float(constant)))
_op("Identity", "a copy (unsqueeze_dim: with a size-1 dimension inserted there)")(
    lambda a, unsqueeze=None, unsqueeze_dim=None: (
        a.unsqueeze(unsqueeze_dim) if unsqueeze is not None else a * 1
    )
)
_op("Buffer", "a copy")(lambda a: a * 1)

# ---- shape ops -------------------------------------------------------------------------------


def _hslice(a: torch.Tensor, slices: int) -> torch.Tensor:
    *lead, z, r, c = (1,) * max(0, 3 - a.dim()) + tuple(a.shape)
    x = a.reshape(-1, z, r, slices, c // slices).permute(0, 1, 3, 2, 4)
    return x.reshape(*lead, z * slices, r, c // slices)


def _hstack(a: torch.Tensor, slices: int = -1) -> torch.Tensor:
    *lead, z, r, c = a.shape
    slices = z if slices == -1 else slices
    x = a.reshape(-1, z // slices, slices, r, c).permute(0, 1, 3, 2, 4)
    return x.reshape(*lead, z // slices, r, c * slices)


def _vslice(a: torch.Tensor, slices: int) -> torch.Tensor:
    *lead, z, r, c = (1,) * max(0, 3 - a.dim()) + tuple(a.shape)
    return a.reshape(*lead, z * slices, r // slices, c)


def _vstack(a: torch.Tensor, slices: int = -1) -> torch.Tensor:
    *lead, z, r, c = a.shape
    slices = z if slices == -1 else slices
    return a.reshape(*lead, z // slices, r * slices, c)


def _index(
    a: torch.Tensor, dim: int, start: int, stop: int | None = None, stride: int = 1
) -> torch.Tensor:
    d = _dim(a, dim)
    stop = start + 1 if stop is None else (stop + a.shape[d] if stop < 0 else stop)
    return a[(slice(None),) * d + (slice(start, stop, stride),)]


def _select(a: torch.Tensor, dim: int, index: Any, stride: int = 0) -> torch.Tensor:
    d = _dim(a, dim)
    size = a.shape[d]
    start, length = (index, 1) if isinstance(index, int) else tuple(index)
    stride = size if stride == 0 else stride
    picks = [
        o + i
        for o in range(0, size - start, stride)
        for i in range(start, start + length)
        if o + i < size
    ]
    return a.index_select(d, torch.tensor(picks, dtype=torch.long))


def _binary_stack(a: torch.Tensor, b: torch.Tensor, dim: int) -> torch.Tensor:
    d = _dim(a, dim)
    return torch.stack((a, b), dim=d + 1).flatten(d, d + 1)


_op("HSlice", "split the last dim into `slices` pieces stacked along Z (dim -3)")(_hslice)
_op("HStack", "inverse of HSlice: Z pieces side by side along the last dim")(_hstack)
_op("VSlice", "split dim -2 into `slices` pieces stacked along Z")(_vslice)
_op("VStack", "inverse of VSlice: Z pieces stacked along dim -2")(_vstack)
_op("Reshape", "reshape to `shape`")(lambda a, shape: a.reshape(tuple(shape)))
_op("Transpose", "swap dims dim0 and dim1")(lambda a, dim0, dim1: a.transpose(dim0, dim1))
_op("Index", "a[start:stop:stride] along dim (stop default start + 1)")(_index)
_op("Select", "`length` entries from `start`, every `stride` entries, along dim")(_select)
_op("Pad", "F.pad with (left, right[, top, bottom]); constant / replicate / reflect")(
    lambda a, pad, mode="constant", channel_last=False: F.pad(
        a, tuple(pad) if not channel_last else (0, 0, *pad), mode=mode
    )
)
_op("Concatenate", "concatenation along axis")(lambda *xs, axis: torch.cat(xs, dim=axis))
_op("BinaryStack", "a and b interleaved element by element along dim")(_binary_stack)

# ---- activations and math --------------------------------------------------------------------


def _relu(a: torch.Tensor, threshold: float = 0.0, mode: str = "min") -> torch.Tensor:
    if mode not in ("min", "max"):
        raise invalid(f"Relu: mode={mode!r}; expected 'min' or 'max'")
    if threshold == 0.0 and mode == "min":
        return torch.relu(a)
    keep = a >= threshold if mode == "min" else a <= threshold
    return torch.where(keep, a, torch.zeros_like(a))


_op("Relu", "max(a, 0); with threshold: a where a >= threshold ('min') / <= ('max'), else 0")(_relu)
_op("Gelu", "GELU (approximate 'none' or 'tanh')")(
    lambda a, approximate="none": F.gelu(a, approximate=approximate)
)
_op("Sigmoid", "1 / (1 + exp(-a))")(torch.sigmoid)
_op("Tanh", "tanh(a)")(torch.tanh)
_op("Exp", "exp(a)")(torch.exp)
_op("Reciprocal", "1 / a")(torch.reciprocal)
_op("Sqrt", "sqrt(a)")(torch.sqrt)
_op("Log", "natural log of a")(torch.log)
_op("Abs", "absolute value of a")(torch.abs)
_op("Clip", "a clipped to [min, max]")(lambda a, min, max: torch.clamp(a, min, max))
_op("Argmax", "index of the maximum over dim (all elements when dim is None), kept as size 1")(
    lambda a, dim=None: torch.argmax(a, dim=dim, keepdim=dim is not None).to(a.dtype)
)

# ---- convolutions and nn ---------------------------------------------------------------------


def _conv_padding(padding: Any, kernel: tuple[int, int], dilation: int) -> Any:
    if padding == "same":
        return "same"
    if isinstance(padding, int):
        return padding
    left, right, top, bottom = padding
    if left != right or top != bottom:
        raise invalid(f"Conv2d: asymmetric padding {padding} is not supported")
    return (top, left)


def _convolution(transposed: bool) -> Callable[..., torch.Tensor]:
    def conv(x, w, bias=None, stride=1, padding="same", dilation=1, groups=1, channel_last=False):
        if channel_last:
            x = x.permute(0, 3, 1, 2)
        if transposed:
            pad = (w.shape[-1] - 1) // 2 if padding == "same" else padding
            fn = F.conv_transpose2d
        else:
            pad, fn = _conv_padding(padding, tuple(w.shape[-2:]), dilation), F.conv2d
        out = fn(x, w, bias, stride=stride, padding=pad, dilation=dilation, groups=groups)
        return out.permute(0, 2, 3, 1) if channel_last else out

    return conv


def _pool_pad(padding: Any, kernel: Any) -> int:
    k = kernel if isinstance(kernel, int) else kernel[0]
    return k // 2 if padding == "same" else int(padding)


_op("Conv2d", "2-D convolution (N, C, H, W); padding 'same', an int or (l, r, t, b)")(
    _convolution(transposed=False)
)
_op("Conv2dTranspose", "2-D transposed convolution")(_convolution(transposed=True))


@_op("MaxPool2d", "2-D max pooling")
def _max_pool(x, kernel_size, stride=1, padding="same", dilation=1, ceil_mode=False):
    pad = _pool_pad(padding, kernel_size)
    return F.max_pool2d(x, kernel_size, stride, pad, dilation, ceil_mode)


@_op("AvgPool2d", "2-D average pooling")
def _avg_pool(
    x,
    kernel_size,
    stride=1,
    padding="same",
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    pad = _pool_pad(padding, kernel_size)
    return F.avg_pool2d(x, kernel_size, stride, pad, ceil_mode, count_include_pad, divisor_override)


_op("Softmax", "softmax over dim")(lambda a, dim, stable=True: torch.softmax(a, dim=dim))


def _layernorm(a, weights, bias, dim=-1, epsilon=1e-5):
    if _dim(a, dim) != a.dim() - 1:
        raise invalid(f"Layernorm: dim={dim}; normalisation runs over the last dim")
    return F.layer_norm(a, (a.shape[-1],), weights.reshape(-1), bias.reshape(-1), epsilon)


_op("Layernorm", "layer normalisation over the last dim, then * weights + bias")(_layernorm)

# ---- the public functions (the reference signatures) -----------------------------------------


def _named(kind: str, op: Callable[..., Tensor]) -> Callable[..., Tensor]:
    op.__name__ = op.__qualname__ = kind
    op.__doc__ = f"``{kind}(name, ...)``: {OPS[kind].doc}."
    return op


def _unary(kind: str) -> Callable[..., Tensor]:
    return _named(kind, lambda name, operandA: _apply(kind, name, operandA))


def _binary(kind: str) -> Callable[..., Tensor]:
    return _named(kind, lambda name, operandA, operandB: _apply(kind, name, operandA, operandB))


Add, Subtract, Multiply, Max, Heaviside = map(
    _binary, ("Add", "Subtract", "Multiply", "Max", "Heaviside")
)
Buffer, Sigmoid, Tanh, Exp, Reciprocal, Sqrt, Log, Abs = map(
    _unary, ("Buffer", "Sigmoid", "Tanh", "Exp", "Reciprocal", "Sqrt", "Log", "Abs")
)

# a pipeline Tensor's arithmetic operators are these named ops, with automatic names
for _dunder, _op in (("__add__", Add), ("__sub__", Subtract), ("__mul__", Multiply)):
    setattr(Tensor, _dunder, lambda self, other, _op=_op: _op("", self, other))


def Matmul(name: str, operandA: Any, operandB: Any, bias: Any = None) -> Tensor:
    """``operandA @ operandB`` (+ ``bias``)."""
    return _apply("Matmul", name, operandA, operandB, bias)


def ReduceSum(name: str, operandA: Any, dim: int) -> Tensor:
    """Sum over ``dim``, keeping it as size 1."""
    return _apply("ReduceSum", name, operandA, dim=dim)


def ReduceAvg(name: str, operandA: Any, dim: int) -> Tensor:
    """Mean over ``dim``, keeping it as size 1."""
    return _apply("ReduceAvg", name, operandA, dim=dim)


def Constant(name: str, *, constant: float) -> Tensor:
    """A scalar constant."""
    return _apply("Constant", name, constant=constant)


def Identity(
    name: str, operandA: Any, unsqueeze: str | None = None, unsqueeze_dim: int | None = None
) -> Tensor:
    """A copy; with ``unsqueeze`` set, a size-1 dimension inserted at ``unsqueeze_dim``."""
    return _apply("Identity", name, operandA, unsqueeze=unsqueeze, unsqueeze_dim=unsqueeze_dim)


def HSlice(name: str, operandA: Any, slices: int) -> Tensor:
    """Split the last dim into ``slices`` pieces, stacked along Z (dim -3)."""
    return _apply("HSlice", name, operandA, slices=slices)


def HStack(name: str, operandA: Any, slices: int = -1) -> Tensor:
    """Put ``slices`` Z pieces side by side along the last dim (default: all of Z)."""
    return _apply("HStack", name, operandA, slices=slices)


def VSlice(name: str, operandA: Any, slices: int) -> Tensor:
    """Split dim -2 into ``slices`` pieces, stacked along Z."""
    return _apply("VSlice", name, operandA, slices=slices)


def VStack(name: str, operandA: Any, slices: int = -1) -> Tensor:
    """Stack ``slices`` Z pieces along dim -2 (default: all of Z)."""
    return _apply("VStack", name, operandA, slices=slices)


def Reshape(name: str, operandA: Any, shape: tuple[int, ...]) -> Tensor:
    """Reshape to ``shape``."""
    return _apply("Reshape", name, operandA, shape=shape)


def Transpose(name: str, operandA: Any, dim0: int, dim1: int, **_: Any) -> Tensor:
    """Swap dims ``dim0`` and ``dim1``."""
    return _apply("Transpose", name, operandA, dim0=dim0, dim1=dim1)


def Index(
    name: str, operandA: Any, dim: int, start: int, stop: int | None = None, stride: int = 1
) -> Tensor:
    """``[start:stop:stride]`` along ``dim`` (``stop`` default ``start + 1``)."""
    return _apply("Index", name, operandA, dim=dim, start=start, stop=stop, stride=stride)


def Select(
    name: str, operandA: Any, dim: int, index: int | tuple[int, int], stride: int = 0
) -> Tensor:
    """``index = (start, length)`` (or one index): those entries of every ``stride`` along
    ``dim`` (``stride`` 0: the whole dim once)."""
    return _apply("Select", name, operandA, dim=dim, index=index, stride=stride)


def Pad(
    name: str,
    operandA: Any,
    pad: tuple[int, ...],
    mode: str = "constant",
    channel_last: bool = False,
) -> Tensor:
    """Pad by ``(left, right)`` or ``(left, right, top, bottom)``."""
    return _apply("Pad", name, operandA, pad=pad, mode=mode, channel_last=channel_last)


def Concatenate(name: str, *operands: Any, axis: int) -> Tensor:
    """Concatenate along ``axis``."""
    return _apply("Concatenate", name, *operands, axis=axis)


def BinaryStack(name: str, operandA: Any, operandB: Any, dim: int) -> Tensor:
    """``operandA`` and ``operandB`` interleaved along ``dim``."""
    return _apply("BinaryStack", name, operandA, operandB, dim=dim)


def Relu(name: str, operandA: Any, threshold: float = 0.0, mode: str = "min") -> Tensor:
    """ReLU (see :data:`OPS` for ``threshold`` / ``mode``)."""
    return _apply("Relu", name, operandA, threshold=threshold, mode=mode)


def Gelu(name: str, operandA: Any, approximate: str = "none") -> Tensor:
    """GELU."""
    return _apply("Gelu", name, operandA, approximate=approximate)


def Clip(name: str, operandA: Any, min: float, max: float) -> Tensor:
    """Clip to ``[min, max]``."""
    return _apply("Clip", name, operandA, min=min, max=max)


def Argmax(name: str, operandA: Any, dim: int | None = None) -> Tensor:
    """Index of the maximum (as the operand's dtype)."""
    return _apply("Argmax", name, operandA, dim=dim)


def _conv_op(kind: str) -> Callable[..., Tensor]:
    def op(
        name: str,
        activations: Any,
        weights: Any,
        bias: Any = None,
        stride: int = 1,
        padding: Any = "same",
        dilation: int = 1,
        groups: int = 1,
        channel_last: bool = False,
    ) -> Tensor:
        return _apply(
            kind,
            name,
            activations,
            weights,
            bias,
            stride=stride,
            padding=padding,
            dilation=dilation,
            groups=groups,
            channel_last=channel_last,
        )

    return _named(kind, op)


Conv2d, Conv2dTranspose = _conv_op("Conv2d"), _conv_op("Conv2dTranspose")


def MaxPool2d(
    name: str,
    activations: Any,
    kernel_size: Any,
    stride: int = 1,
    padding: Any = "same",
    dilation: int = 1,
    ceil_mode: bool = False,
    **kwargs: Any,
) -> Tensor:
    """2-D max pooling."""
    return _apply(
        "MaxPool2d",
        name,
        activations,
        kernel_size=kernel_size,
        stride=stride,
        padding=padding,
        dilation=dilation,
        ceil_mode=ceil_mode,
    )


def AvgPool2d(
    name: str,
    activations: Any,
    kernel_size: Any,
    stride: int = 1,
    padding: Any = "same",
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: float | None = None,
    **kwargs: Any,
) -> Tensor:
    """2-D average pooling."""
    return _apply(
        "AvgPool2d",
        name,
        activations,
        kernel_size=kernel_size,
        stride=stride,
        padding=padding,
        ceil_mode=ceil_mode,
        count_include_pad=count_include_pad,
        divisor_override=divisor_override,
    )


def Softmax(name: str, operandA: Any, *, dim: int, stable: bool = True) -> Tensor:
    """Softmax over ``dim`` (always computed the numerically stable way)."""
    return _apply("Softmax", name, operandA, dim=dim, stable=stable)


def Layernorm(
    name: str, operandA: Any, weights: Any, bias: Any, dim: int = -1, epsilon: float = 1e-5
) -> Tensor:
    """Layer normalisation over the last dim."""
    return _apply("Layernorm", name, operandA, weights, bias, dim=dim, epsilon=epsilon)


def markdown() -> str:
    """The op set as a Markdown table (name, what it computes)."""
    rows = ["| op | computes |", "|---|---|"]
    rows += [f"| `{o.name}` | {o.doc} |" for o in OPS.values()]
    return "\n".join(rows)
