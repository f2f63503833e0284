"""The pipeline runtime: inference and training through simulated NeuronCore and CPU devices
against eager torch (values, gradients, trained parameters), the manual loop, the named op
set, concurrency, the performance trace, and the errors for bad input.

Tolerance of training against an eager torch loop (documented in docs/guides/models.md): parameters
within rtol 1e-5 / atol 1e-6 after the run (fp32; the NKI kernels sum in another order than
torch's CPU kernels)."""

from __future__ import annotations

import copy
import inspect
import json
import queue
import time

import pytest
import torch
from model_checks import fails
from torch import nn

import frontends.pipeline as pb
from frontends import torch_backend as tb
from frontends.pipeline import ops
from nki.errors import NKIError

from snippets import site_table

TOL = {"rtol": 1e-5, "atol": 1e-6}


@pytest.fixture(autouse=True)
def _fresh_pipeline():
    pb.shutdown()
    yield
    pb.shutdown()


class TwoIn(pb.OpModule):
    """PyBuda's sample module shape: two matmuls with parameters, two outputs."""

    def __init__(self, name: str, outputs: int = 2) -> None:
        super().__init__(name)
        self.w1 = pb.Parameter(torch.randn(8, 8) / 3)
        self.w2 = pb.Parameter(torch.randn(8, 8) / 3)
        self.outputs = outputs

    def forward(self, a, b):
        m1 = ops.Matmul("mm1", a, self.w1)
        m2 = ops.Matmul("mm2", b, self.w2)
        return (m1 + ops.Tanh("t", m2), m2)[: self.outputs]


def _ref_twoin(m: TwoIn, a, b):
    m2 = b @ m.w2.value()
    return a @ m.w1.value() + torch.tanh(m2), m2


def test_two_device_inference_matches_torch():
    torch.manual_seed(0)
    head = nn.Sequential(nn.Linear(8, 8), nn.ReLU())

    class Both(nn.Module):  # a CPU stage with two inputs and two outputs
        def forward(self, a, b):
            return head(a), head(b)

    pb.CPUDevice("cpu0", module=pb.PyTorchModule("head", Both()))
    op_mod = TwoIn("body")
    pb.NeuronCoreDevice("nc1", module=op_mod)
    xs = [(torch.rand(2, 8), torch.rand(2, 8)) for _ in range(3)]
    n = len(tb.reports())
    out_q = pb.run_inference(inputs=xs, input_count=3, _sequential=True)
    for a, b in xs:
        got = out_q.get(timeout=60)
        for g, w in zip(got, _ref_twoin(op_mod, head(a), head(b))):
            torch.testing.assert_close(g.value(), w.detach(), **TOL)
    ran = tb.reports()[n:]
    assert any(r.ran_as_nki("aten::mm") for r in ran) and any(
        r.ran_as_nki("aten::tanh") for r in ran
    )


def _training_setup(seed: int = 0):
    torch.manual_seed(seed)
    s0 = nn.Sequential(nn.Linear(8, 16), nn.Tanh())
    s1 = nn.Linear(16, 4)
    ref = (copy.deepcopy(s0), copy.deepcopy(s1))
    nc0 = pb.NeuronCoreDevice(
        "nc0", module=pb.PyTorchModule("s0", s0), optimizer=pb.SGD(learning_rate=0.1)
    )
    cpu1 = pb.CPUDevice(
        "cpu1",
        module=pb.PyTorchModule("s1", s1),
        optimizer_f=lambda m: torch.optim.SGD(m.parameters(), lr=0.05),
    )
    cpu1.place_loss_module(pb.PyTorchModule("mse", nn.MSELoss()))
    return nc0, cpu1, ref


