"""Built-in ATen op -> NKI kernel adapters of the ``"nki"`` torch.compile backend for the
neural-network ops: attention, convolution and pooling (forward and backward), and the fused
rms_norm custom ops the backend substitutes for ``torch.rms_norm``. The shared helpers and the
elementary ops are in :mod:`frontends.torch_ops`."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

import nki.kernels as K
from nki.kernels._tiles import FREE_MAX

from .torch_ops import _FLOAT_DOC, _float, _rows
from .torch_registry import Guard, builtin

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
    if x.dim() != 4 or transposed or groups != 1 or set(_pair(dilation)) != {1}:
        raise Guard("not a plain 2-D convolution")  # (before reading 2-D stride / padding)
    (sh, sw), (ph, pw) = _pair(stride), _pair(padding)
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
