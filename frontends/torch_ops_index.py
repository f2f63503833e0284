"""Factory, shape-building, index, loss and batch-norm ATen op -> NKI kernel adapters of the
``"nki"`` torch.compile backend: arange / full / zeros / ones, cat, constant padding, tril /
triu, gather / index_select / index / index_put / scatter, topk / max / argmax, nll_loss,
batch norm and dropout without randomness (p = 0 or eval), forward and backward.

Index ops gather rows through :func:`nki.kernels.embedding_kernel` (an indirect DMA) after
:func:`nki.kernels.flat_index_kernel` turns the op's indices into flat row numbers; scatters
accumulate through the one-hot matmul of ``embedding_backward_kernel``. Results of factories
come back on the device the op asks for."""

from __future__ import annotations

import math
from typing import Any

import torch

import nki.kernels as K
from nki.kernels._tiles import FREE_MAX

from .torch_ops import _DTYPE_NAMES, _FLOAT_DOC, FLOATS, INTS, _float, _operand, _rows
from .torch_ops_elementwise import _binary_call, _compare_call, _where
from .torch_registry import Guard, builtin

_ANY = f"float32 / bfloat16 / float16 / int32 / int64 / bool, rows of <= {FREE_MAX}"


def _on(t: torch.Tensor, device: Any) -> torch.Tensor:
    """A kernel result (on the host) on the device the op asked for."""
    return t if device is None or torch.device(device).type == "cpu" else t.to(device)


