"""Built-in ATen op -> NKI kernel adapters of the ``"nki"`` torch.compile backend.

An adapter reshapes the op's tensors to the 2-D (rows, last dim) form the kernels of
:mod:`nki.kernels` take (a view for contiguous tensors), checks its guards (raising
``Guard(reason)``), launches the kernels through ``run`` and reshapes the result back."""

from __future__ import annotations

import math
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


_EW = f"{_FLOAT_DOC}, last dim <= {FREE_MAX}"
INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
_DTYPE_NAMES = {
    torch.float32: "float32",
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.int32: "int32",
    torch.int64: "int32",  # computed as int32, widened back at the boundary
    torch.bool: "bool_",
}


def _operand(t: torch.Tensor) -> torch.Tensor:
    """``t`` in a dtype the kernels take: floats as they are, booleans viewed as uint8 (no
    copy), integers as int32 (int64 values must fit: NKI has no 64-bit types)."""
    if t.dtype in FLOATS:
        return t
    if t.dtype == torch.bool:
        return t.view(torch.uint8) if t.is_contiguous() else t.to(torch.uint8)
    if t.dtype not in INTS:
        raise Guard(f"dtype {t.dtype}")
    if t.dtype == torch.int64 and t.numel() and (t.min() < -(2**31) or t.max() >= 2**31):
        raise Guard("int64 values beyond the int32 range")
    return t if t.dtype == torch.int32 else t.to(torch.int32)


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


# ---- reductions, softmax ----------------------------------------------------------------------


def _runs(dims: list[int]) -> list[tuple[int, int]]:
    """Sorted dims as runs of consecutive dims [(first, last), ...]."""
    runs: list[list[int]] = []
    for d in sorted(set(dims)):
        if runs and runs[-1][1] == d - 1:
            runs[-1][1] = d
        else:
            runs.append([d, d])
    return [(a, b) for a, b in runs]


def _reduce_run(run: Any, x: Any, first: int, last: int, kernel: str) -> Any:
    """x reduced over dims first..last (kept as size 1): the last dim on the Vector engine
    (sum / mean / amax kernels), a middle run on the Tensor engine (sum_middle_kernel; a sum
    over every dim but the last, a bias or norm weight gradient, as sum_rows_kernel, which a
    fused chain's column sum computes bit for bit alike)."""
    shape = tuple(x.shape)
    kept = shape[:first] + (1,) * (last - first + 1) + shape[last + 1 :]
    if last == x.dim() - 1:
        return run(getattr(K, kernel), _rows(x.reshape(*shape[:first], -1))).reshape(kept)
    if kernel == "amax_kernel":
        raise Guard("amax over a dim other than the last")
    if kernel == "sum_kernel" and first == 0 and last == x.dim() - 2:
        return run(K.sum_rows_kernel, x.contiguous().reshape(-1, shape[-1])).reshape(kept)
    o = math.prod(shape[:first])
    r = math.prod(shape[first : last + 1])
    scale = 1.0 / r if kernel == "mean_kernel" else 1.0
    x3 = x.contiguous().reshape(o, r, -1)
    return run(K.sum_middle_kernel, x3, scale=scale).reshape(kept)


def _reduce(kernel_name: str) -> Any:
    def adapter(run: Any, x: Any, dim: Any = None, keepdim: bool = False, **kw: Any) -> Any:
        if kw.get("dtype") not in (None, x.dtype):
            raise Guard("dtype=")
        _float(x)
        nd = x.dim()
        dims = [dim] if isinstance(dim, int) else list(dim or range(nd))
        if nd == 0:
            raise Guard("0-d tensor")
        runs = _runs([d % nd for d in dims])
        if x.shape[-1] > FREE_MAX and runs[-1][1] == nd - 1:
            raise Guard(f"last dim {x.shape[-1]} > {FREE_MAX}")
        out = x
        for first, last in reversed(runs):
            out = _reduce_run(run, out, first, last, kernel_name)
        if not keepdim:
            gone = {d % nd for d in dims}
            out = out.reshape([s for d, s in enumerate(out.shape) if d not in gone])
        return out

    return adapter


builtin("aten::sum", ("sum_kernel", "sum_middle_kernel", "sum_rows_kernel"), f"{_EW}; any dims")(
    _reduce("sum_kernel")
)
builtin("aten::mean", ("mean_kernel", "sum_middle_kernel"), f"{_EW}; any dims")(
    _reduce("mean_kernel")
)
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
    f"{_FLOAT_DOC}; no scale_grad_by_freq",
)
def _embedding_bwd(run: Any, g: Any, idx: Any, num: int, padding_idx: int, scale: bool) -> Any:
    _float(g)
    if scale:
        raise Guard("scale_grad_by_freq")
    d = g.shape[-1]
    return run(
        K.embedding_backward_kernel,
        g.contiguous().reshape(-1, d),
        _indices(idx, num),
        num_weights=int(num),
        padding_idx=int(padding_idx),
    )
