"""ModelBuilder: a tiny Llama-style decoder, tensor-parallel over two simulated NeuronCores,
with a KV cache, saved and loaded.

Run: python tutorials/model_builder/tiny_llama_tp.py
The model (written here: RMSNorm, rotary position embedding, causal attention reading a KV
cache, a SiLU-gated MLP, residuals) is built inside ``NxDParallelState(world_size=2,
tensor_model_parallel_size=2)``: the q / k / v / gate / up projections are
``ColumnParallelLinear`` (each rank holds half of the heads and of the MLP), the output and
down projections ``RowParallelLinear`` (partial sums all-reduced by the simulator's
collective kernel), the LM head a gathered ``ColumnParallelLinear``. Each rank's KV cache is a
state buffer holding its own heads, written in place by every call.

Two buckets: "prefill" (8 prompt tokens) and "decode" (1 token). The script generates 3
tokens greedily, checks every step's logits against the same model run eagerly on the CPU
(fp32, within 1e-4) and each rank's KV cache against the CPU cache's heads, then saves the
model, loads it back and generates again: the same tokens and bit-identical logits. Prints
PASS / FAIL."""

from __future__ import annotations

import math
import os
import sys
import tempfile

import torch
from torch import nn

from frontends.model_builder import (
    ColumnParallelLinear,
    ModelBuilder,
    NxDModel,
    NxDParallelState,
    RowParallelLinear,
    get_tensor_model_parallel_size,
    init_on_device,
    shard_checkpoint,
)

VOCAB, DIM, HEADS, HIDDEN, LAYERS, MAX_SEQ = 64, 32, 4, 64, 2, 16
HEAD_DIM = DIM // HEADS
TP = 2


def linear(parallel: bool, kind: str, n_in: int, n_out: int) -> nn.Module:
    if not parallel:
        return nn.Linear(n_in, n_out, bias=False)
    if kind == "column":
        return ColumnParallelLinear(n_in, n_out, bias=False, gather_output=False)
    return RowParallelLinear(n_in, n_out, bias=False, input_is_parallel=True)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, parallel: bool) -> None:
        super().__init__()
        tp = get_tensor_model_parallel_size() if parallel else 1
        self.heads = HEADS // tp  # this rank's heads
        self.q, self.k, self.v = (linear(parallel, "column", DIM, DIM) for _ in range(3))
        self.o = linear(parallel, "row", DIM, DIM)
        shape = (1, self.heads, MAX_SEQ, HEAD_DIM)
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))

    def forward(self, x, slots, mask, cos, sin):
        b, s, _ = x.shape

        def heads(t):
            return t.view(b, s, self.heads, HEAD_DIM).transpose(1, 2)

        q = rotate(heads(self.q(x)), cos, sin)
        k = rotate(heads(self.k(x)), cos, sin)
        v = heads(self.v(x))
        # write this call's keys and values at their positions (slots: one-hot, (s, MAX_SEQ))
        keep = (1 - slots.sum(0))[:, None]
        self.k_cache = self.k_cache * keep + torch.matmul(slots.t(), k)
        self.v_cache = self.v_cache * keep + torch.matmul(slots.t(), v)
        scores = torch.matmul(q, self.k_cache.transpose(-1, -2)) / math.sqrt(HEAD_DIM) + mask
        out = torch.matmul(torch.softmax(scores, dim=-1), self.v_cache)
        return self.o(out.transpose(1, 2).reshape(b, s, self.heads * HEAD_DIM))


class Block(nn.Module):
    def __init__(self, parallel: bool) -> None:
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(DIM), RMSNorm(DIM)
        self.attn = Attention(parallel)
        self.gate = linear(parallel, "column", DIM, HIDDEN)
        self.up = linear(parallel, "column", DIM, HIDDEN)
        self.down = linear(parallel, "row", HIDDEN, DIM)

    def forward(self, x, slots, mask, cos, sin):
        x = x + self.attn(self.norm1(x), slots, mask, cos, sin)
        h = self.norm2(x)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


