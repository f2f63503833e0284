"""A small transformer block in bfloat16 trained through torch.compile(backend="nki").

Run: python tutorials/torch_backend/transformer_block.py
Embedding, rms_norm (the fused nki::rms_norm kernels), causal scaled-dot-product attention
(the flash-style attention kernels), SiLU MLP and residuals, compiled and eager side by side
for two SGD steps. Prints the differences and PASS / FAIL: bf16 rounds every stored value, so
outputs must agree within 2e-2 and gradients within 5e-2 of the reference's scale."""

from __future__ import annotations

import sys

import torch
from models import Block, train_side_by_side

import frontends.torch as ft
from frontends import torch_backend as tb


def main() -> int:
    ft.init_backend(log_level="WARNING")
    torch.manual_seed(0)
    ok = True
    model = Block(vocab=50, d=64, heads=4, hidden=128).to(torch.bfloat16)
    for step, out_diff, grad_diff in train_side_by_side(
        model, lambda s: torch.randint(0, 50, (2, 16)), steps=2
    ):
        good = out_diff <= 2e-2 and grad_diff <= 5e-2
        ok &= good
        verdict = "ok" if good else "TOO LARGE"
        print(f"step {step}: output {out_diff:.2e}, gradients {grad_diff:.2e} {verdict}")
    for rep in tb.reports():
        print(rep)
        ok &= not rep.fallbacks
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
