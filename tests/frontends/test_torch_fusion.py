"""Fused element-wise chains of the torch.compile backend: the fused kernel gives bit for bit what
the chain of separate kernels gives, the backend fuses chains once per graph (report, fallback,
graph order, dynamic shapes) and ``init_backend(fuse=False)`` turns it off."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import frontends.torch as ft
import nki.kernels as K
from frontends import torch_backend as tb
from frontends import torch_fusion as fusion
from nki.errors import NKIError

from helpers import same_product_bits

FUSED = "fused_elementwise_kernel"
EPILOGUE = "matmul_epilogue_kernel"


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


@pytest.mark.parametrize("n", [64, 300])  # one tile; ragged tiles (zero-filled rows)
@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16], ids=["f32", "bf16"])
def test_fused_kernel_is_bitwise_the_chain_of_separate_kernels(n, dt):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, 96)).astype(dt)
    w = rng.standard_normal((1, 96)).astype(dt)
    g = rng.standard_normal((n, 96)).astype(dt)
    s = np.abs(rng.standard_normal((1, 1))).astype(dt)
    name = "float32" if dt is np.float32 else "bfloat16"
    prog = (
        ("binary:pow", (("in", 0), ("s", 2.0)), name),  # 0
        ("mean", (("v", 0),), name),  # 1: (n, 1)
        ("binary:add", (("v", 1), ("s", 1e-6)), name),  # 2
        ("unary:rsqrt", (("v", 2),), name),  # 3
        ("binary:mul", (("in", 0), ("v", 3)), name),  # 4
        ("binary:mul", (("v", 4), ("in", 1)), name),  # 5: a row vector
        ("unary:silu", (("v", 5),), name),  # 6
        ("grad:silu_backward", (("in", 2), ("v", 5)), name),  # 7
        ("binary:div", (("s", 1.0), ("in", 3)), name),  # 8: (1, 1), reversed scalar
        ("binary:sub", (("v", 6), ("v", 8)), name),  # 9
        ("cast", (("v", 9),), "float32"),  # 10
        ("sum", (("v", 10),), "float32"),  # 11
    )
    got = K.fused_elementwise_kernel([x, w, g, s], program=prog, outs=(3, 7, 10, 11))
    r = K.UNARY_KERNELS["rsqrt"](
        K.SCALAR_KERNELS["add"](K.mean_kernel(K.SCALAR_KERNELS["pow"](x, s=2.0)), s=1e-6)
    )
    y = K.BINARY_KERNELS["mul"](K.BINARY_KERNELS["mul"](x, r), w)
    gy = K.GRAD_KERNELS["silu_backward"](g, y)
    inv = K.SCALAR_KERNELS["div"](s, s=1.0, reverse=True)
    c = K.cast_kernel(K.BINARY_KERNELS["sub"](K.UNARY_KERNELS["silu"](y), inv), dtype="float32")
    want = (r, gy, c, K.sum_kernel(c))
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(_bits(a), _bits(b))


def _rms_mlp(x, w, up):
    """An RMSNorm, a residual and a gated activation: chains of element-wise ops around mms."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    h = w * h.to(x.dtype)
    a = h @ up
    return x + F.silu(a[..., :32]) * a[..., 32:] - torch.sigmoid(h).sum(-1, keepdim=True) / 3.0