def test_run_training_equals_an_eager_torch_loop():
    nc0, cpu1, (r0, r1) = _training_setup()
    steps, acc, mbs = 2, 2, 2
    data = [(torch.randn(4, 8), torch.randn(4, 4)) for _ in range(steps * acc * mbs)]
    for x, t in data:
        nc0.push_to_inputs(x)
        cpu1.push_to_target_inputs(t)
    losses = queue.Queue()
    ckpt = pb.run_training(
        steps=steps,
        accumulation_steps=acc,
        microbatch_count=mbs,
        loss_queue=losses,
        checkpoint_interval=1,
        _sequential=True,
    )
    opt0 = torch.optim.SGD(r0.parameters(), lr=0.1)
    opt1 = torch.optim.SGD(r1.parameters(), lr=0.05)
    want_losses, checkpoints = [], []
    it = iter(data)
    for _ in range(steps):
        opt0.zero_grad()
        opt1.zero_grad()
        for _ in range(acc * mbs):
            x, t = next(it)
            loss = nn.functional.mse_loss(r1(r0(x)), t)
            loss.backward()
            want_losses.append(loss.item())
        opt0.step()
        opt1.step()
        checkpoints.append(copy.deepcopy((r0.state_dict(), r1.state_dict())))
    got_losses = [losses.get(timeout=60).value().item() for _ in want_losses]
    torch.testing.assert_close(torch.tensor(got_losses), torch.tensor(want_losses), **TOL)
    for want in [*checkpoints, checkpoints[-1]]:  # every step, then the final parameters
        got = ckpt.get(timeout=60)
        for dev, ref in zip(got, want):
            assert set(dev) == set(ref)
            for k in ref:
                torch.testing.assert_close(dev[k].value(), ref[k], **TOL)


def test_manual_loop_gradients_checkpoints_and_updates():
    torch.manual_seed(1)
    body = TwoIn("stage0", outputs=1)
    ref = copy.deepcopy(body)
    nc0 = pb.NeuronCoreDevice("nc0", module=body, optimizer=pb.SGD(learning_rate=0.2))
    nc0.place_loss_module(pb.loss.MSELoss("mse"))
    ckpt = pb.initialize_pipeline(training=True, sample_inputs=(torch.rand(2, 8), torch.rand(2, 8)))
    grads_want = {n: torch.zeros(8, 8) for n in ("w1", "w2")}
    for i in range(2):
        a, b, t1 = (torch.rand(2, 8) for _ in range(3))
        nc0.push_to_inputs((a, b))
        nc0.push_to_target_inputs(t1)
        pb.run_forward(1)
        pb.run_backward(1, zero_grad=i == 0)
        w1 = ref.w1.value().detach().requires_grad_()
        w2 = ref.w2.value().detach().requires_grad_()
        out = a @ w1 + torch.tanh(b @ w2)
        loss = ((out - t1) ** 2).mean(dim=-2, keepdim=True).mean(dim=-1, keepdim=True)
        loss.sum().backward()
        grads_want["w1"] += w1.grad
        grads_want["w2"] += w2.grad
    (grads,) = pb.get_parameter_gradients(nc0)
    for n, g in grads_want.items():
        torch.testing.assert_close(grads[n].value(), g, **TOL)
    pb.run_optimizer(checkpoint=True)
    (params,) = ckpt.get(timeout=60)
    for n in grads_want:
        torch.testing.assert_close(
            params[n].value(), ref.get_parameter(n).value() - 0.2 * grads_want[n], **TOL
        )
    pb.update_device_parameters(nc0, [{"w1": torch.zeros(8, 8)}])
    assert torch.equal(pb.get_parameter_checkpoint(nc0)[0]["w1"].value(), torch.zeros(8, 8))
    with fails("err_invalid_argument", "has shape (8, 8), got (3, 3)"):
        pb.update_device_parameters(nc0, [{"w2": torch.zeros(3, 3)}])


# ---- the named op set: each op against a torch expression written out here -------------------

