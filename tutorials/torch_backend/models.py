"""Models of the torch.compile(backend="nki") tutorials, and a trainer that runs a compiled
model next to its eager twin and compares outputs and parameter gradients step by step."""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    """The classic quick-start shape: Linear -> SiLU -> Linear."""

    def __init__(self, d_in: int = 64, hidden: int = 128, d_out: int = 16) -> None:
        super().__init__()
        self.up = nn.Linear(d_in, hidden)
        self.down = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.up(x)))


class Block(nn.Module):
    """Embedding, then one pre-norm transformer block: rms_norm, causal self-attention,
    residual, rms_norm, SiLU MLP, residual. Attention is ``F.scaled_dot_product_attention``
    (``sdpa=True``) or written out (q @ k^T, masked_fill, softmax, @ v)."""

    def __init__(
        self, vocab: int = 50, d: int = 64, heads: int = 4, hidden: int = 128, sdpa: bool = True
    ) -> None:
        super().__init__()
        self.heads = heads
        self.sdpa = sdpa
        self.emb = nn.Embedding(vocab, d)
        self.norm1 = nn.RMSNorm(d, eps=1e-6)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.norm2 = nn.RMSNorm(d, eps=1e-6)
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        b, s = ids.shape
        x = self.emb(ids)
        d = x.shape[-1]
        hd = d // self.heads
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        if self.sdpa:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-1, -2)) * hd**-0.5
            causal = torch.ones(s, s, dtype=torch.bool).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
            a = scores.softmax(-1) @ v
        a = a.transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(a)
        return x + self.down(F.silu(self.up(self.norm2(x))))


def train_side_by_side(model: nn.Module, make_input, steps: int = 3, lr: float = 0.05):
    """Train ``model`` compiled with backend "nki" and an eager copy with SGD for ``steps``
    steps on the same inputs; yields (step, output diff, worst parameter-gradient diff
    relative to the gradient's scale) per step. Returns nothing; stops after ``steps``."""
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="nki")
    opt_c = torch.optim.SGD(model.parameters(), lr=lr)
    opt_e = torch.optim.SGD(eager.parameters(), lr=lr)
    for step in range(steps):
        x = make_input(step)
        outs = []
        for m, opt in ((compiled, opt_c), (eager, opt_e)):
            opt.zero_grad()
            y = m(x)
            y.float().square().mean().backward()
            outs.append(y.detach().float())
        out_diff = (outs[0] - outs[1]).abs().max().item()
        grad_diff = max(
            (
                (pc.grad.float() - pe.grad.float()).abs().max()
                / (pe.grad.float().abs().max() + 1e-12)
            ).item()
            for pc, pe in zip(model.parameters(), eager.parameters())
        )
        yield step, out_diff / (outs[1].abs().max().item() + 1e-12), grad_diff
        opt_c.step()
        opt_e.step()