def _compiled(fuse: bool, fn, *args, **kw):
    torch._dynamo.reset()
    before = len(tb.reports())
    ft.init_backend(fuse=fuse)
    try:
        out = torch.compile(fn, backend="nki", **kw)(*args)
    finally:
        ft.init_backend()
    return out, tb.reports()[before:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_fused_graph_gives_the_unfused_results_bitwise_with_fewer_launches(dtype):
    torch.manual_seed(0)
    x = torch.randn(2, 40, 32, dtype=dtype)
    w, up = torch.randn(32, dtype=dtype), torch.randn(32, 64, dtype=dtype)
    fused, (rep,) = _compiled(True, _rms_mlp, x, w, up)
    plain, (ref,) = _compiled(False, _rms_mlp, x, w, up)
    assert torch.equal(fused, plain)
    torch.testing.assert_close(fused, _rms_mlp(x, w, up), rtol=2e-2, atol=2e-2)
    # every element-wise op ran as the fused kernel; fewer launches in all
    for op in ("aten::pow", "aten::mean", "aten::rsqrt", "aten::sigmoid"):
        assert rep.kernels_of(op) == {FUSED: 1}, (op, rep.kernels_of(op))
    # the product's one reader, the chain with the gated activation, runs in its launch
    assert rep.kernels_of("aten::silu") == rep.kernels_of("aten::mm") == {EPILOGUE: 1}
    assert ref.kernels_of("aten::rsqrt") == {"rsqrt_kernel": 1}
    assert sum(rep.kernel_calls.values()) < sum(ref.kernel_calls.values()) - 5
    assert rep.coverage == ref.coverage == 1.0
    assert f"kernel {FUSED}:" in str(rep)


def test_a_value_used_between_two_fused_ops_keeps_the_graph_order():
    # y feeds an unfusable op (a sum over dim 0) whose result feeds the chain again: y and
    # y * z cannot run as one launch, and the results stay right
    def f(x):
        y = torch.exp(x) * 2.0
        z = y.sum(0, keepdim=True)
        return torch.tanh(y * z) + y

    x = torch.randn(6, 16)
    got, (rep,) = _compiled(True, f, x)
    plain, _ = _compiled(False, f, x)
    assert torch.equal(got, plain)
    torch.testing.assert_close(got, f(x))
    assert rep.kernels_of("aten::exp") == {FUSED: 1} and rep.kernels_of("aten::tanh") == {FUSED: 1}
    assert rep.kernel_calls[FUSED] == 2


def test_an_op_with_a_user_kernel_or_kept_on_the_cpu_is_not_fused():
    def f(x):
        return torch.relu(torch.exp(x) + 1.0) * 3.0

    x = torch.randn(8, 16)
    tb.register_kernel("aten::relu", K.UNARY_KERNELS["relu"])
    try:
        got, (rep,) = _compiled(True, f, x)
    finally:
        tb.unregister_kernel("aten::relu")
    torch.testing.assert_close(got, f(x))
    assert rep.kernels_of("aten::relu") == {"relu_kernel": 1}
    assert rep.kernels_of("aten::exp") == {FUSED: 1}
    torch._dynamo.reset()
    before = len(tb.reports())
    ft.init_backend(cpu_ops=("aten::relu",))
    try:
        got = torch.compile(f, backend="nki")(x)
    finally:
        ft.init_backend()
    (rep,) = tb.reports()[before:]
    torch.testing.assert_close(got, f(x))
    assert rep.fallbacks == {"aten::relu": "kept on the CPU"}
    assert rep.kernels_of("aten::mul") == {"mul_scalar_kernel": 1}  # alone after relu


def test_a_refused_fused_launch_runs_the_ops_one_by_one():
    def f(x):
        return torch.sigmoid(x) * x + 1.0

    x = torch.randn(2, 5000)  # wider than a tile: the fused guard and each op's guard refuse
    got, (rep,) = _compiled(True, f, x)
    torch.testing.assert_close(got, f(x))
    assert FUSED not in rep.kernel_calls
    assert rep.fallbacks["aten::sigmoid"].startswith("guard failed: last dim 5000")


def test_fused_chains_follow_dynamic_shapes():
    def f(x, w):
        return F.silu(x * w) + x.mean(-1, keepdim=True)

    w = torch.randn(24)
    torch._dynamo.reset()
    before = len(tb.reports())
    fn = torch.compile(f, backend="nki", dynamic=True)
    for rows in (3, 7, 130):
        x = torch.randn(rows, 24)
        torch.testing.assert_close(fn(x, w), f(x, w), rtol=1e-5, atol=1e-6)
    (rep,) = tb.reports()[before:]
    assert "s" in rep.inputs  # a symbolic size: one graph for every row count
    assert rep.kernel_calls == {FUSED: 3}


def _rope(q, cos, sin):
    half = q.shape[-1] // 2
    rotated = torch.cat((-q[..., half:], q[..., :half]), dim=-1)  # rotate_half
    return q * cos + rotated * sin


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_a_cat_of_the_last_dim_joins_the_chain_bitwise(dtype):
    q = torch.randn(2, 5, 3, 16, dtype=dtype).transpose(1, 2)  # a strided view, as in models
    cos, sin = torch.randn(1, 1, 5, 16, dtype=dtype), torch.randn(1, 1, 5, 16, dtype=dtype)
    fused, (rep,) = _compiled(True, _rope, q, cos, sin)
    plain, (ref,) = _compiled(False, _rope, q, cos, sin)
    assert torch.equal(fused, plain)
    assert fused.stride() == plain.stride()  # laid out as the eager op lays it out
    torch.testing.assert_close(fused, _rope(q, cos, sin))
    assert rep.kernel_calls == {FUSED: 1}  # neg, cat, mul, mul, add: one launch
    assert rep.kernels_of("aten::cat") == {FUSED: 1} and ref.kernels_of("aten::cat") == {
        "cat_kernel": 1
    }


def test_products_of_one_input_run_as_one_matmul_launch_bitwise():
    def qkv(x, wq, wk, wv, wo):
        h = x.reshape(-1, x.shape[-1])
        q, k, v = h @ wq.t(), h @ wk.t(), h @ wv.t()
        return q, k, (v @ wo.t()).tanh()  # (no chain reads the three products)

    x = torch.randn(2, 9, 32)
    ws = [torch.randn(24, 32), torch.randn(24, 32), torch.randn(24, 32), torch.randn(8, 24)]
    fused, (rep,) = _compiled(True, qkv, x, *ws)
    plain, (ref,) = _compiled(False, qkv, x, *ws)
    for f, p in zip(fused, plain):
        same_product_bits(f, p)
    torch.testing.assert_close(fused, qkv(x, *ws), rtol=1e-4, atol=1e-4)
    assert rep.kernels_of("aten::mm") == {"matmul_shared_kernel": 3, "matmul_kernel": 1}
    assert rep.kernel_calls["matmul_shared_kernel"] == 1
    assert ref.kernels_of("aten::mm") == {"matmul_kernel": 4}
    assert "matmul_epilogue_kernel" not in rep.kernel_calls  # (tanh is one op: no chain)


def _train_step(fuse: bool, model: torch.nn.Module, x: torch.Tensor):
    """Gradients of one compiled forward and backward, and the graphs' reports."""
    torch._dynamo.reset()
    before = len(tb.reports())
    ft.init_backend(fuse=fuse)
    try:
        model.zero_grad(set_to_none=True)
        torch.compile(model, backend="nki")(x).square().mean().backward()
    finally:
        ft.init_backend()
    return [p.grad.clone() for p in model.parameters()], tb.reports()[before:]


def _backward_graphs(model: torch.nn.Module, x: torch.Tensor):
    """The reports of the backward graph fused and not, after checking that the gradients are
    the same bits both ways and close to eager torch's."""
    fused, (_, bwd) = _train_step(True, model, x)
    plain, (_, ref) = _train_step(False, model, x)
    eager = torch.autograd.grad(model(x).square().mean(), list(model.parameters()))
    for a, b, e in zip(fused, plain, eager):
        same_product_bits(a, b)
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-5)
    return bwd, ref


