"""Devices of the pipeline runtime: simulated NeuronCores (:class:`NeuronCoreDevice`, PyBuda's
``TTDevice``) and CPU devices. Devices form the pipeline in the order they are created; each
runs the modules placed on it as one stage, in its own worker thread (see :mod:`.runner`),
taking activations from the previous device's queue and gradients from the next one's.

A NeuronCore device compiles its stage with ``torch.compile(backend="nki")`` (ATen ops as NKI
kernels on the simulator, forward and backward) and accounts the cost model's estimated
device time of every call; a CPU device runs its stage eagerly."""

from __future__ import annotations

import queue
import time
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..api_errors import (
    call_order,
    invalid,
    invalid_type,
    names,
    not_applicable,
)
from ..device_time import launched_us, launches
from . import ops
from .config import SIMULATED, BackendDevice, BackendType, DeviceMode, torch_dtype_of
from .module import Module, OpModule, assign
from .optimizers import LearningRateScheduler, Optimizer
from .tensor import Tensor, to_torch

__all__ = ["CPUDevice", "DEVICES", "Device", "NeuronCoreDevice", "TTDevice"]

DEVICES: list[Device] = []  # the pipeline, in creation order


class Stage(torch.nn.Module):
    """The modules placed on one device, run one after another (outputs become inputs)."""

    def __init__(self, modules: list[torch.nn.Module]) -> None:
        super().__init__()
        self.parts = torch.nn.ModuleList(modules)

    def forward(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        for m in self.parts:
            out = m(*xs)
            xs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        return xs


@dataclass(frozen=True)
class Event:
    """One stage call, for the performance trace."""

    device: int
    kind: str  # "fwd", "bwd", "loss", "opt"
    microbatch: int
    start: float  # host seconds (perf_counter)
    seconds: float
    device_us: float | None  # the cost model's estimate (NeuronCore devices)


class Device:
    """A pipeline stage: modules placed on it run one after another on each microbatch.
    Constraints: a unique non-empty name; ``mp_context`` is not applicable (devices are
    threads of this process)."""

    kind = "device"
    has_optimizer = False
    target: str | None = None

    def __init__(self, name: str, mp_context: Any = None, module: Any = None) -> None:
        if not isinstance(name, str) or not name:
            raise invalid(f"{type(self).__name__}: name must be a non-empty string, got {name!r}")
        if any(d.name == name for d in DEVICES):
            raise invalid(f"{type(self).__name__}: a device named {name!r} already exists")
        if mp_context is not None:
            raise not_applicable("mp_context", "devices run as threads of this process")
        self.name = name
        self.modules: list[Module] = []
        self.loss_module: Module | None = None
        self.input_queue: queue.Queue = queue.Queue()
        self.target_queue: queue.Queue = queue.Queue()
        self.optimizer: Any = None  # a torch optimizer once compiled
        self.scheduler: Any = None
        self.events: list[Event] = []
        self._stage: Any = None
        self._eager_stage: Any = None
        self._named = self._loss_named = False
        self._loss: Any = None
        self._eager_loss: Any = None
        self._saved: deque = deque()
        self._eager_warned = False
        DEVICES.append(self)
        if module is not None:
            self.place_module(module)

    # ---- placement -----------------------------------------------------------------------

    def _claim(self, module: Any, what: str) -> Module:
        if not isinstance(module, Module):
            raise invalid_type(
                f"{what}: expected a pipeline Module (PyTorchModule or "
                f"OpModule), got {type(module).__name__}"
            )
        if module.device is not None:
            raise invalid(
                f"{what}: module {module.name!r} is already placed on device "
                f"{module.device.name!r}; a module runs on one device"
            )
        module.device = self
        self.reset()
        return module

    def place_module(self, module: Module | list[Module] | tuple[Module, ...]) -> None:
        """Place a module (or several, run one after another) on this device."""
        for m in module if isinstance(module, (list, tuple)) else [module]:
            claimed = self._claim(m, f"{self.name}.place_module")
            taken = {n for x in self.modules for n in x.parameter_names()}
            clash = taken & set(claimed.parameter_names())
            if clash:
                claimed.device = None
                raise invalid(
                    f"{self.name}.place_module: parameter name(s) {names(clash)} of "
                    f"{claimed.name!r} are already used on device {self.name!r}"
                )
            self.modules.append(claimed)

    def place_loss_module(self, module: Module) -> None:
        """Place the module that computes the loss (its inputs: the stage's outputs, then the
        targets). Constraint: on the last device of the pipeline when training runs."""
        if self.loss_module is not None:
            raise invalid(
                f"{self.name}.place_loss_module: device {self.name!r} already has loss "
                f"module {self.loss_module.name!r}"
            )
        self.loss_module = self._claim(module, f"{self.name}.place_loss_module")

    def remove_loss_module(self) -> None:
        if self.loss_module is not None:
            self.loss_module.device = None
        self.loss_module = None
        self.reset()

    def remove_modules(self) -> None:
        for m in self.modules:
            m.device = None
        self.modules = []
        self.reset()

    def reset(self) -> None:
        """Forget the compiled stage (placement changed)."""
        self._stage = self._loss = None

    def stale(self) -> bool:
        """Whether the stage must be built again (placement changed since)."""
        return self._stage is None

    # ---- inputs --------------------------------------------------------------------------

    def _arity(self, module: Module | None, given: int, what: str, extra: int = 0) -> None:
        if module is None:
            return
        names_ = module.input_names()
        if names_ is None:
            return
        lo, hi = module.required_inputs() - extra, len(names_) - extra
        if not lo <= given <= hi:
            want = f"{lo}" if lo == hi else f"{lo} to {hi}"
            raise invalid(
                f"{what}: module {module.name!r} takes {want} input(s) "
                f"({', '.join(names_[extra:]) if not extra else 'after its outputs'}), "
                f"got {given}"
            )

    def _items(self, tensors: tuple, what: str) -> tuple[torch.Tensor, ...] | dict:
        if len(tensors) == 1 and isinstance(tensors[0], (tuple, list, dict)):
            tensors = tensors[0]
        if isinstance(tensors, dict):
            return {k: to_torch(v, f"{what} input {k!r}") for k, v in tensors.items()}
        return tuple(to_torch(t, f"{what} input {i}") for i, t in enumerate(tensors))

    def push_to_inputs(self, *tensors: Any) -> None:
        """Queue one microbatch of inputs for this (first) device: tensors in order, one
        tuple, or a dict by the first module's input names. Constraint: as many inputs as the
        first module's forward takes."""
        what = f"{self.name}.push_to_inputs"
        if not self.modules:
            raise call_order(f"{what}: place a module on device {self.name!r} first")
        items = self._items(tensors, what)
        first = self.modules[0]
        if isinstance(items, dict):
            order = first.input_names()
            unknown = set(items) - set(order or items)
            if unknown:
                raise invalid(
                    f"{what}: module {first.name!r} has no input(s) {names(unknown)}; "
                    f"its inputs are {names(order or [])}"
                )
            items = tuple(items[n] for n in (order or items) if n in items)
        self._arity(first, len(items), what)
        self.input_queue.put(items)

    def push_to_target_inputs(self, *tensors: Any) -> None:
        """Queue one microbatch of training targets for the loss module of this device."""
        items = self._items(tensors, f"{self.name}.push_to_target_inputs")
        if isinstance(items, dict):
            items = tuple(items.values())
        self.target_queue.put(items)

    # ---- parameters ----------------------------------------------------------------------

    def parameters(self) -> dict[str, torch.nn.Parameter]:
        """Every trainable parameter of the modules on this device, by name."""
        out: dict[str, torch.nn.Parameter] = {}
        for m in [*self.modules, *([self.loss_module] if self.loss_module else [])]:
            out.update(m.named_parameters())
        return out

    def get_parameter_checkpoint(self) -> dict[str, Tensor]:
        """Copies of the current parameter values."""
        return {k: Tensor(v.detach().clone()) for k, v in self.parameters().items()}

    def get_parameter_gradients(self) -> dict[str, Tensor]:
        """Copies of the accumulated gradients (zeros where none accumulated)."""
        return {
            k: Tensor(v.grad.detach().clone() if v.grad is not None else torch.zeros_like(v))
            for k, v in self.parameters().items()
        }

    def update_parameters(self, values: dict[str, Any]) -> None:
        """Overwrite parameters by name (each of its shape)."""
        assign(self.parameters(), values, f"device {self.name!r}")

    # ---- running (called from the device's worker thread) ---------------------------------

    def compiled(self, fn: torch.nn.Module) -> Callable:
        return fn

    def make_optimizer(self) -> Any:
        return None

    def prepare(self) -> None:
        """Build the stage (and loss) callables and the optimizer."""
        if not self.modules:
            raise call_order(f"device {self.name!r} has no module; place_module() first")
        for m in self.modules:
            if isinstance(m, OpModule):
                m.__dict__["_adapter"] = None  # parameters may have been set since
        if self._stage is None:
            self._eager_stage = Stage([m.torch_module() for m in self.modules])
            self._stage = self.compiled(self._eager_stage)
            if self.loss_module is not None:
                self._eager_loss = Stage([self.loss_module.torch_module()])
                self._loss = self.compiled(self._eager_loss)
            self.optimizer = self.make_optimizer()
            self._named = self._loss_named = False

    def call(self, kind: str, mb: int, fn: Callable, *args: Any) -> Any:
        """Run ``fn(*args)`` in this device's thread, timing it into the trace with the
        estimated device time of the kernels it launched."""
        t0, us0, n0 = time.perf_counter(), launched_us(), launches()
        out = fn(*args)
        dt = time.perf_counter() - t0
        us = launched_us() - us0 if self.kind == "neuroncore" else None
        if us is not None and launches() == n0 and not self._eager_warned:
            self._eager_warned = True  # (torch.compile runs a frame eagerly past its limits)
            warnings.warn(
                f"NeuronCore device '{self.name}' ran its {kind} of microbatch {mb} without "
                "launching a kernel: torch.compile ran the stage eagerly on the CPU (past "
                "torch._dynamo.config.recompile_limit, which counts every compile of "
                "Stage.forward in this process); its estimated device time is 0",
                RuntimeWarning,
                stacklevel=2,
            )
        self.events.append(Event(DEVICES.index(self), kind, mb, t0, dt, us))
        return out

    def check_op_names(self, module: torch.nn.Module, inputs: tuple) -> None:
        """Run the stage once eagerly, recording each op module's op names (a name used
        twice in one forward is an error naming it)."""
        ops.RECORDING.append(ops.Recorder(self.name))
        try:
            with torch.no_grad():
                module(*inputs)
        finally:
            ops.RECORDING.pop()

    def forward(self, inputs: tuple, mb: int, training: bool, first: bool) -> tuple:
        if not self._named:
            self.check_op_names(self._eager_stage, inputs)
            self._named = True
        if training and not first:
            inputs = tuple(x.detach().requires_grad_(x.is_floating_point()) for x in inputs)
        with torch.set_grad_enabled(training):
            outs = self.call("fwd", mb, self._stage, *inputs)
        if training:
            self._saved.append((inputs, outs))
        return outs

    def loss(self, outs: tuple, targets: tuple, mb: int) -> torch.Tensor:
        self._arity(self.loss_module, len(outs) + len(targets), f"loss module on {self.name!r}")
        inputs, _ = self._saved.pop()
        if not self._loss_named:
            self.check_op_names(self._eager_loss, (*outs, *targets))
            self._loss_named = True
        with torch.enable_grad():
            (value,) = self.call("loss", mb, self._loss, *outs, *targets)
        self._saved.append((inputs, (value,)))
        return value

    def backward(self, grads: tuple | None, mb: int) -> tuple:
        inputs, outs = self._saved.popleft()
        if grads is None:  # the loss
            grads = tuple(torch.ones_like(o) for o in outs)
        pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad and g is not None]

        def run(*_grads: torch.Tensor) -> tuple:
            if pairs:
                torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
            return ()

        self.call("bwd", mb, run, *[g for _, g in pairs])
        return tuple(x.grad if x.requires_grad else None for x in inputs)

    def zero_grad(self) -> None:
        for p in self.parameters().values():
            p.grad = None

    def step(self) -> None:
        if self.optimizer is not None:
            t0 = time.perf_counter()
            self.optimizer.step()
            self.events.append(
                Event(DEVICES.index(self), "opt", -1, t0, time.perf_counter() - t0, None)
            )

    def step_scheduler(self) -> None:
        if self.scheduler is not None:
            self.scheduler.step()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class CPUDevice(Device):
    """A CPU stage: its modules run eagerly with torch. ``optimizer_f(module)`` returns the
    torch optimizer of its parameters (``module``: the stage, a ``torch.nn.Module``);
    ``scheduler_f(optimizer)`` a torch LR scheduler stepped after every epoch."""

    kind = "cpu"

    def __init__(
        self,
        name: str,
        optimizer_f: Callable | None = None,
        scheduler_f: Callable | None = None,
        mp_context: Any = None,
        retain_backward_graph: bool = False,
        module: Any = None,
        input_dtypes: list[torch.dtype] | None = None,
    ) -> None:
        super().__init__(name, mp_context, module)
        self.optimizer_f, self.scheduler_f = optimizer_f, scheduler_f
        self.has_optimizer = optimizer_f is not None

    def make_optimizer(self) -> Any:
        if self.optimizer_f is None:
            return None
        opt = self.optimizer_f(self._stage)
        self.scheduler = self.scheduler_f(opt) if self.scheduler_f is not None else None
        return opt


