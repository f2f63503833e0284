"""Weights and state buffers of a compiled model, per rank: checking a sharded checkpoint
against what the buckets were traced with, and initialising the states (a KV cache)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ..api_errors import invalid, invalid_shape, invalid_type, names
from .tracing import TensorSpec

__all__ = ["StateInitializer", "check_rank_dicts", "convert"]


class StateInitializer(torch.nn.Module):
    """Initial values of the state buffers: ``forward()`` returns, for each of
    ``local_ranks_size`` ranks, ``{key: zeros(shapes[key], dtype=dtypes[key])}``. Subclass it
    and override ``forward`` for other initial values (same keys, shapes and dtypes)."""

    def __init__(
        self, shapes: dict[str, list[int]], dtypes: dict[str, torch.dtype], local_ranks_size: int
    ) -> None:
        super().__init__()
        if set(shapes) != set(dtypes):
            raise invalid(
                f"StateInitializer: shapes and dtypes name different states "
                f"({names(shapes)} vs {names(dtypes)})"
            )
        if not isinstance(local_ranks_size, int) or local_ranks_size < 1:
            raise invalid(
                f"StateInitializer: local_ranks_size must be a positive int, got "
                f"{local_ranks_size!r}"
            )
        self.shapes = {k: list(v) for k, v in shapes.items()}
        self.dtypes = dict(dtypes)
        self.local_ranks_size = local_ranks_size

    def forward(self) -> list[dict[str, torch.Tensor]]:
        return [
            {k: torch.zeros(self.shapes[k], dtype=self.dtypes[k]) for k in self.shapes}
            for _ in range(self.local_ranks_size)
        ]


def convert(value: object, spec: TensorSpec, what: str) -> torch.Tensor:
    """``value`` as a contiguous CPU tensor of ``spec``. Constraints: a tensor of exactly
    ``spec.shape``; a different dtype only when every value converts exactly
    (``torch.tensor([0])`` for a float32 buffer)."""
    if not isinstance(value, torch.Tensor):
        raise invalid_type(f"{what} must be a torch.Tensor, got {type(value).__name__}")
    if tuple(value.shape) != spec.shape:
        raise invalid_shape(
            f"{what} has shape {tuple(value.shape)}, the model's is {spec.shape} ({spec})"
        )
    if value.device.type != "cpu":
        raise invalid(
            f"{what} is on device '{value.device}'; pass CPU tensors (the simulated "
            "NeuronCores read host memory)"
        )
    out = value.detach().to(spec.torch_dtype).contiguous().clone()
    if value.dtype != out.dtype:
        back = out.to(value.dtype)
        if not torch.equal(back, value.detach()):
            raise invalid_type(
                f"{what} is {value.dtype}; the model's is {spec.dtype} and its "
                "values do not convert exactly: convert it yourself"
            )
    return out


def check_rank_dicts(
    checkpoint: object,
    required: Mapping[str, TensorSpec],
    optional: Mapping[str, TensorSpec],
    world_size: int,
    ranks: Sequence[int],
    api: str,
) -> list[dict[str, torch.Tensor]]:
    """One checked state dict per local rank from ``checkpoint`` (a list of one state dict
    per rank: all ``world_size`` ranks, or just the local ones). Every ``required`` name
    must be there; ``optional`` ones may be; any other name, shape or dtype is an error."""
    if isinstance(checkpoint, Mapping) or not isinstance(checkpoint, Sequence):
        raise invalid_type(
            f"{api}: expected a list with one state dict per rank (what "
            f"shard_checkpoint returns), got {type(checkpoint).__name__}"
        )
    if len(checkpoint) == world_size:
        picked = [checkpoint[r] for r in ranks]
    elif len(checkpoint) == len(ranks):
        picked = list(checkpoint)
    else:
        raise invalid(
            f"{api}: {len(checkpoint)} state dict(s) for a model of {world_size} "
            f"rank(s)" + (f" ({len(ranks)} here)" if len(ranks) != world_size else "")
        )
    out = []
    for rank, sd in zip(ranks, picked):
        if not isinstance(sd, Mapping):
            raise invalid_type(
                f"{api}: the state dict of rank {rank} is a {type(sd).__name__}, not a dict"
            )
        missing = set(required) - set(sd)
        extra = set(sd) - set(required) - set(optional)
        if missing or extra:
            raise invalid(
                f"{api}: rank {rank}'s weights do not match the model: "
                + (f"missing {names(missing)}" if missing else "")
                + ("; " if missing and extra else "")
                + (f"not in the model {names(extra)}" if extra else "")
            )
        specs = {**optional, **required}
        out.append({k: convert(v, specs[k], f"{api}: rank {rank}'s {k!r}") for k, v in sd.items()})
    return out