def test_independent_products_of_a_backward_graph_share_a_launch_bitwise():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 48, bias=False),
        torch.nn.SiLU(),
        torch.nn.Linear(48, 16, bias=False),
    )
    x = torch.randn(24, 32, requires_grad=True)
    bwd, ref = _backward_graphs(model, x)
    # each layer's input and weight gradients: one launch per layer instead of two
    assert bwd.kernels_of("aten::mm") == {"matmul_pairs_kernel": 4}
    assert bwd.kernel_calls["matmul_pairs_kernel"] == 2
    assert ref.kernels_of("aten::mm") == {"matmul_kernel": 4}


class _NormRope(torch.nn.Module):
    """An RMSNorm with a weight, a projection and rotary embeddings: the backward graph has the
    norm's row statistics broadcast back (expand), the weight's gradient (a sum over every
    row) and the gradient of rotate_half (slices of the last dim and their gradients)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.rand(32) + 0.5)
        self.proj = torch.nn.Linear(32, 32, bias=False)

    def forward(self, x):
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w
        q = self.proj(h).reshape(x.shape[0], x.shape[1], 2, 16).transpose(1, 2)
        pos = torch.arange(x.shape[1], dtype=torch.float32)[:, None]
        return _rope(q, torch.cos(pos), torch.sin(pos))


@pytest.mark.parametrize("rows", [9, 70], ids=["one-tile", "ragged"])
def test_norm_and_rope_gradients_run_as_fused_chains_bitwise(rows):
    torch.manual_seed(0)
    model = _NormRope()
    x = torch.randn(2, rows, 32, requires_grad=True)
    bwd, ref = _backward_graphs(model, x)
    for op in ("aten::expand", "aten::slice_backward", "aten::sum", "aten::neg"):
        assert bwd.kernels_of(op).keys() <= {FUSED, EPILOGUE}, (op, bwd.kernels_of(op))
    assert ref.kernels_of("aten::sum").keys() == {"sum_kernel", "sum_rows_kernel"}
    # the rope's gradient; the norm's (and its weight's) with the projection's gradients
    assert bwd.kernel_calls[FUSED] == bwd.kernel_calls[EPILOGUE] == 1
    assert sum(bwd.kernel_calls.values()) < sum(ref.kernel_calls.values()) - 5


@pytest.mark.parametrize("n", [64, 300])  # one tile; ragged tiles (zero-filled rows)
@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16], ids=["f32", "bf16"])
def test_fused_copies_and_column_sums_are_bitwise_the_separate_kernels(n, dt):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((n, 32)).astype(dt)
    c = rng.standard_normal((n, 1)).astype(dt)
    name = "float32" if dt is np.float32 else "bfloat16"
    prog = (
        ("slice", (("in", 0), ("s", 8), ("s", 24)), name),  # 0: (n, 16)
        ("unary:neg", (("v", 0),), name),  # 1
        ("pad", (("v", 1), ("s", 4), ("s", 32)), name),  # 2: (n, 32), zero but columns 4..20
        ("expand", (("in", 1), ("s", 32)), name),  # 3: c broadcast to 32 columns
        ("binary:mul", (("v", 2), ("v", 3)), name),  # 4
        ("colsum", (("v", 4),), name),  # 5: (1, 32)
    )
    prod, sums, wide, part = K.fused_elementwise_kernel([x, c], program=prog, outs=(4, 5, 3, 0))
    np.testing.assert_array_equal(_bits(part), _bits(x[:, 8:24]))
    padded = np.zeros((n, 32), dt)
    padded[:, 4:20] = K.UNARY_KERNELS["neg"](np.ascontiguousarray(x[:, 8:24]))
    want = K.BINARY_KERNELS["mul"](padded, c)
    np.testing.assert_array_equal(_bits(prod), _bits(want))
    assert sums.shape == (1, 32)
    np.testing.assert_array_equal(_bits(sums), _bits(K.sum_rows_kernel(want)))
    np.testing.assert_array_equal(_bits(wide), _bits(np.broadcast_to(c, (n, 32))))
    bad = (("colsum", (("in", 0),), name), ("unary:neg", (("v", 0),), name))
    with pytest.raises(NKIError, match="step 1 \\(unary:neg\\) reads a colsum step's value"):
        K.fused_elementwise_kernel([x], program=bad, outs=(1,))


def test_copies_in_a_chain_take_no_step_and_keep_every_value():
    def f(x):
        y = torch.exp(x)
        z = y * 1.0  # the same bits: the program computes it once
        return z + 1.0, y, z.to(torch.float32), z / 1.0

    x = torch.randn(6, 16)
    got, (rep,) = _compiled(True, f, x)
    plain, _ = _compiled(False, f, x)
    for a, b, e in zip(got, plain, f(x)):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, e)
    assert torch.equal(got[1], got[2]) and torch.equal(got[1], got[3])
    assert rep.kernel_calls == {FUSED: 1}


@pytest.mark.parametrize(
    "m, k, ns",
    [(2, 128, (128, 64, 64)), (130, 200, (96, 256)), (64, 64, (300, 300))],
    ids=["decode", "ragged", "wide"],
)
@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16], ids=["f32", "bf16"])
def test_products_of_one_input_are_bitwise_the_separate_products(m, k, ns, dt):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(dt)
    bs = [rng.standard_normal((k, n)).astype(dt) for n in ns]
    for got, b in zip(K.matmul_shared_kernel(a, bs), bs):
        same_product_bits(got, K.matmul_kernel(a, b))
    for got, b in zip(K.matmul_pairs_kernel([a, a], bs[:2]), bs):
        np.testing.assert_array_equal(_bits(got), _bits(K.matmul_kernel(a, b)))


def test_rotary_frequencies_and_their_cat_run_as_one_launch():
    def rotary(pos, inv_freq):  # a Llama's cos and sin: a product of a column and a row
        freqs = pos[:, :, None].float() * inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos() * 1.0, emb.sin() * 1.0

    pos, inv = torch.arange(20).reshape(2, 10), torch.rand(16)
    got, (rep,) = _compiled(True, rotary, pos, inv)
    plain, _ = _compiled(False, rotary, pos, inv)
    for a, b, e in zip(got, plain, rotary(pos, inv)):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)
    assert rep.kernel_calls == {FUSED: 1}


@pytest.mark.parametrize("rows", [2, 70], ids=["few", "ragged"])
def test_a_cat_in_no_chain_runs_on_the_fused_kernel(rows):
    def step(cache, new, ids):  # a decode step's KV cache (rows heads of a batch) and indices
        return torch.cat([cache, new], dim=-2), torch.cat([ids, ids + 1], dim=0)

    cache, new = torch.randn(rows, 2, 5, 32), torch.randn(rows, 2, 1, 32)
    ids = torch.arange(6)
    got, (rep,) = _compiled(True, step, cache, new, ids)
    plain, (ref,) = _compiled(False, step, cache, new, ids)
    for a, b, e in zip(got, plain, step(cache, new, ids)):
        assert torch.equal(a, b) and torch.equal(a, e)
    assert rep.kernels_of("aten::cat") == {FUSED: 1, "cat_kernel": 1}  # (integers: cat_kernel)
    assert ref.kernels_of("aten::cat") == {"cat_kernel": 2}


def test_matmul_pairs_kernel_wants_one_rhs_per_lhs():
    a, b = np.ones((4, 8), np.float32), np.ones((8, 4), np.float32)
    np.testing.assert_array_equal(K.matmul_pairs_kernel([a, b], [b, a])[1], b @ a)
    with pytest.raises(NKIError, match="one rhs per lhs: 2 lhs, 1 rhs") as e:
        K.matmul_pairs_kernel([a, a], [b])
    assert e.value.code == "err_invalid_shape"


def test_an_integer_to_float_conversion_starts_a_chain():
    def f(pos, inv_freq):
        return pos.to(torch.float32) * inv_freq + 0.5

    pos, inv = torch.arange(32).reshape(1, 32, 1), torch.rand(16)
    fused, (rep,) = _compiled(True, f, pos, inv)
    plain, _ = _compiled(False, f, pos, inv)
    assert torch.equal(fused, plain)
    assert rep.kernel_calls == {FUSED: 1}
    far = pos + 2**40  # int64 values NKI cannot hold: every op falls back, results stay right
    got, (rep,) = _compiled(True, f, far, inv)
    torch.testing.assert_close(got, f(far, inv))
    assert FUSED not in rep.kernel_calls


@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16], ids=["f32", "bf16"])
def test_segments_of_one_launch_are_bitwise_their_own_launches(dt):
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((300, 48)).astype(dt), rng.standard_normal((1, 48)).astype(dt)
    y, z = rng.standard_normal((3, 40)).astype(dt), rng.standard_normal((3, 8)).astype(dt)
    name = "float32" if dt is np.float32 else "bfloat16"
    norm = (  # 300 rows: ragged tiles, a row statistic and a column sum
        ("binary:mul", (("in", 0), ("in", 1)), name),
        ("mean", (("v", 0),), name),
        ("binary:sub", (("v", 0), ("v", 1)), name),
        ("colsum", (("v", 2),), name),
    )
    cat = (("unary:exp", (("in", 1),), name), ("cat", (("in", 0), ("v", 0)), name))  # 3 rows
    segments = (((0, 1), norm, (2, 3)), ((2, 3), cat, (1, 0)))
    got = K.fused_elementwise_kernel([x, w, y, z], segments=segments)
    want = (
        *K.fused_elementwise_kernel([x, w], program=norm, outs=(2, 3)),
        *K.fused_elementwise_kernel([y, z], program=cat, outs=(1, 0)),
    )
    assert len(got) == 4
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(_bits(a), _bits(b))
    np.testing.assert_array_equal(_bits(got[2]), _bits(np.concatenate([y, got[3]], 1)))
    with pytest.raises(NKIError, match="give program and outs, or segments, not both"):
        K.fused_elementwise_kernel([x, w], program=norm, outs=(2,), segments=segments)


def test_independent_chains_ready_together_run_as_one_launch():
    def two(x, y):  # chains of different shapes that read nothing of each other
        return torch.sigmoid(x) * 2.0 + 1.0, torch.exp(y).mean(-1, keepdim=True) - y

    x, y = torch.randn(5, 24), torch.randn(3, 7, 40)
    fused, (rep,) = _compiled(True, two, x, y)
    plain, (ref,) = _compiled(False, two, x, y)
    for a, b, e in zip(fused, plain, two(x, y)):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, e)
    assert rep.kernel_calls == {FUSED: 1}
    assert rep.kernels_of("aten::exp") == rep.kernels_of("aten::sigmoid") == {FUSED: 1}
    assert sum(ref.kernel_calls.values()) == 6


def _attention_inputs(q, k, v, cache_k, cache_v, cos, sin):
    """A decode step's rotary embeddings of queries and keys and its KV cache cats."""
    return (
        _rope(q, cos, sin),
        torch.cat([cache_k, _rope(k, cos, sin)], -2),
        torch.cat([cache_v, v], -2),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rotary_embeddings_and_cache_cats_share_launches_bitwise(dtype):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, h, 1, 16, dtype=dtype) for h in (4, 2, 2))
    cache_k, cache_v = torch.randn(2, 2, 6, 16, dtype=dtype), torch.randn(2, 2, 6, 16, dtype=dtype)
    cos, sin = torch.randn(2, 1, 1, 16, dtype=dtype), torch.randn(2, 1, 1, 16, dtype=dtype)
    args = (q, k, v, cache_k, cache_v, cos, sin)
    fused, (rep,) = _compiled(True, _attention_inputs, *args)
    plain, (ref,) = _compiled(False, _attention_inputs, *args)
    for a, b, e in zip(fused, plain, _attention_inputs(*args)):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, e)
    # both rotary chains, the key cache's cat (after the new key's) and the value cache's cat
    assert rep.kernel_calls == {FUSED: 1}
    assert ref.kernels_of("aten::cat") == {"cat_kernel": 4}


