"""Attention in the ``"nki"`` torch.compile backend: ``F.scaled_dot_product_attention`` calls of
the captured graph become the ``nki::sdpa`` custom op (forward and backward), which runs the
flash-style :func:`nki.kernels.attention_kernel` / ``attention_backward_kernel`` whatever the
call's mask (additive or boolean, broadcast over batch and heads), key/value heads (grouped
query attention) and query length (a decode step against a KV cache).

Without the rewrite aot_autograd would lower the call to one of several ATen decompositions
(flash for the CPU without a mask, a math decomposition with one), depending on its
arguments. The custom ops' CPU implementations below are the fallback when a guard refuses
the kernels (their math is the kernels' reference)."""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.nn.functional as F

import nki.kernels as K

from .torch_ops import _FLOAT_DOC, _float
from .torch_registry import Guard, builtin

Tensor = torch.Tensor


def _expand_kv(k: Tensor, heads: int) -> Tensor:
    return k.repeat_interleave(heads // k.shape[1], dim=1)


def _additive(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.zeros((), dtype=dtype).masked_fill(~mask, float("-inf")).expand(mask.shape)


_LSE_FLOOR = -1.0e30  # (the attention kernel's: its running max starts there)


def _scores(q: Tensor, k: Tensor, mask: Tensor | None, is_causal: bool, scale: float) -> Tensor:
    """fp32 (B, H, Sq, Sk) scores q k^T * scale + mask, causal entries -inf."""
    s = q.float() @ _expand_kv(k, q.shape[1]).float().transpose(-1, -2) * scale
    if mask is not None:
        s = s + _additive(mask, torch.float32).float()
    if is_causal:
        keep = torch.ones(s.shape[-2:], dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return s


@torch.library.custom_op("nki::sdpa", mutates_args=())
def sdpa_op(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    is_causal: bool,
    scale: float,
    need_lse: bool = True,
) -> tuple[Tensor, Tensor]:
    """out (B, H, Sq, D) and lse (B, H, Sq) fp32 of softmax(q k^T * scale + mask) v, with
    k, v (B, Hk, Sk, D) shared by groups of H / Hk query heads. With ``need_lse`` False (a
    graph that never reads it: :func:`drop_unread_lse`) lse is an empty (0,) tensor."""
    s = _scores(q, k, mask, is_causal, scale)
    # (a row whose every key is masked with -inf: probabilities 0 and an output of 0, as
    # torch gives, from a finite lse as the kernel's, which the backward also reads)
    lse = s.logsumexp(-1).clamp_min(_LSE_FLOOR)
    out = torch.exp(s - lse[..., None]) @ _expand_kv(v, q.shape[1]).float()
    return out.to(q.dtype), lse if need_lse else torch.empty(0, dtype=torch.float32)


@sdpa_op.register_fake
def _(
    q: Tensor, k: Tensor, v: Tensor, mask: Any, is_causal: bool, scale: float, need_lse: bool = True
) -> Any:
    lse_shape = q.shape[:-1] if need_lse else (0,)
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))  # (v's head size: it may differ from q's)
    return out, q.new_empty(lse_shape, dtype=torch.float32)


@torch.library.custom_op("nki::sdpa_backward", mutates_args=())
def sdpa_backward_op(
    g: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    out: Tensor,
    lse: Tensor,
    is_causal: bool,
    scale: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """dq, dk, dv of :func:`sdpa_op` (dk, dv summed over each key/value head's group)."""
    h, hk = q.shape[1], k.shape[1]
    p = torch.exp(_scores(q, k, mask, is_causal, scale) - lse[..., None])
    gf, of = g.float(), out.float()
    dv = p.transpose(-1, -2) @ gf
    dp = gf @ _expand_kv(v, h).float().transpose(-1, -2)
    ds = p * (dp - (gf * of).sum(-1, keepdim=True))
    dq = ds @ _expand_kv(k, h).float() * scale
    dk = ds.transpose(-1, -2) @ q.float() * scale

    def fold(t: Tensor) -> Tensor:  # sum the query heads of each key/value head
        return t.reshape(t.shape[0], hk, h // hk, *t.shape[2:]).sum(2)

    return dq.to(q.dtype), fold(dk).to(k.dtype), fold(dv).to(v.dtype)


@sdpa_backward_op.register_fake
def _(g: Any, q: Tensor, k: Tensor, v: Tensor, *rest: Any) -> Any:
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    q, k, v, mask, is_causal, scale, _need_lse = inputs
    ctx.save_for_backward(q, k, v, mask, output[0], output[1])
    ctx.is_causal, ctx.scale = is_causal, scale


def _backward(ctx: Any, g: Tensor, _g_lse: Any) -> tuple:
    q, k, v, mask, out, lse = ctx.saved_tensors
    dq, dk, dv = sdpa_backward_op(g.contiguous(), q, k, v, mask, out, lse, ctx.is_causal, ctx.scale)
    return dq, dk, dv, None, None, None, None


def drop_unread_lse(n: torch.fx.Node) -> None:
    """An ``nki::sdpa`` node of an aot_autograd graph whose lse output no node reads (an
    inference graph) is called with ``need_lse=False``: the kernel then neither computes nor
    stores it."""
    if n.target is not torch.ops.nki.sdpa.default or n.kwargs.get("need_lse") is False:
        return
    if all(u.target is operator.getitem and u.args[1] == 0 for u in n.users):
        n.kwargs = {**n.kwargs, "need_lse": False}


sdpa_op.register_autograd(_backward, setup_context=_setup)


def fused_sdpa(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """``F.scaled_dot_product_attention`` (without dropout) as :func:`sdpa_op`; the mask is
    viewed as 4-D (MB, MH, Sq, Sk)."""
    if attn_mask is not None and attn_mask.dim() < 4:
        attn_mask = attn_mask.reshape((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape))
    sc = q.shape[-1] ** -0.5 if scale is None else scale
    return sdpa_op(q, k, v, attn_mask, bool(is_causal), float(sc))[0]


_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def _example(a: Any) -> Any:
    return a.meta.get("example_value") if isinstance(a, torch.fx.Node) else a


def rewrite_sdpa(gm: torch.fx.GraphModule) -> None:
    """Replace ``F.scaled_dot_product_attention`` calls of a Dynamo graph by
    :func:`fused_sdpa` where they have no dropout, 4-D q, k, v with a head count dividing
    q's, and a mask (if any) that needs no gradient."""
    changed = False
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target is not F.scaled_dot_product_attention:
            continue
        bound = dict(zip(_SDPA_ARGS, n.args))
        bound.update(n.kwargs)
        q, k, v = (_example(bound.get(a)) for a in _SDPA_ARGS[:3])
        mask = _example(bound.get("attn_mask"))
        if bound.get("dropout_p", 0.0) != 0.0 or not all(
            isinstance(t, Tensor) and t.dim() == 4 for t in (q, k, v)
        ):
            continue
        if q.shape[1] % k.shape[1] or (mask is not None and mask.requires_grad):
            continue
        n.target = fused_sdpa
        n.args = tuple(bound[a] for a in _SDPA_ARGS[:3])
        n.kwargs = {a: bound[a] for a in _SDPA_ARGS[3:] if a in bound}
        changed = True
    if changed:
        gm.recompile()


_DOC = (
    f"{_FLOAT_DOC}; q (B, H, Sq, D), k and v (B, Hk, Sk, D), Hk dividing H, D <= 128; mask "
    "additive or boolean, broadcast over batch and heads"
)


def _mask4(mask: Tensor | None, q: Tensor, sk: int, run: Any) -> Tensor | None:
    """The mask as a float (MB, MH, Sq, Sk) tensor (a boolean mask through where_kernel)."""
    if mask is None:
        return None
    b, h, sq = q.shape[:3]
    if mask.dim() != 4 or mask.shape[0] not in (1, b) or mask.shape[1] not in (1, h):
        raise Guard(f"mask shape {tuple(mask.shape)}")
    m = mask.expand(mask.shape[0], mask.shape[1], sq, sk)
    if m.dtype == torch.bool:
        rows = m.reshape(-1, sk)
        zero = torch.zeros(1, 1, dtype=q.dtype)
        ninf = torch.full((1, 1), float("-inf"), dtype=q.dtype)
        return run(K.where_kernel, rows, zero, ninf).reshape(m.shape)
    if m.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise Guard(f"mask dtype {m.dtype}")
    return m


def _check(q: Tensor, k: Tensor, v: Tensor) -> None:
    _float(q, k, v)
    b, h, _, d = q.shape
    if k.shape != v.shape or k.shape[0] != b or h % k.shape[1] or k.shape[3] != d or d > 128:
        raise Guard(f"shapes q {tuple(q.shape)} k {tuple(k.shape)} v {tuple(v.shape)}")


def _flat(t: Tensor) -> Tensor:
    return t.reshape(-1, t.shape[-2], t.shape[-1])


@builtin("nki::sdpa", ("attention_kernel", "where_kernel"), _DOC)
def _nki_sdpa(
    run: Any,
    q: Any,
    k: Any,
    v: Any,
    mask: Any,
    is_causal: bool,
    scale: float,
    need_lse: bool = True,
) -> Any:
    _check(q, k, v)
    m = _mask4(mask, q, k.shape[2], run)
    res = run(
        K.attention_kernel,
        _flat(q),
        _flat(k),
        _flat(v),
        mask=m,
        scale=float(scale),
        causal=bool(is_causal),
        heads=q.shape[1],
        with_lse=bool(need_lse),
    )
    if not need_lse:
        return res.reshape(q.shape), torch.empty(0, dtype=torch.float32)
    out, lse = res
    return out.reshape(q.shape), lse.reshape(q.shape[:-1])


@builtin("nki::sdpa_backward", ("attention_backward_kernel", "where_kernel"), _DOC)
def _nki_sdpa_bwd(
    run: Any, g: Any, q: Any, k: Any, v: Any, mask: Any, out: Any, lse: Any, causal: bool, sc: Any
) -> Any:
    _check(q, k, v)
    _float(g, out)
    m = _mask4(mask, q, k.shape[2], run)
    dq, dk, dv = run(
        K.attention_backward_kernel,
        _flat(g),
        _flat(q),
        _flat(k),
        _flat(v),
        _flat(out),
        lse.float().reshape(-1, q.shape[2], 1),
        mask=m,
        scale=float(sc),
        causal=bool(causal),
        heads=q.shape[1],
    )
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)
