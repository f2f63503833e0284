"""Every nki.kernels kernel against torch on random ragged and aligned shapes, in float32
and bfloat16, run with checks="full" (an uninitialised read or any other finding raises)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import nki.kernels as K

ROWS = st.sampled_from([1, 16, 37, 128, 130])
COLS = st.sampled_from([1, 7, 64, 130])
DTYPES = st.sampled_from([torch.float32, torch.bfloat16])
# a few examples per kernel (traces are cached per shape, so repeats are cheap); the profile's
# count when it is smaller
FEW = settings(max_examples=min(settings().max_examples, 6))
TOL = {torch.float32: (2e-5, 1e-5), torch.bfloat16: (2e-2, 2e-2)}


def full(k):
    return k.configure(checks="full")


def close(got, want, dtype, scale=1.0):
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(
        got.float(), want.float(), rtol=rtol, atol=atol * scale, check_dtype=False
    )


def ref_bf16(fn, *xs):
    """torch's own result computed in fp32 from the same (rounded) inputs, rounded once."""
    return fn(*(x.float() for x in xs)).to(xs[0].dtype)


UNARY_REF = {
    "neg": torch.neg,
    "abs": torch.abs,
    "reciprocal": torch.reciprocal,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "exp": torch.exp,
    "log": torch.log,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}
POSITIVE = {"sqrt", "rsqrt", "log", "reciprocal"}


@pytest.mark.parametrize("op", sorted(UNARY_REF))
@FEW
@given(n=ROWS, d=COLS, dtype=DTYPES, seed=st.integers(0, 999))
def test_unary_kernels_match_torch(op, n, d, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    if op in POSITIVE:
        x = x.abs() + 0.5
    x = x.to(dtype)
    close(full(K.UNARY_KERNELS[op])(x), ref_bf16(UNARY_REF[op], x), dtype)


BIN_REF = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "pow": torch.pow,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
}


@pytest.mark.parametrize("op", sorted(BIN_REF))
@FEW
@given(
    n=ROWS,
    d=COLS,
    dtype=DTYPES,
    form=st.sampled_from(["same", "row", "col", "scalar"]),
    seed=st.integers(0, 999),
)
def test_binary_kernels_match_torch_with_broadcasts(op, n, d, dtype, form, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    yshape = {"same": (n, d), "row": (1, d), "col": (n, 1), "scalar": (1, 1)}[form]
    y = torch.randn(*yshape, generator=g)
    if op == "pow":
        x = x.abs() + 0.5
    if op == "div":
        y = y.sign() * (y.abs() + 0.5)
    x, y = x.to(dtype), y.to(dtype)
    close(full(K.BINARY_KERNELS[op])(x, y), ref_bf16(BIN_REF[op], x, y), dtype)
    s = 1.5
    want = ref_bf16(lambda a: BIN_REF[op](a, torch.tensor(s)), x)
    close(full(K.SCALAR_KERNELS[op])(x, s=s), want, dtype)
    if op != "pow":
        close(
            full(K.SCALAR_KERNELS[op])(x, s=s, reverse=True),
            ref_bf16(lambda a: BIN_REF[op](torch.tensor(s), a), x),
            dtype,
        )


def _autograd_ref(fn, x):
    x = x.float().requires_grad_(True)
    y = fn(x)
    return x, y


GRAD_REF = {
    "silu_backward": (F.silu, False),
    "gelu_backward": (F.gelu, False),
    "gelu_tanh_backward": (lambda x: F.gelu(x, approximate="tanh"), False),
    "sigmoid_backward": (torch.sigmoid, True),
    "tanh_backward": (torch.tanh, True),
    "relu_backward": (torch.relu, True),
}


@pytest.mark.parametrize("op", sorted(GRAD_REF))
@FEW
@given(n=ROWS, d=COLS, dtype=DTYPES, seed=st.integers(0, 999))
def test_activation_backward_kernels_match_autograd(op, n, d, dtype, seed):
    fn, saves_output = GRAD_REF[op]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen).to(dtype)
    g = torch.randn(n, d, generator=gen).to(dtype)
    xf = x.float().requires_grad_(True)
    y = fn(xf)
    y.backward(g.float())
    saved = y.detach().to(dtype) if saves_output else x
    if saves_output:  # the reference from the same rounded saved output
        yf = saved.float()
        want = {
            "sigmoid_backward": g.float() * yf * (1 - yf),
            "tanh_backward": g.float() * (1 - yf * yf),
            "relu_backward": g.float() * (yf > 0),
        }[op]
    else:
        want = xf.grad
    close(full(K.GRAD_KERNELS[op])(g, saved), want.to(dtype), dtype, scale=4)


