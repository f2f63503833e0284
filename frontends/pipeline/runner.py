"""Running the pipeline: one worker thread per device, commands (forward, backward, optimizer
step, parameter reads) queued to every worker, activations and gradients passed between
devices through queues.

Devices work concurrently: while device ``i`` runs microbatch ``k``, device ``i+1`` runs
microbatch ``k-1``. Each worker runs its commands in order, so a parameter read queued after a
backward pass sees its gradients. An error in any worker stops the pipeline; the next call
that waits (``sync``, a ``_sequential`` run, a parameter read) raises it, and
``error_raised()`` reports it; ``shutdown()`` clears everything.

Training follows the reference API: every ``push_to_inputs`` is one microbatch; a mini-batch
is ``microbatch_count`` microbatches, a step ``accumulation_steps`` mini-batches (gradients
summed over all of them), then the optimizers step; schedulers step after every epoch."""

from __future__ import annotations

import itertools
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from nki.errors import NKIError

from .. import torch_backend as tb
from ..api_errors import call_order, invalid, invalid_type, not_applicable
from ..common import boundary_loc
from . import perf
from .config import CONFIG, SIMULATED, DeviceMode
from .devices import DEVICES, Device, NeuronCoreDevice
from .module import Module
from .tensor import Tensor

__all__ = [
    "detect_available_devices",
    "error_raised",
    "get_parameter_checkpoint",
    "get_parameter_gradients",
    "initialize_pipeline",
    "run_backward",
    "run_forward",
    "run_inference",
    "run_optimizer",
    "run_schedulers",
    "run_training",
    "shutdown",
    "sync",
    "update_device_parameters",
]


class _Stopped(Exception):
    """The pipeline was stopped while a worker waited."""


@dataclass
class Pipeline:
    """The running pipeline: its devices, their workers and the queues between them."""

    devices: list[Device]
    training: bool
    output_queue: Any
    checkpoint_queue: Any
    loss_queue: Any = None
    d2d_fwd: list = field(default_factory=list)
    d2d_bwd: list = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    error: tuple[BaseException, str] | None = None
    workers: list[Worker] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.devices)
        self.fwd = [self.devices[0].input_queue] + [queue.Queue() for _ in range(n - 1)]
        self.bwd = [queue.Queue() for _ in range(n)]
        self.counters = [[0, 0] for _ in range(n)]  # forward / backward microbatches

    def get(self, q: Any) -> Any:
        while True:
            if self.stop.is_set():
                raise _Stopped
            try:
                return q.get(timeout=0.05)
            except queue.Empty:
                continue

    def fail(self, exc: BaseException, where: str) -> None:
        if self.error is None:
            self.error = (exc, where)
        self.stop.set()

    def check(self) -> None:
        """Raise a worker's error in the calling thread, located at the caller's line (a
        worker thread has no line of the user's)."""
        if self.error is not None:
            exc = self.error[0]
            if isinstance(exc, NKIError) and (
                exc.loc is None
                or exc.loc.file.endswith("threading.py")
                or exc.loc.file == "<unknown>"
            ):
                exc.loc = None
                exc.with_context(loc=boundary_loc())
            raise exc


