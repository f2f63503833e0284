"""A pipeline runtime on simulated NeuronCores (the shape of Tenstorrent's PyBuda API).

Devices (:class:`NeuronCoreDevice` - PyBuda's ``TTDevice`` - and :class:`CPUDevice`) form a
pipeline in creation order; modules (:class:`PyTorchModule` wrapping a torch module, or an
:class:`OpModule` written with the named op set of :mod:`.ops`) are placed on them.
``run_inference`` / ``run_training`` (or ``initialize_pipeline`` with ``run_forward``,
``run_backward``, ``run_optimizer``) push microbatches through the devices, which run
concurrently in worker threads and pass activations and gradients through queues. A
NeuronCore device runs its modules through ``torch.compile(backend="nki")`` (ATen ops as NKI
kernels on the simulator, forward and backward) and accounts the cost model's estimated device
time of every call; ``perf.write_trace`` draws the pipeline as a Perfetto trace. What is
simulated and what is a stand-in is in docs/guides/models.md, "Pipelines of devices"."""

from . import config, loss, ops, optimizers, perf
from . import optimizers as schedulers
from .config import (
    BackendDevice,
    BackendType,
    CompilerConfig,
    DataFormat,
    DeviceMode,
    MathFidelity,
    PerfTraceLevel,
    override_op_size,
    set_chip_break,
    set_configuration_options,
    set_epoch_break,
)
from .devices import CPUDevice, Device, NeuronCoreDevice, TTDevice
from .module import Module, OpModule, PyBudaModule, PyTorchModule
from .optimizers import SGD, Adam, AdamW, LearningRateScheduler, Optimizer
from .perf import write_trace
from .runner import (
    detect_available_devices,
    error_raised,
    get_parameter_checkpoint,
    get_parameter_gradients,
    initialize_pipeline,
    pybuda_reset,
    run_backward,
    run_forward,
    run_inference,
    run_optimizer,
    run_schedulers,
    run_training,
    shutdown,
    sync,
    update_device_parameters,
)
from .tensor import Parameter, SomeTensor, Tensor

__all__ = [
    "Adam",
    "AdamW",
    "BackendDevice",
    "BackendType",
    "CPUDevice",
    "CompilerConfig",
    "DataFormat",
    "Device",
    "DeviceMode",
    "LearningRateScheduler",
    "MathFidelity",
    "Module",
    "NeuronCoreDevice",
    "OpModule",
    "Optimizer",
    "Parameter",
    "PerfTraceLevel",
    "PyBudaModule",
    "PyTorchModule",
    "SGD",
    "SomeTensor",
    "TTDevice",
    "Tensor",
    "config",
    "detect_available_devices",
    "error_raised",
    "get_parameter_checkpoint",
    "get_parameter_gradients",
    "initialize_pipeline",
    "loss",
    "ops",
    "optimizers",
    "override_op_size",
    "perf",
    "pybuda_reset",
    "run_backward",
    "run_forward",
    "run_inference",
    "run_optimizer",
    "run_schedulers",
    "run_training",
    "schedulers",
    "set_chip_break",
    "set_configuration_options",
    "set_epoch_break",
    "shutdown",
    "sync",
    "update_device_parameters",
    "write_trace",
]