@FEW
@given(n=ROWS, d=COLS, src=DTYPES, dst=DTYPES, seed=st.integers(0, 999))
def test_cast_kernel_rounds_like_torch(n, d, src, dst, seed):
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(seed)).to(src)
    name = {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dst]
    assert torch.equal(full(K.cast_kernel)(x, dtype=name), x.to(dst))


@FEW
@given(n=ROWS, d=COLS, dtype=DTYPES, seed=st.integers(0, 999))
def test_where_kernel_matches_torch(n, d, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    c = torch.rand(n, d, generator=gen) > 0.5
    x, y = (torch.randn(n, d, generator=gen).to(dtype) for _ in range(2))
    got = full(K.where_kernel)(c.to(torch.uint8), x, y)
    assert torch.equal(got, torch.where(c, x, y))


MM = st.sampled_from([1, 37, 130])


@FEW
@given(m=MM, k=MM, n=st.sampled_from([1, 9, 520]), dtype=DTYPES, seed=st.integers(0, 999))
def test_matmul_addmm_bmm_kernels_match_torch(m, k, n, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(k, n, generator=gen).to(dtype)
    bias = torch.randn(1, n, generator=gen).to(dtype)
    want = a.float() @ b.float()
    scale = k**0.5
    close(full(K.matmul_kernel)(a, b), want.to(dtype), dtype, scale)
    close(
        full(K.addmm_kernel)(bias, a, b, beta=0.5, alpha=2.0),
        (0.5 * bias.float() + 2 * want).to(dtype),
        dtype,
        scale * 2,
    )
    close(
        full(K.bmm_kernel)(torch.stack([a, -a]), torch.stack([b, b])),
        torch.stack([want, -want]).to(dtype),
        dtype,
        scale,
    )
    close(full(K.sum_rows_kernel)(a), a.float().sum(0, keepdim=True).to(dtype), dtype, m**0.5)


RED_REF = {
    "sum_kernel": lambda x: x.sum(-1, keepdim=True),
    "mean_kernel": lambda x: x.mean(-1, keepdim=True),
    "amax_kernel": lambda x: x.amax(-1, keepdim=True),
    "softmax_kernel": lambda x: x.softmax(-1),
    "log_softmax_kernel": lambda x: x.log_softmax(-1),
    "cumsum_kernel": lambda x: x.cumsum(-1),
}


@pytest.mark.parametrize("name", sorted(RED_REF))
@FEW
@given(n=ROWS, d=COLS, dtype=DTYPES, seed=st.integers(0, 999))
def test_reduction_and_softmax_kernels_match_torch(name, n, d, dtype, seed):
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(seed)).to(dtype)
    close(full(getattr(K, name))(x), ref_bf16(RED_REF[name], x), dtype, d**0.5)


@FEW
@given(n=ROWS, d=COLS, dtype=DTYPES, seed=st.integers(0, 999))
def test_softmax_backward_kernels_match_torch(n, d, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen).to(dtype)
    g = torch.randn(n, d, generator=gen).to(dtype)
    y = x.float().softmax(-1).to(dtype)
    want = torch._softmax_backward_data(g.float(), y.float(), -1, torch.float32)
    close(full(K.softmax_backward_kernel)(g, y), want.to(dtype), dtype, 2)
    ly = x.float().log_softmax(-1).to(dtype)
    want = torch._log_softmax_backward_data(g.float(), ly.float(), -1, torch.float32)
    close(full(K.log_softmax_backward_kernel)(g, ly), want.to(dtype), dtype, 2)


@FEW
@given(n=ROWS, d=st.sampled_from([7, 64, 130]), dtype=DTYPES, seed=st.integers(0, 999))
def test_norm_kernels_forward_and_backward_match_autograd(n, d, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen).to(dtype)
    w = torch.randn(d, generator=gen).to(dtype)
    b = torch.randn(d, generator=gen).to(dtype)
    g = torch.randn(n, d, generator=gen).to(dtype)
    scale = 4 * n**0.5
    xf, wf, bf = (t.float().requires_grad_(True) for t in (x, w, b))
    y = F.rms_norm(xf, (d,), wf, 1e-6)
    y.backward(g.float())
    got, rstd = full(K.rms_norm_kernel)(x, w[None], eps=1e-6)
    close(got, y.detach().to(dtype), dtype, 4)
    dx, dw = full(K.rms_norm_backward_kernel)(g, x, w[None], rstd)
    close(dx, xf.grad.to(dtype), dtype, scale)
    close(dw[0], wf.grad.to(dtype), dtype, scale)
    xf.grad = wf.grad = None
    y = F.layer_norm(xf, (d,), wf, bf)
    y.backward(g.float())
    got, mean, rstd = full(K.layer_norm_kernel)(x, w[None], b[None])
    close(got, y.detach().to(dtype), dtype, 4)
    dx, dw, db = full(K.layer_norm_backward_kernel)(g, x, mean, rstd, w[None])
    close(dx, xf.grad.to(dtype), dtype, scale)
    close(dw[0], wf.grad.to(dtype), dtype, scale)
    close(db[0], bf.grad.to(dtype), dtype, scale)


@pytest.mark.parametrize("n", [1, 32, 130, 300])
@pytest.mark.parametrize(
    "start, step, dtype",
    [
        (0, 1, "int32"),
        (5, -2, "int32"),
        (0, 1, "float32"),
        (0, 1, "bfloat16"),
        (0.0, 0.5, "float32"),
        (0, -1.0, "float16"),
        (-3.0, 0.1, "float32"),
        (2.5, 3.0, "bfloat16"),
    ],
)
def test_arange_kernel_matches_fp32_arithmetic(n, start, step, dtype):
    got = full(K.arange_kernel)(n=n, start=start, step=step, dtype=dtype)
    i = np.arange(n, dtype=np.float32)[:, None]
    if dtype == "int32":
        want = (start + step * np.arange(n, dtype=np.int64)[:, None]).astype(np.int32)
    else:  # fp32 arithmetic, rounded once to the dtype (exact where the products are)
        f32 = (i * np.float32(step) + np.float32(start)).astype(np.float32)
        want = f32.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype))
    assert got.dtype == want.dtype and got.shape == (n, 1)
    assert np.array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8))


