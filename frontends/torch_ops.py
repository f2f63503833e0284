"""Built-in ATen op -> NKI kernel adapters of the ``"nki"`` torch.compile backend.

An adapter reshapes the op's tensors to the 2-D (rows, last dim) form the kernels of
:mod:`nki.kernels` take (a view for contiguous tensors), checks its guards (raising
``Guard(reason)``), launches the kernels through ``run`` and reshapes the result back."""

from __future__ import annotations

from typing import Any

import torch

import nki.kernels as K
from nki.kernels._tiles import FREE_MAX

from .torch_registry import Guard, builtin

FLOATS = (torch.float32, torch.bfloat16, torch.float16)
_FLOAT_DOC = "float32 / bfloat16 / float16"


def _float(*ts: Any) -> None:
    for t in ts:
        if not isinstance(t, torch.Tensor):
            raise Guard(f"argument is {type(t).__name__}, not a tensor")
        if t.dtype not in FLOATS:
            raise Guard(f"dtype {t.dtype} (kernels take {_FLOAT_DOC})")
        if t.numel() == 0:
            raise Guard("empty tensor")
    if len({t.dtype for t in ts}) > 1:
        raise Guard(f"mixed dtypes {sorted(str(t.dtype) for t in ts)}")


def _rows(t: torch.Tensor, limit: int = FREE_MAX) -> torch.Tensor:
    """t as (rows, last dim), contiguous."""
    d = t.shape[-1] if t.dim() else 1
    if d > limit:
        raise Guard(f"last dim {d} > {limit}")
    return t.contiguous().reshape(-1, d)


def _last_dim(t: torch.Tensor, dim: Any) -> None:
    dims = [dim] if isinstance(dim, int) else list(dim or [])
    if [d % max(t.dim(), 1) for d in dims] != [t.dim() - 1]:
        raise Guard(f"reduces dims {dims}, kernel reduces the last dim only")


# ---- matmul -----------------------------------------------------------------------------------

_MM = f"2-D (any M, K, N), {_FLOAT_DOC}, same dtype"


@builtin("aten::mm", ("matmul_kernel",), _MM)
def _mm(run: Any, a: torch.Tensor, b: torch.Tensor) -> Any:
    _float(a, b)
    return run(K.matmul_kernel, a.contiguous(), b.contiguous())


@builtin("aten::addmm", ("addmm_kernel",), f"{_MM}; bias (N,) or (M, N)")
def _addmm(run: Any, bias: Any, a: Any, b: Any, *, beta: Any = 1, alpha: Any = 1) -> Any:
    _float(bias, a, b)
    m, n = a.shape[0], b.shape[1]
    if bias.shape == (n,) or bias.shape == (1, n):
        bias2 = bias.reshape(1, n)
    elif tuple(bias.shape) == (m, n):
        bias2 = bias
    else:
        raise Guard(f"bias shape {tuple(bias.shape)}")
    return run(
        K.addmm_kernel,
        bias2.contiguous(),
        a.contiguous(),
        b.contiguous(),
        beta=float(beta),
        alpha=float(alpha),
    )


@builtin("aten::bmm", ("bmm_kernel",), f"3-D batches, {_FLOAT_DOC}, same dtype")
def _bmm(run: Any, a: torch.Tensor, b: torch.Tensor) -> Any:
    _float(a, b)
    return run(K.bmm_kernel, a.contiguous(), b.contiguous())


# ---- element-wise -----------------------------------------------------------------------------

_EW = f"{_FLOAT_DOC}, last dim <= {FREE_MAX}"


def _unary(op: str) -> Any:
    def adapter(run: Any, x: Any) -> Any:
        _float(x)
        return run(K.UNARY_KERNELS[op], _rows(x)).reshape(x.shape)

    return adapter


