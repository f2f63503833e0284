"""A script written for the PyBuda API (its own imports), run through nki-compat by
test_model_compat.py: a PyBuda module on a device, inference, then a training step with the
loss on a CPU device, each checked against torch. Prints PYBUDA OK."""

import queue

import pybuda
import pybuda.op
import torch
from pybuda.op.loss import L1Loss  # noqa: F401  (the loss module namespace resolves)


class Stage0(pybuda.PyBudaModule):
    def __init__(self, name):
        super().__init__(name)
        self.weights1 = pybuda.Parameter(torch.rand(32, 32), requires_grad=True)
        self.weights2 = pybuda.Parameter(torch.rand(32, 32), requires_grad=True)

    def forward(self, act1, act2):
        m1 = pybuda.op.Matmul("matmul1", act1, self.weights1)
        m2 = pybuda.op.Matmul("matmul2", act2, self.weights2)
        return m1 + m2


torch.manual_seed(0)
a, b = torch.rand(2, 32), torch.rand(2, 32)
stage0 = Stage0("stage0")
w1, w2 = stage0.weights1.value().detach().clone(), stage0.weights2.value().detach().clone()
tt0 = pybuda.TTDevice("tt0", module=stage0, optimizer=pybuda.optimizers.SGD(learning_rate=0.01))
tt0.push_to_inputs((a, b))
out = pybuda.run_inference(_sequential=True).get()
torch.testing.assert_close(out[0].value(), a @ w1 + b @ w2, rtol=1e-5, atol=1e-4)

head = torch.nn.Linear(32, 4)
head_ref = torch.nn.Linear(32, 4)
head_ref.load_state_dict(head.state_dict())
cpu1 = pybuda.CPUDevice(
    "cpu1",
    module=pybuda.PyTorchModule("head", head),
    optimizer_f=lambda m: torch.optim.SGD(m.parameters(), lr=0.01),
)
cpu1.place_loss_module(pybuda.PyTorchModule("l1", torch.nn.L1Loss()))
target = torch.rand(2, 4)
tt0.push_to_inputs((a, b))
cpu1.push_to_target_inputs(target)
losses = queue.Queue()
checkpoint = pybuda.run_training(loss_queue=losses, _sequential=True).get()
x1 = w1.clone().requires_grad_()
x2 = w2.clone().requires_grad_()
loss = torch.nn.functional.l1_loss(head_ref(a @ x1 + b @ x2), target)
loss.backward()
torch.testing.assert_close(losses.get().value(), loss.detach(), rtol=1e-5, atol=1e-5)
torch.testing.assert_close(
    checkpoint[0]["weights1"].value(), w1 - 0.01 * x1.grad, rtol=1e-5, atol=1e-5
)
pybuda.shutdown()
print("PYBUDA OK")