X = torch.randn(2, 3, 4, 6)
Y = torch.randn(2, 3, 4, 6)
OP_CASES = {
    "Matmul": (
        lambda: ops.Matmul("o", X, Y.transpose(-1, -2), bias=torch.ones(4)),
        lambda: torch.einsum("bzik,bzjk->bzij", X, Y) + 1,
    ),
    "Add": (lambda: ops.Add("o", X, Y), lambda: X + Y),
    "Subtract": (lambda: ops.Subtract("o", X, Y), lambda: X - Y),
    "Multiply": (lambda: ops.Multiply("o", X, Y), lambda: X * Y),
    "Max": (lambda: ops.Max("o", X, Y), lambda: torch.where(X > Y, X, Y)),
    "ReduceSum": (lambda: ops.ReduceSum("o", X, -2), lambda: X.sum(-2)[..., None, :]),
    "ReduceAvg": (lambda: ops.ReduceAvg("o", X, 1), lambda: X.mean(1)[:, None]),
    "Constant": (lambda: ops.Constant("o", constant=2.5), lambda: torch.tensor(2.5)),
    "Identity": (
        lambda: ops.Identity("o", X, unsqueeze="unsqueeze", unsqueeze_dim=1),
        lambda: X[:, None],
    ),
    "Buffer": (lambda: ops.Buffer("o", X), lambda: X),
    "HSlice": (
        lambda: ops.HSlice("o", X, 2),
        lambda: torch.stack(
            [X[:, z, :, s * 3 : (s + 1) * 3] for z in range(3) for s in range(2)], 1
        ),
    ),
    "HStack": (
        lambda: ops.HStack("o", X, 3),
        lambda: torch.cat([X[:, z] for z in range(3)], -1)[:, None],
    ),
    "VSlice": (
        lambda: ops.VSlice("o", X, 2),
        lambda: torch.stack([X[:, z, s * 2 : (s + 1) * 2] for z in range(3) for s in range(2)], 1),
    ),
    "VStack": (
        lambda: ops.VStack("o", X),
        lambda: torch.cat([X[:, z] for z in range(3)], -2)[:, None],
    ),
    "Reshape": (lambda: ops.Reshape("o", X, (6, 24)), lambda: X.reshape(6, 24)),
    "Transpose": (lambda: ops.Transpose("o", X, -1, -2), lambda: X.permute(0, 1, 3, 2)),
    "Index": (lambda: ops.Index("o", X, -1, 1, 6, 2), lambda: X[..., [1, 3, 5]]),
    "Select": (lambda: ops.Select("o", X, -1, (1, 2), stride=3), lambda: X[..., [1, 2, 4, 5]]),
    "Pad": (
        lambda: ops.Pad("o", X, (1, 2)),
        lambda: torch.cat([torch.zeros(2, 3, 4, 1), X, torch.zeros(2, 3, 4, 2)], -1),
    ),
    "Concatenate": (lambda: ops.Concatenate("o", X, Y, axis=-1), lambda: torch.cat([X, Y], -1)),
    "BinaryStack": (
        lambda: ops.BinaryStack("o", X, Y, -1),
        lambda: torch.stack([X, Y], -1).reshape(2, 3, 4, 12),
    ),
    "Heaviside": (lambda: ops.Heaviside("o", X.round(), Y), lambda: torch.heaviside(X.round(), Y)),
    "Relu": (lambda: ops.Relu("o", X), lambda: X.clamp(min=0)),
    "Gelu": (lambda: ops.Gelu("o", X), lambda: 0.5 * X * (1 + torch.erf(X / 2**0.5))),
    "Sigmoid": (lambda: ops.Sigmoid("o", X), lambda: 1 / (1 + torch.exp(-X))),
    "Tanh": (lambda: ops.Tanh("o", X), lambda: torch.tanh(X)),
    "Exp": (lambda: ops.Exp("o", X), lambda: torch.exp(X)),
    "Reciprocal": (lambda: ops.Reciprocal("o", Y), lambda: 1 / Y),
    "Sqrt": (lambda: ops.Sqrt("o", X.abs()), lambda: X.abs() ** 0.5),
    "Log": (lambda: ops.Log("o", X.abs()), lambda: torch.log(X.abs())),
    "Abs": (lambda: ops.Abs("o", X), lambda: torch.where(X < 0, -X, X)),
    "Clip": (
        lambda: ops.Clip("o", X, -0.5, 0.5),
        lambda: torch.minimum(torch.maximum(X, torch.tensor(-0.5)), torch.tensor(0.5)),
    ),
    "Argmax": (lambda: ops.Argmax("o", X, -1), lambda: X.max(-1, keepdim=True).indices.float()),
    "Softmax": (
        lambda: ops.Softmax("o", X, dim=-1),
        lambda: torch.exp(X) / torch.exp(X).sum(-1, keepdim=True),
    ),
    "Layernorm": (
        lambda: ops.Layernorm("o", X, torch.full((6,), 2.0), torch.ones(6)),
        lambda: (
            (X - X.mean(-1, keepdim=True))
            / torch.sqrt(X.var(-1, unbiased=False, keepdim=True) + 1e-5)
            * 2
            + 1
        ),
    ),
    "Conv2d": (
        lambda: ops.Conv2d("o", X, torch.ones(2, 3, 1, 1)),
        lambda: X.sum(1, keepdim=True).expand(2, 2, 4, 6),
    ),
    "Conv2dTranspose": (
        lambda: ops.Conv2dTranspose("o", X, torch.ones(3, 2, 1, 1)),
        lambda: X.sum(1, keepdim=True).expand(2, 2, 4, 6),
    ),
    "MaxPool2d": (
        lambda: ops.MaxPool2d("o", X, 2, stride=2, padding=0),
        lambda: X.reshape(2, 3, 2, 2, 3, 2).amax((3, 5)),
    ),
    "AvgPool2d": (
        lambda: ops.AvgPool2d("o", X, 2, stride=2, padding=0),
        lambda: X.reshape(2, 3, 2, 2, 3, 2).mean((3, 5)),
    ),
}


