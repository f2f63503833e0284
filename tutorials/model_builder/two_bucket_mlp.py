"""ModelBuilder quick start: an MLP compiled for two batch sizes (two buckets).

Run: python tutorials/model_builder/two_bucket_mlp.py
``ModelBuilder(model).trace(..., tag=...)`` captures one graph per input shape; ``compile()``
turns each into a bucket whose ATen ops run as NKI kernels on a simulated NeuronCore, and a
call goes to the bucket whose traced shapes it matches. The script checks every bucket against
the eager model (fp32, within 1e-5), prints each bucket's estimated device time, saves the
model, loads it back and checks the loaded model gives bit-identical outputs. Prints PASS /
FAIL."""

from __future__ import annotations

import os
import sys
import tempfile

import torch
from torch import nn

from frontends.model_builder import ModelBuilder, NxDModel


def main() -> int:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.SiLU(), nn.Linear(128, 10))
    nxd = (
        ModelBuilder(model)
        .trace(args=torch.rand(8, 64), tag="batch8")
        .trace(args=torch.rand(32, 64), tag="batch32")
        .compile()
    )
    nxd.to_neuron()  # one rank: the weights the model was traced with
    ok = True
    outputs = {}
    for rows in (8, 32, 8):
        x = torch.rand(rows, 64)
        got = nxd(x)
        diff = (got - model(x)).abs().max().item()
        ok &= diff <= 1e-5
        outputs[rows] = (x, got)
        est = nxd.buckets[nxd.last_run.bucket].estimate
        print(
            f"batch {rows:2d} -> bucket {nxd.last_run.bucket!r}: max |diff| {diff:.1e}; "
            f"estimated device time {nxd.last_run.device_us[0]:.1f} us per call "
            f"({est['kernels']} kernels traced at compile time)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mlp.nxd")
        nxd.save(path, save_weights=True)
        loaded = NxDModel.load(path)
        loaded.to_neuron()
        same = all(torch.equal(loaded(x), got) for x, got in outputs.values())
        print(f"saved {os.path.getsize(path)} bytes; loaded model bit-identical: {same}")
        ok &= same
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