def test_a_long_cache_runs_its_cats_apart_and_the_chains_still_fused():  # (refused parts)
    q, k, v = (torch.randn(2, h, 1, 16) for h in (4, 2, 2))
    cache_k, cache_v = torch.randn(2, 2, 300, 16), torch.randn(2, 2, 300, 16)  # 4800 columns
    cos, sin = torch.randn(2, 1, 1, 16), torch.randn(2, 1, 1, 16)
    args = (q, k, v, cache_k, cache_v, cos, sin)
    got, (rep,) = _compiled(True, _attention_inputs, *args)
    for a, e in zip(got, _attention_inputs(*args)):
        torch.testing.assert_close(a, e)
    # the shared launch and the key's chain with its cat refuse the caches' 4800 columns: the
    # rotary chains run as a launch each, the cats on their own (cat_kernel refuses them too)
    assert rep.kernel_calls == {FUSED: 2}
    assert rep.kernels_of("aten::neg") == {FUSED: 2}
    assert rep.fallbacks == {"aten::cat": "guard failed: slices wider than 4096 or empty"}


def test_a_refused_part_of_a_shared_launch_runs_alone():
    def two(x, y):  # x is wider than a tile: its chain runs op by op, y's still fused
        return torch.sigmoid(x) + 1.0, torch.exp(y) * 3.0

    x, y = torch.randn(2, 5000), torch.randn(4, 8)
    got, (rep,) = _compiled(True, two, x, y)
    for a, e in zip(got, two(x, y)):
        torch.testing.assert_close(a, e)
    assert rep.kernels_of("aten::exp") == {FUSED: 1}
    assert rep.fallbacks["aten::sigmoid"].startswith("guard failed: last dim 5000")


