"""Modules of the pipeline runtime: a workload placed on one device.

* :class:`PyTorchModule` wraps a ``torch.nn.Module``.
* :class:`OpModule` (PyBuda's ``PyBudaModule``) is written with the named op set
  (:mod:`.ops`) and :class:`~.tensor.Parameter` attributes.

Both present the same thing to a device: a ``torch.nn.Module`` (:meth:`Module.torch_module`)
that a simulated NeuronCore compiles with ``torch.compile(backend="nki")`` and a CPU device
runs eagerly, and a dict of named parameters."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from ..api_errors import invalid, invalid_shape, invalid_type, missing_key, names, not_applicable
from . import ops
from .tensor import Parameter, Tensor, to_torch

__all__ = ["Module", "OpModule", "PyBudaModule", "PyTorchModule"]


class Module:
    """A workload that is placed on one device. Constraint: ``name`` is a non-empty string."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise invalid(f"{type(self).__name__}: name must be a non-empty string, got {name!r}")
        self.name = name
        self.device: Any = None

    def get_name(self) -> str:
        return self.name

    def get_device(self) -> Any:
        """The device this module is placed on (None before ``place_module``)."""
        return self.device

    def torch_module(self) -> torch.nn.Module:
        """The computation as a torch module taking and returning torch tensors."""
        raise NotImplementedError

    def named_parameters(self) -> dict[str, torch.nn.Parameter]:
        """This module's trainable parameters by name."""
        raise NotImplementedError

    def parameter_names(self) -> list[str]:
        """Names of this module's parameters (values not needed)."""
        raise NotImplementedError

    def forward_signature(self) -> inspect.Signature:
        raise NotImplementedError

    def input_names(self) -> list[str] | None:
        """Names of the forward's inputs (None: it takes any number)."""
        params = list(self.forward_signature().parameters.values())
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
            return None
        return [p.name for p in params]

    def required_inputs(self) -> int:
        return sum(
            p.default is p.empty
            for p in self.forward_signature().parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        )

    # ``run(*args)``, inference on this module alone, is attached by the runner (runner.py),
    # which builds on modules

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class PyTorchModule(Module):
    """A ``torch.nn.Module`` as a pipeline module. On a CPU device it runs as is; on a
    simulated NeuronCore its ATen ops run as NKI kernels (``torch.compile(backend="nki")``)."""

    def __init__(self, name: str, module: torch.nn.Module, redirect_forward: bool = True) -> None:
        super().__init__(name)
        if not isinstance(module, torch.nn.Module):
            raise invalid_type(
                f"PyTorchModule {name!r}: module must be a torch.nn.Module, got "
                f"{type(module).__name__}"
            )
        self.module = module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the wrapped module eagerly on the CPU."""
        return self.module(*args, **kwargs)

    def torch_module(self) -> torch.nn.Module:
        return self.module

    def forward_signature(self) -> inspect.Signature:
        return inspect.signature(self.module.forward)

    def named_parameters(self) -> dict[str, torch.nn.Parameter]:
        return dict(self.module.named_parameters())

    def parameter_names(self) -> list[str]:
        return list(self.named_parameters())

    def add_parameter(self, name: str, parameter: Any) -> None:
        """Add a parameter to the wrapped module."""
        value = to_torch(parameter, f"parameter {name!r}")
        self.module.register_parameter(name, torch.nn.Parameter(value.detach().clone()))

    def set_parameters(self, **kwargs: Any) -> None:
        """Set parameter values by name (each the parameter's shape)."""
        assign(self.named_parameters(), kwargs, f"module {self.name!r}")

    def get_parameters(self) -> list[torch.nn.Parameter]:
        return list(self.module.parameters())


def assign(params: dict[str, torch.nn.Parameter], values: dict[str, Any], owner: str) -> None:
    """Overwrite ``params`` by name; an unknown name or another shape is an error naming
    it."""
    for k, v in values.items():
        if k not in params:
            raise missing_key(f"{owner} has no parameter {k!r}; it has {names(params)}")
        t = to_torch(v, f"parameter {k!r}")
        if t.shape != params[k].shape:
            raise invalid_shape(
                f"parameter {k!r} of {owner} has shape "
                f"{tuple(params[k].shape)}, got {tuple(t.shape)}"
            )
        with torch.no_grad():
            params[k].copy_(t)


def _unwrap(out: Any) -> Any:
    if isinstance(out, Tensor):
        return out.value()
    if isinstance(out, (tuple, list)):
        return tuple(_unwrap(o) for o in out)
    return out


class _OpAdapter(torch.nn.Module):
    """An :class:`OpModule` as a torch module: wraps the inputs as pipeline tensors, calls the
    user's ``forward`` (its ops are torch operations) and unwraps the outputs. It holds the
    module's parameters (the same ``nn.Parameter`` objects), so optimisers and autograd see
    them."""

    def __init__(self, module: OpModule) -> None:
        super().__init__()
        self.__dict__["om"] = module  # not a torch submodule
        self.params = torch.nn.ParameterDict(
            {k.replace(".", "__"): v for k, v in module.named_parameters().items()}
        )

    def forward(self, *tensors: torch.Tensor) -> Any:
        wrapped = [Tensor(t) for t in tensors]
        self.om.pre_forward(*wrapped)
        return _unwrap(self.om(*wrapped))


class OpModule(Module):
    """A module written with the named op set (PyBuda's ``PyBudaModule``): subclass it,
    assign :class:`Parameter` attributes in ``__init__`` and write ``forward`` with the ops of
    :mod:`.ops` (or the ``+ - *`` operators). Op names are unique within a forward."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["_params"] = {}
        self.__dict__["_constants"] = {}
        self.__dict__["_submodules"] = {}
        self.__dict__["_adapter"] = None

    def __setattr__(self, key: str, value: Any) -> None:
        if isinstance(value, Parameter):
            if value.name is None:
                value.name = key
            self._params[key] = value
        elif isinstance(value, OpModule):
            self._submodules[key] = value
        object.__setattr__(self, key, value)

    def pre_forward(self, *args: Any, **kwargs: Any) -> None:
        """Called before ``forward`` with the same inputs (override to add logic)."""

    def __call__(self, *args: Any) -> Any:
        """A submodule call: its op names are unique within its own forward."""
        if not ops.RECORDING:
            return self.forward(*args)
        rec = ops.Recorder(self.name)
        ops.RECORDING.append(rec)
        try:
            return self.forward(*args)
        finally:
            ops.RECORDING.remove(rec)

    def forward(self, *args: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def forward_signature(self) -> inspect.Signature:
        return inspect.signature(self.forward)

    def add_parameter(self, name: str, parameter: Parameter, prepend_name: bool = False) -> None:
        """Add ``parameter`` under ``name`` (``module_name.name`` with ``prepend_name``)."""
        if not isinstance(parameter, Parameter):
            raise invalid_type(
                f"add_parameter({name!r}): expected a Parameter, got {type(parameter).__name__}"
            )
        key = f"{self.name}.{name}" if prepend_name else name
        if key in self._params:
            raise invalid(f"module {self.name!r} already has a parameter {key!r}")
        parameter.name = parameter.name or key
        self._params[key] = parameter

    def get_parameter(self, name: str) -> Parameter:
        if name not in self._params:
            raise missing_key(
                f"module {self.name!r} has no parameter {name!r}; it has {names(self._params)}"
            )
        return self._params[name]

    def get_parameters(self, submodules: bool = True) -> list[Parameter]:
        """This module's parameters (and its submodules', with ``submodules=True``)."""
        out = list(self._params.values())
        if submodules:
            for sub in self._submodules.values():
                out += sub.get_parameters(True)
        return out

    def set_parameter(self, name: str, data: Any) -> None:
        """Set parameter ``name``'s value (a tensor of its shape)."""
        self.get_parameter(name).set_value(data)
        self.__dict__["_adapter"] = None

    def load_parameter_dict(self, data: dict[str, Any]) -> None:
        """Set several parameters' values by name."""
        for k, v in data.items():
            self.set_parameter(k, v)

    def add_constant(self, name: str, prepend_name: bool = False, shape: Any = None) -> None:
        """Declare a constant (a tensor that is not trained); set it with ``set_constant``."""
        key = f"{self.name}.{name}" if prepend_name else name
        self._constants[key] = None

    def set_constant(self, name: str, data: Any) -> None:
        if name not in self._constants:
            raise missing_key(
                f"module {self.name!r} has no constant {name!r}; it has {names(self._constants)}"
            )
        self._constants[name] = Tensor(to_torch(data, f"constant {name!r}").detach().clone())

    def get_constant(self, name: str) -> Tensor:
        value = self._constants.get(name)
        if value is None:
            raise missing_key(f"module {self.name!r} has no constant {name!r} with a value")
        return value

    def insert_tapout_queue_for_op(self, op_name: str, output_index: int) -> Any:
        raise not_applicable(
            "insert_tapout_queue_for_op",
            "intermediate values are not "
            "queued out of a compiled graph here; print them in forward",
        )

    def parameter_names(self) -> list[str]:
        out = list(self._params)
        for sub_key, sub in self._submodules.items():
            out += [f"{sub_key}.{k}" for k in sub.parameter_names()]
        return out

    def named_parameters(self) -> dict[str, torch.nn.Parameter]:
        out = {}
        for key, p in self._params.items():
            if not p.has_value():
                raise invalid(
                    f"parameter {key!r} of module {self.name!r} (shape {p.shape_}) "
                    "has no value; set it with set_parameter()"
                )
            out[key] = p.value()
        for sub_key, sub in self._submodules.items():
            out.update({f"{sub_key}.{k}": v for k, v in sub.named_parameters().items()})
        return out

    def torch_module(self) -> torch.nn.Module:
        if self._adapter is None:
            self.__dict__["_adapter"] = _OpAdapter(self)
        return self._adapter


PyBudaModule = OpModule