def test_every_op_of_the_table_is_tested():
    assert set(OP_CASES) == set(ops.OPS)


@pytest.mark.parametrize("name", sorted(OP_CASES))
def test_op_matches_torch(name):
    got, want = OP_CASES[name]
    torch.testing.assert_close(got().value(), want(), rtol=1e-5, atol=1e-5)


class ManyOps(pb.OpModule):
    """A module of shape ops, activations and reductions, trained on a NeuronCore."""

    def __init__(self) -> None:
        super().__init__("many")
        self.w = pb.Parameter(torch.randn(6, 6) / 3)
        self.g = pb.Parameter(torch.ones(6))
        self.b = pb.Parameter(torch.zeros(6))

    def forward(self, x):
        h = ops.Matmul("mm", x, self.w)
        h = ops.Layernorm("ln", h, self.g, self.b)
        h = ops.HStack("hs", ops.HSlice("sl", h, 2), 2)
        h = ops.Gelu("gelu", h) * ops.Sigmoid("sig", h) - ops.Exp("exp", ops.Clip("c", h, -1, 1))
        h = ops.Softmax("sm", ops.Transpose("tr", h, -1, -2), dim=-1)
        return ops.ReduceAvg("avg", ops.ReduceSum("sum", h, -1), -2)


def test_op_module_trains_on_a_neuroncore_like_torch():
    torch.manual_seed(3)
    mod = ManyOps()
    ref = {n: p.value().detach().clone().requires_grad_() for n, p in mod._params.items()}
    nc = pb.NeuronCoreDevice("nc", module=mod)
    x = torch.randn(2, 3, 4, 6)
    nc.push_to_inputs(x)
    nc.place_loss_module(pb.PyTorchModule("sum", _Sum()))
    pb.initialize_pipeline(training=True)
    nc.push_to_target_inputs(torch.zeros(1))
    pb.run_forward(1)
    pb.run_backward(1, zero_grad=True, _sequential=True)
    h = x @ ref["w"]
    h = nn.functional.layer_norm(h, (6,), ref["g"], ref["b"])
    h = nn.functional.gelu(h) * torch.sigmoid(h) - torch.exp(h.clamp(-1, 1))
    h = torch.softmax(h.transpose(-1, -2), -1)
    (h.sum(-1, keepdim=True).mean(-2, keepdim=True).sum() + 0).backward()
    (grads,) = pb.get_parameter_gradients()
    for n in ref:
        torch.testing.assert_close(grads[n].value(), ref[n].grad, rtol=1e-4, atol=1e-5)


class _Sum(nn.Module):
    def forward(self, out, target):
        return out.sum() + target.sum()


# ---- concurrency and the trace ---------------------------------------------------------------