for _aten, _op in {
    "neg": "neg",
    "abs": "abs",
    "reciprocal": "reciprocal",
    "sqrt": "sqrt",
    "rsqrt": "rsqrt",
    "exp": "exp",
    "log": "log",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
    "relu": "relu",
    "silu": "silu",
}.items():
    builtin(f"aten::{_aten}", (f"{_op}_kernel",), _EW)(_unary(_op))


@builtin("aten::gelu", ("gelu_kernel", "gelu_tanh_kernel"), f"{_EW}; approximate none or tanh")
def _gelu(run: Any, x: Any, approximate: str = "none") -> Any:
    _float(x)
    op = {"none": "gelu", "tanh": "gelu_tanh"}[approximate]
    return run(K.UNARY_KERNELS[op], _rows(x)).reshape(x.shape)


def _is_scalar(v: Any) -> bool:
    return isinstance(v, (int, float)) or (isinstance(v, torch.Tensor) and v.dim() == 0)


def _binary_call(run: Any, op: str, x: Any, y: Any, commutative: bool) -> Any:
    if _is_scalar(y) and isinstance(x, torch.Tensor) and x.dim() > 0:
        _float(x)
        return run(K.SCALAR_KERNELS[op], _rows(x), s=float(y)).reshape(x.shape)
    if _is_scalar(x) and isinstance(y, torch.Tensor) and y.dim() > 0:
        _float(y)
        return run(K.SCALAR_KERNELS[op], _rows(y), s=float(x), reverse=True).reshape(y.shape)
    if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.dtype != y.dtype:
        if x.dtype in FLOATS and y.dtype in FLOATS:  # torch's promotion (bf16 * fp32 -> fp32)
            dt = torch.promote_types(x.dtype, y.dtype)
            x, y = x.to(dt), y.to(dt)
    _float(x, y)
    shape = torch.broadcast_shapes(x.shape, y.shape)
    if x.shape != shape and commutative:
        x, y = y, x
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
    return run(K.BINARY_KERNELS[op], x2, y2).reshape(shape)


_BIN = f"{_EW}; y same shape, a row vector, a per-row column or a scalar"


def _binary(op: str, commutative: bool) -> Any:
    def adapter(run: Any, x: Any, y: Any, *, alpha: Any = 1, rounding_mode: Any = None) -> Any:
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


@builtin("aten::rsub", ("sub_scalar_kernel",), f"{_EW}; other a scalar")
def _rsub(run: Any, x: Any, other: Any, *, alpha: Any = 1) -> Any:
    if alpha != 1 or not _is_scalar(other):
        raise Guard("alpha != 1 or tensor other")
    return _binary_call(run, "sub", other, x, False)


def _grad(op: str) -> Any:
    def adapter(run: Any, g: Any, saved: Any, *extra: Any, **kw: Any) -> Any:
        _float(g, saved)
        if g.shape != saved.shape:
            raise Guard("broadcast")
        return run(K.GRAD_KERNELS[op], _rows(g), _rows(saved)).reshape(g.shape)

    return adapter


for _aten, _op in {
    "silu_backward": "silu_backward",
    "sigmoid_backward": "sigmoid_backward",
    "tanh_backward": "tanh_backward",
}.items():
    builtin(f"aten::{_aten}", (f"{_op}_kernel",), f"{_EW}; same shapes")(_grad(_op))


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


@builtin("aten::where", ("where_kernel",), f"{_EW}; condition, x, y of one shape")
def _where(run: Any, cond: Any, x: Any, y: Any) -> Any:
    if not all(isinstance(t, torch.Tensor) for t in (cond, x, y)):
        raise Guard("scalar operand")
    _float(x, y)
    shape = torch.broadcast_shapes(cond.shape, x.shape, y.shape)
    c2, x2, y2 = (_rows(t.expand(shape)) for t in (cond, x, y))
    return run(K.where_kernel, c2.to(torch.uint8), x2, y2).reshape(shape)