@FEW
@given(n=ROWS, v=st.sampled_from([3, 130]), d=COLS, dtype=DTYPES, seed=st.integers(0, 999))
def test_embedding_kernels_match_torch(n, v, d, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(v, d, generator=gen).to(dtype)
    idx = torch.randint(0, v, (n, 1), generator=gen, dtype=torch.int32)
    assert torch.equal(full(K.embedding_kernel)(w, idx), w[idx[:, 0].long()])
    g = torch.randn(n, d, generator=gen).to(dtype)
    want = torch.ops.aten.embedding_dense_backward(g.float(), idx[:, 0].long(), v, -1, False)
    close(full(K.embedding_backward_kernel)(g, idx, num_weights=v), want.to(dtype), dtype, n**0.5)


def test_embedding_backward_over_several_psum_tiles_of_columns():
    gen = torch.Generator().manual_seed(3)
    g = torch.randn(37, 1030, generator=gen)  # (two full 512-column tiles and a ragged one)
    idx = torch.randint(0, 5, (37, 1), generator=gen, dtype=torch.int32)
    want = torch.ops.aten.embedding_dense_backward(g, idx[:, 0].long(), 5, -1, False)
    close(full(K.embedding_backward_kernel)(g, idx, num_weights=5), want, torch.float32, 37**0.5)


@FEW
@given(b=st.sampled_from([1, 2]), r=MM, c=MM, dtype=DTYPES, seed=st.integers(0, 999))
def test_transpose_kernel_is_exact(b, r, c, dtype, seed):
    x = torch.randn(b, r, c, generator=torch.Generator().manual_seed(seed)).to(dtype)
    assert torch.equal(full(K.transpose_kernel)(x), x.transpose(1, 2))


@FEW
@given(
    bh=st.sampled_from([1, 2]),
    s=st.sampled_from([1, 16, 130]),
    d=st.sampled_from([8, 32]),
    causal=st.booleans(),
    dtype=DTYPES,
    seed=st.integers(0, 999),
)
def test_flash_attention_kernels_match_torch_sdpa(bh, s, d, causal, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    q, k, v, g = (torch.randn(bh, s, d, generator=gen).to(dtype) for _ in range(4))
    qf, kf, vf = (t.float().requires_grad_(True) for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal)
    ref.backward(g.float())
    sc = d**-0.5
    out, lse = full(K.attention_kernel)(q, k, v, scale=sc, causal=causal)
    close(out, ref.detach().to(dtype), dtype, 2)
    grads = full(K.attention_backward_kernel)(g, q, k, v, out, lse, scale=sc, causal=causal)
    for got, want in zip(grads, (qf.grad, kf.grad, vf.grad)):
        close(got, want.to(dtype), dtype, 4 * s**0.5)


@FEW
@given(
    n=st.sampled_from([1, 2]),
    ci=st.sampled_from([1, 3]),
    co=st.sampled_from([2, 5]),
    h=st.sampled_from([5, 8]),
    k=st.sampled_from([1, 3]),
    stride=st.sampled_from([1, 2]),
    dtype=DTYPES,
    seed=st.integers(0, 999),
)
def test_conv2d_kernel_matches_torch(n, ci, co, h, k, stride, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, ci, h, h, generator=gen).to(dtype)
    w = torch.randn(co, ci, k, k, generator=gen).to(dtype)
    b = torch.randn(co, generator=gen).to(dtype)
    pad = k // 2
    got = full(K.conv2d_kernel)(x, w, b[:, None], stride=stride, padding=pad)
    xf, wf = x.float().requires_grad_(True), w.float().requires_grad_(True)
    want = F.conv2d(xf, wf, b.float(), stride=stride, padding=pad)
    close(got, want.detach().to(dtype), dtype, 2 * (ci * k * k) ** 0.5)
    g = torch.randn(want.shape, generator=gen).to(dtype)
    want.backward(g.float())
    gx = full(K.conv2d_input_grad_kernel)(g, w, h=h, wd=h, stride=stride, padding=pad)
    close(gx, xf.grad.to(dtype), dtype, 2 * (co * k * k) ** 0.5)
    gw = full(K.conv2d_weight_grad_kernel)(g, x, kh=k, kw=k, stride=stride, padding=pad)
    close(gw, wf.grad.to(dtype), dtype, 2 * (n * h * h) ** 0.5)


# (B, H, Hk, Sq, Sk, D, causal, additive mask, dtype): blocks of a whole short sequence, of
# 128 with a ragged tail, two full blocks; grouped-query heads; a decode step (Sq < Sk)
ATTENTION_CASES = [
    (2, 4, 2, 32, 32, 32, True, False, torch.float32),  # the tiny Llama of model_runs.py
    (1, 2, 2, 130, 130, 16, True, False, torch.bfloat16),
    (1, 1, 1, 256, 256, 8, True, False, torch.float32),
    (2, 2, 1, 5, 40, 8, False, True, torch.float32),
    (1, 2, 1, 1, 130, 32, False, False, torch.bfloat16),
    (1, 2, 2, 24, 136, 16, True, True, torch.float32),
]


@pytest.mark.parametrize("b, h, hk, sq, sk, d, causal, masked, dtype", ATTENTION_CASES)
def test_attention_layouts_match_torch(b, h, hk, sq, sk, d, causal, masked, dtype):
    gen = torch.Generator().manual_seed(sq * 1000 + sk)
    q = torch.randn(b * h, sq, d, generator=gen).to(dtype)
    k, v = (torch.randn(b * hk, sk, d, generator=gen).to(dtype) for _ in range(2))
    g = torch.randn(b * h, sq, d, generator=gen).to(dtype)
    mask = torch.randn(b, 1, sq, sk, generator=gen) if masked else None
    qf, kf, vf = (t.float().requires_grad_(True) for t in (q, k, v))

    def grouped(t):  # (B*Hk, S, D) -> (B, H, S, D), each key/value head shared by H/Hk heads
        return t.reshape(b, hk, sk, d).repeat_interleave(h // hk, dim=1)

    bias = torch.zeros(sq, sk) if mask is None else mask
    if causal:  # torch's is_causal: top-left aligned, key j <= query i
        bias = bias.masked_fill(torch.ones(sq, sk, dtype=torch.bool).tril().logical_not(), -1e30)
    ref = F.scaled_dot_product_attention(qf.reshape(b, h, sq, d), grouped(kf), grouped(vf), bias)
    ref.backward(g.float().reshape(b, h, sq, d))
    sc = d**-0.5
    kw = {"scale": sc, "causal": causal, "heads": h}
    out, lse = full(K.attention_kernel)(q, k, v, mask, **kw)
    close(out, ref.detach().reshape(b * h, sq, d).to(dtype), dtype, 2)
    grads = full(K.attention_backward_kernel)(g, q, k, v, out, lse, mask, **kw)
    for got, want in zip(grads, (qf.grad, kf.grad, vf.grad)):
        close(got, want.to(dtype), dtype, 4 * sk**0.5)
    # inference: the same output bits without the log-sum-exp's instructions and tensor
    kernel = full(K.attention_kernel)
    kernel(q, k, v, mask, **kw)
    with_ir = kernel.last_ir
    assert torch.equal(kernel(q, k, v, mask, with_lse=False, **kw), out)
    without_ir = kernel.last_ir
    assert len(without_ir.outputs) == 1 and len(with_ir.outputs) == 2
    assert len(list(without_ir.instructions())) < len(list(with_ir.instructions()))


# (n, ci, co, h, w, k, stride, padding, dtype, SBUF budget in bytes per partition: small ones
# split the planes into blocks of output rows, the weights into kernel-row / channel groups)
CONV_CASES = [
    (4, 3, 8, 8, 8, 3, 1, 1, torch.float32, None),  # the CNN of benchmarks/model_runs.py
    (2, 8, 8, 4, 4, 3, 1, 1, torch.bfloat16, None),
    (1, 130, 5, 6, 7, 3, 2, 1, torch.float32, None),  # ragged input-channel tiles
    (1, 4, 130, 5, 5, 3, 1, 2, torch.bfloat16, None),  # ragged output-channel tiles
    (2, 3, 4, 9, 7, 3, 2, 0, torch.bfloat16, None),
    (1, 1, 3, 6, 5, 2, 2, 2, torch.float32, None),  # one input channel, even kernel
    (2, 5, 3, 4, 4, 1, 2, 0, torch.float32, None),  # 1x1
    (1, 2, 3, 1, 1, 1, 3, 1, torch.float32, None),  # windows of padding only
    (1, 256, 3, 5, 5, 3, 1, 1, torch.float32, None),
    (1, 3, 8, 8, 8, 3, 1, 1, torch.float32, 600),  # blocks of output rows
    (2, 3, 4, 20, 9, 3, 1, 1, torch.float32, 370),  # edge blocks and a run of inner ones
    (1, 3, 8, 8, 8, 3, 2, 2, torch.bfloat16, 170),  # kernel-row groups
    (1, 260, 4, 6, 6, 3, 1, 1, torch.float32, 500),  # channel groups and row blocks
]


@pytest.mark.parametrize("n, ci, co, h, w, k, stride, pad, dtype, budget", CONV_CASES)
def test_conv2d_forward_layouts_match_torch(n, ci, co, h, w, k, stride, pad, dtype, budget):
    gen = torch.Generator().manual_seed(ci * 100 + h)
    x = torch.randn(n, ci, h, w, generator=gen).to(dtype)
    wt = torch.randn(co, ci, k, k, generator=gen).to(dtype)
    b = torch.randn(co, generator=gen).to(dtype)
    extra = {} if budget is None else {"sbuf_budget": budget}
    got = full(K.conv2d_kernel)(x, wt, b[:, None], stride=stride, padding=pad, **extra)
    want = F.conv2d(x.float(), wt.float(), b.float(), stride=stride, padding=pad)
    assert got.shape == want.shape
    close(got, want.to(dtype), dtype, 2 * (ci * k * k) ** 0.5)


# (m, h, w, kernel, stride, padding, dtype, SBUF budget)
POOL_CASES = [
    (32, 8, 8, 2, 2, 0, torch.float32, None),  # the CNN's max pool
    (130, 7, 5, 3, 2, 1, torch.bfloat16, None),  # ragged plane tiles
    (3, 9, 9, 3, 1, 1, torch.float32, None),
    (2, 5, 6, 1, 2, 0, torch.float32, None),  # 1x1
    (4, 11, 10, 3, 2, 1, torch.float32, 800),  # blocks of output rows
    (3, 30, 8, 3, 1, 1, torch.float32, 700),  # edge blocks and a run of inner ones
    (5, 12, 7, 2, 1, 1, torch.bfloat16, 600),
]


@pytest.mark.parametrize("m, h, w, k, s, p, dtype, budget", POOL_CASES)
def test_pool2d_forward_layouts_match_torch(m, h, w, k, s, p, dtype, budget):
    x = torch.randn(m, h, w, generator=torch.Generator().manual_seed(m + h)).to(dtype)
    extra = {} if budget is None else {"sbuf_budget": budget}
    want, want_idx = F.max_pool2d(x[None], k, s, p, return_indices=True)
    assert torch.equal(
        full(K.max_pool2d_kernel)(x, kernel=k, stride=s, padding=p, **extra), want[0]
    )
    got, idx = full(K.max_pool2d_indices_kernel)(x, kernel=k, stride=s, padding=p, **extra)
    assert torch.equal(got, want[0]) and torch.equal(idx.long(), want_idx[0])
    got = full(K.avg_pool2d_kernel)(x, kernel=k, stride=s, padding=p, **extra)
    close(got, F.avg_pool2d(x.float()[None], k, s, p)[0].to(dtype), dtype)


@FEW
@given(
    m=st.sampled_from([1, 6, 130]),
    h=st.sampled_from([4, 7]),
    window=st.sampled_from([(2, 2, 0), (3, 2, 1), (3, 1, 1)]),
    dtype=DTYPES,
    seed=st.integers(0, 999),
)
def test_pool2d_kernels_match_torch(m, h, window, dtype, seed):
    k, s, p = window
    x = torch.randn(m, h, h, generator=torch.Generator().manual_seed(seed)).to(dtype)
    got = full(K.max_pool2d_kernel)(x, kernel=k, stride=s, padding=p)
    want, want_idx = F.max_pool2d(x[None], k, s, p, return_indices=True)
    assert torch.equal(got, want[0])
    got, idx = full(K.max_pool2d_indices_kernel)(x, kernel=k, stride=s, padding=p)
    assert torch.equal(got, want[0]) and torch.equal(idx.long(), want_idx[0])
    got = full(K.avg_pool2d_kernel)(x, kernel=k, stride=s, padding=p)
    close(got, F.avg_pool2d(x.float()[None], k, s, p)[0].to(dtype), dtype)
    g = torch.randn(want.shape[1:], generator=torch.Generator().manual_seed(seed + 1)).to(dtype)
    for pool, kernel, extra in (
        (lambda t: F.max_pool2d(t, k, s, p), K.max_pool2d_backward_kernel, (idx,)),
        (lambda t: F.avg_pool2d(t, k, s, p), K.avg_pool2d_backward_kernel, ()),
    ):
        xf = x.float()[None].requires_grad_(True)
        pool(xf).backward(g.float()[None])
        got = full(kernel)(g, *extra, h=h, wd=h, kernel=k, stride=s, padding=p)
        close(got, xf.grad[0].to(dtype), dtype, k)


def test_library_kernel_errors_point_at_the_library_kernel_line():
    from nki.errors import NKIError

    x = torch.zeros(4, 100_000)  # far beyond the documented D <= 4096: SBUF overflows
    with pytest.raises(NKIError) as e:
        K.softmax_kernel(x)
    assert e.value.code == "err_sbuf_capacity_exceeded"
    assert "/nki/kernels/" in e.value.loc.file, e.value.loc
