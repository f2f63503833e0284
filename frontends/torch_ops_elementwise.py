"""Element-wise ATen op -> NKI kernel adapters of the ``"nki"`` torch.compile backend: unary math,
binary arithmetic and comparisons with torch's type promotion, logic on booleans, activation
backward ops, where / masked_fill, dtype conversions and copies.

Operands go to the kernels as (rows, last dim) views; a second operand may be a scalar, a
tensor of the same shape, a row vector or a per-row column (other broadcasts are materialised
by a layout copy). Integer tensors are computed in int32 (int64 values must fit) and booleans
as uint8; results come back in the graph's dtype."""

from __future__ import annotations

from typing import Any

import torch

import nki.kernels as K
from nki.kernels._tiles import FREE_MAX

from .torch_ops import _DTYPE_NAMES, FLOATS, INTS, _float, _operand, _rows
from .torch_registry import Guard, builtin

_EW = f"float32 / bfloat16 / float16, last dim <= {FREE_MAX}"
# integer results torch wraps around in their own dtype: kept on the CPU (the kernels compute
# int32 values, and the engines saturate)
_NARROW_INTS = (torch.int16, torch.int8, torch.uint8)
_EW_INT = f"float32 / bfloat16 / float16 / int32 / int64, last dim <= {FREE_MAX}"


def _is_scalar(v: Any) -> bool:
    return isinstance(v, (int, float, bool)) or (isinstance(v, torch.Tensor) and v.dim() == 0)


def _scalar(v: Any) -> Any:
    return v.item() if isinstance(v, torch.Tensor) else v