class Sleep(nn.Module):
    def forward(self, x):
        time.sleep(0.05)
        return x + 1


def test_devices_run_concurrently_and_the_trace_shows_the_pipeline(tmp_path):
    a = pb.CPUDevice("a", module=pb.PyTorchModule("a", Sleep()))
    pb.CPUDevice("b", module=pb.PyTorchModule("b", Sleep()))
    out = pb.run_inference(inputs=[(torch.zeros(1),)] * 4, input_count=4, _sequential=True)
    assert [out.get().__getitem__(0).value().item() for _ in range(4)] == [2.0] * 4
    ev_a, ev_b = (d.events for d in pb.devices.DEVICES)
    overlap = any(
        x.start < y.start + y.seconds and y.start < x.start + x.seconds for x in ev_a for y in ev_b
    )
    assert overlap, "device b never ran while device a did"
    assert a.events[0].device_us is None
    path = pb.write_trace(tmp_path / "trace.json")
    events = [e for e in json.load(open(path))["traceEvents"] if e["ph"] == "X" and e["pid"] == 0]
    first = {(e["tid"], e["name"]): e["ts"] for e in events}
    assert first[(1, "fwd mb0")] >= first[(0, "fwd mb0")] + 0.04e6  # b waits for a's output


def test_neuroncore_calls_carry_estimated_device_time(tmp_path):
    nc0, cpu1, _ = _training_setup()
    for _ in range(2):
        nc0.push_to_inputs(torch.randn(4, 8))
        cpu1.push_to_target_inputs(torch.randn(4, 4))
    pb.run_training(microbatch_count=2, _sequential=True)
    kinds = {(e.kind, e.device_us is not None and e.device_us > 0) for e in nc0.events}
    assert ("fwd", True) in kinds and ("bwd", True) in kinds
    events = json.load(open(pb.write_trace(tmp_path / "t.json")))["traceEvents"]
    names = {(e["tid"], e["name"]) for e in events if e["ph"] == "X"}
    assert {(0, "fwd mb1"), (1, "loss mb1"), (1, "bwd mb0"), (0, "bwd mb1")} <= names


# ---- errors ----------------------------------------------------------------------------------


def test_placement_and_queue_errors_name_the_argument():
    m = TwoIn("m")
    nc = pb.NeuronCoreDevice("nc", module=m)
    cpu = pb.CPUDevice("cpu")
    with fails("err_invalid_argument", "module 'm' is already placed on device 'nc'"):
        cpu.place_module(m)
    with fails("err_invalid_argument", "module 'm' takes 2 input(s)", "got 1"):
        nc.push_to_inputs(torch.rand(2, 8))
    with fails("err_invalid_argument", "has no input(s) 'c'"):
        nc.push_to_inputs({"a": torch.rand(2, 8), "c": torch.rand(2, 8)})
    cpu.place_module(pb.PyTorchModule("id", nn.Identity()))
    with fails("err_invalid_argument", "d2d_fwd_queues has 2 queue(s)", "1 device boundaries"):
        pb.initialize_pipeline(False, d2d_fwd_queues=[queue.Queue(), queue.Queue()])
    with fails("err_invalid_argument", "training without a loss", "'cpu'"):
        pb.run_training()
    cpu.place_loss_module(pb.PyTorchModule("l", nn.L1Loss()))
    with fails("err_invalid_argument", "no device has an optimizer"):
        pb.run_training()
    with fails("err_invalid_argument", "output_queue must be a queue"):
        pb.run_inference(output_queue=[])
    with fails("err_invalid_argument", "a device named 'nc' already exists"):
        pb.CPUDevice("nc")


def test_hardware_knobs_are_not_applicable():
    with fails("err_not_applicable", "balancer_policy", "placement"):
        pb.set_configuration_options(balancer_policy="NLP")
    with fails("err_not_applicable", "math_fidelity"):
        pb.set_configuration_options(math_fidelity=pb.MathFidelity.LoFi)
    pb.set_configuration_options(math_fidelity=pb.MathFidelity.HiFi4)  # what is simulated
    with fails("err_invalid_argument", "unknown option 'fast'"):
        pb.set_configuration_options(fast=True)
    with fails("err_not_applicable", "num_chips"):
        pb.TTDevice("t", num_chips=2)
    with fails("err_not_applicable", "arch=BackendDevice.Grayskull"):
        pb.TTDevice("t", arch=pb.BackendDevice.Grayskull)
    with fails("err_not_applicable", "set_chip_break"):
        pb.set_chip_break("mm1")