class Worker(threading.Thread):
    """The thread of one device: runs its commands in order."""

    def __init__(self, pipe: Pipeline, index: int) -> None:
        super().__init__(name=f"pipeline-{pipe.devices[index].name}", daemon=True)
        self.pipe, self.index = pipe, index
        self.device = pipe.devices[index]
        self.commands: queue.Queue = queue.Queue()

    def run(self) -> None:
        while not self.pipe.stop.is_set():
            try:
                cmd = self.commands.get(timeout=0.05)
            except queue.Empty:
                continue
            try:
                getattr(self, f"do_{cmd[0]}")(*cmd[1:])
            except _Stopped:
                pass
            except BaseException as e:  # reported to the caller that waits
                self.pipe.fail(e, self.device.name)
            finally:
                self.commands.task_done()

    @property
    def last(self) -> bool:
        return self.index == len(self.pipe.devices) - 1

    def do_forward(self, count: int, training: bool) -> None:
        pipe, dev, i = self.pipe, self.device, self.index
        for _ in range(count) if count else itertools.count():
            x = pipe.get(pipe.fwd[i])
            mb = pipe.counters[i][0]
            pipe.counters[i][0] += 1
            outs = dev.forward(x, mb, training, first=i == 0)
            if not self.last:
                sent = tuple(o.detach() for o in outs)
                pipe.fwd[i + 1].put(sent)
                if pipe.d2d_fwd:
                    pipe.d2d_fwd[i].put(tuple(Tensor(o.clone()) for o in sent))
            elif training:
                loss = dev.loss(outs, pipe.get(dev.target_queue), mb)
                sink = pipe.loss_queue if pipe.loss_queue is not None else pipe.output_queue
                if sink is not None:
                    sink.put(Tensor(loss.detach().clone()))
            else:
                pipe.output_queue.put(tuple(Tensor(o.detach()) for o in outs))

    def do_backward(self, count: int, zero_grad: bool) -> None:
        pipe, dev, i = self.pipe, self.device, self.index
        if zero_grad:
            dev.zero_grad()
        for _ in range(count):
            grads = None if self.last else pipe.get(pipe.bwd[i])
            mb = pipe.counters[i][1]
            pipe.counters[i][1] += 1
            back = dev.backward(grads, mb)
            if i > 0:
                pipe.bwd[i - 1].put(back)
                if pipe.d2d_bwd:
                    pipe.d2d_bwd[i - 1].put(tuple(Tensor(g.clone()) for g in back if g is not None))

    def do_optimizer(self) -> None:
        self.device.step()

    def do_scheduler(self) -> None:
        self.device.step_scheduler()

    def do_call(self, fn: Any, out: queue.Queue) -> None:
        out.put(fn(self.device))


_CURRENT: list[Pipeline] = []
_SAVED_TARGET: list[str | None] = []


def _pipeline(api: str, training: bool | None = None) -> Pipeline:
    if not _CURRENT:
        raise call_order(
            f"{api}: no pipeline is running; call initialize_pipeline() (or "
            "run_inference / run_training) first"
        )
    pipe = _CURRENT[0]
    pipe.check()
    if training is not None and pipe.training != training:
        raise call_order(
            f"{api}: the pipeline was initialised for "
            f"{'training' if pipe.training else 'inference'}"
        )
    return pipe


def _check_queue(q: Any, what: str) -> Any:
    if q is not None and not (hasattr(q, "put") and hasattr(q, "get")):
        raise invalid_type(f"{what} must be a queue (with put / get), got {type(q).__name__}")
    return q


def _check_devices(training: bool, api: str) -> list[Device]:
    if not DEVICES:
        raise call_order(f"{api}: no devices; create a device and place a module on it first")
    for d in DEVICES:
        if not d.modules:
            raise call_order(f"{api}: device {d.name!r} has no module; place_module() first")
    for d in DEVICES[:-1]:
        if d.loss_module is not None:
            raise invalid(
                f"{api}: loss module {d.loss_module.name!r} is on {d.name!r}, not on "
                f"the last device {DEVICES[-1].name!r}"
            )
    if training and DEVICES[-1].loss_module is None:
        raise invalid(
            f"{api}: training without a loss: place a loss module on the last device "
            f"{DEVICES[-1].name!r} (place_loss_module)"
        )
    targets = {d.target for d in DEVICES if isinstance(d, NeuronCoreDevice) and d.target}
    if len(targets) > 1:
        raise not_applicable(
            f"NeuronCore devices of generations {sorted(targets)}",
            "one pipeline simulates one generation",
        )
    return list(DEVICES)


def _stop_workers() -> None:
    for pipe in _CURRENT:
        pipe.stop.set()
        for w in pipe.workers:
            w.join(timeout=5)
    _CURRENT.clear()