@builtin("aten::masked_fill", ("where_kernel",), f"{_EW}; scalar fill value")
def _masked_fill(run: Any, x: Any, mask: Any, value: Any) -> Any:
    if not _is_scalar(value):
        raise Guard("tensor fill value")
    _float(x)
    m2 = _rows(mask.expand(x.shape)).to(torch.uint8)
    fill = torch.full_like(_rows(x), float(value))
    return run(K.where_kernel, m2, fill, _rows(x)).reshape(x.shape)


_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


@builtin("aten::_to_copy", ("cast_kernel",), f"{_EW}; a float dtype change on the CPU device")
def _to_copy(run: Any, x: Any, *, dtype: Any = None, device: Any = None, **kw: Any) -> Any:
    _float(x)
    if dtype not in _DTYPE_NAMES or (device is not None and torch.device(device).type != "cpu"):
        raise Guard(f"dtype {dtype}, device {device}")
    if kw.get("memory_format") not in (None, torch.preserve_format, torch.contiguous_format):
        raise Guard(f"memory_format {kw['memory_format']}")
    return run(K.cast_kernel, _rows(x), dtype=_DTYPE_NAMES[dtype]).reshape(x.shape)


# ---- reductions, softmax ----------------------------------------------------------------------


def _reduce(kernel_name: str) -> Any:
    def adapter(run: Any, x: Any, dim: Any = None, keepdim: bool = False, **kw: Any) -> Any:
        if kw.get("dtype") is not None:
            raise Guard("dtype=")
        _float(x)
        dims = [dim] if isinstance(dim, int) else list(dim or [])
        nd = x.dim()
        norm = sorted(d % nd for d in dims)
        if kernel_name == "sum_kernel" and nd >= 2 and norm == list(range(nd - 1)):
            s = run(K.sum_rows_kernel, _rows(x))  # bias-gradient form: all dims but the last
            return s.reshape((1,) * (nd - 1) + (x.shape[-1],)) if keepdim else s.reshape(-1)
        _last_dim(x, dim)
        s = run(getattr(K, kernel_name), _rows(x))
        return s.reshape(x.shape[:-1] + (1,)) if keepdim else s.reshape(x.shape[:-1])

    return adapter


builtin("aten::sum", ("sum_kernel", "sum_rows_kernel"), f"{_EW}; last dim or all leading dims")(
    _reduce("sum_kernel")
)
builtin("aten::mean", ("mean_kernel",), f"{_EW}; last dim")(_reduce("mean_kernel"))
builtin("aten::amax", ("amax_kernel",), f"{_EW}; last dim")(_reduce("amax_kernel"))


@builtin("aten::cumsum", ("cumsum_kernel",), f"{_FLOAT_DOC}; last dim <= 512")
def _cumsum(run: Any, x: Any, dim: int, *, dtype: Any = None) -> Any:
    _float(x)
    _last_dim(x, dim)
    if dtype is not None and dtype != x.dtype:
        raise Guard("dtype=")
    return run(K.cumsum_kernel, _rows(x, 512)).reshape(x.shape)


def _softmax(kernel: Any) -> Any:
    def adapter(run: Any, x: Any, dim: int, half_to_float: bool) -> Any:
        _float(x)
        _last_dim(x, dim)
        if half_to_float:
            raise Guard("half_to_float")
        return run(kernel, _rows(x)).reshape(x.shape)

    return adapter


def _softmax_bwd(kernel: Any) -> Any:
    def adapter(run: Any, g: Any, y: Any, dim: int, input_dtype: Any) -> Any:
        _float(g, y)
        _last_dim(g, dim)
        return run(kernel, _rows(g), _rows(y)).reshape(g.shape)

    return adapter


