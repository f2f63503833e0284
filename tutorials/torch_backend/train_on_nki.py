"""Train a 2-layer SiLU MLP (fp32) and a small transformer block (bf16) through
torch.compile(backend="nki"), next to eager torch, and inject a user kernel for aten::gelu.

Run: python tutorials/torch_backend/train_on_nki.py
Every matmul, norm piece, softmax and activation runs as an NKI kernel on the simulator; the
script prints each step's output and gradient differences, the backend's report for the first
graph, and PASS / FAIL (fp32 within 1e-5 / 1e-4 relative, bf16 within 2e-2 / 5e-2)."""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from models import MLP, Block, train_side_by_side

import frontends.torch as ft
import nki
import nki.language as nl
from frontends import torch_backend as tb


@nki.jit
def gelu_tanh_kernel(x):
    """A user kernel for aten::gelu on (N, D) tiles with N <= 128: the tanh approximation."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.gelu_apprx_tanh(nl.load(x)))
    return out


def main() -> int:
    ft.init_backend(log_level="WARNING")
    torch.manual_seed(0)
    ok = True
    cases = (
        ("MLP fp32", MLP(64, 128, 16), lambda s: torch.randn(32, 64), (1e-5, 1e-4)),
        (
            "block bf16",
            Block(50, 64, 4, 128).to(torch.bfloat16),
            lambda s: torch.randint(0, 50, (2, 16)),
            (2e-2, 5e-2),
        ),
    )
    for name, model, make, (otol, gtol) in cases:
        for step, out_diff, grad_diff in train_side_by_side(model, make, steps=2):
            good = out_diff <= otol and grad_diff <= gtol
            ok &= good
            print(
                f"{name} step {step}: output {out_diff:.2e}, gradients {grad_diff:.2e} "
                f"{'ok' if good else 'TOO LARGE'}"
            )
    print(tb.reports()[0])

    # inject a kernel: aten::gelu on 2-D inputs of <= 128 rows runs gelu_tanh_kernel
    tb.register_kernel(
        "aten::gelu",
        gelu_tanh_kernel,
        guard=lambda x, *a, **k: None if x.dim() == 2 and x.shape[0] <= 128 else "shape",
    )
    x = torch.randn(16, 32)
    got = torch.compile(lambda t: F.gelu(t), backend="nki")(x)
    err = (got - F.gelu(x, approximate="tanh")).abs().max().item()
    used = "gelu_tanh_kernel" in tb.reports()[-1].kernel_calls
    ok &= err < 1e-6 and used
    print(f"injected gelu kernel ran: {used}, max |diff| vs torch tanh-gelu {err:.2e}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
