"""``trace()``: capture a model (or a callable) with example inputs as one bucket's graph.

The graph is a ``torch.export`` program in functional form: the model's parameters and
buffers become graph inputs, a buffer the forward reassigns (a KV cache) becomes a *state*
whose new value is a graph output, and the tensor-parallel collectives are ``nki_tp`` ops. It
stands in for the HLO of the reference API (``TraceArtifacts.hlo``); ``metaneff`` is the
bucket's metadata (inputs, weights, states, world size)."""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils import _pytree as pytree

from ..api_errors import invalid, invalid_type, names
from .parallel import parallel_config

__all__ = [
    "Metaneff",
    "ModelParamInfo",
    "ProvidedArgInfo",
    "TensorSpec",
    "TraceArtifacts",
    "TracedGraph",
    "trace",
]


@dataclass(frozen=True)
class TensorSpec:
    """A tensor's shape and dtype (``"float32"``)."""

    shape: tuple[int, ...]
    dtype: str

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorSpec:
        return cls(tuple(int(s) for s in t.shape), str(t.dtype).removeprefix("torch."))

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def __str__(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


@dataclass(frozen=True)
class ProvidedArgInfo:
    """An example input given to ``trace``: the parameter it is for, whether that parameter is
    positional (required) or keyword (optional), and the tensor."""

    param_name: str
    is_positional: bool
    tensor: torch.Tensor


@dataclass(frozen=True)
class ModelParamInfo:
    """A parameter of the model's signature: its name and whether it is positional (has no
    default) or keyword (has one)."""

    param_name: str
    is_positional: bool


def _specs(items: tuple[tuple[str, TensorSpec], ...]) -> dict[str, dict]:
    return {n: {"shape": list(s.shape), "dtype": s.dtype} for n, s in items}


def _unspecs(d: dict[str, dict]) -> tuple[tuple[str, TensorSpec], ...]:
    return tuple((n, TensorSpec(tuple(v["shape"]), v["dtype"])) for n, v in d.items())


@dataclass(frozen=True)
class Metaneff:
    """A bucket's metadata (the stand-in for the NEFF's metadata): the user inputs in graph
    order, the weights (parameters and buffers the forward only reads), the states (buffers
    the forward writes back), each with shape and dtype, and the world size."""

    inputs: tuple[tuple[str, TensorSpec], ...]
    weights: tuple[tuple[str, TensorSpec], ...]
    states: tuple[tuple[str, TensorSpec], ...]
    world_size: int
    state_outputs: tuple[str, ...] = ()  # the states written by the graph's last outputs

    def to_json(self) -> str:
        return json.dumps(
            {
                "inputs": _specs(self.inputs),
                "weights": _specs(self.weights),
                "states": _specs(self.states),
                "world_size": self.world_size,
                "state_outputs": list(self.state_outputs),
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> Metaneff:
        d = json.loads(text)
        return cls(
            _unspecs(d["inputs"]),
            _unspecs(d["weights"]),
            _unspecs(d["states"]),
            d["world_size"],
            tuple(d["state_outputs"]),
        )


@dataclass(frozen=True)
class TracedGraph:
    """One bucket's traced graph (the stand-in for its HLO module): the exported program, the
    example inputs in graph order, and the world size it was traced for."""

    program: ExportedProgram
    example_inputs: tuple[torch.Tensor, ...]
    world_size: int

    def __str__(self) -> str:
        return self.program.graph_module.code

    def digest(self) -> str:
        """A short hash of the graph and its input shapes (the default bucket key)."""
        h = hashlib.sha256(str(self).encode())
        h.update(repr([TensorSpec.of(t) for t in self.example_inputs]).encode())
        return h.hexdigest()[:16]


@dataclass
class TraceArtifacts:
    """What ``trace`` produces for one bucket (the reference API's field names): ``hlo`` (a
    :class:`TracedGraph`), ``metaneff`` (a :class:`Metaneff`), ``flattener`` (the call
    arguments -> the graph's input tensors), ``packer`` (the graph's outputs -> the model's
    output structure), the weights' positions among the graph inputs, the example inputs
    given, and the model's parameters."""

    hlo: TracedGraph
    metaneff: Metaneff
    flattener: Flattener
    packer: Packer
    weight_name_to_idx: dict[str, int]
    weight_names_to_skip: set[str] = field(default_factory=set)
    provided_args: list[ProvidedArgInfo] = field(default_factory=list)
    model_params: list[ModelParamInfo] = field(default_factory=list)


@dataclass(frozen=True)
class Flattener:
    """Maps a call's ``(args, kwargs)`` to the bucket's input tensors in graph order:
    positional arguments fill the model's parameters in signature order."""

    params: tuple[str, ...]
    inputs: tuple[str, ...]

    def bind(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        if len(args) > len(self.params):
            raise invalid(
                f"the model takes {len(self.params)} argument(s) ({', '.join(self.params)}), "
                f"got {len(args)} positional"
            )
        given = dict(zip(self.params, args))
        for k, v in kwargs.items():
            if k not in self.params:
                raise invalid(f"unknown argument {k!r}; the model's are {names(self.params)}")
            if k in given:
                raise invalid(f"argument {k!r} given both by position and by keyword")
            given[k] = v
        return given

    def __call__(self, args: tuple, kwargs: dict) -> list[Any]:
        given = self.bind(args, kwargs)
        return [given[n] for n in self.inputs]


@dataclass(frozen=True)
class Packer:
    """Rebuilds the model's output structure from the graph's flat user outputs."""

    out_spec: Any

    def __call__(self, flat: list[torch.Tensor]) -> Any:
        return pytree.tree_unflatten(flat, self.out_spec)


class _Callable(torch.nn.Module):
    """A plain function as a module (``torch.export`` takes modules)."""

    def __init__(self, fn: Callable) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, **kwargs: torch.Tensor) -> Any:
        return self.fn(**kwargs)


@contextlib.contextmanager
def quiet_export() -> Iterator[None]:
    """Silence torch's own deprecation warning and serializer notes raised inside
    torch.export (about torch's internals, not the user's model)."""
    serde = logging.getLogger("torch._export.serde.serialize")
    level = serde.level
    serde.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning, message=".*LeafSpec")
            yield
    finally:
        serde.setLevel(level)


def model_signature(model: Any, api: str) -> list[ModelParamInfo]:
    """The model's parameters. Constraints: callable, explicit parameters only (no ``*args``
    or ``**kwargs``), at least one."""
    if not callable(model):
        raise invalid_type(
            f"{api}: model must be a torch.nn.Module or a callable, got {type(model).__name__}"
        )
    fn = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise invalid_type(f"{api}: cannot read the signature of {model!r}") from None
    var = [p.name for p in params if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if var:
        raise invalid(
            f"{api}: the model's parameters must be explicit; it has *args / **kwargs "
            f"({', '.join(var)})"
        )
    if not params:
        raise invalid(f"{api}: the model must take at least one parameter")
    return [ModelParamInfo(p.name, p.default is p.empty) for p in params]


def _provided(
    params: list[ModelParamInfo], args: Any, kwargs: Any, api: str
) -> list[ProvidedArgInfo]:
    if args is None:
        args = ()
    elif isinstance(args, torch.Tensor):
        args = (args,)
    elif not isinstance(args, (tuple, list)):
        raise invalid_type(
            f"{api}: args must be None, a tensor or a tuple of tensors, got {type(args).__name__}"
        )
    if kwargs is None:
        kwargs = {}
    elif not isinstance(kwargs, dict):
        raise invalid_type(f"{api}: kwargs must be a dict of tensors, got {type(kwargs).__name__}")
    order = [p.param_name for p in params]
    given = Flattener(tuple(order), ()).bind(tuple(args), kwargs)
    for name, v in given.items():
        if not isinstance(v, torch.Tensor):
            raise invalid_type(
                f"{api}: example input {name!r} must be a torch.Tensor, got {type(v).__name__}"
            )
    missing = [p.param_name for p in params if p.is_positional and p.param_name not in given]
    if missing:
        raise invalid(
            f"{api}: no example input for the model's required parameter(s) {names(missing)}"
        )
    return [
        ProvidedArgInfo(p.param_name, p.is_positional, given[p.param_name])
        for p in params
        if p.param_name in given
    ]


def _check_states(
    program: ExportedProgram, buffers: dict[str, torch.Tensor], state_outputs: tuple[str, ...]
) -> list[str]:
    """The buffers the forward writes (states): the root module's, which torch.export writes
    back (BUFFER_MUTATION), and those of submodules, which the traced forward returns as its
    last outputs (``state_outputs``). A written parameter, or a buffer whose shape or dtype
    changes, is an error."""
    sig = program.graph_signature
    out_node = list(program.graph.nodes)[-1]
    vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in out_node.args[0]]
    users = [i for i, spec in enumerate(sig.output_specs) if spec.kind == OutputKind.USER_OUTPUT]
    written = {i: n for i, n in zip(users[len(users) - len(state_outputs) :], state_outputs)}
    states = []
    for i, (spec, val) in enumerate(zip(sig.output_specs, vals)):
        if spec.kind == OutputKind.BUFFER_MUTATION or i in written:
            name = spec.target if spec.kind == OutputKind.BUFFER_MUTATION else written[i]
            old = buffers[name]
            if val is not None and (tuple(val.shape) != tuple(old.shape) or val.dtype != old.dtype):
                raise invalid(
                    f"trace: the forward changes buffer {name!r} from {TensorSpec.of(old)} to "
                    f"{TensorSpec.of(val)}; a state buffer keeps its shape and dtype"
                )
            if name not in states:
                states.append(name)
        elif spec.kind != OutputKind.USER_OUTPUT:
            raise invalid(
                f"trace: the forward writes {spec.target!r} ({spec.kind.name}); only "
                "buffers may be updated in place"
            )
    return states


@contextlib.contextmanager
def _returning_states(module: torch.nn.Module) -> Iterator[None]:
    """While tracing, the module's forward also returns the buffers anywhere in the module
    tree that it reassigned (``self.cache = ...`` in a submodule), by name: torch.export writes
    back only the root module's reassigned buffers."""
    forward = type(module).forward

    def forward_and_states(**kwargs: Any) -> Any:
        before = dict(module.named_buffers())
        out = forward(module, **kwargs)
        after = dict(module.named_buffers())
        return out, {n: b for n, b in after.items() if b is not before.get(n)}

    module.forward = forward_and_states  # type: ignore[method-assign]
    try:
        yield
    finally:
        del module.forward


def trace(
    model: Callable | torch.nn.Module,
    args: None | torch.Tensor | tuple[torch.Tensor, ...] = None,
    kwargs: dict[str, torch.Tensor] | None = None,
    spmd: bool = True,
    preserve_parameters: bool = True,
) -> TraceArtifacts:
    """Trace ``model`` with example inputs (``args`` by position, ``kwargs`` by name) into one
    bucket's :class:`TraceArtifacts`, for the ranks of the active ``NxDParallelState``.

    Constraints: the model has explicit parameters (no ``*args`` / ``**kwargs``), at least
    one; every required parameter gets a tensor, none twice; ``spmd=True`` (one graph for all
    ranks). The forward may reassign buffers (out of place, same shape and dtype); it may not
    write parameters. ``preserve_parameters=True`` restores the module's buffers after
    tracing, so the next bucket is traced from the same state."""
    api = "trace"
    if spmd is not True:
        raise invalid(f"{api}: spmd={spmd!r}; only SPMD tracing (one graph for every rank) exists")
    params = model_signature(model, api)
    provided = _provided(params, args, kwargs, api)
    module = model if isinstance(model, torch.nn.Module) else _Callable(model)
    snapshot = {k: v.detach().clone() for k, v in module.named_buffers() if v.device.type != "meta"}
    examples = {p.param_name: p.tensor for p in provided}
    try:
        with quiet_export(), _returning_states(module):
            program = torch.export.export(module, (), examples).run_decompositions({})
    finally:
        if preserve_parameters and snapshot:
            _restore(module, snapshot)
    sig = program.graph_signature
    out_spec, written = program.call_spec.out_spec.children()
    state_outputs = tuple(written.context or ())
    buffers = {**program.state_dict, **program.constants}
    states = _check_states(program, buffers, state_outputs)
    user = [s for s in sig.input_specs if s.kind == InputKind.USER_INPUT]
    order = list(examples)
    inputs = tuple((order[i], TensorSpec.of(examples[order[i]])) for i in range(len(user)))
    weights, weight_idx = [], {}
    for i, s in enumerate(sig.input_specs):
        if s.kind in (InputKind.PARAMETER, InputKind.BUFFER) and s.target not in states:
            weights.append((s.target, TensorSpec.of(buffers[s.target])))
            weight_idx[s.target] = i
    meta = Metaneff(
        inputs=inputs,
        weights=tuple(weights),
        states=tuple((n, TensorSpec.of(buffers[n])) for n in states),
        world_size=parallel_config().world_size,
        state_outputs=state_outputs,
    )
    graph = TracedGraph(program, tuple(examples[n] for n, _ in inputs), meta.world_size)
    return TraceArtifacts(
        hlo=graph,
        metaneff=meta,
        flattener=Flattener(tuple(p.param_name for p in params), tuple(n for n, _ in inputs)),
        packer=Packer(out_spec),
        weight_name_to_idx=weight_idx,
        provided_args=provided,
        model_params=params,
    )


def _restore(module: torch.nn.Module, snapshot: dict[str, torch.Tensor]) -> None:
    for name, value in snapshot.items():
        owner, _, leaf = name.rpartition(".")
        mod = module.get_submodule(owner) if owner else module
        if leaf in mod._buffers:
            mod._buffers[leaf] = value
