"""torch.compile(backend="nki"): models train like eager torch with their ops as NKI kernels;
the report, user kernels, guards and the cross-process IR cache."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import frontends.torch as ft
import nki
import nki.kernels as K
import nki.language as nl
from frontends import torch_backend as tb
from frontends import torch_estimates
from nki.errors import NKIError

from snippets import site_table

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tutorials" / "torch_backend"))
from models import MLP, Block, train_side_by_side  # noqa: E402

# the ops whose every call must run as an NKI kernel in the example models
COMMON = {
    "aten::mm",
    "aten::addmm",
    "aten::silu",
    "aten::silu_backward",
    "nki::rms_norm",
    "nki::rms_norm_backward",
    "aten::embedding",
    "aten::embedding_dense_backward",
}
MANUAL_ATTENTION = {"aten::bmm", "aten::_softmax", "aten::_softmax_backward_data"}
SDPA = {"nki::sdpa", "nki::sdpa_backward"}
# (output, gradient) tolerances relative to the reference's scale
TOLS = {torch.float32: (1e-5, 1e-4), torch.bfloat16: (2e-2, 5e-2)}


def _new_reports(before: int) -> list:
    return tb.reports()[before:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_mlp_trains_like_eager_with_every_op_as_a_kernel(dtype):
    torch.manual_seed(0)
    before = len(tb.reports())
    model = MLP(64, 128, 16).to(dtype)
    out_tol, grad_tol = TOLS[dtype]
    for _, out_diff, grad_diff in train_side_by_side(
        model, lambda s: torch.randn(32, 64, generator=torch.Generator().manual_seed(s)).to(dtype)
    ):
        assert out_diff <= out_tol and grad_diff <= grad_tol, (out_diff, grad_diff)
    reps = _new_reports(before)
    assert {r.name.split()[0] for r in reps} == {"forward", "backward"}
    for r in reps:
        assert r.fallbacks == {}, str(r)
    fwd = next(r for r in reps if r.name.startswith("forward"))
    assert fwd.ran_as_nki("aten::addmm") and fwd.ran_as_nki("aten::silu")
    assert fwd.kernel_calls["addmm_kernel"] == 2 * fwd.runs

    # the cost model's device-time estimate per kernel, summed over launches
    def est(m, k, n):
        z = [torch.zeros(*sh, dtype=dtype) for sh in ((1, n), (m, k), (k, n))]
        return nki.estimate(K.addmm_kernel)(*z, beta=1.0, alpha=1.0).latency_us

    want = fwd.runs * (est(32, 64, 128) + est(32, 128, 16))
    assert fwd.kernel_device_us["addmm_kernel"] == pytest.approx(want, rel=1e-9)
    assert want > 0 and "us estimated on device" in str(fwd)


@pytest.mark.parametrize(
    "dtype, sdpa",
    [(torch.float32, False), (torch.bfloat16, True)],
    ids=["fp32-manual-attention", "bf16-sdpa"],
)
def test_transformer_block_trains_like_eager(dtype, sdpa):
    torch.manual_seed(1)
    before = len(tb.reports())
    model = Block(vocab=50, d=64, heads=4, hidden=128, sdpa=sdpa).to(dtype)
    must = COMMON | (SDPA if sdpa else MANUAL_ATTENTION)
    out_tol, grad_tol = TOLS[dtype]
    for _, out_diff, grad_diff in train_side_by_side(
        model, lambda s: torch.randint(0, 50, (2, 16)), steps=2
    ):
        assert out_diff <= out_tol and grad_diff <= grad_tol, (out_diff, grad_diff)
    reps = _new_reports(before)
    seen = set()
    for r in reps:
        for op in must & {s.op for s in r.ops.values()}:
            assert r.ran_as_nki(op), str(r)
            seen.add(op)
        # only building the constant causal mask may run on the CPU
        allowed = {"aten::ones", "aten::tril", "aten::bitwise_not"}
        assert set(r.fallbacks) <= allowed, str(r)
    assert seen == must


def test_attention_computes_the_log_sum_exp_only_for_the_backward(monkeypatch):
    torch._dynamo.reset()
    torch.manual_seed(2)
    model = Block(vocab=50, d=64, heads=4, hidden=128, sdpa=True)
    ids = torch.randint(0, 50, (2, 16))
    launched = []
    real = tb.launch_traced

    def spy(k, args, kwargs):
        if tb.kernel_name(k) == "attention_kernel":
            launched.append(kwargs["with_lse"])
        return real(k, args, kwargs)

    monkeypatch.setattr(tb, "launch_traced", spy)
    compiled = torch.compile(copy.deepcopy(model), backend="nki")
    with torch.no_grad():  # an inference graph: nothing reads the log-sum-exp
        torch.testing.assert_close(compiled(ids), model(ids), rtol=1e-5, atol=1e-5)
    assert launched == [False]
    out = compiled(ids)  # a training graph: the backward reads it
    out.sum().backward()
    torch.testing.assert_close(out, model(ids), rtol=1e-5, atol=1e-5)
    assert launched == [False, True]


@pytest.mark.parametrize("boolean", [True, False])
def test_attention_rows_with_every_key_masked_give_zeros_and_zero_gradients(boolean):
    """A left-padded batch's pad queries see no key: torch gives 0 there (not NaN), and the
    NaN would otherwise reach every token through the next layer."""
    torch._dynamo.reset()
    torch.manual_seed(3)
    q, k, v = (torch.randn(2, 2, 6, 8, requires_grad=True) for _ in range(3))
    keep = torch.ones(2, 1, 6, 6, dtype=torch.bool)
    keep[0, :, :2, :] = False  # (queries 0 and 1 of batch 0 see nothing)
    mask = keep if boolean else torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    want = f(q, k, v)
    grads = torch.autograd.grad(want.square().sum(), (q, k, v))
    before = len(tb.reports())
    got = torch.compile(f, backend="nki")(q, k, v)
    assert torch.equal(got[0, :, :2], torch.zeros_like(got[0, :, :2]))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(torch.autograd.grad(got.square().sum(), (q, k, v)), grads):
        assert not g.isnan().any()
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    reps = _new_reports(before)
    assert any(r.ran_as_nki("nki::sdpa") for r in reps)
    assert any(r.ran_as_nki("nki::sdpa_backward") for r in reps)


def test_attention_with_a_value_head_size_of_its_own():
    torch._dynamo.reset()
    torch.manual_seed(4)
    q, k = torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16)
    v = torch.randn(2, 4, 8, 5, requires_grad=True)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v) + v

    want = f(q, k, v)
    (gw,) = torch.autograd.grad(want.sum(), v)
    got = torch.compile(f, backend="nki")(q, k, v)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    (gg,) = torch.autograd.grad(got.sum(), v)
    torch.testing.assert_close(gg, gw, rtol=1e-5, atol=1e-5)


def test_narrow_integers_wrap_rsub_takes_alpha_and_a_3d_convolution_falls_back():
    torch._dynamo.reset()
    a = torch.tensor([[100, -100, 50, 7]], dtype=torch.int8)
    b = torch.tensor([[200, 10, 255, 0]], dtype=torch.uint8)
    c = torch.tensor([[300, -300, 1000, 1]], dtype=torch.int16)
    x = torch.randn(4, 8)
    conv = torch.nn.Conv3d(2, 3, 3, padding=1)
    vol = torch.randn(1, 2, 4, 5, 5)

    def f(a, b, c, x, vol):
        return a + a, a * 3, b - 10, c * c, torch.rsub(x, 2.0, alpha=3), conv(vol)

    with torch.no_grad():
        want = f(a, b, c, x, vol)
        got = torch.compile(f, backend="nki")(a, b, c, x, vol)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_integer_results_past_int32_follow_torch():
    """The engines saturate at int32's limits; torch keeps int64 values and wraps int32 ones."""
    torch._dynamo.reset()
    a = torch.tensor([[100000, 70000, -90000, 65536]])
    b = torch.tensor([[100000, 80000, 90000, 65536]])
    z = torch.tensor([[-(2**31) + 5, 7]])
    x = torch.tensor([[0.5, -3.0, 21.5, 0.01]])

    def f(a, b, z, x):
        return a * b, a.int() * b.int(), z - 10, -(z - 5).int(), (x * 1e8).to(torch.int64)

    with torch.no_grad():
        want = f(a, b, z, x)
        got = torch.compile(f, backend="nki")(a, b, z, x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and torch.equal(g, w), (g, w)


def test_max_argmax_and_topk_rank_nan_first_as_torch_does():
    torch._dynamo.reset()
    x = torch.tensor([[1.0, float("nan"), 3.0, 2.0], [4.0, 5.0, -1.0, 0.0]])

    def f(x):
        return x.max(dim=1), x.argmax(dim=1), x.topk(2, dim=1), x.max()

    with torch.no_grad():
        want = f(x)
        got = torch.compile(f, backend="nki")(x)
    torch.testing.assert_close(got, want, equal_nan=True)


@nki.jit
def double_gelu(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.gelu(nl.load(x)), 2.0))
    return out


