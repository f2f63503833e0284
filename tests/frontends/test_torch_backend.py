"""torch.compile(backend="nki"): models train like eager torch with their ops as NKI kernels;
the report, user kernels, guards and the cross-process IR cache."""

from __future__ import annotations

import copy
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
from nki.errors import NKIError

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
SDPA = {
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
}
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
    torch.compile(lambda t: torch.sin(t) + t.sum(0), backend="nki")(x)
    (rep,) = _new_reports(before)
    assert rep.fallbacks["aten::sin"] == "no kernel"
    assert rep.ran_as_nki("aten::add")
    xi = torch.arange(6, dtype=torch.int32)
    before = len(tb.reports())
    torch.compile(lambda t: t * 3, backend="nki")(xi)
    (rep,) = _new_reports(before)
    assert rep.fallbacks["aten::mul"].startswith("guard failed: dtype torch.int32")
    assert "aten::sin" in str(_new_reports(before - 1)[0])


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
    import subprocess

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


def test_readme_op_table_is_the_registry():
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = text.index("<!-- torch-backend-ops:begin")
    body = text[text.index("\n", start) + 1 : text.index("<!-- torch-backend-ops:end -->")]
    assert body.strip() == tb.registry_table().strip()


def test_readme_quick_start_runs(tmp_path, capsys):
    import re

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
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