def initialize_pipeline(
    training: bool,
    output_queue: Any = None,
    checkpoint_queue: Any = None,
    sample_inputs: Any = (),
    sample_targets: Any = (),
    microbatch_count: int = 1,
    d2d_fwd_queues: list | None = None,
    d2d_bwd_queues: list | None = None,
    _sequential: bool = False,
    _verify_cfg: Any = None,
    _device_mode: DeviceMode = DeviceMode.CompileAndRun,
) -> Any:
    """Set up the devices for manual ``run_forward`` / ``run_backward`` / ``run_optimizer``
    calls; returns the output queue (inference) or the checkpoint queue (training).

    Constraints: every device has a module; training needs a loss module on the last
    device; ``d2d_fwd_queues`` / ``d2d_bwd_queues`` hold one queue per device boundary
    (devices - 1). Stages compile at their first microbatch; ``sample_inputs``, when given,
    are checked against the first module's inputs."""
    api = "initialize_pipeline"
    devices = _check_devices(bool(training), api)
    if _device_mode != DeviceMode.CompileAndRun:
        raise not_applicable(
            f"{api}(_device_mode={_device_mode})", "the simulator compiles and runs in one step"
        )
    if not isinstance(microbatch_count, int) or microbatch_count < 1:
        raise invalid(f"{api}: microbatch_count must be a positive int, got {microbatch_count!r}")
    _check_queue(output_queue, f"{api}: output_queue")
    _check_queue(checkpoint_queue, f"{api}: checkpoint_queue")
    d2d = {
        "d2d_fwd_queues": list(d2d_fwd_queues or []),
        "d2d_bwd_queues": list(d2d_bwd_queues or []),
    }
    for what, qs in d2d.items():
        if qs and len(qs) != len(devices) - 1:
            raise invalid(
                f"{api}: {what} has {len(qs)} queue(s); a pipeline of "
                f"{len(devices)} device(s) has {len(devices) - 1} device boundaries"
            )
        for q in qs:
            _check_queue(q, f"{api}: each of {what}")
    if sample_inputs:
        first = devices[0]
        items = first._items((sample_inputs,), f"{api}: sample_inputs")
        first._arity(first.modules[0], len(items), f"{api}: sample_inputs")
    _stop_workers()
    for d in devices:
        d.prepare()
    if not _SAVED_TARGET:
        _SAVED_TARGET.append(tb.OPTIONS.target)
    targets = [d.target for d in devices if isinstance(d, NeuronCoreDevice) and d.target]
    tb.OPTIONS.target = targets[0] if targets else _SAVED_TARGET[0]
    pipe = Pipeline(
        devices,
        bool(training),
        output_queue if output_queue is not None else (None if training else queue.Queue()),
        checkpoint_queue if checkpoint_queue is not None else queue.Queue(),
        d2d_fwd=d2d["d2d_fwd_queues"],
        d2d_bwd=d2d["d2d_bwd_queues"],
    )
    pipe.workers = [Worker(pipe, i) for i in range(len(devices))]
    for w in pipe.workers:
        w.start()
    _CURRENT.append(pipe)
    return pipe.checkpoint_queue if training else pipe.output_queue


def _send(pipe: Pipeline, *cmd: Any) -> None:
    for w in pipe.workers:
        w.commands.put(cmd)


def _wait(pipe: Pipeline) -> None:
    while any(w.commands.unfinished_tasks for w in pipe.workers):
        pipe.check()
        time.sleep(0.002)
    pipe.check()


def sync() -> None:
    """Block until every device has finished the commands queued so far (raises a worker's
    error)."""
    if _CURRENT:
        _wait(_CURRENT[0])


def run_forward(input_count: int = 1, _sequential: bool = False) -> None:
    """Queue forward passes of ``input_count`` microbatches (0: until shutdown) through the
    pipeline; outputs (inference) go to the output queue, losses (training) to the loss
    queue."""
    pipe = _pipeline("run_forward")
    if not isinstance(input_count, int) or input_count < 0:
        raise invalid(f"run_forward: input_count must be an int >= 0, got {input_count!r}")
    _send(pipe, "forward", input_count, pipe.training)
    if _sequential:
        _wait(pipe)


def run_backward(input_count: int = 1, zero_grad: bool = False, _sequential: bool = False) -> None:
    """Queue backward passes of ``input_count`` microbatches; ``zero_grad`` clears the
    accumulated gradients first (the first backward of a batch)."""
    pipe = _pipeline("run_backward", training=True)
    if not isinstance(input_count, int) or input_count < 1:
        raise invalid(f"run_backward: input_count must be a positive int, got {input_count!r}")
    _send(pipe, "backward", input_count, bool(zero_grad))
    if _sequential:
        _wait(pipe)


def run_optimizer(checkpoint: bool = False, _sequential: bool = False) -> None:
    """Step every device's optimizer; ``checkpoint`` then puts the parameters (one dict per
    device) into the checkpoint queue."""
    pipe = _pipeline("run_optimizer", training=True)
    _send(pipe, "optimizer")
    if checkpoint:
        pipe.checkpoint_queue.put(get_parameter_checkpoint())
    elif _sequential:
        _wait(pipe)