def test_user_kernel_overrides_builtin_and_guard_falls_back():
    torch._dynamo.reset()
    before = len(tb.reports())
    tb.register_kernel(
        "aten::gelu", double_gelu, guard=lambda x, *a, **k: None if x.dim() == 2 else "not 2-D"
    )
    try:
        x = torch.randn(8, 32)
        got = torch.compile(lambda t: F.gelu(t), backend="nki")(x)
        torch.testing.assert_close(got, 2 * F.gelu(x))  # the user kernel ran, not the built-in
        x3 = torch.randn(2, 8, 32)
        got3 = torch.compile(lambda t: F.gelu(t) + 1, backend="nki")(x3)
        torch.testing.assert_close(got3, F.gelu(x3) + 1)  # guard failed: built-in kernel
    finally:
        tb.unregister_kernel("aten::gelu")
    first, second = _new_reports(before)
    assert first.ran_as_nki("aten::gelu") and "double_gelu" in first.kernel_calls
    assert second.ran_as_nki("aten::gelu") and "gelu_kernel" in second.kernel_calls


def test_custom_op_from_the_frontend_overrides_builtin_and_is_reported_as_a_kernel():
    torch._dynamo.reset()
    op = ft.custom_op("nkibackendtest::double_gelu", double_gelu)
    before = len(tb.reports())
    tb.register_kernel("aten::gelu", op)
    try:
        x = torch.randn(8, 32)
        got = torch.compile(lambda t: F.gelu(t) + op(t), backend="nki")(x)
    finally:
        tb.unregister_kernel("aten::gelu")
    torch.testing.assert_close(got, 4 * F.gelu(x))
    (rep,) = _new_reports(before)
    assert rep.ran_as_nki("aten::gelu")  # through the registered custom op
    assert rep.kernel_calls["nkibackendtest::double_gelu"] == 1
    assert rep.ran_as_nki("nkibackendtest::double_gelu")  # the custom op in the graph


