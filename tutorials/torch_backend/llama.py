"""A Hugging Face Llama on simulated NeuronCores with torch.compile(backend="nki").

Run: python tutorials/torch_backend/llama.py              (one process)
     torchrun --nproc-per-node 2 tutorials/torch_backend/llama.py   (tensor parallel, 2 or 4)

One process: a tiny Llama built from a config (random weights: no download) runs forward,
greedy ``generate()`` and one training step compiled with the "nki" backend next to an eager
copy, then prints the per-op report (kernels, counts, estimated device time). Under torchrun
every rank holds a shard of the same model (column-parallel q/k/v/gate/up projections,
row-parallel o/down projections followed by an all-reduce, attention heads split across ranks)
and simulates its own NeuronCore; the all-reduces run as the simulator's collective kernel on
data exchanged through the gloo process group. Each part checks itself against eager torch
(the unsharded model for the tensor-parallel run) and the script prints PASS or FAIL."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import transformers

import frontends.torch as ft
from frontends import torch_backend as tb

CONFIG = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=1,
    num_attention_heads=8,
    num_key_value_heads=4,
    max_position_embeddings=128,
)


def tiny_llama(seed: int = 0) -> transformers.LlamaForCausalLM:
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).eval()


class RowParallelLinear(nn.Module):
    """y = all_reduce(x_shard @ W_shard^T) + b: this rank's slice of the input features."""

    def __init__(self, full: nn.Linear, rank: int, world: int, group: object) -> None:
        super().__init__()
        cols = full.in_features // world
        self.weight = nn.Parameter(full.weight.detach()[:, rank * cols : (rank + 1) * cols].clone())
        self.bias = None if full.bias is None else nn.Parameter(full.bias.detach().clone())
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.distributed import _functional_collectives as funcol

        y = funcol.all_reduce(F.linear(x, self.weight), "sum", self.group)
        return y if self.bias is None else y + self.bias


def _column_shard(lin: nn.Linear, rank: int, world: int) -> None:
    """Keep this rank's slice of the output features (a column-parallel linear)."""
    rows = lin.out_features // world
    lin.weight = nn.Parameter(lin.weight.detach()[rank * rows : (rank + 1) * rows].clone())
    if lin.bias is not None:
        lin.bias = nn.Parameter(lin.bias.detach()[rank * rows : (rank + 1) * rows].clone())
    lin.out_features = rows


def tensor_parallel(model: transformers.LlamaForCausalLM, group: object = None) -> None:
    """Shard ``model`` in place over the ranks of ``group`` (heads and MLP columns split; the
    embedding, norms and LM head replicated)."""
    group = group if group is not None else dist.group.WORLD
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    cfg = model.config
    if cfg.num_key_value_heads % world or cfg.intermediate_size % world:
        raise ValueError(f"{world} ranks do not divide the heads / MLP of {cfg}")
    for layer in model.model.layers:
        att, mlp = layer.self_attn, layer.mlp
        for lin in (att.q_proj, att.k_proj, att.v_proj, mlp.gate_proj, mlp.up_proj):
            _column_shard(lin, rank, world)
        att.o_proj = RowParallelLinear(att.o_proj, rank, world, group)
        mlp.down_proj = RowParallelLinear(mlp.down_proj, rank, world, group)


def single_process() -> bool:
    ft.init_backend(log_level="WARNING")
    model, eager = tiny_llama(), tiny_llama()
    ids = torch.randint(
        0, CONFIG["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(1)
    )
    compiled = torch.compile(model.forward, backend="nki")
    ok = True

    with torch.no_grad():
        err = (compiled(ids).logits - eager(ids).logits).abs().max().item()
    ok &= err < 1e-5
    print(f"forward: max |logits - eager| = {err:.2e}")

    model.forward = compiled  # generate() calls the compiled forward
    prompt = ids[:1, :7]
    with torch.no_grad():
        got = model.generate(prompt, max_new_tokens=5, do_sample=False)
        want = eager.generate(prompt, max_new_tokens=5, do_sample=False)
    ok &= torch.equal(got, want)
    print(f"generate: {got[0, 7:].tolist()} (eager {want[0, 7:].tolist()})")

    model.train(), eager.train()
    loss = compiled(ids, labels=ids).loss
    ref = eager(ids, labels=ids).loss
    loss.backward()
    ref.backward()
    scale = max(p.grad.abs().max().item() for p in eager.parameters())
    gerr = max(
        (p.grad - q.grad).abs().max().item() for p, q in zip(model.parameters(), eager.parameters())
    )
    ok &= abs(loss.item() - ref.item()) < 1e-5 and gerr < 1e-5 * scale
    print(
        f"training step: loss {loss.item():.6f} (eager {ref.item():.6f}), "
        f"max |grad diff| {gerr:.2e}"
    )

    fwd = next(r for r in reversed(tb.reports()) if r.name.startswith("forward"))
    print(fwd)
    device_us = sum(fwd.kernel_device_us.values())
    print(f"estimated device time of one training forward: {device_us:.0f} us")
    return ok


def tensor_parallel_run() -> bool:
    dist.init_process_group("nki")  # gloo underneath; every rank simulates its own NeuronCore
    rank, world = dist.get_rank(), dist.get_world_size()
    ft.init_backend(rank=rank, world_size=world)
    full, model = tiny_llama(), tiny_llama()
    tensor_parallel(model)
    ids = torch.randint(
        0, CONFIG["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(1)
    )
    compiled = torch.compile(model.forward, backend="nki")
    with torch.no_grad():
        err = (compiled(ids).logits - full(ids).logits).abs().max().item()
        model.forward = compiled
        got = model.generate(ids[:1, :7], max_new_tokens=4, do_sample=False)
        want = full.generate(ids[:1, :7], max_new_tokens=4, do_sample=False)
    ok = err < 1e-5 and torch.equal(got, want)
    rep = tb.reports()[0]
    if rank == 0:
        print(rep)
    allreduce_us = rep.kernel_device_us.get("all_reduce_kernel", 0.0)
    print(
        f"rank {rank}/{world}: max |logits - unsharded| = {err:.2e}, generate "
        f"{'matches' if torch.equal(got, want) else 'DIFFERS'}, all_reduce_kernel x"
        f"{rep.kernel_calls.get('all_reduce_kernel', 0)} ({allreduce_us:.1f} us estimated)"
    )
    flags = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(flags, torch.tensor([1.0 if ok else 0.0]))
    dist.destroy_process_group()
    return all(f.item() == 1.0 for f in flags)


def main() -> int:
    ok = tensor_parallel_run() if "RANK" in os.environ else single_process()
    if os.environ.get("RANK", "0") == "0":
        print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    code = main()
    if "RANK" in os.environ:
        # torch's compiled-graph caches keep the process group alive past
        # destroy_process_group, so gloo's threads would be torn down while the interpreter
        # shuts down, which can abort (SIGABRT) a rank whose run has finished: a finished rank
        # leaves at once instead.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