def test_an_in_place_write_keeps_its_place_against_fused_steps():
    # exp(x) * 2 (a fused step, which waits for other steps) reads x before copy_ writes it
    g = torch.fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    e = g.call_function(torch.ops.aten.exp.default, (x,))
    m = g.call_function(torch.ops.aten.mul.Tensor, (e, 2.0))
    p = g.call_function(torch.ops.aten.mm.default, (x, w))
    c = g.call_function(torch.ops.aten.copy_.default, (x, p))
    g.output((m, c))
    nodes = list(g.nodes)
    chain = fusion.Group([e, m], (4, 8))
    order = fusion.schedule(nodes, [chain])
    assert order.index(chain) < order.index(c)
    assert order[-1].op == "output" and len(order) == len(nodes) - 1


def _product_then_exp(write_first: bool):
    """x @ w and exp of it, with copy_ writing w between the two or after both."""
    g = torch.fx.Graph()
    x, w, y = (g.placeholder(n) for n in "xwy")
    p = g.call_function(torch.ops.aten.mm.default, (x, w))
    if write_first:
        c = g.call_function(torch.ops.aten.copy_.default, (w, y))
    e = g.call_function(torch.ops.aten.exp.default, (p,))
    if not write_first:
        c = g.call_function(torch.ops.aten.copy_.default, (w, y))
    g.output((e, c))
    return list(g.nodes), p, fusion.Group([e], (4, 8), inputs=(p,))


