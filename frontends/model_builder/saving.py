"""``NxDModel.save`` / ``NxDModel.load``: the whole model as one archive of
:mod:`.artifacts` (format ``nki-sim/nxd-model``): each bucket's compiled artifact (itself a
verified archive) with its routing information, the state initializer's shapes and dtypes,
and optionally every local rank's weights. Loading verifies every hash before building
anything, so a corrupted file is an error, never a model that computes something else."""

from __future__ import annotations

import io
import json
import os
from typing import Any

import torch
from torch.utils import _pytree as pytree

from ..api_errors import bad_artifact, call_order, invalid
from . import artifacts
from .tracing import Flattener, Packer
from .weights import StateInitializer

__all__ = ["save", "load"]


class SavedStates(StateInitializer):
    """The initial state values a saved model's state initializer gave (one dict per rank)."""

    def __init__(self, values: list[dict[str, torch.Tensor]]) -> None:
        first = values[0] if values else {}
        super().__init__(
            {k: list(v.shape) for k, v in first.items()},
            {k: v.dtype for k, v in first.items()},
            max(1, len(values)),
        )
        self.values = values

    def forward(self) -> list[dict[str, torch.Tensor]]:
        return [{k: v.clone() for k, v in d.items()} for d in self.values]


def _torch_bytes(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def save(model: Any, path: str | os.PathLike, save_weights: bool) -> None:
    if not model.buckets:
        raise call_order("save: the model has no buckets to save")
    members: dict[str, bytes] = {}
    order = []
    for i, (key, b) in enumerate(model.buckets.items()):
        order.append(key)
        members[f"buckets/{i}.neff"] = b.neff
        members[f"buckets/{i}.json"] = json.dumps(
            {
                "key": key,
                "params": list(b.flattener.params),
                "inputs": list(b.flattener.inputs),
                "out_spec": pytree.treespec_dumps(b.packer.out_spec),
            }
        ).encode()
    weights = model._weights if model._weights is not None else model._pending
    if save_weights:
        if weights is None:
            raise call_order(
                "save(save_weights=True): the model has no weights yet; call set_weights() first"
            )
        for rank, w in zip(model.group.ranks, weights):
            members[f"weights/rank{rank}.pt"] = _torch_bytes(dict(w))
    if model.state_initializer is not None:  # its values, whatever computes them
        for rank, states in zip(model.group.ranks, model.state_initializer()):
            members[f"initial_states/rank{rank}.pt"] = _torch_bytes(dict(states))
    meta = {
        "world_size": model.world_size,
        "buckets": order,
        "weights_ranks": list(model.group.ranks) if save_weights else [],
        "initial_states_ranks": list(model.group.ranks) if model.state_initializer else [],
    }
    artifacts.write(path, artifacts.pack(artifacts.MODEL, meta, members))


def load(cls: Any, path: str | os.PathLike, start_rank: int | None, local: int | None) -> Any:
    if (start_rank is None) != (local is None):
        raise invalid(
            f"load: start_rank ({start_rank}) and local_ranks_size ({local}) must be given together"
        )
    bundle = artifacts.read(path, artifacts.MODEL)
    meta = bundle.meta
    where = repr(os.fspath(path))
    try:
        world, order = int(meta["world_size"]), list(meta["buckets"])
        saved_ranks = list(meta["weights_ranks"])
        state_ranks = list(meta["initial_states_ranks"])
    except (KeyError, TypeError, ValueError):
        raise bad_artifact(f"{where}: the manifest lacks the model's description") from None
    ranks = list(range(start_rank or 0, (start_rank or 0) + (world if local is None else local)))
    init = None
    if state_ranks:
        missing = [r for r in ranks if r not in state_ranks]
        if missing:
            raise bad_artifact(
                f"{where} holds the initial states of ranks {state_ranks}, not of {missing}"
            )
        init = SavedStates(
            [
                torch.load(
                    io.BytesIO(bundle.members[f"initial_states/rank{r}.pt"]), weights_only=True
                )
                for r in ranks
            ]
        )
    model = cls(world, start_rank, local, state_initializer=init)
    for i, key in enumerate(order):
        info = json.loads(bundle.text(f"buckets/{i}.json"))
        if info["key"] != key:
            raise bad_artifact(f"{where}: bucket {i} is {info['key']!r}, the manifest says {key!r}")
        flat = Flattener(tuple(info["params"]), tuple(info["inputs"]))
        pack = Packer(pytree.treespec_loads(info["out_spec"]))
        data = bundle.members[f"buckets/{i}.neff"]
        model._add_bucket(model._bucket(key, data, f"{where} bucket {key!r}", flat, pack))
    if saved_ranks:
        missing = [r for r in model.group.ranks if r not in saved_ranks]
        if missing:
            raise bad_artifact(
                f"{where} holds the weights of ranks {saved_ranks}, not of {missing}"
            )
        weights = [
            torch.load(io.BytesIO(bundle.members[f"weights/rank{r}.pt"]), weights_only=True)
            for r in model.group.ranks
        ]
        model.set_weights(weights)
    return model