class NeuronCoreDevice(Device):
    """A simulated NeuronCore (PyBuda's ``TTDevice``): its stage is compiled with
    ``torch.compile(backend="nki")``. ``optimizer`` (a pipeline :class:`Optimizer`) updates
    its parameters; ``scheduler`` steps after every epoch. ``arch`` picks the simulated
    generation (``BackendDevice.Trn1/Trn2/Trn3``). Chips, device modes other than
    compile-and-run, silicon backends and fp32 fallback formats are not applicable."""

    kind = "neuroncore"

    def __init__(
        self,
        name: str,
        num_chips: int | None = None,
        chip_ids: list | None = None,
        arch: BackendDevice | None = None,
        devtype: BackendType | None = None,
        device_mode: DeviceMode | None = None,
        optimizer: Optimizer | None = None,
        scheduler: LearningRateScheduler | None = None,
        fp32_fallback: Any = None,
        mp_context: Any = None,
        module: Any = None,
    ) -> None:
        if num_chips not in (None, 1) or (chip_ids is not None and len(chip_ids) > 1):
            raise not_applicable(
                f"{name}: num_chips / chip_ids",
                "a device is one simulated NeuronCore; create one device per stage",
            )
        if arch is not None and arch not in SIMULATED:
            raise not_applicable(
                f"{name}: arch={arch}",
                f"the simulated devices are {', '.join(a.name for a in SIMULATED)}",
            )
        if devtype not in (None, BackendType.Golden):
            raise not_applicable(
                f"{name}: devtype={devtype}", "devices are simulated (BackendType.Golden)"
            )
        if device_mode not in (None, DeviceMode.CompileAndRun):
            raise not_applicable(
                f"{name}: device_mode={device_mode}", "the simulator compiles and runs in one step"
            )
        if fp32_fallback is not None:
            torch_dtype_of(fp32_fallback, f"{name}: fp32_fallback")
            raise not_applicable(f"{name}: fp32_fallback", "float32 runs as float32 here")
        if optimizer is not None and not isinstance(optimizer, Optimizer):
            raise invalid_type(
                f"{name}: optimizer must be a pipeline Optimizer (SGD, Adam, "
                f"AdamW), got {type(optimizer).__name__}"
            )
        super().__init__(name, mp_context, module)
        self.target = arch.value if arch is not None else None
        self.optimizer_def = optimizer
        self.scheduler_def = scheduler
        self.has_optimizer = optimizer is not None

    def compiled(self, fn: torch.nn.Module) -> Callable:
        # (dynamic=None: a second microbatch shape recompiles once with symbolic sizes, rather
        # than once per shape up to torch's recompile limit, past which a stage runs eagerly)
        return torch.compile(fn, backend="nki")

    def make_optimizer(self) -> Any:
        if self.optimizer_def is None:
            return None
        self.scheduler = self.scheduler_def
        return self.optimizer_def.torch_optimizer(self._stage.parameters())


TTDevice = NeuronCoreDevice