def test_a_product_never_moves_past_an_in_place_write():
    # merged, the product would be computed with its reader, after the write of its operand
    nodes, p, chain = _product_then_exp(write_first=True)
    assert fusion.with_epilogues(nodes, [chain], {p}) == [chain]
    nodes, p, chain = _product_then_exp(write_first=False)
    (merged,) = fusion.with_epilogues(nodes, [chain], {p})
    assert isinstance(merged, fusion.Epilogue) and merged.members == [p, *chain.members]
    order = fusion.schedule(nodes, [merged])
    assert order is not None and order.index(merged) < order.index(nodes[-2])  # (copy_)


SILU_MUL = (("unary:silu", (("in", 0),), "{}"), ("binary:mul", (("v", 0), ("in", 1)), "{}"))
ADD_RMS = (
    ("binary:add", (("in", 1), ("in", 0)), "{}"),  # 0: the residual
    ("binary:pow", (("v", 0), ("s", 2.0)), "{}"),
    ("mean", (("v", 1),), "{}"),
    ("binary:add", (("v", 2), ("s", 1e-6)), "{}"),
    ("unary:rsqrt", (("v", 3),), "{}"),
    ("binary:mul", (("v", 0), ("v", 4)), "{}"),
    ("binary:mul", (("v", 5), ("in", 2)), "{}"),  # 6: times a row vector
)