def _fill(run: Any, shape: Any, value: Any, dtype: Any, device: Any = None) -> Any:
    shape = tuple(int(s) for s in shape)
    n = math.prod(shape)
    if dtype not in _DTYPE_NAMES or n == 0:
        raise Guard(f"dtype {dtype}, {n} elements")
    d = shape[-1] if shape and shape[-1] <= FREE_MAX else 1
    if isinstance(value, torch.Tensor):
        value = value.item()
    out = run(K.fill_kernel, n=n // d, d=d, value=value, dtype=_DTYPE_NAMES[dtype])
    if dtype == torch.bool:
        out = out.view(torch.bool)
    return _on(out.reshape(shape), device)


_FACTORY = "float32 / bfloat16 / float16 / int32 / int64 / bool; on any device"


@builtin("aten::full", ("fill_kernel",), _FACTORY)
def _full(run: Any, size: Any, value: Any, *, dtype: Any = None, device: Any = None, **_: Any):
    dtype = dtype or torch.tensor(value).dtype  # bool, int64, or the default float dtype
    return _fill(run, size, value, dtype, device)


def _factory(value: float) -> Any:
    def adapter(run: Any, size: Any, *, dtype: Any = None, device: Any = None, **_: Any) -> Any:
        return _fill(run, size, value, dtype or torch.get_default_dtype(), device)

    return adapter


builtin("aten::zeros", ("fill_kernel",), _FACTORY)(_factory(0.0))
builtin("aten::ones", ("fill_kernel",), _FACTORY)(_factory(1.0))


@builtin("aten::scalar_tensor", ("fill_kernel",), _FACTORY)
def _scalar_tensor(run: Any, s: Any, *, dtype: Any = None, device: Any = None, **_: Any) -> Any:
    return _fill(run, (), s, dtype or torch.get_default_dtype(), device)


def _new(value: Any) -> Any:
    def adapter(run: Any, x: Any, size: Any, *rest: Any, dtype: Any = None, **kw: Any) -> Any:
        v = rest[0] if value is None else value
        return _fill(run, size, v, dtype or x.dtype, kw.get("device") or x.device)

    return adapter


builtin("aten::new_zeros", ("fill_kernel",), _FACTORY)(_new(0.0))
builtin("aten::new_ones", ("fill_kernel",), _FACTORY)(_new(1.0))
builtin("aten::new_full", ("fill_kernel",), _FACTORY)(_new(None))


def _like(value: Any) -> Any:
    def adapter(run: Any, x: Any, *rest: Any, dtype: Any = None, **kw: Any) -> Any:
        v = rest[0] if value is None else value
        return _fill(run, x.shape, v, dtype or x.dtype, kw.get("device") or x.device)

    return adapter


builtin("aten::zeros_like", ("fill_kernel",), _FACTORY)(_like(0.0))
builtin("aten::ones_like", ("fill_kernel",), _FACTORY)(_like(1.0))
builtin("aten::full_like", ("fill_kernel",), _FACTORY)(_like(None))


@builtin("aten::arange", ("arange_kernel",), f"{_FACTORY}; int32-range values")
def _arange(run: Any, *nums: Any, dtype: Any = None, device: Any = None, **_: Any) -> Any:
    if len(nums) == 1:
        start, end, step = 0, nums[0], 1
    else:
        start, end, step = nums[0], nums[1], nums[2] if len(nums) == 3 else 1
    if dtype is None:
        floats = any(isinstance(v, float) for v in (start, end, step))
        dtype = torch.get_default_dtype() if floats else torch.int64
    n = math.ceil((end - start) / step)
    if dtype not in _DTYPE_NAMES or dtype == torch.bool or n <= 0 or abs(end) >= 2**31:
        raise Guard(f"dtype {dtype}, {n} values up to {end}")
    out = run(K.arange_kernel, n=n, start=start, step=step, dtype=_DTYPE_NAMES[dtype])
    return _on(out.reshape(n), device)


# ---- shapes: cat, pad, tril -------------------------------------------------------------------


@builtin("aten::cat", ("cat_kernel",), f"{_ANY}; one dtype")
def _cat(run: Any, tensors: Any, dim: int = 0) -> Any:
    ts = [t for t in tensors if not (t.dim() == 1 and t.numel() == 0)]
    if not ts or len({t.dtype for t in ts}) > 1 or len({t.device for t in ts}) > 1:
        raise Guard("no tensors, or mixed dtypes or devices")
    d = dim % ts[0].dim()
    outer = math.prod(ts[0].shape[:d])
    parts = [_operand(t).contiguous().reshape(outer, -1) for t in ts]
    if any(p.shape[1] > FREE_MAX or p.numel() == 0 for p in parts):
        raise Guard(f"slices wider than {FREE_MAX} or empty")
    out = run(K.cat_kernel, parts)
    shape = list(ts[0].shape)
    shape[d] = sum(t.shape[d] for t in ts)
    out = out.reshape(shape)
    return out.view(torch.bool) if ts[0].dtype == torch.bool else out


@builtin("aten::constant_pad_nd", ("pad_kernel",), f"{_ANY}; the last dim, no negative pads")
def _pad(run: Any, x: Any, pad: Any, value: Any = 0) -> Any:
    pad = list(pad)
    if len(pad) < 2 or any(pad[2:]) or min(pad[:2]) < 0 or x.dim() == 0:
        raise Guard(f"pad {pad}")
    left, right = int(pad[0]), int(pad[1])
    if x.shape[-1] + left + right > FREE_MAX or x.numel() == 0:
        raise Guard(f"padded width {x.shape[-1] + left + right}")
    out = run(K.pad_kernel, _rows(_operand(x)), left=left, right=right, value=value)
    return out.reshape(*x.shape[:-1], x.shape[-1] + left + right)


def _tri(upper: bool) -> Any:
    def adapter(run: Any, x: Any, diagonal: int = 0) -> Any:
        if x.dim() < 2 or x.numel() == 0 or x.shape[-1] > FREE_MAX:
            raise Guard(f"shape {tuple(x.shape)}")
        x3 = _operand(x).contiguous().reshape(-1, x.shape[-2], x.shape[-1])
        out = run(K.tril_kernel, x3, diagonal=int(diagonal), upper=upper).reshape(x.shape)
        return out.view(torch.bool) if x.dtype == torch.bool else out

    return adapter


builtin("aten::tril", ("tril_kernel",), f"{_ANY}")(_tri(False))
builtin("aten::triu", ("tril_kernel",), f"{_ANY}")(_tri(True))


# ---- gathers and scatters ---------------------------------------------------------------------


def _int_index(idx: Any) -> torch.Tensor:
    if not isinstance(idx, torch.Tensor) or idx.dtype not in INTS:
        raise Guard("index not an integer tensor")
    return _operand(idx)


def _gather_rows(run: Any, table: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
    """Rows flat[n] of the (M, W) table: (N, W)."""
    if table.shape[1] > FREE_MAX:
        raise Guard(f"rows of {table.shape[1]} > {FREE_MAX} elements")
    res = run(K.embedding_kernel, _operand(table).contiguous(), flat.reshape(-1, 1))
    return res.view(torch.bool) if table.dtype == torch.bool else res


def _select(run: Any, x: Any, dim: int, idx: torch.Tensor) -> torch.Tensor:
    """x indexed along dim by the integer tensor idx (any shape; negative indices wrap)."""
    d = dim % x.dim()
    a, s = math.prod(x.shape[:d]), x.shape[d]
    ii = _int_index(idx).reshape(1, -1)
    if ii.shape[1] == 0 or ii.shape[1] > FREE_MAX:
        raise Guard(f"{ii.shape[1]} indices")
    flat = run(K.flat_index_kernel, ii, rows=a, stride=s, size=s)
    out = _gather_rows(run, x.contiguous().reshape(a * s, -1), flat)
    return out.reshape(*x.shape[:d], *idx.shape, *x.shape[d + 1 :])


_GATHER = f"{_ANY}; integer indices"


@builtin("aten::index_select", ("flat_index_kernel", "embedding_kernel"), _GATHER)
def _index_select(run: Any, x: Any, dim: int, idx: Any) -> Any:
    return _select(run, x, dim, idx)


@builtin("aten::index", ("flat_index_kernel", "embedding_kernel"), f"{_GATHER}; one index tensor")
def _index(run: Any, x: Any, indices: Any) -> Any:
    tensors = [(d, t) for d, t in enumerate(indices) if t is not None]
    if len(tensors) != 1:
        raise Guard(f"{len(tensors)} index tensors")
    return _select(run, x, tensors[0][0], tensors[0][1])


@builtin("aten::gather", ("flat_index_kernel", "embedding_kernel"), _GATHER)
def _gather(run: Any, x: Any, dim: int, idx: Any, *, sparse_grad: bool = False) -> Any:
    d = dim % x.dim()
    xm, im = x.movedim(d, -1), idx.movedim(d, -1)
    if tuple(xm.shape[:-1]) != tuple(im.shape[:-1]) or im.numel() == 0:
        raise Guard(f"index shape {tuple(idx.shape)} for input {tuple(x.shape)}")
    dx = xm.shape[-1]
    flat = run(K.flat_index_kernel, _rows(_int_index(im)), stride=dx, size=dx)
    out = _gather_rows(run, xm.contiguous().reshape(-1, 1), flat)
    return out.reshape(im.shape).movedim(-1, d)


def _scatter_add_rows(run: Any, src: torch.Tensor, flat: torch.Tensor, rows: int) -> Any:
    """(rows, W) sums of the rows of src (N, W) into rows flat[n]."""
    _float(src)
    return run(K.embedding_backward_kernel, src.contiguous(), flat.reshape(-1, 1), num_weights=rows)


@builtin(
    "aten::index_put",
    ("embedding_backward_kernel", "add_kernel"),
    f"{_FLOAT_DOC}; one index tensor on dim 0, accumulate=True",
)
def _index_put(run: Any, x: Any, indices: Any, values: Any, accumulate: bool = False) -> Any:
    if not accumulate or len(indices) != 1 or indices[0] is None:
        raise Guard("not an accumulating index_put on dim 0")
    idx = _int_index(indices[0]).reshape(-1)
    v = values.expand(*indices[0].shape, *x.shape[1:]).reshape(idx.numel(), -1)
    x2 = x.reshape(x.shape[0], -1)
    flat = run(K.flat_index_kernel, idx.reshape(1, -1), rows=1, stride=0, size=x.shape[0])
    summed = _scatter_add_rows(run, v.to(x.dtype) if v.dtype != x.dtype else v, flat, x.shape[0])
    return _binary_call(run, "add", x2, summed, True).reshape(x.shape)


@builtin(
    "aten::index_copy",
    ("flat_index_kernel", "embedding_backward_kernel", "fill_kernel", "where_kernel"),
    f"{_FLOAT_DOC}; distinct indices, slices of <= {FREE_MAX} elements",
)
def _index_copy(run: Any, x: Any, dim: int, idx: Any, src: Any) -> Any:
    _float(x)
    d = dim % x.dim()
    a, s = math.prod(x.shape[:d]), x.shape[d]
    ii = _int_index(idx).reshape(1, -1)
    n = ii.shape[1]
    if n == 0 or x.numel() // max(a * s, 1) > FREE_MAX or src.dtype != x.dtype:
        raise Guard(f"{n} indices, slices of {x.numel() // max(a * s, 1)}, dtype {src.dtype}")
    flat = run(K.flat_index_kernel, ii, rows=a, stride=s, size=s)
    rows = src.contiguous().reshape(a * n, -1)
    vals = _scatter_add_rows(run, rows, flat, a * s)
    ones = run(K.fill_kernel, n=a * n, d=1, value=1.0, dtype="float32")
    hit = _compare_call(run, "gt", _scatter_add_rows(run, ones, flat, a * s), 0.0)
    out = run(K.where_kernel, _operand(hit), vals, x.contiguous().reshape(a * s, -1))
    return out.reshape(x.shape)


@builtin(
    "aten::scatter",
    ("flat_index_kernel", "embedding_backward_kernel", "where_kernel"),
    f"{_FLOAT_DOC}; at most 65536 elements, distinct indices per row",
)
def _scatter(run: Any, x: Any, dim: int, idx: Any, src: Any, *, reduce: Any = None) -> Any:
    _float(x)
    d = dim % x.dim()
    if reduce is not None or x.numel() > 65536:
        raise Guard(f"reduce={reduce} or {x.numel()} elements")
    xm, im = x.movedim(d, -1), idx.movedim(d, -1)
    if not isinstance(src, torch.Tensor):
        src = torch.full((1,), float(src), dtype=x.dtype).expand(im.shape)
    sm = src.movedim(d, -1) if src.dim() == x.dim() else src
    if tuple(sm.shape) != tuple(im.shape) or tuple(xm.shape[:-1]) != tuple(im.shape[:-1]):
        raise Guard(f"index {tuple(idx.shape)} / src {tuple(src.shape)} / self {tuple(x.shape)}")
    dx = xm.shape[-1]
    flat = run(K.flat_index_kernel, _rows(_int_index(im)), stride=dx, size=dx)
    n = xm.numel()
    vals = _scatter_add_rows(run, sm.to(x.dtype).reshape(-1, 1), flat, n)
    ones = run(K.fill_kernel, n=flat.numel(), d=1, value=1.0, dtype="float32")
    hits = _scatter_add_rows(run, ones, flat, n)
    hit = _compare_call(run, "gt", hits, 0.0)
    out = _where(run, hit, vals, xm.contiguous().reshape(-1, 1))
    return out.reshape(xm.shape).movedim(-1, d)


# ---- topk, max, argmax ------------------------------------------------------------------------

_TOPK = f"{_FLOAT_DOC} / int32 / int64; the last dim (<= {FREE_MAX}), k <= 8, largest"


def _topk_last(run: Any, x: Any, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    if x.dim() == 0 or x.shape[-1] > FREE_MAX or not 1 <= k <= min(8, x.shape[-1]):
        raise Guard(f"k {k} of {tuple(x.shape)}")
    if x.dtype not in FLOATS + INTS:
        raise Guard(f"dtype {x.dtype}")
    if x.dtype in FLOATS and bool(torch.isnan(x).any()):  # (torch ranks NaN above everything)
        raise Guard("NaN in the data")
    vals, idx = run(K.topk_kernel, _rows(_operand(x)), k=k)
    shape = (*x.shape[:-1], k)
    return vals.reshape(shape), idx.reshape(shape)


@builtin("aten::topk", ("topk_kernel",), _TOPK)
def _topk(run: Any, x: Any, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    if not largest or dim % max(x.dim(), 1) != x.dim() - 1:
        raise Guard(f"largest={largest}, dim {dim}")
    return _topk_last(run, x, int(k))


def _argmax_like(run: Any, x: Any, dim: Any, keepdim: bool) -> tuple[torch.Tensor, Any]:
    if dim is None:
        vals, idx = _topk_last(run, x.reshape(1, -1), 1)
        return vals.reshape(()), idx.reshape(())
    d = dim % x.dim()
    vals, idx = _topk_last(run, x.movedim(d, -1), 1)
    if keepdim:
        return vals.movedim(-1, d), idx.movedim(-1, d)
    return vals.squeeze(-1), idx.squeeze(-1)


@builtin("aten::max", ("topk_kernel",), f"{_TOPK}; max over a dim (values, indices) or all")
def _max(run: Any, x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    vals, idx = _argmax_like(run, x, dim, keepdim)
    return vals if dim is None else (vals, idx)


@builtin("aten::argmax", ("topk_kernel",), _TOPK)
def _argmax(run: Any, x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    return _argmax_like(run, x, dim, keepdim)[1]


# ---- nll_loss ---------------------------------------------------------------------------------

_NLL = f"{_FLOAT_DOC}; input (N, C) or (C,), C <= {FREE_MAX}, no class weights"


def _nll_args(x: Any, target: Any, weight: Any) -> tuple[torch.Tensor, torch.Tensor]:
    _float(x)
    if weight is not None or x.dim() not in (1, 2) or x.shape[-1] > FREE_MAX:
        raise Guard("class weights, or not (N, C) / (C,)")
    return x.reshape(-1, x.shape[-1]), _int_index(target).reshape(-1, 1)


@builtin("aten::nll_loss_forward", ("nll_loss_kernel",), _NLL)
def _nll(run: Any, x: Any, target: Any, weight: Any, reduction: int, ignore_index: int) -> Any:
    x2, t2 = _nll_args(x, target, weight)
    loss, total = run(
        K.nll_loss_kernel, x2, t2, reduction=int(reduction), ignore_index=int(ignore_index)
    )
    loss = loss.reshape(target.shape) if reduction == 0 else loss.reshape(())
    return loss, total.reshape(()).to(x.dtype)


@builtin("aten::nll_loss_backward", ("nll_loss_backward_kernel",), _NLL)
def _nll_bwd(
    run: Any,
    g: Any,
    x: Any,
    target: Any,
    weight: Any,
    reduction: int,
    ignore_index: int,
    total: Any,
) -> Any:
    x2, t2 = _nll_args(x, target, weight)
    _float(g)
    dx = run(
        K.nll_loss_backward_kernel,
        g.reshape(-1, 1).to(x.dtype).contiguous(),
        t2,
        total.float().reshape(1, 1),
        c=x2.shape[1],
        reduction=int(reduction),
        ignore_index=int(ignore_index),
    )
    return dx.reshape(x.shape)


# ---- batch norm, dropout ----------------------------------------------------------------------

_BN = f"{_FLOAT_DOC}; (N, C, ...) with affine weight and bias, training, <= {FREE_MAX} positions"


def _bn_input(x: Any, *params: Any) -> torch.Tensor:
    _float(x)
    if x.dim() < 2 or any(p is None for p in params):
        raise Guard("no affine weight / bias, or fewer than 2 dims")
    x3 = x.reshape(x.shape[0], x.shape[1], -1)
    if x3.shape[2] > FREE_MAX:
        raise Guard(f"{x3.shape[2]} positions per channel > {FREE_MAX}")
    return x3


def _col(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, 1).contiguous()


@builtin(
    "aten::_native_batch_norm_legit_functional", ("batch_norm_kernel",), _BN + "; running stats"
)
def _batch_norm(
    run: Any, x: Any, w: Any, b: Any, rm: Any, rv: Any, training: bool, momentum: float, eps: float
) -> Any:
    x3 = _bn_input(x, w, b, rm, rv)
    if not training:
        raise Guard("eval mode")
    y, mean, rstd, nrm, nrv = run(
        K.batch_norm_kernel,
        x3,
        _col(w),
        _col(b),
        _col(rm),
        _col(rv),
        momentum=float(momentum),
        eps=float(eps),
    )
    c = x.shape[1]
    return y.reshape(x.shape), mean.reshape(c), rstd.reshape(c), nrm.reshape(c), nrv.reshape(c)


@builtin(
    "aten::_native_batch_norm_legit_no_training",
    ("fused_elementwise_kernel",),
    f"{_FLOAT_DOC}; (N, C, ...) with affine weight and bias, eval mode",
)
def _batch_norm_eval(
    run: Any, x: Any, w: Any, b: Any, rm: Any, rv: Any, momentum: float, eps: float
) -> Any:
    x3 = _bn_input(x, w, b, rm, rv)
    if any(p.dtype not in FLOATS for p in (w, b, rm, rv)):
        raise Guard("parameters of a dtype the kernels do not take")
    n, c, _ = x3.shape
    # per channel: scale = w * rsqrt(var + eps), shift = b - mean * scale; each step rounds
    # to its first operand's dtype, as the separate kernels would
    rv_t, w_t, b_t, rm_t = (_DTYPE_NAMES[p.dtype] for p in (rv, w, b, rm))
    stats = (
        ("binary:add", (("in", 0), ("s", float(eps))), rv_t),
        ("unary:rsqrt", (("v", 0),), rv_t),
        ("binary:mul", (("in", 1), ("v", 1)), w_t),
        ("binary:mul", (("in", 3), ("v", 2)), rm_t),
        ("binary:sub", (("in", 2), ("v", 3)), b_t),
    )
    fused = K.fused_elementwise_kernel
    scale, shift = run(fused, [_row(p) for p in (rv, w, b, rm)], program=stats, outs=(2, 4))

    def per_row(v: torch.Tensor) -> torch.Tensor:  # (1, C) -> one value per (sample, channel)
        return v.expand(n, c).reshape(n * c, 1).contiguous()

    x_t = _DTYPE_NAMES[x.dtype]
    affine = (
        ("binary:mul", (("in", 0), ("in", 1)), x_t),
        ("binary:add", (("v", 0), ("in", 2)), x_t),
    )
    ins = [x3.contiguous().reshape(n * c, -1), per_row(scale), per_row(shift)]
    y = run(fused, ins, program=affine, outs=(1,))
    empty = x.new_empty(0)
    return y.reshape(x.shape), empty, empty


def _row(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(1, -1).contiguous()


@builtin("aten::native_batch_norm_backward", ("batch_norm_backward_kernel",), _BN)
def _batch_norm_bwd(
    run: Any,
    g: Any,
    x: Any,
    w: Any,
    rm: Any,
    rv: Any,
    mean: Any,
    rstd: Any,
    train: bool,
    eps: float,
    mask: Any,
) -> Any:
    x3 = _bn_input(x, w, mean, rstd)
    if not train:
        raise Guard("eval mode")
    _float(g)
    dx, dw, db = run(
        K.batch_norm_backward_kernel,
        g.reshape(x3.shape).contiguous(),
        x3,
        _col(w),
        _col(mean.float()),
        _col(rstd.float()),
    )
    c = x.shape[1]
    return (
        dx.reshape(x.shape) if mask[0] else None,
        dw.reshape(c) if mask[1] else None,
        db.reshape(c) if mask[2] else None,
    )


@builtin(
    "aten::native_dropout",
    ("copy_kernel", "fill_kernel"),
    f"{_FLOAT_DOC}; p = 0 or eval (a random mask cannot reproduce eager torch's)",
)
def _dropout(run: Any, x: Any, p: float, train: Any) -> Any:
    if train and p > 0:
        raise Guard(f"random mask (p={p} in training)")
    _float(x)
    out = run(K.EXACT_KERNELS["copy"], _rows(x)).reshape(x.shape)
    return out, _fill(run, x.shape, True, torch.bool, x.device)


@builtin("aten::native_dropout_backward", ("mul_scalar_kernel", "where_kernel"), _FLOAT_DOC)
def _dropout_bwd(run: Any, g: Any, mask: Any, scale: float) -> Any:
    scaled = _binary_call(run, "mul", g, float(scale), True)
    return _where(run, mask, scaled, 0.0)