def _cast(run: Any, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` converted to ``dtype`` by cast_kernel (unchanged if it already has it)."""
    if t.dtype == dtype or (t.dtype == torch.int32 and dtype == torch.int64):
        return t
    if dtype not in _DTYPE_NAMES:
        raise Guard(f"conversion to {dtype}")
    return run(K.cast_kernel, _rows(_operand(t)), dtype=_DTYPE_NAMES[dtype]).reshape(t.shape)


def _unary(op: str) -> Any:
    def adapter(run: Any, x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype in _NARROW_INTS:
            raise Guard(f"{op} on {x.dtype} (torch wraps around; the engines saturate)")
        if isinstance(x, torch.Tensor) and x.dtype in INTS and f"{op}_int" in K.EXACT_KERNELS:
            res = run(K.EXACT_KERNELS[f"{op}_int"], _rows(_operand(x))).reshape(x.shape)
            return _int32_limits(res)
        _float(x)
        return run(K.UNARY_KERNELS[op], _rows(x)).reshape(x.shape)

    return adapter


for _op in "neg abs reciprocal sqrt rsqrt exp log tanh sigmoid relu silu sin cos erf".split():
    _note = "; int32 / int64 exact" if _op in ("neg", "abs") else ""
    builtin(f"aten::{_op}", (f"{_op}_kernel",), _EW + _note)(_unary(_op))


@builtin("aten::gelu", ("gelu_kernel", "gelu_tanh_kernel"), f"{_EW}; approximate none or tanh")
def _gelu(run: Any, x: Any, approximate: str = "none") -> Any:
    _float(x)
    op = {"none": "gelu", "tanh": "gelu_tanh"}[approximate]
    return run(K.UNARY_KERNELS[op], _rows(x)).reshape(x.shape)


def _broadcast_pair(x: torch.Tensor, y: torch.Tensor, swap: bool) -> tuple:
    """(x2, y2, shape, swapped): x as (rows, last dim) of the broadcast shape and y in one of
    the forms the kernels broadcast (same rows, a (1, D) row, an (N, 1) column)."""
    shape = torch.broadcast_shapes(x.shape, y.shape)
    swapped = False
    if x.shape != shape and swap:
        x, y, swapped = y, x, True
    if x.shape != shape:
        x = x.expand(shape)  # the broadcast operand is materialised by the layout copy
    d = shape[-1] if len(shape) else 1
    x2 = _rows(x)
    yy = y.reshape((1,) * (len(shape) - y.dim()) + tuple(y.shape))
    if tuple(yy.shape) == tuple(shape):
        y2 = _rows(yy)
    elif all(s == 1 for s in yy.shape[:-1]) and yy.shape[-1] == d:
        y2 = yy.reshape(1, d).contiguous()  # a row vector (bias, weight)
    elif yy.shape[-1] == 1 and tuple(yy.shape[:-1]) == tuple(shape[:-1]):
        y2 = yy.reshape(-1, 1).contiguous()  # one value per row (norm statistics)
    else:
        y2 = _rows(yy.expand(shape))
    return x2, y2, shape, swapped


def _result_dtype(op: str, x: Any, y: Any) -> torch.dtype:
    rt = torch.result_type(x, y)
    if op == "div" and rt not in FLOATS:
        return torch.get_default_dtype()  # true division
    return rt


def _int32_limits(res: torch.Tensor) -> torch.Tensor:
    """``res``, unless it is an integer result holding int32's limits: a value that left int32's
    range saturated there in the engines, where torch keeps int64 values and wraps int32 ones,
    so the op runs on the CPU instead (a true result at a limit only costs that fallback)."""
    if res.dtype in (torch.int32, torch.int64):
        lim = torch.iinfo(torch.int32)
        if bool(((res == lim.max) | (res == lim.min)).any()):
            raise Guard("an integer result at int32's limits (it may have saturated)")
    return res


def _binary_call(run: Any, op: str, x: Any, y: Any, commutative: bool) -> Any:
    return _int32_limits(_binary_launch(run, op, x, y, commutative))


def _binary_launch(run: Any, op: str, x: Any, y: Any, commutative: bool) -> Any:
    rt = _result_dtype(op, x, y)
    if rt not in FLOATS and (rt not in INTS or op not in K.INT_EXACT or rt in _NARROW_INTS):
        raise Guard(f"{op} on {rt}")  # (int8 / uint8 / int16: torch wraps, the engines saturate)
    kdt = rt if rt in FLOATS else torch.int32
    xt, yt = isinstance(x, torch.Tensor), isinstance(y, torch.Tensor)
    if xt and (not yt or (y.dim() == 0 and x.dim() > 0)):  # y a scalar
        xs = _operand(_cast(run, x, rt))
        s = float(_scalar(y)) if rt in FLOATS else int(_scalar(y))
        return run(K.SCALAR_KERNELS[op], _rows(xs), s=s).reshape(x.shape)
    if yt and (not xt or (x.dim() == 0 and y.dim() > 0)):  # x a scalar
        ys = _operand(_cast(run, y, rt))
        s = float(_scalar(x)) if rt in FLOATS else int(_scalar(x))
        return run(K.SCALAR_KERNELS[op], _rows(ys), s=s, reverse=True).reshape(y.shape)
    if not (xt and yt):
        raise Guard("scalar operands")
    x, y = (_operand(_cast(run, t, rt)) for t in (x, y))
    if x.dtype != kdt or y.dtype != kdt or x.numel() == 0 or y.numel() == 0:
        raise Guard(f"dtypes {x.dtype}, {y.dtype}")
    x2, y2, shape, _ = _broadcast_pair(x, y, commutative)
    return run(K.BINARY_KERNELS[op], x2, y2).reshape(shape)


_BIN = f"{_EW_INT} (add, sub, mul, maximum, minimum exact on integers); y same shape, a row "
_BIN += "vector, a per-row column or a scalar"


def _binary(op: str, commutative: bool) -> Any:
    def adapter(run: Any, x: Any, y: Any, alpha: Any = 1, *, rounding_mode: Any = None) -> Any:
        if alpha != 1 or rounding_mode is not None:
            raise Guard("alpha != 1" if alpha != 1 else f"rounding_mode={rounding_mode}")
        return _binary_call(run, op, x, y, commutative)

    return adapter


for _aten, (_op, _comm) in {
    "add": ("add", True),
    "sub": ("sub", False),
    "mul": ("mul", True),
    "div": ("div", False),
    "maximum": ("maximum", True),
    "minimum": ("minimum", False),
    "pow": ("pow", False),
}.items():
    builtin(f"aten::{_aten}", (f"{_op}_kernel", f"{_op}_scalar_kernel"), _BIN)(_binary(_op, _comm))


@builtin("aten::rsub", ("sub_scalar_kernel",), f"{_EW_INT}; other a scalar")
def _rsub(run: Any, x: Any, other: Any, alpha: Any = 1) -> Any:  # (ATen: alpha positional)
    if alpha != 1 or not _is_scalar(other):
        raise Guard("alpha != 1 or tensor other")
    return _binary_call(run, "sub", other, x, False)


@builtin("aten::clamp", ("maximum_scalar_kernel", "minimum_scalar_kernel"), f"{_EW_INT}")
def _clamp(run: Any, x: Any, lo: Any = None, hi: Any = None) -> Any:
    if isinstance(lo, torch.Tensor) or isinstance(hi, torch.Tensor):
        raise Guard("tensor bounds")
    out = x
    if lo is not None:
        out = _binary_call(run, "maximum", out, lo, True)
    if hi is not None:
        out = _binary_call(run, "minimum", out, hi, True)
    if out is x:
        raise Guard("no bounds")
    return out


# ---- comparisons and logic --------------------------------------------------------------------


def _compare_call(run: Any, op: str, x: Any, y: Any) -> Any:
    if _is_scalar(y) and isinstance(x, torch.Tensor):
        v = _scalar(y)
        if isinstance(v, float) and x.dtype not in FLOATS:
            x = _cast(run, x, torch.float32)
        return run(K.COMPARE_SCALAR_KERNELS[op], _rows(_operand(x)), s=v).reshape(x.shape)
    if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
        raise Guard("scalar operands")
    rt = torch.result_type(x, y)
    if rt in FLOATS:
        x, y = _cast(run, x, rt), _cast(run, y, rt)
    x, y = _operand(x), _operand(y)
    if x.dtype != y.dtype:
        x, y = (t.to(torch.int32) if t.dtype == torch.uint8 else t for t in (x, y))
    if x.dtype != y.dtype:
        raise Guard(f"dtypes {x.dtype}, {y.dtype}")
    x2, y2, shape, swapped = _broadcast_pair(x, y, True)
    if swapped:
        op = {"lt": "gt", "gt": "lt", "le": "ge", "ge": "le"}.get(op, op)
    return run(K.COMPARE_KERNELS[op], x2, y2).reshape(shape)


_CMP = f"{_EW_INT} or bool; y a tensor (broadcast as for add) or a scalar; result bool"


def _compare(op: str) -> Any:
    def adapter(run: Any, x: Any, y: Any) -> Any:
        return _compare_call(run, op, x, y)

    return adapter


for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    builtin(f"aten::{_op}", (f"{_op}_kernel", f"{_op}_scalar_kernel"), _CMP)(_compare(_op))


def _logic(op: str) -> Any:
    def adapter(run: Any, x: Any, y: Any) -> Any:
        if not all(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in (x, y)):
            raise Guard("not two boolean tensors")
        return _compare_call(run, op, x, y)

    return adapter


for _aten, _op in {
    "logical_and": "logical_and",
    "bitwise_and": "logical_and",
    "logical_or": "logical_or",
    "bitwise_or": "logical_or",
}.items():
    builtin(f"aten::{_aten}", (f"{_op}_kernel",), "bool tensors (broadcast as for add)")(
        _logic(_op)
    )


def _not(run: Any, x: Any) -> Any:
    if not isinstance(x, torch.Tensor) or x.dtype != torch.bool:
        raise Guard("not a boolean tensor")
    res = run(K.EXACT_KERNELS["logical_not"], _rows(_operand(x))).reshape(x.shape)
    return res.view(torch.bool)


builtin("aten::bitwise_not", ("logical_not_kernel",), "bool tensors")(_not)
builtin("aten::logical_not", ("logical_not_kernel",), "bool tensors")(_not)


# ---- activation backward ----------------------------------------------------------------------


def _grad(op: str) -> Any:
    def adapter(run: Any, g: Any, saved: Any, *extra: Any, **kw: Any) -> Any:
        _float(g, saved)
        if g.shape != saved.shape:
            raise Guard("broadcast")
        return run(K.GRAD_KERNELS[op], _rows(g), _rows(saved)).reshape(g.shape)

    return adapter


for _op in ("silu_backward", "sigmoid_backward", "tanh_backward"):
    builtin(f"aten::{_op}", (f"{_op}_kernel",), f"{_EW}; same shapes")(_grad(_op))


@builtin(
    "aten::gelu_backward",
    ("gelu_backward_kernel", "gelu_tanh_backward_kernel"),
    f"{_EW}; same shapes",
)
def _gelu_bwd(run: Any, g: Any, x: Any, *, approximate: str = "none") -> Any:
    op = {"none": "gelu_backward", "tanh": "gelu_tanh_backward"}[approximate]
    return _grad(op)(run, g, x)


@builtin("aten::threshold_backward", ("relu_backward_kernel",), f"{_EW}; threshold 0 (relu)")
def _relu_bwd(run: Any, g: Any, y: Any, threshold: Any) -> Any:
    if threshold != 0:
        raise Guard(f"threshold {threshold} != 0")
    return _grad("relu_backward")(run, g, y)


# ---- where, conversions, copies ---------------------------------------------------------------


def _as_tensor(v: Any, dtype: torch.dtype) -> torch.Tensor:
    """A Python scalar as a (1, 1) kernel operand (a tensor argument, not a computation)."""
    if isinstance(v, torch.Tensor):
        return v
    return torch.full((1, 1), v, dtype=dtype)


@builtin("aten::where", ("where_kernel",), f"{_EW_INT}; x, y tensors or scalars (broadcast)")
def _where(run: Any, cond: Any, x: Any, y: Any) -> Any:
    rt = torch.result_type(x, y)
    kdt = rt if rt in FLOATS else torch.int32
    if rt not in FLOATS and rt not in INTS:
        raise Guard(f"dtype {rt}")
    xt, yt = (_as_tensor(v, kdt) for v in (x, y))
    shape = torch.broadcast_shapes(
        cond.shape, *(t.shape for t, v in ((xt, x), (yt, y)) if isinstance(v, torch.Tensor))
    )
    c2 = _rows(cond.expand(shape))
    ops = []
    for t, v in ((xt, x), (yt, y)):
        t = _operand(_cast(run, t, rt))
        ops.append(t if not isinstance(v, torch.Tensor) else _rows(t.expand(shape)))
    return run(K.where_kernel, _operand(c2), *ops).reshape(shape)


@builtin("aten::masked_fill", ("where_kernel",), f"{_EW_INT}; scalar fill value")
def _masked_fill(run: Any, x: Any, mask: Any, value: Any) -> Any:
    if not _is_scalar(value):
        raise Guard("tensor fill value")
    if x.dtype not in FLOATS and isinstance(_scalar(value), float):
        raise Guard(f"float fill value for {x.dtype}")
    return _where(run, mask, _scalar(value), x).reshape(x.shape)


@builtin(
    "aten::_to_copy", ("cast_kernel",), f"{_EW_INT} or bool, to one of them, on the same device"
)
def _to_copy(run: Any, x: Any, *, dtype: Any = None, device: Any = None, **kw: Any) -> Any:
    if device is not None and torch.device(device) != x.device:
        raise Guard(f"device {device}")
    if kw.get("memory_format") not in (None, torch.preserve_format, torch.contiguous_format):
        raise Guard(f"memory_format {kw['memory_format']}")
    dt = x.dtype if dtype is None else dtype
    if dt not in _DTYPE_NAMES or x.numel() == 0:
        raise Guard(f"dtype {dt}")
    res = run(K.cast_kernel, _rows(_operand(x)), dtype=_DTYPE_NAMES[dt]).reshape(x.shape)
    return _int32_limits(res) if x.dtype in FLOATS else res


@builtin("prims::convert_element_type", ("cast_kernel",), f"{_EW_INT} or bool, to one of them")
def _convert(run: Any, x: Any, dtype: Any) -> Any:
    return _to_copy(run, x, dtype=dtype)


def _copy_of(run: Any, x: Any) -> Any:
    if x.dtype not in FLOATS + INTS + (torch.bool,) or x.numel() == 0:
        raise Guard(f"dtype {x.dtype}, shape {tuple(x.shape)}")
    res = run(K.EXACT_KERNELS["copy"], _rows(_operand(x))).reshape(x.shape)
    return res.view(torch.bool) if x.dtype == torch.bool else res


builtin("aten::lift_fresh_copy", ("copy_kernel",), f"{_EW_INT} or bool")(_copy_of)


@builtin("aten::copy", ("copy_kernel", "cast_kernel"), f"{_EW_INT} or bool; src broadcast to self")
def _copy(run: Any, self: Any, src: Any, non_blocking: bool = False) -> Any:
    if src.device != self.device:
        raise Guard(f"copy from {src.device} to {self.device}")
    src = src.expand(self.shape)
    return _cast(run, _copy_of(run, src), self.dtype)