builtin("aten::_softmax", ("softmax_kernel",), f"{_EW}; last dim")(_softmax(K.softmax_kernel))
builtin("aten::_log_softmax", ("log_softmax_kernel",), f"{_EW}; last dim")(
    _softmax(K.log_softmax_kernel)
)
builtin("aten::_softmax_backward_data", ("softmax_backward_kernel",), f"{_EW}; last dim")(
    _softmax_bwd(K.softmax_backward_kernel)
)
builtin("aten::_log_softmax_backward_data", ("log_softmax_backward_kernel",), f"{_EW}; last dim")(
    _softmax_bwd(K.log_softmax_backward_kernel)
)


# ---- norms ------------------------------------------------------------------------------------


def _norm_params(x: Any, shape: Any, w: Any, b: Any) -> tuple[Any, Any]:
    if len(shape) != 1:
        raise Guard("normalized over more than the last dim")
    d = x.shape[-1]
    w = torch.ones(d, dtype=x.dtype) if w is None else w
    b = torch.zeros(d, dtype=x.dtype) if b is None else b
    _float(x, w, b)
    return w.reshape(1, d).contiguous(), b.reshape(1, d).contiguous()


@builtin("aten::native_layer_norm", ("layer_norm_kernel",), f"{_EW}; last dim")
def _layer_norm(run: Any, x: Any, shape: Any, w: Any, b: Any, eps: float) -> Any:
    w2, b2 = _norm_params(x, shape, w, b)
    y, mean, rstd = run(K.layer_norm_kernel, _rows(x), w2, b2, eps=float(eps))
    stat = x.shape[:-1] + (1,)
    return y.reshape(x.shape), mean.to(x.dtype).reshape(stat), rstd.to(x.dtype).reshape(stat)


@builtin(
    "aten::native_layer_norm_backward", ("layer_norm_backward_kernel",), f"{_EW}; last dim <= 512"
)
def _layer_norm_bwd(
    run: Any, g: Any, x: Any, shape: Any, mean: Any, rstd: Any, w: Any, b: Any, mask: Any
) -> Any:
    w2, _ = _norm_params(x, shape, w, b)
    _float(g)
    dx, dw, db = run(
        K.layer_norm_backward_kernel,
        _rows(g, 512),
        _rows(x, 512),
        mean.reshape(-1, 1).float().contiguous(),
        rstd.reshape(-1, 1).float().contiguous(),
        w2,
    )
    d = x.shape[-1]
    return (
        dx.reshape(x.shape) if mask[0] else None,
        dw.reshape(d) if mask[1] and w is not None else None,
        db.reshape(d) if mask[2] and b is not None else None,
    )


# ---- embedding --------------------------------------------------------------------------------


def _indices(idx: Any, v: int) -> Any:
    if idx.dtype not in (torch.int64, torch.int32) or v >= 2**31:
        raise Guard(f"index dtype {idx.dtype}")
    return idx.reshape(-1, 1).to(torch.int32).contiguous()


@builtin("aten::embedding", ("embedding_kernel",), f"{_EW}; int32/int64 indices")
def _embedding(run: Any, w: Any, idx: Any, padding_idx: int = -1, *rest: Any) -> Any:
    _float(w)
    if w.shape[1] > FREE_MAX:
        raise Guard(f"embedding dim {w.shape[1]} > {FREE_MAX}")
    out = run(K.embedding_kernel, w.contiguous(), _indices(idx, w.shape[0]))
    return out.reshape(tuple(idx.shape) + (w.shape[1],))


@builtin(
    "aten::embedding_dense_backward",
    ("embedding_backward_kernel",),
    f"{_FLOAT_DOC}; no padding_idx, no scale_grad_by_freq",
)
def _embedding_bwd(run: Any, g: Any, idx: Any, num: int, padding_idx: int, scale: bool) -> Any:
    _float(g)
    if padding_idx >= 0 or scale:
        raise Guard("padding_idx or scale_grad_by_freq")
    d = g.shape[-1]
    return run(
        K.embedding_backward_kernel,
        g.contiguous().reshape(-1, d),
        _indices(idx, num),
        num_weights=int(num),
    )
