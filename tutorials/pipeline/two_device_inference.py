"""Pipeline tutorial: inference through a CPU device and a simulated NeuronCore.

Run: python tutorials/pipeline/two_device_inference.py
A CPU device embeds token ids (a PyTorch module, run eagerly); a NeuronCore device classifies
the embeddings with a module written in the named op set (``Matmul`` with a bias, ``Gelu``,
``Softmax``), whose ATen ops run as NKI kernels on the simulator. The devices work in their
own threads, the embeddings pass between them through a queue, and six microbatches stream
through. Every output is checked against the same computation in plain torch (fp32, within
1e-5); the script prints the NeuronCore's estimated device time per microbatch and writes the
pipeline's Perfetto trace. Prints PASS / FAIL."""

from __future__ import annotations

import os
import sys
import tempfile

import torch
from torch import nn

import frontends.pipeline as pb
from frontends.pipeline import ops


class Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(100, 32)

    def forward(self, tokens):
        return self.table(tokens).mean(dim=1)


class Classifier(pb.OpModule):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.w1 = pb.Parameter(torch.randn(32, 64) / 6)
        self.b1 = pb.Parameter(torch.zeros(64))
        self.w2 = pb.Parameter(torch.randn(64, 10) / 8)

    def forward(self, x):
        h = ops.Gelu("gelu", ops.Matmul("fc1", x, self.w1, bias=self.b1))
        return ops.Softmax("probs", ops.Matmul("fc2", h, self.w2), dim=-1)


def main() -> int:
    torch.manual_seed(0)
    embed, classifier = Embed(), Classifier("classifier")
    pb.CPUDevice("cpu0", module=pb.PyTorchModule("embed", embed))
    nc1 = pb.NeuronCoreDevice("nc1", module=classifier)
    batches = [torch.randint(0, 100, (4, 12)) for _ in range(6)]
    outputs = pb.run_inference(inputs=[(b,) for b in batches], input_count=6, _sequential=True)
    ok = True
    w1, b1, w2 = (p.value().detach() for p in classifier.get_parameters())
    for i, tokens in enumerate(batches):
        (probs,) = outputs.get()
        x = embed(tokens).detach()
        want = torch.softmax(nn.functional.gelu(x @ w1 + b1) @ w2, dim=-1)
        diff = (probs.value() - want).abs().max().item()
        ok &= diff <= 1e-5
        ev = nc1.events[i]
        print(
            f"microbatch {i}: max |diff| {diff:.1e}; {nc1.name} estimated {ev.device_us:.1f} us "
            f"(simulated in {ev.seconds * 1e3:.0f} ms)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        path = pb.write_trace(os.path.join(tmp, "pipeline.json"))
        print(f"Perfetto trace: {os.path.getsize(path)} bytes (open in ui.perfetto.dev)")
    pb.shutdown()
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