class Twice(pb.OpModule):
    def forward(self, x):
        return ops.Exp("e", ops.Exp("e", x))  # ERR


def _line(fn, marker: str = "# ERR") -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if marker in text)


def test_op_names_and_parameter_values_are_checked():
    pb.NeuronCoreDevice("nc", module=Twice("twice"))
    q = pb.run_inference(inputs=[(torch.rand(2, 2),)])
    with pytest.raises(NKIError) as ei:  # located at the op in forward
        pb.sync()
    assert "op name 'e' is used twice in module 'twice'" in ei.value.message
    assert ei.value.loc.line == _line(Twice.forward) and ei.value.loc.file == __file__
    assert q.empty() and pb.error_raised()
    pb.shutdown()
    empty = pb.OpModule("empty")
    empty.w = pb.Parameter(4, 4)
    empty.forward = lambda x: ops.Matmul("mm", x, empty.w)
    with fails("err_invalid_argument", "parameter 'w' of module 'empty'", "no value"):
        pb.NeuronCoreDevice("nc", module=empty).prepare()


def test_the_models_guide_op_table_is_generated_from_the_op_table():
    assert site_table("guides/models.md", "pipeline-ops") == ops.markdown().strip()


def test_inference_until_shutdown_and_module_run():
    pb.CPUDevice("cpu", module=pb.PyTorchModule("plus", Sleep()))
    out = pb.run_inference(input_count=0)  # runs until shutdown
    pb.devices.DEVICES[0].push_to_inputs(torch.zeros(2))
    pb.devices.DEVICES[0].push_to_inputs(torch.ones(2))
    assert out.get(timeout=60)[0].value().tolist() == [1.0, 1.0]
    assert out.get(timeout=60)[0].value().tolist() == [2.0, 2.0]
    workers = list(pb.runner._CURRENT[0].workers)
    pb.shutdown()
    assert not any(w.is_alive() for w in workers) and not pb.devices.DEVICES
    m = TwoIn("alone")
    a, b = torch.rand(2, 8), torch.rand(2, 8)
    got = m.run(a, b)  # on a NeuronCore of its own
    for g, w in zip(got, _ref_twoin(m, a, b)):
        torch.testing.assert_close(g.value(), w.detach(), **TOL)
    assert pb.detect_available_devices() == [
        pb.BackendDevice.Trn1,
        pb.BackendDevice.Trn2,
        pb.BackendDevice.Trn3,
    ]


def test_a_device_simulates_every_microbatch_shape_and_warns_when_torch_runs_it_eagerly(
    monkeypatch,
):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))
    rows = list(range(1, 11))  # (more shapes than torch's recompile limit of 8)
    nc0 = pb.NeuronCoreDevice("nc0", module=pb.PyTorchModule("m", m))
    xs = [torch.randn(r, 16) for r in rows]
    for x in xs:
        nc0.push_to_inputs(x)
    out = pb.run_inference(input_count=len(rows), _sequential=True)
    for x in xs:
        torch.testing.assert_close(out.get()[0].value(), m(x), rtol=1e-5, atol=1e-5)
    assert all(e.device_us > 0 for e in nc0.events)
    pb.shutdown()
    # (what torch.compile does past its limits: the stage runs as plain torch)
    monkeypatch.setattr(pb.NeuronCoreDevice, "compiled", lambda self, fn: fn)
    nc1 = pb.NeuronCoreDevice("nc1", module=pb.PyTorchModule("m1", m))
    nc1.push_to_inputs(xs[0])
    with pytest.warns(RuntimeWarning, match="ran the stage eagerly on the CPU"):
        out = pb.run_inference(input_count=1, _sequential=True)
        torch.testing.assert_close(out.get()[0].value(), m(xs[0]), rtol=1e-5, atol=1e-5)