def _typed(program: tuple, name: str) -> tuple:
    return tuple((op, args, dt.format(name)) for op, args, dt in program)


@pytest.mark.parametrize("m, k", [(2, 128), (130, 200)], ids=["decode", "ragged"])
@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16], ids=["f32", "bf16"])
def test_matmul_epilogue_kernel_is_bitwise_the_product_and_chain_launches(m, k, dt):
    rng = np.random.default_rng(5)
    name = "float32" if dt is np.float32 else "bfloat16"
    a, b = (rng.standard_normal((m, k)).astype(dt) for _ in range(2))
    gate, up = (rng.standard_normal((k, 96)).astype(dt) for _ in range(2))
    prog = _typed(SILU_MUL, name)
    products = K.matmul_shared_kernel(a, [gate, up])
    want = K.fused_elementwise_kernel(products, program=prog, outs=(1,))
    full = K.matmul_epilogue_kernel.configure(checks="full")  # (fp32: steps read PSUM)
    for shared in (True, False):  # (side by side, or a product each)
        got = full(
            [a, a], [gate, up], program=prog, outs=(1,), read=(0, 1), shared=shared
        )  # (one result comes alone)
        same_product_bits(got, want)
    # a product of another left operand, the chain's product also stored, a wide product
    # (over 512 columns) the chain does not read
    w, res, norm = (rng.standard_normal(s).astype(dt) for s in ((k, 128), (m, 128), (1, 128)))
    wide = rng.standard_normal((k, 600)).astype(dt)
    prog = _typed(ADD_RMS, name)
    got = K.matmul_epilogue_kernel(
        [a, b], [w, wide], [res, norm], program=prog, outs=(0, 6), read=(0,), keep=(0,)
    )
    product = K.matmul_kernel(a, w)
    want = [product, K.matmul_kernel(b, wide)]
    want += K.fused_elementwise_kernel([product, res, norm], program=prog, outs=(0, 6))
    assert len(got) == len(want) == 4
    for g, r in zip(got, want):
        np.testing.assert_array_equal(_bits(g), _bits(r))


def test_matmul_epilogue_kernel_takes_one_psum_bank_of_products():
    a = np.ones((4, 8), np.float32)
    bs = [np.ones((8, 300), np.float32)] * 2
    prog = _typed(SILU_MUL, "float32")
    with pytest.raises(
        NKIError, match=r"read products \[0, 1\] of \[300, 300\] columns \(at most 512 in all\)"
    ):
        K.matmul_epilogue_kernel([a, a], bs, program=prog, outs=(1,), read=(0, 1), shared=True)
    with pytest.raises(NKIError, match=r"one rhs per lhs \(1 lhs, 2 rhs\)"):
        K.matmul_epilogue_kernel([a], bs, program=prog, outs=(1,), read=(0,))
    with pytest.raises(NKIError, match=r"read indices among them \(\[0, 2\]\)"):
        K.matmul_epilogue_kernel([a, a], bs, program=prog, outs=(1,), read=(0, 2))
    with pytest.raises(NKIError, match=r"of \[600\] columns \(at most 512 each\)"):
        K.matmul_epilogue_kernel([a], [np.ones((8, 600), np.float32)], program=prog, read=(0,))


def _mlp_block(x, wg, wu, wd, wn):
    """A Llama MLP and the next layer's norm: the gate and up products' one reader is the gated
    activation, the down product's is the residual add and the norm."""
    y = F.silu(F.linear(x, wg)) * F.linear(x, wu)
    r = x + F.linear(y, wd)
    return r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + 1e-6) * wn, r