def run_schedulers(_sequential: bool = False) -> None:
    """Step every device's learning-rate scheduler."""
    pipe = _pipeline("run_schedulers", training=True)
    _send(pipe, "scheduler")
    if _sequential:
        _wait(pipe)


def _ask(device: Device | None, fn: Any, api: str) -> list:
    devices = list(DEVICES) if device is None else [device]
    if device is not None and device not in DEVICES:
        raise invalid(f"{api}: {device!r} is not a device of the pipeline")
    if not _CURRENT:
        return [fn(d) for d in devices]
    pipe = _pipeline(api)
    replies = []
    for d in devices:
        out: queue.Queue = queue.Queue()
        pipe.workers[pipe.devices.index(d)].commands.put(("call", fn, out))
        replies.append(out)
    results = []
    for out in replies:
        while True:
            pipe.check()
            try:
                results.append(out.get(timeout=0.01))
                break
            except queue.Empty:
                continue
    return results


def get_parameter_checkpoint(device: Device | None = None, _sequential: bool = False) -> list:
    """The current parameters: one ``{name: Tensor}`` per device (or for ``device``)."""
    return _ask(device, Device.get_parameter_checkpoint, "get_parameter_checkpoint")


def get_parameter_gradients(device: Device | None = None, _sequential: bool = False) -> list:
    """The accumulated gradients: one ``{name: Tensor}`` per device (or for ``device``)."""
    return _ask(device, Device.get_parameter_gradients, "get_parameter_gradients")


def update_device_parameters(
    device: Device | None = None, parameters: Any = (), _sequential: bool = False
) -> None:
    """Overwrite parameters: ``parameters`` is one ``{name: tensor}`` per device of the
    pipeline (or a list of one, or a dict, for ``device``). Names and shapes must match."""
    api = "update_device_parameters"
    devices = list(DEVICES) if device is None else [device]
    params = [parameters] if isinstance(parameters, dict) else list(parameters)
    if len(params) != len(devices):
        raise invalid(f"{api}: {len(params)} parameter dict(s) for {len(devices)} device(s)")
    for d, p in zip(devices, params):
        _ask(d, lambda dev, p=p: dev.update_parameters(p), api)


def _ints(api: str, **values: int) -> None:
    for k, v in values.items():
        low = 0 if k == "checkpoint_interval" else 1
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise invalid(f"{api}: {k} must be an int >= {low}, got {v!r}")


def _ready(devices: list[Device], training: bool, queue: Any) -> Pipeline:
    """The running pipeline for ``devices`` in this mode, set up again when there is none, it
    runs the other mode, the devices or their placement changed, or an error stopped it;
    ``queue`` (when given) becomes its output (inference) or checkpoint (training) queue."""
    pipe = _CURRENT[0] if _CURRENT else None
    if (
        pipe is None
        or pipe.training != training
        or pipe.devices != devices
        or pipe.error is not None
        or any(d.stale() for d in devices)
    ):
        key = "checkpoint_queue" if training else "output_queue"
        initialize_pipeline(training, **{key: queue})
        return _CURRENT[0]
    if queue is not None:
        setattr(pipe, "checkpoint_queue" if training else "output_queue", queue)
    return pipe


def run_inference(
    module: Module | None = None,
    inputs: list | tuple = (),
    input_count: int = 1,
    output_queue: Any = None,
    _sequential: bool = False,
    _perf_trace: bool = False,
    _verify_cfg: Any = None,
) -> Any:
    """Run ``input_count`` inputs (0: until shutdown) through the pipeline and return the
    output queue (one tuple of output Tensors per input). ``module``: place it alone on a new
    simulated NeuronCore first. ``inputs``: tuples or dicts pushed to the first device. Returns
    at once (the devices keep running); ``_sequential=True`` waits until done."""
    api = "run_inference"
    if not isinstance(input_count, int) or isinstance(input_count, bool) or input_count < 0:
        raise invalid(
            f"{api}: input_count must be an int >= 0 (0: until shutdown), got {input_count!r}"
        )
    if input_count == 0 and _sequential:
        raise invalid(f"{api}: input_count=0 runs until shutdown(); it cannot be _sequential")
    _check_queue(output_queue, f"{api}: output_queue")
    if module is not None:
        if DEVICES and module.device is None:
            raise invalid(
                f"{api}(module=...): devices {[d.name for d in DEVICES]} exist; place "
                f"{module.name!r} with place_module() instead"
            )
        if module.device is None:
            NeuronCoreDevice(f"nc{len(DEVICES)}", module=module)
        elif module.device not in DEVICES:
            raise invalid(f"{api}: module {module.name!r} is placed on a device that is shut down")
    devices = _check_devices(False, api)
    for x in inputs:
        devices[0].push_to_inputs(x)
    pipe = _ready(devices, training=False, queue=output_queue)
    run_forward(input_count)
    if _sequential or _perf_trace or CONFIG.performance_trace:
        _wait(pipe)
        perf.write_if_asked(devices, _perf_trace)
    return pipe.output_queue


