"""Pipeline tutorial: training across a simulated NeuronCore and a CPU device.

Run: python tutorials/pipeline/training.py
A two-stage regression model learns a fixed target function: the first stage (Linear + Tanh)
runs on a NeuronCore device, forward and backward as NKI kernels on the simulator, with the
runtime's SGD optimizer; the second stage (Linear) and the loss (the op set's ``MSELoss``) run
on a CPU device with a torch SGD optimizer. ``run_training`` streams 3 epochs x 3 steps x 2
microbatches through the devices (activations forward, gradients back, through queues). The
script checks that the loss falls (the last epoch's mean below half the first's) and that the
trained parameters and every loss equal an eager torch loop on the same data (within rtol 1e-5 /
atol 1e-6). Prints PASS / FAIL."""

from __future__ import annotations

import copy
import queue
import sys

import torch
from torch import nn

import frontends.pipeline as pb

EPOCHS, STEPS, MICROBATCHES = 3, 3, 2


def main() -> int:
    torch.manual_seed(0)
    stage0 = nn.Sequential(nn.Linear(4, 16), nn.Tanh())
    stage1 = nn.Linear(16, 2)
    ref0, ref1 = copy.deepcopy(stage0), copy.deepcopy(stage1)
    true_w = torch.randn(4, 2)
    data = []
    for _ in range(STEPS * MICROBATCHES):  # one epoch of microbatches, seen every epoch
        x = torch.randn(8, 4)
        data.append((x, torch.sin(x @ true_w)))

    nc0 = pb.NeuronCoreDevice(
        "nc0", module=pb.PyTorchModule("stage0", stage0), optimizer=pb.SGD(learning_rate=0.3)
    )
    cpu1 = pb.CPUDevice(
        "cpu1",
        module=pb.PyTorchModule("stage1", stage1),
        optimizer_f=lambda m: torch.optim.SGD(m.parameters(), lr=0.3),
    )
    cpu1.place_loss_module(pb.loss.MSELoss("mse"))
    for _ in range(EPOCHS):
        for x, t in data:
            nc0.push_to_inputs(x)
            cpu1.push_to_target_inputs(t)
    losses = queue.Queue()
    checkpoints = pb.run_training(
        epochs=EPOCHS,
        steps=STEPS,
        microbatch_count=MICROBATCHES,
        loss_queue=losses,
        _sequential=True,
    )
    final = checkpoints.get()
    got = [losses.get().value().item() for _ in range(EPOCHS * STEPS * MICROBATCHES)]

    opt0 = torch.optim.SGD(ref0.parameters(), lr=0.3)
    opt1 = torch.optim.SGD(ref1.parameters(), lr=0.3)
    want = []
    for _ in range(EPOCHS):
        for step in range(STEPS):
            opt0.zero_grad()
            opt1.zero_grad()
            for x, t in data[step * MICROBATCHES : (step + 1) * MICROBATCHES]:
                loss = nn.functional.mse_loss(ref1(ref0(x)), t)
                loss.backward()
                want.append(loss.item())
            opt0.step()
            opt1.step()
    per_epoch = [sum(got[i : i + len(data)]) / len(data) for i in range(0, len(got), len(data))]
    print("mean loss per epoch:", ", ".join(f"{v:.4f}" for v in per_epoch))
    ok = per_epoch[-1] < 0.5 * per_epoch[0]
    ok &= torch.allclose(torch.tensor(got), torch.tensor(want), rtol=1e-5, atol=1e-6)
    worst = 0.0
    for dev, ref in zip(final, (ref0, ref1)):
        for name, value in ref.state_dict().items():
            ok &= torch.allclose(dev[name].value(), value, rtol=1e-5, atol=1e-6)
            worst = max(worst, (dev[name].value() - value).abs().max().item())
    print(f"trained parameters vs the eager loop: max |diff| {worst:.1e}")
    busy = sum(e.device_us for e in nc0.events if e.device_us)
    print(f"{nc0.name}: {len(nc0.events)} calls, {busy:.0f} us estimated device time in total")
    pb.shutdown()
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
