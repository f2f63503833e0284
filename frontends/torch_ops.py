"""Built-in ATen op -> NKI kernel adapters of the ``"nki"`` torch.compile backend.

An adapter reshapes the op's tensors to the 2-D (rows, last dim) form the kernels of
:mod:`nki.kernels` take (a view for contiguous tensors), checks its guards (raising
``Guard(reason)``), launches the kernels through ``run`` and reshapes the result back."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

import nki.kernels as K
from nki.kernels._tiles import FREE_MAX

from .torch_backend import Guard, builtin

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


# ---- attention --------------------------------------------------------------------------------

_SDPA = f"{_FLOAT_DOC}; q, k, v (..., S, D) of one shape, D <= 128, no dropout, no attn_mask"


def _sdpa_guard(q: Any, k: Any, v: Any, dropout_p: float, attn_mask: Any) -> float:
    _float(q, k, v)
    if dropout_p != 0.0 or attn_mask is not None:
        raise Guard("dropout or attn_mask")
    if not (q.shape == k.shape == v.shape) or q.dim() < 2 or q.shape[-1] > 128:
        raise Guard(f"shapes q {tuple(q.shape)} k {tuple(k.shape)} v {tuple(v.shape)}")
    return q.shape[-1] ** -0.5


def _bhsd(t: Any) -> Any:
    return t.contiguous().reshape(-1, t.shape[-2], t.shape[-1])


@builtin("aten::_scaled_dot_product_flash_attention_for_cpu", ("attention_kernel",), _SDPA)
def _sdpa(
    run: Any,
    q: Any,
    k: Any,
    v: Any,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    attn_mask: Any = None,
    scale: Any = None,
) -> Any:
    default = _sdpa_guard(q, k, v, dropout_p, attn_mask)
    sc = float(default if scale is None else scale)
    out, lse = run(
        K.attention_kernel, _bhsd(q), _bhsd(k), _bhsd(v), scale=sc, causal=bool(is_causal)
    )
    return out.reshape(q.shape), lse.reshape(q.shape[:-1])


@builtin(
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    ("attention_backward_kernel",),
    _SDPA,
)
def _sdpa_bwd(
    run: Any,
    g: Any,
    q: Any,
    k: Any,
    v: Any,
    out: Any,
    lse: Any,
    dropout_p: float,
    is_causal: bool,
    *,
    attn_mask: Any = None,
    scale: Any = None,
) -> Any:
    default = _sdpa_guard(q, k, v, dropout_p, attn_mask)
    _float(g, out)
    sc = float(default if scale is None else scale)
    lse3 = lse.float().contiguous().reshape(-1, q.shape[-2], 1)
    dq, dk, dv = run(
        K.attention_backward_kernel,
        _bhsd(g),
        _bhsd(q),
        _bhsd(k),
        _bhsd(v),
        _bhsd(out),
        lse3,
        scale=sc,
        causal=bool(is_causal),
    )
    return dq.reshape(q.shape), dk.reshape(q.shape), dv.reshape(q.shape)


# ---- convolution, pooling ---------------------------------------------------------------------


def _pair(v: Any) -> tuple:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return tuple(v * 2 if len(v) == 1 else v)


@builtin(
    "aten::convolution",
    ("conv2d_kernel",),
    f"{_FLOAT_DOC}; 2-D NCHW, square stride and padding, no dilation/groups, OW <= 512",
)
def _convolution(
    run: Any,
    x: Any,
    w: Any,
    b: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: int,
) -> Any:
    if b is None:
        b = torch.zeros(w.shape[0], dtype=w.dtype)
    _float(x, w, b)
    (sh, sw), (ph, pw) = _pair(stride), _pair(padding)
    if x.dim() != 4 or transposed or groups != 1 or set(_pair(dilation)) != {1}:
        raise Guard("not a plain 2-D convolution")
    if sh != sw or ph != pw:
        raise Guard(f"stride {(sh, sw)} / padding {(ph, pw)} differ per axis")
    if (x.shape[3] + 2 * pw - w.shape[3]) // sw + 1 > 512:
        raise Guard("output width > 512")
    return run(
        K.conv2d_kernel,
        x.contiguous(),
        w.contiguous(),
        b.reshape(-1, 1).contiguous(),
        stride=int(sh),
        padding=int(ph),
    )


def _pool_size(h: int, w: int, k: int, s: int, p: int) -> None:
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    if oh * ow > 4096:
        raise Guard(f"output plane {oh}x{ow} > 4096 elements")


@builtin(
    "aten::avg_pool2d",
    ("avg_pool2d_kernel",),
    f"{_FLOAT_DOC}; square window, stride and padding, count_include_pad, no ceil_mode, "
    "output planes <= 4096 elements",
)
def _avg_pool2d(
    run: Any,
    x: Any,
    kernel: Any,
    stride: Any = (),
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: Any = None,
) -> Any:
    _float(x)
    (kh, kw), (ph, pw) = _pair(kernel), _pair(padding)
    sh, sw = _pair(stride) if stride else (kh, kw)
    if kh != kw or sh != sw or ph != pw or ceil_mode or not count_include_pad:
        raise Guard("non-square window/stride/padding, ceil_mode or count_include_pad=False")
    if divisor_override is not None or x.dim() != 4:
        raise Guard("divisor_override or not NCHW")
    n, c, h, wd = x.shape
    _pool_size(h, wd, kh, sh, ph)
    out = run(
        K.avg_pool2d_kernel,
        x.contiguous().reshape(n * c, h, wd),
        kernel=int(kh),
        stride=int(sh),
        padding=int(ph),
    )
    return out.reshape(n, c, out.shape[1], out.shape[2])


# ---- fused rms_norm ---------------------------------------------------------------------------
# torch.rms_norm is decomposed before aot_autograd sees it (pow, mean, rsqrt, mul). The backend
# rewrites it in the captured graph into these custom ops, whose forward and backward run the
# fused kernels (their CPU implementations below are the fallback when a guard fails).


@torch.library.custom_op("nki::rms_norm", mutates_args=())
def rms_norm_op(x: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * rstd * w.float()).to(x.dtype), rstd


@rms_norm_op.register_fake
def _(x: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), x.new_empty(x.shape[:-1] + (1,), dtype=torch.float32)


@torch.library.custom_op("nki::rms_norm_backward", mutates_args=())
def rms_norm_backward_op(
    g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    gf, xf, wf = g.float(), x.float(), w.float()
    xhat = xf * rstd
    gw = gf * wf
    dx = rstd * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))
    dw = (gf * xhat).reshape(-1, x.shape[-1]).sum(0)
    return dx.to(x.dtype), dw.to(w.dtype)


@rms_norm_backward_op.register_fake
def _(g: Any, x: Any, w: Any, rstd: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(w)


def _rms_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    x, w, _ = inputs
    ctx.save_for_backward(x, w, output[1])


def _rms_backward(ctx: Any, g: torch.Tensor, _g_rstd: Any) -> tuple:
    x, w, rstd = ctx.saved_tensors
    dx, dw = rms_norm_backward_op(g.contiguous(), x, w, rstd)
    return dx, dw, None


rms_norm_op.register_autograd(_rms_backward, setup_context=_rms_setup)


def fused_rms_norm(x: torch.Tensor, shape: Any, w: Any = None, eps: Any = None) -> torch.Tensor:
    """torch.rms_norm over the last dim with a weight, as the nki::rms_norm custom op."""
    e = torch.finfo(x.dtype).eps if eps is None else float(eps)
    return rms_norm_op(x, w, e)[0]


def rewrite_rms_norm(gm: torch.fx.GraphModule) -> None:
    """Replace torch.rms_norm calls over the last dim with a weight by :func:`fused_rms_norm`
    in a Dynamo graph (before aot_autograd decomposes them)."""
    changed = False
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target not in (torch.rms_norm, F.rms_norm):
            continue
        args = list(n.args) + [None] * (4 - len(n.args))
        shape = n.kwargs.get("normalized_shape", args[1])
        w = n.kwargs.get("weight", args[2])
        eps = n.kwargs.get("eps", args[3])
        if w is None or not isinstance(shape, (list, tuple)) or len(shape) != 1:
            continue
        n.target = fused_rms_norm
        n.args, n.kwargs = (args[0], tuple(shape), w, eps), {}
        changed = True
    if changed:
        gm.recompile()


_RMS = f"{_FLOAT_DOC}; weight given; last dim <= {FREE_MAX} (backward <= 512)"


@builtin("nki::rms_norm", ("rms_norm_kernel",), _RMS)
def _nki_rms_norm(run: Any, x: Any, w: Any, eps: float) -> Any:
    _float(x, w)
    d = x.shape[-1]
    y, rstd = run(K.rms_norm_kernel, _rows(x), w.reshape(1, d).contiguous(), eps=float(eps))
    return y.reshape(x.shape), rstd.reshape(x.shape[:-1] + (1,))


@builtin("nki::rms_norm_backward", ("rms_norm_backward_kernel",), _RMS)
def _nki_rms_norm_bwd(run: Any, g: Any, x: Any, w: Any, rstd: Any) -> Any:
    _float(g, x, w)
    d = x.shape[-1]
    dx, dw = run(
        K.rms_norm_backward_kernel,
        _rows(g, 512),
        _rows(x, 512),
        w.reshape(1, d).contiguous(),
        rstd.float().reshape(-1, 1).contiguous(),
    )
    return dx.reshape(x.shape), dw.reshape(d)


@builtin(
    "aten::max_pool2d_with_indices",
    ("max_pool2d_indices_kernel",),
    f"{_FLOAT_DOC}; square window, stride and padding, no dilation, no ceil_mode, "
    "output planes <= 4096 elements",
)
def _max_pool2d(
    run: Any,
    x: Any,
    kernel: Any,
    stride: Any = (),
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
) -> Any:
    _float(x)
    (kh, kw), (ph, pw) = _pair(kernel), _pair(padding)
    sh, sw = _pair(stride) if stride else (kh, kw)
    if kh != kw or sh != sw or ph != pw or ceil_mode or set(_pair(dilation)) != {1}:
        raise Guard("non-square window/stride/padding, dilation or ceil_mode")
    if x.dim() != 4 or x.shape[2] * x.shape[3] >= 2**24:
        raise Guard("not NCHW or planes of 2**24 elements or more")
    n, c, h, wd = x.shape
    _pool_size(h, wd, kh, sh, ph)
    if ph > kh // 2:
        raise Guard(f"padding {ph} > kernel // 2")
    out, idx = run(
        K.max_pool2d_indices_kernel,
        x.contiguous().reshape(n * c, h, wd),
        kernel=int(kh),
        stride=int(sh),
        padding=int(ph),
    )
    shape = (n, c, out.shape[1], out.shape[2])
    return out.reshape(shape), idx.to(torch.int64).reshape(shape)


@builtin(
    "aten::convolution_backward",
    ("conv2d_input_grad_kernel", "conv2d_weight_grad_kernel", "sum_kernel"),
    f"{_FLOAT_DOC}; as aten::convolution, and H <= 64, OW <= 128, Co <= 128, Ci <= 512",
)
def _convolution_bwd(
    run: Any,
    g: Any,
    x: Any,
    w: Any,
    bias_sizes: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: int,
    mask: Any,
) -> Any:
    _float(g, x, w)
    (sh, sw), (ph, pw) = _pair(stride), _pair(padding)
    if x.dim() != 4 or transposed or groups != 1 or set(_pair(dilation)) != {1}:
        raise Guard("not a plain 2-D convolution")
    if sh != sw or ph != pw:
        raise Guard(f"stride {(sh, sw)} / padding {(ph, pw)} differ per axis")
    n, ci, h, wd = x.shape
    co, _, kh, kw = w.shape
    if h > 64 or g.shape[3] > 128 or co > 128 or ci > 512:
        raise Guard(f"input {tuple(x.shape)}, weight {tuple(w.shape)} beyond the kernels' limits")
    g = g.contiguous()
    gx = gw = gb = None
    if mask[0]:
        gx = run(K.conv2d_input_grad_kernel, g, w.contiguous(), h=h, wd=wd, stride=sh, padding=ph)
    if mask[1]:
        gw = run(
            K.conv2d_weight_grad_kernel, g, x.contiguous(), kh=kh, kw=kw, stride=sh, padding=ph
        )
    if mask[2]:
        per_channel = g.transpose(0, 1).reshape(co, -1)  # (Co, N*OH*OW), a layout copy
        if per_channel.shape[1] > FREE_MAX:
            raise Guard(f"bias gradient over {per_channel.shape[1]} > {FREE_MAX} positions")
        gb = run(K.sum_kernel, per_channel.contiguous()).reshape(co)
    return gx, gw, gb


def _pool_bwd_args(x: Any, kernel: Any, stride: Any, padding: Any) -> tuple[int, int, int]:
    (kh, kw), (ph, pw) = _pair(kernel), _pair(padding)
    sh, sw = _pair(stride) if stride else (kh, kw)
    if kh != kw or sh != sw or ph != pw or x.dim() != 4:
        raise Guard("non-square window/stride/padding or not NCHW")
    if x.shape[2] > 64 or x.shape[3] > FREE_MAX:
        raise Guard(f"input plane {tuple(x.shape[2:])}: rows > 64 or columns > {FREE_MAX}")
    return int(kh), int(sh), int(ph)


@builtin(
    "aten::max_pool2d_with_indices_backward",
    ("max_pool2d_backward_kernel",),
    f"{_FLOAT_DOC}; as the forward, and H <= 64",
)
def _max_pool2d_bwd(
    run: Any,
    g: Any,
    x: Any,
    kernel: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    ceil_mode: bool,
    idx: Any,
) -> Any:
    _float(g, x)
    k, s, p = _pool_bwd_args(x, kernel, stride, padding)
    if ceil_mode or set(_pair(dilation)) != {1}:
        raise Guard("dilation or ceil_mode")
    n, c, h, wd = x.shape
    gm = g.contiguous().reshape(n * c, g.shape[2], g.shape[3])
    im = idx.to(torch.int32).contiguous().reshape(gm.shape)
    out = run(K.max_pool2d_backward_kernel, gm, im, h=h, wd=wd, kernel=k, stride=s, padding=p)
    return out.reshape(x.shape)


@builtin(
    "aten::avg_pool2d_backward",
    ("avg_pool2d_backward_kernel",),
    f"{_FLOAT_DOC}; as the forward, and H <= 64",
)
def _avg_pool2d_bwd(
    run: Any,
    g: Any,
    x: Any,
    kernel: Any,
    stride: Any,
    padding: Any,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: Any,
) -> Any:
    _float(g, x)
    k, s, p = _pool_bwd_args(x, kernel, stride, padding)
    if ceil_mode or not count_include_pad or divisor_override is not None:
        raise Guard("ceil_mode, count_include_pad=False or divisor_override")
    n, c, h, wd = x.shape
    gm = g.contiguous().reshape(n * c, g.shape[2], g.shape[3])
    out = run(K.avg_pool2d_backward_kernel, gm, h=h, wd=wd, kernel=k, stride=s, padding=p)
    return out.reshape(x.shape)