class TinyLlama(nn.Module):
    def __init__(self, parallel: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block(parallel) for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.head = (
            ColumnParallelLinear(DIM, VOCAB, bias=False, gather_output=True)
            if parallel
            else nn.Linear(DIM, VOCAB, bias=False)
        )

    def forward(self, tokens, slots, mask, cos, sin):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, slots, mask, cos, sin)
        return self.head(self.norm(x))


def step_inputs(tokens: torch.Tensor, start: int) -> dict[str, torch.Tensor]:
    """The model's inputs for tokens at positions start, start + 1, ...: cache slots, the
    causal mask over the cache, and the rotary angles."""
    s = tokens.shape[1]
    pos = torch.arange(start, start + s)
    slots = torch.nn.functional.one_hot(pos, MAX_SEQ).float()
    mask = torch.where(torch.arange(MAX_SEQ)[None, :] <= pos[:, None], 0.0, -1e9)
    inv = 1.0 / 10000 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM)
    ang = torch.cat([pos[:, None] * inv] * 2, dim=-1)
    return {"tokens": tokens, "slots": slots, "mask": mask, "cos": ang.cos(), "sin": ang.sin()}


def generate(run, prompt: torch.Tensor, n: int) -> tuple[list[int], list[torch.Tensor]]:
    tokens, logits = [], []
    out = run(**step_inputs(prompt, 0))
    for i in range(n):
        logits.append(out[0, -1])
        tokens.append(int(out[0, -1].argmax()))
        out = run(**step_inputs(torch.tensor([[tokens[-1]]]), prompt.shape[1] + i))
    return tokens, logits


def main() -> int:
    torch.manual_seed(0)
    cpu = TinyLlama()
    checkpoint = dict(cpu.named_parameters())  # the weights; the KV caches start at zero
    prompt = torch.randint(0, VOCAB, (1, 8))
    with NxDParallelState(world_size=TP, tensor_model_parallel_size=TP):
        nxd = (
            ModelBuilder(TinyLlama(parallel=True))
            .trace(kwargs=step_inputs(prompt, 0), tag="prefill")
            .trace(kwargs=step_inputs(prompt[:, :1], 8), tag="decode")
            .compile()
        )
    with NxDParallelState(TP, TP), init_on_device(torch.device("meta")):
        meta = TinyLlama(parallel=True)
        shards = shard_checkpoint(checkpoint, meta)
    nxd.set_weights(shards)
    nxd.to_neuron()

    want_tokens, want_logits = generate(cpu, prompt, 3)
    tokens, logits = generate(nxd, prompt, 3)
    worst = max((a - b).abs().max().item() for a, b in zip(logits, want_logits))
    ok = tokens == want_tokens and worst <= 1e-4
    print(f"generated {tokens} (CPU: {want_tokens}); logits max |diff| {worst:.1e}")
    for rank in range(TP):  # each rank's cache holds its own heads of the whole cache
        mine = nxd.read_from_neuron_buffer("layers.1.attn.k_cache", rank)
        heads = cpu.layers[1].attn.k_cache[:, rank * HEADS // TP : (rank + 1) * HEADS // TP]
        same = torch.allclose(mine, heads, rtol=1e-4, atol=1e-5)
        ok &= same
        print(f"rank {rank}: KV cache heads match the CPU cache: {same}")
    for key in ("prefill", "decode"):
        print(
            f"bucket {key!r}: estimate {nxd.buckets[key].estimate['device_us']:.0f} us per "
            f"call (compute per rank + collectives)"
        )

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tiny_llama.nxd")
        nxd.save(path, save_weights=True)
        loaded = NxDModel.load(path)
        loaded.to_neuron()  # fresh (zero) KV caches
        again, again_logits = generate(loaded, prompt, 3)
        same = again == tokens and all(torch.equal(a, b) for a, b in zip(again_logits, logits))
        print(f"loaded from {os.path.getsize(path)} bytes: the same generation: {same}")
        ok &= same
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
