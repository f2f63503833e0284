"""Quick start: a 2-layer MLP with SiLU trained through torch.compile(backend="nki").

Run: python tutorials/torch_backend/mlp.py
The compiled model and an eager copy train side by side for three SGD steps (fp32); every
linear layer (addmm / mm), the SiLU and its backward and the bias-gradient sums run as NKI
kernels on the simulator. Prints the per-step output and gradient differences, the report of
the forward and backward graphs, and PASS / FAIL (within 1e-5 / 1e-4 relative)."""

from __future__ import annotations

import sys

import torch
from models import MLP, train_side_by_side

import frontends.torch as ft
from frontends import torch_backend as tb


def main() -> int:
    ft.init_backend(log_level="INFO")  # print each graph's report after its first run
    torch.manual_seed(0)
    ok = True
    steps = train_side_by_side(MLP(64, 128, 16), lambda s: torch.randn(32, 64), steps=3)
    for step, out_diff, grad_diff in steps:
        good = out_diff <= 1e-5 and grad_diff <= 1e-4
        ok &= good
        verdict = "ok" if good else "TOO LARGE"
        print(f"step {step}: output {out_diff:.2e}, gradients {grad_diff:.2e} {verdict}")
    ok &= all(not r.fallbacks for r in tb.reports())
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