def run_training(
    epochs: int = 1,
    steps: int = 1,
    accumulation_steps: int = 1,
    microbatch_count: int = 1,
    checkpoint_queue: Any = None,
    loss_queue: Any = None,
    checkpoint_interval: int = 0,
    _sequential: bool = False,
    _perf_trace: bool = False,
    _verify_cfg: Any = None,
) -> Any:
    """Train: ``epochs`` x ``steps`` optimizer steps, each over ``accumulation_steps`` x
    ``microbatch_count`` pushed microbatches (inputs on the first device, targets on the
    last). Losses go to ``loss_queue``; parameters (one dict per device) to the returned
    checkpoint queue every ``checkpoint_interval`` steps and at the end. Returns at once;
    ``_sequential=True`` waits until done.

    Constraints: a loss module on the last device; at least one optimizer (``optimizer=`` of a
    NeuronCore device, ``optimizer_f=`` of a CPU device)."""
    api = "run_training"
    _ints(
        api,
        epochs=epochs,
        steps=steps,
        accumulation_steps=accumulation_steps,
        microbatch_count=microbatch_count,
        checkpoint_interval=checkpoint_interval,
    )
    _check_queue(checkpoint_queue, f"{api}: checkpoint_queue")
    _check_queue(loss_queue, f"{api}: loss_queue")
    devices = _check_devices(True, api)
    if not any(d.has_optimizer for d in devices):
        raise invalid(
            f"{api}: no device has an optimizer (optimizer= of a NeuronCore device, "
            "optimizer_f= of a CPU device): the parameters would not change"
        )
    pipe = _ready(devices, training=True, queue=checkpoint_queue)
    pipe.loss_queue = loss_queue

    def loop() -> None:
        done = 0
        for _ in range(epochs):
            for _ in range(steps):
                for acc in range(accumulation_steps):
                    run_forward(microbatch_count)
                    run_backward(microbatch_count, zero_grad=acc == 0)
                run_optimizer()
                done += 1
                if checkpoint_interval and done % checkpoint_interval == 0:
                    pipe.checkpoint_queue.put(get_parameter_checkpoint())
            run_schedulers()
        pipe.checkpoint_queue.put(get_parameter_checkpoint())
        if _perf_trace or CONFIG.performance_trace:
            perf.write_if_asked(devices, _perf_trace)

    if _sequential:
        loop()
    else:

        def controller() -> None:
            try:
                loop()
            except _Stopped:
                pass
            except BaseException as e:
                pipe.fail(e, "run_training")

        threading.Thread(target=controller, name="pipeline-training", daemon=True).start()
    return pipe.checkpoint_queue


def run_module(module: Module, *args: Any) -> tuple:
    """``module.run(*args)``: inference on this module alone on a simulated NeuronCore.
    Constraint: no other device exists (``shutdown()`` first)."""
    if DEVICES:
        raise call_order(
            f"{module.name}.run(): devices {[d.name for d in DEVICES]} exist; "
            "run() uses a device of its own (shutdown() first)"
        )
    try:
        q = run_inference(module, inputs=[args], _sequential=True)
        return q.get()
    finally:
        shutdown()


Module.run = run_module  # type: ignore[attr-defined]


def error_raised() -> bool:
    """Whether a device of the running pipeline failed."""
    return bool(_CURRENT and _CURRENT[0].error is not None)


def detect_available_devices() -> list:
    """The NeuronCore generations the simulator provides (any number of devices of each)."""
    return list(SIMULATED)


def shutdown() -> None:
    """Stop the workers and remove every device (the next pipeline starts from scratch)."""
    _stop_workers()
    for d in DEVICES:
        for m in [*d.modules, *([d.loss_module] if d.loss_module else [])]:
            m.device = None
    DEVICES.clear()
    if _SAVED_TARGET:
        tb.OPTIONS.target = _SAVED_TARGET.pop()


pybuda_reset = shutdown