def test_register_kernel_rejects_a_non_kernel_at_the_callers_line():
    with pytest.raises(NKIError, match="expected an NKI kernel") as e:
        tb.register_kernel("aten::gelu", 42)
    assert e.value.loc.line > 0 and e.value.loc.file.endswith("test_torch_backend.py")


def test_report_names_fallback_reasons():
    before = len(tb.reports())
    x = torch.randn(4, 6)
    torch.compile(lambda t: torch.atan(t) + t.sum(0), backend="nki")(x)
    (rep,) = _new_reports(before)
    assert rep.fallbacks["aten::atan"] == "no kernel"
    assert rep.ran_as_nki("aten::add")
    xi = torch.arange(6, dtype=torch.float64)
    before = len(tb.reports())
    torch.compile(lambda t: t * 3, backend="nki")(xi)
    (rep,) = _new_reports(before)
    assert rep.fallbacks["aten::mul"] == "guard failed: mul on torch.float64"
    assert "aten::atan" in str(_new_reports(before - 1)[0])


def test_layer_norm_gelu_log_softmax_forward_and_backward_run_as_kernels():
    torch.manual_seed(3)
    net = torch.nn.Sequential(
        torch.nn.Linear(32, 48),
        torch.nn.LayerNorm(48),
        torch.nn.GELU(approximate="tanh"),
        torch.nn.Linear(48, 10),
        torch.nn.LogSoftmax(-1),
    )
    twin = copy.deepcopy(net)
    x = torch.randn(20, 32)
    before = len(tb.reports())
    torch.compile(net, backend="nki")(x).sum().backward()
    twin(x).sum().backward()
    for p, q in zip(net.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    fwd, bwd = _new_reports(before)
    for op in ("aten::native_layer_norm", "aten::gelu", "aten::_log_softmax"):
        assert fwd.ran_as_nki(op), str(fwd)
    for op in (
        "aten::native_layer_norm_backward",
        "aten::gelu_backward",
        "aten::_log_softmax_backward_data",
    ):
        assert bwd.ran_as_nki(op), str(bwd)


def test_cnn_trains_with_convolution_and_pooling_fwd_bwd_as_kernels():
    torch.manual_seed(2)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 4, 3, padding=1),
        torch.nn.AvgPool2d(2),
    )
    twin = copy.deepcopy(net)
    x = torch.randn(2, 3, 8, 8)
    before = len(tb.reports())
    got = torch.compile(net, backend="nki")(x)
    want = twin(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    got.square().sum().backward()
    want.square().sum().backward()
    for p, q in zip(net.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    fwd, bwd = _new_reports(before)
    for op in ("aten::convolution", "aten::relu", "aten::max_pool2d_with_indices"):
        assert fwd.ran_as_nki(op), str(fwd)
    assert fwd.ran_as_nki("aten::avg_pool2d"), str(fwd)
    assert fwd.fallbacks == {}, str(fwd)
    for op in (
        "aten::convolution_backward",
        "aten::max_pool2d_with_indices_backward",
        "aten::avg_pool2d_backward",
        "aten::threshold_backward",
    ):
        assert bwd.ran_as_nki(op), str(bwd)
    assert bwd.fallbacks == {}, str(bwd)


def test_traced_kernels_are_cached_across_processes(tmp_path):
    """A second process (here: this one) reuses the IR the first traced for the same shapes."""
    import nki.kernels as K

    code = (
        "import torch, frontends.torch as ft, nki.kernels as K\n"
        f"ft.init_backend(cache_dir={str(tmp_path)!r}, target='trn2', checks='static')\n"
        "torch.compile(lambda a, b: a @ b, backend='nki')(torch.ones(7, 5), torch.ones(5, 3))\n"
        "print('ran')\n"
    )
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.stdout.split()[-1:] == ["ran"], proc.stderr[-2000:]
    assert list(tmp_path.glob("matmul_kernel-*.pkl"))
    ft.init_backend(cache_dir=str(tmp_path), target="trn2")  # the first process's target
    try:
        traced = K.matmul_kernel.trace_count
        a, b = torch.randn(7, 5), torch.randn(5, 3)
        torch._dynamo.reset()
        got = torch.compile(lambda a, b: a @ b, backend="nki")(a, b)
        torch.testing.assert_close(got, a @ b)
        assert K.matmul_kernel.trace_count == traced  # the IR came from the cache file
    finally:
        ft.init_backend()


def test_fused_programs_cached_by_another_process_run_their_own_program(tmp_path):
    """The fused kernel's trace key holds its program (a compile-time tuple): a cache file
    written by a process with other string hashes, which traced the programs in another order,
    gives each program its own IR here."""
    import nki.kernels as K

    code = (
        "import torch, frontends.torch as ft\n"
        f"ft.init_backend(cache_dir={str(tmp_path)!r})\n"
        "x = torch.ones(64, 128)\n"
        "for f in (lambda x: torch.cos(x) * 3.0 - 1.0, lambda x: torch.sin(x) * 2.0 + 1.0):\n"
        "    torch._dynamo.reset(); torch.compile(f, backend='nki')(x)\n"
        "print('ran')\n"
    )
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PATH": "/usr/bin:/bin",
           "PYTHONHASHSEED": "12345"}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.stdout.split()[-1:] == ["ran"], proc.stderr[-2000:]
    assert list(tmp_path.glob("fused_elementwise_kernel-*.pkl"))
    ft.init_backend(cache_dir=str(tmp_path))
    try:
        x = torch.randn(64, 128)
        for f in (lambda x: torch.sin(x) * 2.0 + 1.0, lambda x: torch.cos(x) * 3.0 - 1.0):
            traced = K.fused_elementwise_kernel.trace_count
            torch._dynamo.reset()
            torch.testing.assert_close(torch.compile(f, backend="nki")(x), f(x))
            assert K.fused_elementwise_kernel.trace_count == traced  # (from the file)
    finally:
        ft.init_backend()


def test_the_frontends_reference_op_table_is_the_registry():
    assert site_table("reference/frontends.md", "torch-backend-ops") == tb.registry_table().strip()


def test_the_models_guide_quick_start_runs(tmp_path, capsys):
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "models.md").read_text()
    section = text[text.index("## PyTorch models on NKI kernels") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    try:
        exec(code.replace("/tmp/nki-cache", str(tmp_path)), {})
    finally:
        ft.init_backend()
    out = capsys.readouterr().out
    assert "nki backend report: backward graph" in out and "matmul_kernel" in out


def test_init_backend_rejects_unknown_log_level():
    with pytest.raises(ValueError, match="log_level"):
        ft.init_backend(log_level="LOUD")
    ft.init_backend()


# ---- kernel injection: full signature, fallbacks, per-kernel counts ---------------------------


@nki.jit
def my_mul(x, y):
    """x * y for a scalar y: the kernel receives the op's scalar argument."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.load(x), y))
    return out


@nki.jit
def my_cat(tensors, dim=0):
    """torch.cat of 2-D tensors along dim 1: the kernel receives the list and the dim."""
    n = tensors[0].shape[0]
    total = sum(t.shape[1] for t in tensors)
    out = nl.ndarray((n, total), dtype=tensors[0].dtype, buffer=nl.shared_hbm)
    off = 0
    for t in tensors:
        i_p, i_f = nl.arange(n)[:, None], nl.arange(t.shape[1])[None, :]
        nl.store(out[i_p, off + i_f], nl.load(t[i_p, i_f]))
        off += t.shape[1]
    return out


def test_register_kernel_receives_the_ops_full_signature():
    # regression: "bad arguments for kernel 'my_mul': missing a required argument: 'y'"
    torch._dynamo.reset()
    before = len(tb.reports())
    tb.register_kernel("aten::mul", my_mul, guard=lambda x, y: None if _is_num(y) else "tensor")
    tb.register_kernel("aten::cat", my_cat, guard=lambda ts, dim=0: None if dim == 1 else "dim")
    try:
        x, y = torch.randn(8, 16), torch.randn(8, 4)
        got = torch.compile(lambda a, b: torch.cat([a * 3.0, b], dim=1), backend="nki")(x, y)
    finally:
        tb.unregister_kernel("aten::mul")
        tb.unregister_kernel("aten::cat")
    torch.testing.assert_close(got, torch.cat([x * 3.0, y], dim=1))
    (rep,) = _new_reports(before)
    assert rep.kernels_of("aten::mul") == {"my_mul": 1}
    assert rep.kernels_of("aten::cat") == {"my_cat": 1}


def _is_num(v):
    return isinstance(v, (int, float))


@nki.jit
def broken_gelu(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(x.shape[0] + 1)[:, None]  # one row too many: an out-of-bounds load
    nl.store(
        out[i_p, nl.arange(x.shape[1])[None, :]], nl.load(x[i_p, nl.arange(x.shape[1])[None, :]])
    )
    return out


def test_a_failing_or_refusing_user_kernel_falls_back_with_the_reason_recorded():
    torch._dynamo.reset()
    before = len(tb.reports())
    tb.register_kernel("aten::gelu", broken_gelu)
    tb.register_kernel("aten::tanh", double_gelu, guard=lambda x: "only for 3-D inputs")
    try:
        x = torch.randn(8, 32)
        got = torch.compile(lambda t: torch.tanh(F.gelu(t)), backend="nki")(x)
    finally:
        tb.unregister_kernel("aten::gelu")
        tb.unregister_kernel("aten::tanh")
    torch.testing.assert_close(got, torch.tanh(F.gelu(x)))
    (rep,) = _new_reports(before)
    (gelu,) = [s for s in rep.ops.values() if s.op == "aten::gelu"]
    assert gelu.status == "nki" and dict(gelu.kernels) == {"gelu_kernel": 1}
    assert gelu.reason.startswith("user kernel broken_gelu failed: NKI"), gelu.reason
    (tanh,) = [s for s in rep.ops.values() if s.op == "aten::tanh"]
    assert tanh.reason == "user kernel double_gelu refused: only for 3-D inputs"
    assert "refused: only for 3-D inputs" in str(rep)


def test_report_lists_every_kernel_an_op_used_with_counts():
    # regression: aten::add showed only its first call's kernel (add_scalar_kernel)
    before = len(tb.reports())
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    ft.init_backend(fuse=False)  # one kernel per op (fused, the chain is one launch)
    try:
        torch.compile(lambda a, b: ((a + 1.0) + b) + (b + a), backend="nki")(x, y)
    finally:
        ft.init_backend()
    (rep,) = _new_reports(before)
    assert rep.kernels_of("aten::add") == {"add_scalar_kernel": 1, "add_kernel": 3}
    assert "add_kernel x3, add_scalar_kernel x1" in str(rep)


@pytest.mark.parametrize("dynamic", [False, True])
def test_report_counts_every_view_call_of_every_run(dynamic):
    # views are called straight from the plan and counted once per run; with dynamic shapes
    # the reshape's sizes hold a graph input (a SymInt in a list): it runs node by node
    before = len(tb.reports())
    f = torch.compile(
        lambda a, b: (a.t() @ b).reshape(a.shape[1], -1, 2) * 2.0, backend="nki", dynamic=dynamic
    )
    for n in (16, 24, 16):
        a, b = torch.randn(n, 8), torch.randn(n, 4)
        torch.testing.assert_close(f(a, b), (a.t() @ b).reshape(8, -1, 2) * 2.0)
    counts = {}
    for rep in _new_reports(before):
        for s in rep.ops.values():
            counts[s.op, s.status] = counts.get((s.op, s.status), 0) + s.count
    assert counts == {("aten::t", "view"): 3, ("aten::view", "view"): 3,
                      ("aten::mm", "nki"): 3, ("aten::mul", "nki"): 3}  # fmt: skip


def test_on_cpu_and_cpu_ops_keep_work_on_the_cpu():
    before = len(tb.reports())
    head = tb.on_cpu(lambda t: torch.exp(t) * 2)
    x = torch.randn(4, 8)
    got = torch.compile(lambda t: head(torch.relu(t)) + 1, backend="nki")(x)
    torch.testing.assert_close(got, torch.exp(torch.relu(x)) * 2 + 1)
    (rep,) = _new_reports(before)
    assert rep.fallbacks == {"aten::exp": "kept on the CPU", "aten::mul": "kept on the CPU"}
    assert rep.ran_as_nki("aten::relu") and rep.ran_as_nki("aten::add")
    ft.init_backend(cpu_ops=("aten::relu",))
    try:
        torch._dynamo.reset()
        torch.compile(lambda t: torch.relu(t) + 1, backend="nki")(x)
    finally:
        ft.init_backend()
    assert tb.reports()[-1].fallbacks == {"aten::relu": "kept on the CPU"}


# ---- devices ---------------------------------------------------------------------------------


class StandInCuda(torch.Tensor):
    """A device stand-in where no GPU is present: reports device cuda:0 and, like a CUDA tensor,
    refuses to be read as NumPy; moves to the host and allocations on the device are counted."""

    moves = {"to_host": 0, "on_device": 0}

    @staticmethod
    def __new__(cls, data):
        return torch.Tensor._make_subclass(cls, data)

    @property
    def device(self):
        return torch.device("cuda", 0)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.Tensor.numpy, torch.Tensor.__array__, torch.Tensor.data_ptr):
            raise TypeError("can't convert cuda:0 device type tensor to numpy")
        to_host = func is torch.Tensor.cpu or (
            func is torch.Tensor.to and "cpu" in [str(a) for a in (*args[1:], *kwargs.values())]
        )
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
            if to_host:  # a plain CPU tensor with its own memory, as a device-to-host copy
                cls.moves["to_host"] += 1
                return out.as_subclass(torch.Tensor).clone()
            if func in (torch.Tensor.new_empty, torch.Tensor.new_zeros):
                cls.moves["on_device"] += 1
            if isinstance(out, torch.Tensor):
                return StandInCuda(out.as_subclass(torch.Tensor))
        return out


StandInCuda.__module__ = "torch.stand_in"  # a torch tensor type, as torch.Tensor on CUDA is


def test_device_tensors_go_to_the_host_and_come_back_on_their_device():
    # regression: "TypeError: can't convert cuda:0 device type tensor to numpy"
    a, b = torch.randn(256, 64), torch.randn(256, 64)
    da, db = StandInCuda(a), StandInCuda(b)
    with pytest.raises(TypeError, match="cuda:0"):
        da.numpy()
    StandInCuda.moves.update(to_host=0, on_device=0)
    got = K.BINARY_KERNELS["add"](da, db)  # a kernel launch
    assert isinstance(got, StandInCuda) and got.device.type == "cuda"
    assert StandInCuda.moves == {"to_host": 2, "on_device": 1}
    torch.testing.assert_close(got.as_subclass(torch.Tensor), a + b)
    op = ft.custom_op("nkibackendtest::device_gelu", double_gelu)  # a custom op
    res = op(StandInCuda(a[:8, :32]))
    assert res.device.type == "cuda"
    torch.testing.assert_close(
        res.as_subclass(torch.Tensor), 2 * F.gelu(a[:8, :32]), rtol=1e-5, atol=1e-5
    )
    # the compile backend's kernel path (adapter -> launch) returns device tensors too
    run = tb._Run(tb.GraphReport("device"))
    mm = tb.builtin_entry("aten::mm").adapter(run, da, StandInCuda(b.T.contiguous()))
    assert mm.device.type == "cuda" and run.used == ["matmul_kernel"]
    torch.testing.assert_close(mm.as_subclass(torch.Tensor), a @ b.T, rtol=1e-4, atol=1e-4)


def test_bfloat16_crosses_without_np_asarray_even_without_package_metadata(tmp_path):
    # regression (torch 2.11): "TypeError: Got unsupported ScalarType BFloat16" from
    # np.asarray(tensor) when the frontend was not found through entry points
    code = (
        "import nki.frameworks\n"
        "nki.frameworks._entry_points = {}\n"  # a source checkout without package metadata
        "import torch\n"
        "def refuse(self, *a, **k):\n"
        "    raise AssertionError('np.asarray of a torch tensor')\n"
        "torch.Tensor.__array__ = refuse\n"
        "import nki.kernels as K\n"
        "x = torch.randn(130, 24).to(torch.bfloat16)\n"
        "y = K.BINARY_KERNELS['mul'](x, x)\n"
        "assert y.dtype == torch.bfloat16\n"
        "assert torch.equal(y, x * x), (y - x * x).abs().max()\n"
        "print('ok')\n"
    )
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.stdout.split()[-1:] == ["ok"], proc.stderr[-2000:]


def test_init_backend_checks_rank_and_world_size():
    with pytest.raises(ValueError, match="rank 2 and world_size 2"):
        ft.init_backend(rank=2, world_size=2)
    ft.init_backend()


def test_device_time_estimates_wait_until_the_report_is_read(monkeypatch):
    a, b, c = torch.randn(64, 128), torch.randn(128, 32), torch.randn(32, 128)
    mm = tb.builtin_entry("aten::mm").adapter

    def launches(rep):
        run = tb._Run(rep)
        for _ in range(2):
            torch.testing.assert_close(mm(run, a, b), a @ b, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(mm(run, b, c), b @ c, rtol=1e-4, atol=1e-4)

    # a launch hook needs each launch's number when it runs: estimated at once
    seen = []
    monkeypatch.setattr(tb, "LAUNCH_HOOKS", [lambda name, us: seen.append((name, us))])
    monkeypatch.setattr(torch_estimates, "ESTIMATES", {})
    now = tb.GraphReport("hooked")
    launches(now)
    assert now._device_pending == [] and len(torch_estimates.ESTIMATES) == 2
    assert [n for n, _ in seen] == ["matmul_kernel"] * 4 and seen[0] == seen[2] != seen[1]
    assert now.kernel_device_us["matmul_kernel"] == sum(us for _, us in seen) > 0

    # without hooks, nothing is estimated until the sums are read; then the same sums
    monkeypatch.setattr(tb, "LAUNCH_HOOKS", [])
    monkeypatch.setattr(torch_estimates, "ESTIMATES", {})
    monkeypatch.setattr(torch_estimates, "WAITING", {})
    rep = tb.GraphReport("lazy")
    launches(rep)
    assert len(rep._device_pending) == 4 and torch_estimates.ESTIMATES == {}
    # (one waiting function per traced kernel, shared by its launches)
    assert len({id(us) for _, us in rep._device_pending}) == len(torch_estimates.WAITING) == 2
    assert rep.kernel_device_us == now.kernel_device_us
    assert rep._device_pending == [] and len(torch_estimates.ESTIMATES) == 2
    assert torch_estimates.WAITING == {}
    mm(tb._Run(rep), a, b)  # an estimated kernel adds its number at once
    assert rep._device_pending == []
    assert (
        rep.kernel_device_us["matmul_kernel"] == now.kernel_device_us["matmul_kernel"] + seen[0][1]
    )


def test_pending_device_estimates_are_bounded(monkeypatch):
    from frontends import torch_report

    monkeypatch.setattr(torch_report, "PENDING_LAUNCHES", 3)
    rep = tb.GraphReport("bounded")
    calls = []

    def later(us):
        return lambda: calls.append(us) or us

    for i, us in enumerate([later(1.0), 2.0, later(None), later(4.0)]):
        rep.add_device_us("k", us)
        assert len(rep._device_pending) == (i + 1) % 3
    assert calls == [1.0, None]  # the third pending launch settled the first three
    assert rep.kernel_device_us == {"k": 7.0} and calls == [1.0, None, 4.0]


def test_first_run_sets_older_objects_aside_and_gives_them_back(monkeypatch):
    """A compiled graph's compile and first run, which trace its kernels, happen with the
    objects made before them frozen (a full collection there would walk torch's whole heap);
    later runs, and the process after the block, see no frozen object, and garbage made
    before the block is still collected after it."""
    import gc
    import weakref

    from frontends.gc_window import new_objects_only

    seen: list[int] = []
    launch = tb.launch_traced

    def spy(*args, **kwargs):
        seen.append(gc.get_freeze_count())
        return launch(*args, **kwargs)

    monkeypatch.setattr(tb, "launch_traced", spy)
    torch._dynamo.reset()
    f = torch.compile(lambda a, b: torch.relu(a @ b), backend="nki")
    a, b = torch.randn(64, 32), torch.randn(32, 48)
    with torch.no_grad():
        torch.testing.assert_close(f(a, b), torch.relu(a @ b))
        first = len(seen)
        torch.testing.assert_close(f(a, b), torch.relu(a @ b))
    assert first > 0 and all(n > 0 for n in seen[:first]), seen
    assert seen[first:] and all(n == 0 for n in seen[first:]), seen
    assert gc.get_freeze_count() == 0

    class Cycle:
        pass

    c = Cycle()
    c.me = c
    gone = weakref.ref(c)
    with new_objects_only():
        assert gc.get_freeze_count() > 0
        del c
        gc.collect()
        assert gone() is not None  # (set aside: not scanned inside)
        with new_objects_only():  # (nested: the outer block's objects stay frozen)
            pass
        assert gc.get_freeze_count() > 0
    gc.collect()
    assert gone() is None and gc.get_freeze_count() == 0

    gc.freeze()  # the process's own frozen objects are left as they are
    try:
        held = gc.get_freeze_count()
        with new_objects_only():
            pass
        # not unfrozen (0) nor frozen again (more); a frozen object another thread frees leaves
        # the count meanwhile (seen once in a full run: 2 fewer)
        assert 0 < gc.get_freeze_count() <= held
    finally:
        gc.unfreeze()
