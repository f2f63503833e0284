"""Tensor parallelism: the parallel state (``NxDParallelState``), linear layers whose
parameters are one rank's shard, and ``shard_checkpoint``.

A model built inside ``NxDParallelState(world_size=W, tensor_model_parallel_size=W)`` holds
rank-local shards: ``ColumnParallelLinear`` splits the output features (weight rows, bias) over
the ranks, ``RowParallelLinear`` the input features (weight columns; its bias is whole). Their
forward passes call the collectives of :mod:`.collectives` (all-gather, all-reduce, scatter),
which a compiled ``NxDModel`` runs across ranks with the simulator's collective kernels. The
graph traced from such a model is the same for every rank (SPMD); each rank gets its own
weights from ``shard_checkpoint``."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..api_errors import invalid, invalid_shape, invalid_type, names, not_applicable
from . import collectives

__all__ = [
    "ColumnParallelLinear",
    "NxDParallelState",
    "RowParallelLinear",
    "get_tensor_model_parallel_size",
    "init_on_device",
    "shard_checkpoint",
]


@dataclass(frozen=True)
class ParallelConfig:
    """The ranks a model is traced for: ``world_size`` ranks, one tensor-parallel group."""

    world_size: int = 1
    tensor_model_parallel_size: int = 1


_STACK: list[ParallelConfig] = []


def parallel_config() -> ParallelConfig:
    """The innermost active ``NxDParallelState`` (one rank when none is active)."""
    return _STACK[-1] if _STACK else ParallelConfig()


def get_tensor_model_parallel_size() -> int:
    """The tensor-parallel degree of the innermost ``NxDParallelState`` (1 outside one)."""
    return parallel_config().tensor_model_parallel_size


class NxDParallelState:
    """``with NxDParallelState(world_size=W, tensor_model_parallel_size=T):`` models built and
    traced inside hold one rank's shards of a ``T``-way tensor-parallel model; every rank is a
    simulated NeuronCore.

    Constraint: ``world_size == tensor_model_parallel_size`` (data-parallel replicas are not
    simulated), both positive ints."""

    def __init__(self, world_size: int = 1, tensor_model_parallel_size: int = 1) -> None:
        for arg, v in (
            ("world_size", world_size),
            ("tensor_model_parallel_size", tensor_model_parallel_size),
        ):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise invalid(f"NxDParallelState: {arg} must be a positive int, got {v!r}")
        if world_size != tensor_model_parallel_size:
            raise not_applicable(
                f"NxDParallelState(world_size={world_size}, "
                f"tensor_model_parallel_size={tensor_model_parallel_size})",
                "data-parallel replicas are not simulated; world_size must equal "
                "tensor_model_parallel_size",
            )
        self.config = ParallelConfig(world_size, tensor_model_parallel_size)

    def __enter__(self) -> NxDParallelState:
        _STACK.append(self.config)
        return self

    def __exit__(self, *exc: Any) -> None:
        _STACK.remove(self.config)


@contextlib.contextmanager
def init_on_device(device: torch.device, include_buffers: bool = False) -> Iterator[None]:
    """Create modules' tensors on ``device`` inside the block (``torch.device("meta")``: shapes
    only, no memory; what ``shard_checkpoint`` needs from its ``model``)."""
    with torch.device(device):
        yield


def _split(size: int, tp: int, what: str) -> int:
    if size % tp:
        raise invalid_shape(
            f"{what}={size} is not divisible by the tensor-parallel degree {tp} (padding is "
            "not simulated)"
        )
    return size // tp


def _init_linear(weight: torch.Tensor, bias: torch.Tensor | None, fan_in: int) -> None:
    # nn.Linear's initialisation, with the fan-in of the whole (unsharded) layer
    if weight.device.type == "meta":
        return
    bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    with torch.no_grad():
        nn.init.uniform_(weight, -bound, bound)
        if bias is not None:
            nn.init.uniform_(bias, -bound, bound)


class ParallelLayer(nn.Module):
    """A layer with sharded parameters: ``SHARD_DIMS`` maps a parameter name to the dimension
    split over the ranks (absent: the parameter is whole on every rank)."""

    SHARD_DIMS: dict[str, int] = {}

    def __init__(self) -> None:
        super().__init__()
        self.tensor_parallel_size = get_tensor_model_parallel_size()


class ColumnParallelLinear(ParallelLayer):
    """``y = x W^T + b`` with the output features split over the ranks: rank ``r`` holds rows
    ``r*out/T ... (r+1)*out/T`` of ``W`` and ``b``. ``gather_output=True`` all-gathers the
    output (every rank gets all features), else each rank keeps its slice (feed it to a
    ``RowParallelLinear(input_is_parallel=True)``).

    Constraint: ``output_size`` divisible by the tensor-parallel degree."""

    SHARD_DIMS = {"weight": 0, "bias": 0}

    def __init__(
        self,
        input_size: int,
        output_size: int,
        bias: bool = True,
        gather_output: bool = True,
        dtype: torch.dtype = torch.float32,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        tp = self.tensor_parallel_size
        local = _split(output_size, tp, "ColumnParallelLinear output_size")
        self.input_size, self.output_size, self.gather_output = (
            input_size,
            output_size,
            gather_output,
        )
        self.weight = nn.Parameter(torch.empty(local, input_size, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.empty(local, dtype=dtype, device=device)) if bias else None
        _init_linear(self.weight, self.bias, input_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight, self.bias)
        if self.gather_output and self.tensor_parallel_size > 1:
            y = collectives.all_gather(y, y.dim() - 1, self.tensor_parallel_size)
        return y


class RowParallelLinear(ParallelLayer):
    """``y = x W^T + b`` with the input features split over the ranks: rank ``r`` holds
    columns ``r*in/T ... (r+1)*in/T`` of ``W``; the partial products are all-reduced, then the
    (whole) bias is added. ``input_is_parallel=False`` first takes this rank's slice of ``x``.

    Constraint: ``input_size`` divisible by the tensor-parallel degree."""

    SHARD_DIMS = {"weight": 1}

    def __init__(
        self,
        input_size: int,
        output_size: int,
        bias: bool = True,
        input_is_parallel: bool = False,
        dtype: torch.dtype = torch.float32,
        device: torch.device | None = None,
        reduce_output: bool = True,
    ) -> None:
        super().__init__()
        tp = self.tensor_parallel_size
        local = _split(input_size, tp, "RowParallelLinear input_size")
        self.input_size, self.output_size = input_size, output_size
        self.input_is_parallel, self.reduce_output = input_is_parallel, reduce_output
        self.weight = nn.Parameter(torch.empty(output_size, local, dtype=dtype, device=device))
        self.bias = (
            nn.Parameter(torch.empty(output_size, dtype=dtype, device=device)) if bias else None
        )
        _init_linear(self.weight, self.bias, input_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tp = self.tensor_parallel_size
        if not self.input_is_parallel and tp > 1:
            x = collectives.scatter(x, x.dim() - 1, tp)
        y = F.linear(x, self.weight)
        if self.reduce_output and tp > 1:
            y = collectives.all_reduce(y, tp)
        return y + self.bias if self.bias is not None else y


def shard_dims(model: nn.Module) -> dict[str, int]:
    """``state-dict name -> split dimension`` of every sharded parameter of ``model``."""
    out = {}
    for prefix, mod in model.named_modules():
        if isinstance(mod, ParallelLayer) and mod.tensor_parallel_size > 1:
            for pname, dim in mod.SHARD_DIMS.items():
                if getattr(mod, pname, None) is not None:
                    out[f"{prefix}.{pname}" if prefix else pname] = dim
    return out


def shard_checkpoint(
    checkpoint: dict[str, torch.Tensor],
    model: nn.Module,
    start_rank: int | None = None,
    end_rank: int | None = None,
    load_on_device: bool = False,
    serialize_path: str | None = None,
) -> list[dict[str, torch.Tensor]]:
    """Split a whole-model ``checkpoint`` into one state dict per rank ``start_rank ...
    end_rank`` (default: every rank of the active ``NxDParallelState``), using ``model``'s
    parallel layers (build it under ``init_on_device(torch.device("meta"))``) to know which
    dimension of which tensor is split.

    Constraints: the checkpoint has every parameter of ``model`` (its buffers are optional) and
    no other name, each tensor of the whole (unsharded) shape;
    ``0 <= start_rank <= end_rank < tensor-parallel degree``.
    ``serialize_path`` also writes ``tp{rank}_sharded_checkpoint.safetensors`` files there.
    ``load_on_device=True`` is not applicable (the simulator keeps weights in host memory)."""
    if load_on_device:
        raise not_applicable(
            "shard_checkpoint(load_on_device=True)",
            "the simulated NeuronCores keep their weights in host memory; pass the returned "
            "shards to NxDModel.set_weights",
        )
    if not isinstance(checkpoint, dict):
        raise invalid_type(
            f"shard_checkpoint: checkpoint must be a dict of tensors, got "
            f"{type(checkpoint).__name__}"
        )
    tp = get_tensor_model_parallel_size()
    start = 0 if start_rank is None else start_rank
    end = tp - 1 if end_rank is None else end_rank
    if not (0 <= start <= end < tp):
        raise invalid(
            f"shard_checkpoint: need 0 <= start_rank <= end_rank < {tp} (the tensor-parallel "
            f"degree), got start_rank={start_rank}, end_rank={end_rank}"
        )
    expected = model.state_dict()
    params = {k for k, _ in model.named_parameters()}
    missing, extra = params - set(checkpoint), set(checkpoint) - set(expected)
    if missing or extra:
        raise invalid(
            "shard_checkpoint: checkpoint names do not match the model's: "
            + (f"missing {names(missing)}" if missing else "")
            + ("; " if missing and extra else "")
            + (f"not in the model {names(extra)}" if extra else "")
        )
    dims = shard_dims(model)
    shards: list[dict[str, torch.Tensor]] = [{} for _ in range(start, end + 1)]
    for key, local in expected.items():
        if key not in checkpoint:  # a buffer (a state such as a KV cache): optional
            continue
        full = list(local.shape)
        if key in dims:
            full[dims[key]] *= tp
        value = checkpoint[key]
        if not isinstance(value, torch.Tensor) or list(value.shape) != full:
            got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise invalid_shape(
                f"shard_checkpoint: checkpoint[{key!r}] has shape {got}, the model's whole "
                f"(unsharded) {key!r} is {tuple(full)}"
            )
        for i, rank in enumerate(range(start, end + 1)):
            if key in dims:
                n = local.shape[dims[key]]
                part = value.narrow(dims[key], rank * n, n)
            else:
                part = value
            shards[i][key] = part.detach().contiguous().clone()
    if serialize_path is not None:
        from safetensors.torch import save_file

        os.makedirs(serialize_path, exist_ok=True)
        for i, rank in enumerate(range(start, end + 1)):
            save_file(
                shards[i], os.path.join(serialize_path, f"tp{rank}_sharded_checkpoint.safetensors")
            )
    return shards