def _views(rep) -> list:
    return sorted((s.op, s.count) for s in rep.ops.values() if s.status == "view")


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_products_read_only_by_a_chain_run_in_its_launch_bitwise(dynamic):
    torch.manual_seed(4)
    x = torch.randn(2, 5, 32)
    ws = [torch.randn(64, 32), torch.randn(64, 32), torch.randn(32, 64), torch.randn(32)]
    fused, (rep,) = _compiled(True, _mlp_block, x, *ws, dynamic=dynamic)
    plain, (ref,) = _compiled(False, _mlp_block, x, *ws, dynamic=dynamic)
    assert all(map(torch.equal, fused, plain))
    torch.testing.assert_close(fused, _mlp_block(x, *ws), rtol=1e-4, atol=1e-4)
    # (under dynamic shapes x's two views are not known to be one tensor: a product each)
    assert rep.kernels_of("aten::mm") == {EPILOGUE: 3}
    assert rep.kernels_of("aten::silu") == rep.kernels_of("aten::rsqrt") == {EPILOGUE: 1}
    assert rep.kernel_calls[EPILOGUE] == 2 and sum(rep.kernel_calls.values()) == 2
    assert _views(rep) == _views(ref) and _views(rep)  # the products' views still counted
    assert rep.coverage == 1.0


def test_a_product_read_elsewhere_is_stored_and_a_wide_one_runs_apart():
    torch.manual_seed(5)
    x = torch.randn(2, 5, 32)
    ws = [torch.randn(64, 32), torch.randn(64, 32), torch.randn(32, 64), torch.randn(32)]

    def kept(x, wg, wu, wd, wn):  # the gate product is an output too: the launch stores it
        return _mlp_block(x, wg, wu, wd, wn)[0], F.linear(x, wg)

    got, (rep,) = _compiled(True, kept, x, *ws)
    plain, _ = _compiled(False, kept, x, *ws)
    assert all(map(torch.equal, got, plain))
    torch.testing.assert_close(got, kept(x, *ws), rtol=1e-4, atol=1e-4)
    assert rep.kernels_of("aten::silu") == {EPILOGUE: 1}
    assert rep.kernel_calls[EPILOGUE] == 2 and sum(rep.kernel_calls.values()) == 2
    wide = [torch.randn(300, 32), torch.randn(300, 32), torch.randn(32, 300), torch.randn(32)]
    got, (rep,) = _compiled(True, _mlp_block, x, *wide)  # 600 columns: more than a PSUM bank
    plain, _ = _compiled(False, _mlp_block, x, *wide)
    assert all(map(torch.equal, got, plain))
    assert rep.kernels_of("aten::silu") == {FUSED: 1}
    assert rep.kernels_of("aten::mm") == {"matmul_shared_kernel": 2, EPILOGUE: 1}


class _GatedMLP(torch.nn.Module):
    """A Llama MLP with its residual and the next norm (``_mlp_block``), to train."""

    def __init__(self) -> None:
        super().__init__()
        self.gate, self.up = (
            torch.nn.Linear(32, 64, bias=False),
            torch.nn.Linear(32, 64, bias=False),
        )
        self.down = torch.nn.Linear(64, 32, bias=False)
        self.w = torch.nn.Parameter(torch.rand(32) + 0.5)

    def forward(self, x):
        ws = (self.gate.weight, self.up.weight, self.down.weight, self.w)
        return _mlp_block(x, *ws)[0]


def test_a_training_step_runs_products_with_their_chains_bitwise():
    torch.manual_seed(6)
    x = torch.randn(2, 9, 32, requires_grad=True)
    bwd, ref = _backward_graphs(_GatedMLP(), x)  # (the gradients are the unfused bits)
    # the backward chains with the input gradients they read; the weight gradients are stored
    # by the same launches
    assert bwd.kernel_calls[EPILOGUE] == 2 and "matmul_pairs_kernel" not in bwd.kernel_calls
    assert sum(bwd.kernel_calls.values()) < sum(ref.kernel_calls.values())


def test_epilogue_read_product_shapes_are_made_once_per_step_and_shape():
    """The data-free tensors standing for an epilogue's read products (and their views) are
    made once per step and shape: the same object on every launch, the view's own shape, and a
    new one when the rows change."""
    from types import SimpleNamespace

    from torch.fx.experimental.proxy_tensor import make_fx

    from frontends.torch_fusion_epilogue import _shape_of

    gm = make_fx(lambda a: a.view(-1, 4, 8))(torch.randn(8, 8))
    view = next(n for n in gm.graph.nodes if n.op == "call_function")
    step = SimpleNamespace(products=[view.args[0]], read=(0,), product_of={view: 0}, shapes={})
    a = _shape_of(step, view, 8, 8, torch.float32, {})
    assert a.device.type == "meta" and tuple(a.shape) == (2, 4, 8)
    assert _shape_of(step, view, 8, 8, torch.float32, {}) is a
    b = _shape_of(step, view, 16, 8, torch.float32, {})
    assert tuple(b.shape) == (4, 4, 8) and _shape_of(step, view, 16, 8, torch.float32, {}) is b
