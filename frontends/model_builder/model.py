"""``NxDModel``: a compiled model on simulated NeuronCores, one per rank.

It holds one or more buckets (compiled graphs for given input shapes), the weights of every
rank, and the state buffers the graphs update in place (a KV cache). A call picks the bucket
whose traced inputs match the call's shapes and dtypes, runs it on every rank (the compute on
the simulator's NKI kernels, the collectives across ranks) and returns rank 0's outputs (or
every rank's, ``forward_mode="ranked"``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export.graph_signature import InputKind

from ..api_errors import (
    bad_artifact,
    call_order,
    invalid,
    invalid_type,
    missing_key,
    names,
    not_applicable,
)
from . import saving
from .collectives import RankGroup
from .compiling import CompilationArtifacts, load_compiled
from .program import Program
from .tracing import Flattener, Metaneff, Packer, TensorSpec, TraceArtifacts, TracedGraph
from .weights import StateInitializer, check_rank_dicts, convert

__all__ = ["NxDModel", "Bucket", "RunInfo"]

FORWARD_MODES = ("default", "ranked", "async")


@dataclass
class Bucket:
    """One compiled bucket: its artifact bytes, program, traced graph, metadata, and how
    calls map to its inputs and outputs."""

    key: str
    neff: bytes
    meta_json: dict[str, Any]
    program: Program
    graph: TracedGraph
    metaneff: Metaneff
    flattener: Flattener
    packer: Packer
    defaults: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def estimate(self) -> dict[str, Any]:
        """The cost model's estimate of one call (from compiling)."""
        return dict(self.meta_json["estimate"])

    def accepts(self, inputs: dict[str, Any]) -> bool:
        return set(inputs) == {n for n, _ in self.metaneff.inputs} and all(
            isinstance(inputs[n], torch.Tensor) and TensorSpec.of(inputs[n]) == s
            for n, s in self.metaneff.inputs
        )

    def signature(self) -> str:
        return ", ".join(f"{n}: {s}" for n, s in self.metaneff.inputs)


@dataclass(frozen=True)
class RunInfo:
    """The last call: the bucket that ran and each local rank's estimated device time of
    its compute (cost model), in microseconds."""

    bucket: str
    device_us: tuple[float, ...]


def _spec_text(v: Any) -> str:
    return str(TensorSpec.of(v)) if isinstance(v, torch.Tensor) else type(v).__name__


class NxDModel(torch.nn.Module):
    """Runs models compiled by ``ModelBuilder`` or by ``trace`` + ``compile``, on
    ``world_size`` ranks, each a simulated NeuronCore. This process simulates ranks
    ``start_rank ... start_rank + local_ranks_size - 1`` (default: all); the others run in
    other ``torch.distributed`` processes.

    Constraints: ``start_rank`` and ``local_ranks_size`` given together, within
    ``world_size``. ``layout_transformer`` (weight layout optimisation) is not applicable."""

    def __init__(
        self,
        world_size: int,
        start_rank: int | None = None,
        local_ranks_size: int | None = None,
        state_initializer: StateInitializer | None = None,
        layout_transformer: Any = None,
    ) -> None:
        super().__init__()
        if not isinstance(world_size, int) or world_size < 1:
            raise invalid(f"NxDModel: world_size must be a positive int, got {world_size!r}")
        if (start_rank is None) != (local_ranks_size is None):
            raise invalid(
                f"NxDModel: start_rank ({start_rank}) and local_ranks_size "
                f"({local_ranks_size}) must be given together"
            )
        start = start_rank or 0
        local = world_size if local_ranks_size is None else local_ranks_size
        if not (0 <= start and 1 <= local and start + local <= world_size):
            raise invalid(
                f"NxDModel: ranks {start} ... {start + local - 1} are not within "
                f"world_size={world_size}"
            )
        if layout_transformer is not None:
            raise not_applicable(
                "NxDModel(layout_transformer=...)",
                "weight layout optimisation is not simulated; weights run as given",
            )
        if state_initializer is not None and not isinstance(state_initializer, torch.nn.Module):
            raise invalid_type("NxDModel: state_initializer must be a StateInitializer")
        self.world_size = world_size
        self.group = RankGroup(world_size, start, local)
        self.state_initializer = state_initializer
        self.buckets: dict[str, Bucket] = {}
        self._pending: list[dict[str, torch.Tensor]] | None = None
        self._weights: list[dict[str, torch.Tensor]] | None = None
        self._states: list[dict[str, torch.Tensor]] | None = None
        self.last_run: RunInfo | None = None

    # ---- building ------------------------------------------------------------------------

    def add(
        self,
        key: str,
        trace_artifacts: TraceArtifacts,
        compilation_artifacts: CompilationArtifacts,
    ) -> NxDModel:
        """Add a compiled bucket under ``key`` (unique). Constraints: the artifacts of one
        bucket, compiled for this model's world size, before ``to_neuron()``; its weights and
        states agree (names, shapes, dtypes) with the buckets already added."""
        if not isinstance(trace_artifacts, TraceArtifacts):
            raise invalid_type(
                f"add: trace_artifacts must come from trace(), got {type(trace_artifacts).__name__}"
            )
        if not isinstance(compilation_artifacts, CompilationArtifacts):
            raise invalid_type(
                f"add: compilation_artifacts must come from compile(), got "
                f"{type(compilation_artifacts).__name__}"
            )
        path = compilation_artifacts.neff_filepath
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError as e:
            raise bad_artifact(
                f"add: cannot read the compiled artifact {path!r}: {e.strerror}"
            ) from None
        bucket = self._bucket(
            key, data, repr(path), trace_artifacts.flattener, trace_artifacts.packer
        )
        if bucket.metaneff.inputs != trace_artifacts.metaneff.inputs:
            raise bad_artifact(
                f"add: the compiled artifact {path!r} was compiled from another "
                f"trace (inputs {bucket.signature()}) than trace_artifacts"
            )
        self._add_bucket(bucket)
        return self

    def _bucket(self, key: str, data: bytes, where: str, flat: Flattener, pack: Packer) -> Bucket:
        if not isinstance(key, str) or not key:
            raise invalid(f"add: key must be a non-empty string, got {key!r}")
        if key in self.buckets:
            raise invalid(f"add: a bucket named {key!r} is already added")
        if self._weights is not None:
            raise call_order(f"add({key!r}): add buckets before to_neuron()")
        bundle, program, graph, meta = load_compiled(data, where)
        if meta.world_size != self.world_size:
            raise bad_artifact(
                f"add({key!r}): compiled for world_size={meta.world_size}, "
                f"this NxDModel has world_size={self.world_size}"
            )
        sig = graph.program.graph_signature
        defaults = {
            s.target: graph.program.constants[s.target]
            for s in sig.input_specs
            if s.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
            and s.target in graph.program.constants
        }
        return Bucket(key, data, bundle.meta, program, graph, meta, flat, pack, defaults)

    def _add_bucket(self, bucket: Bucket) -> None:
        for other in self.buckets.values():
            for kind in ("weights", "states"):
                mine, theirs = (
                    dict(getattr(bucket.metaneff, kind)),
                    dict(getattr(other.metaneff, kind)),
                )
                for n in set(mine) & set(theirs):
                    if mine[n] != theirs[n]:
                        raise invalid(
                            f"add({bucket.key!r}): {kind[:-1]} {n!r} is {mine[n]} "
                            f"here and {theirs[n]} in bucket {other.key!r}"
                        )
        self.buckets[bucket.key] = bucket

    def _specs(self) -> tuple[dict[str, TensorSpec], dict[str, TensorSpec], dict]:
        """(required weights, states, weights with a traced default) over all buckets."""
        weights, states, defaults = {}, {}, {}
        for b in self.buckets.values():
            weights.update(b.metaneff.weights)
            states.update(b.metaneff.states)
            defaults.update(b.defaults)
        required = {k: v for k, v in weights.items() if k not in defaults}
        return required, states, {k: v for k, v in weights.items() if k in defaults}

    def _bucket_named(self, key: str, api: str) -> Bucket:
        if key not in self.buckets:
            raise missing_key(f"{api}: no bucket {key!r}; the buckets are {names(self.buckets)}")
        return self.buckets[key]

    def get_neff(self, key: str) -> bytes:
        """The compiled artifact of bucket ``key`` (the NEFF stand-in: an nki-sim archive with
        the graph, the kernels' IR and the cost estimate)."""
        return self._bucket_named(key, "get_neff").neff

    def get_metaneff(self, key: str) -> Metaneff:
        """Bucket ``key``'s metadata (inputs, weights, states, world size)."""
        return self._bucket_named(key, "get_metaneff").metaneff

    def get_hlo(self, key: str) -> TracedGraph:
        """Bucket ``key``'s traced graph (the HLO stand-in: a torch.export program)."""
        return self._bucket_named(key, "get_hlo").graph

    # ---- weights and states --------------------------------------------------------------

    def _check(self, checkpoint: Any, api: str) -> list[dict[str, torch.Tensor]]:
        if not self.buckets:
            raise call_order(f"{api}: the model has no buckets yet (add() them first)")
        required, states, defaults = self._specs()
        return check_rank_dicts(
            checkpoint, required, {**states, **defaults}, self.world_size, self.group.ranks, api
        )

    def set_weights(self, sharded_checkpoint: list[dict[str, torch.Tensor]]) -> None:
        """Set every rank's weights (one state dict per rank, as ``shard_checkpoint`` returns)
        before ``to_neuron()``. State buffers named there get those initial values.
        Constraints: exactly the model's weight names (states optional), each of the traced
        shape; dtypes that convert exactly."""
        if self._weights is not None:
            raise call_order(
                "set_weights: the model is already on the simulated NeuronCores; "
                "use replace_weights()"
            )
        self._pending = self._check(sharded_checkpoint, "set_weights")

    def to_neuron(self) -> None:
        """Load the weights and initial states onto the ranks' simulated NeuronCores. Without
        ``set_weights``, a one-rank model uses the weights it was traced with."""
        if not self.buckets:
            raise call_order("to_neuron: the model has no buckets (add() them first)")
        required, states, defaults = self._specs()
        pending = self._pending
        if pending is None:
            if required and self.world_size > 1:
                raise call_order(
                    f"to_neuron: {self.world_size} ranks need their weights: call "
                    "set_weights(shard_checkpoint(...)) first"
                )
            traced = {**self._traced_weights()}
            pending = [{k: traced[k] for k in required} for _ in self.group.ranks]
        initial = self._initial_states(states)
        self._weights, self._states = [], []
        for k, given in enumerate(pending):
            w = {n: v for n, v in given.items() if n not in states}
            for n in defaults:
                w.setdefault(
                    n, next(b.defaults[n] for b in self.buckets.values() if n in b.defaults)
                )
            self._weights.append(w)
            self._states.append({n: given.get(n, initial[k][n]).clone() for n in states})

    def _traced_weights(self) -> dict[str, torch.Tensor]:
        out = {}
        for b in self.buckets.values():
            out.update({k: v.detach() for k, v in b.graph.program.state_dict.items()})
        return out

    def _initial_states(self, states: dict[str, TensorSpec]) -> list[dict[str, torch.Tensor]]:
        local = len(self.group.ranks)
        init = self.state_initializer or StateInitializer(
            {n: list(s.shape) for n, s in states.items()},
            {n: s.torch_dtype for n, s in states.items()},
            local,
        )
        values = init()
        if len(values) != local:
            raise invalid(
                f"to_neuron: the state initializer gave {len(values)} rank(s) of "
                f"states, this model runs {local}"
            )
        return [
            {n: convert(v.get(n), states[n], f"initial state {n!r}") for n in states}
            for v in values
        ]

    def replace_weights(self, sharded_checkpoint: list[dict[str, torch.Tensor]]) -> None:
        """Replace the weights (and any states named) of a model already on the simulated
        NeuronCores; same constraints as ``set_weights``."""
        if self._weights is None:
            raise call_order(
                "replace_weights: the model is not on the simulated NeuronCores "
                "yet; use set_weights() before to_neuron()"
            )
        new = self._check(sharded_checkpoint, "replace_weights")
        states = self._specs()[1]
        for k, given in enumerate(new):
            for n, v in given.items():
                (self._states if n in states else self._weights)[k][n] = v

    def _state(self, buffer_key: str, rank: int, api: str) -> torch.Tensor:
        if self._states is None:
            raise call_order(f"{api}: call to_neuron() first")
        if not isinstance(rank, int) or rank not in self.group.ranks:
            raise invalid(
                f"{api}: rank {rank!r} is not one of this model's ranks {self.group.ranks}"
            )
        states = self._states[rank - self.group.start_rank]
        if buffer_key not in states:
            raise missing_key(
                f"{api}: no state buffer {buffer_key!r}; the states are {names(states)}"
            )
        return states[buffer_key]

    def read_from_neuron_buffer(self, buffer_key: str, rank: int) -> torch.Tensor:
        """A copy of state buffer ``buffer_key`` of ``rank``."""
        return self._state(buffer_key, rank, "read_from_neuron_buffer").clone()

    def write_to_neuron_buffer(self, tensor: torch.Tensor, buffer_key: str, rank: int) -> None:
        """Overwrite state buffer ``buffer_key`` of ``rank`` with ``tensor`` (same shape; a
        dtype that converts exactly)."""
        dst = self._state(buffer_key, rank, "write_to_neuron_buffer")
        dst.copy_(convert(tensor, TensorSpec.of(dst), f"write_to_neuron_buffer: {buffer_key!r}"))

    # ---- running -------------------------------------------------------------------------

    def _route(self, args: tuple, kwargs: dict, model_name: str | None, ranked: bool) -> tuple:
        if model_name is not None:
            b = self._bucket_named(model_name, "forward")
            return b, b.flattener.bind(args, kwargs)
        matches, bound = [], {}
        for b in self.buckets.values():
            try:
                given = b.flattener.bind(args, kwargs)
            except Exception:
                continue
            first = {
                k: (v[0] if ranked and isinstance(v, (list, tuple)) and v else v)
                for k, v in given.items()
            }
            if b.accepts(first):
                matches.append(b)
                bound = given
        if len(matches) == 1:
            return matches[0], bound
        if matches:
            raise invalid(
                f"forward: buckets {names(b.key for b in matches)} all match these "
                "inputs; pick one with model_name="
            )
        shown = ", ".join(
            f"{k}: {_spec_text(v[0] if ranked and isinstance(v, (list, tuple)) else v)}"
            for k, v in {**dict(enumerate(args)), **kwargs}.items()
        )
        listing = "; ".join(f"{b.key!r} ({b.signature()})" for b in self.buckets.values())
        raise invalid(f"forward: no bucket matches the inputs ({shown}); the buckets are {listing}")

    def forward(
        self,
        *args: Any,
        model_name: str | None = None,
        forward_mode: str = "default",
        **kwargs: Any,
    ) -> Any:
        """Run the bucket matching the inputs (or ``model_name``). ``forward_mode``:
        ``"default"`` (inputs replicated to every rank; rank 0's outputs, in the traced
        structure), ``"ranked"`` (each input a list with one tensor per rank; returns the
        flat outputs as ``[output][rank]``), ``"async"`` (as ranked; the outputs are ready
        when it returns, since the simulation is synchronous)."""
        if self._weights is None or self._states is None:
            raise call_order(
                "forward: the model is not on the simulated NeuronCores; call to_neuron() first"
            )
        if forward_mode not in FORWARD_MODES:
            raise invalid(
                f"forward: forward_mode={forward_mode!r}; expected one of {names(FORWARD_MODES)}"
            )
        ranked = forward_mode != "default"
        bucket, given = self._route(args, kwargs, model_name, ranked)
        local = len(self.group.ranks)
        per_rank = {
            n: self._rank_values(given, n, ranked, local) for n, _ in bucket.metaneff.inputs
        }
        flat_in = []
        for k in range(local):
            row = []
            for kind, target, argname in bucket.program.inputs:
                if kind == InputKind.USER_INPUT:
                    row.append(per_rank[_user_name(bucket, argname)][k])
                elif target in self._states[k]:
                    row.append(self._states[k][target])
                else:
                    row.append(self._weights[k][target])
            flat_in.append(row)
        flat_out, device_us = bucket.program.run(flat_in, self.group)
        users = []
        for k, outs in enumerate(flat_out):
            mine = []
            for (role, target), v in zip(bucket.program.outputs, outs):
                if role == "state":
                    self._states[k][target].copy_(v)
                else:
                    mine.append(v)
            users.append(mine)
        self.last_run = RunInfo(bucket.key, tuple(device_us))
        if not ranked:
            return bucket.packer(users[0])
        return [[users[k][i] for k in range(local)] for i in range(len(users[0]))]

    def _rank_values(self, given: dict, name: str, ranked: bool, local: int) -> list:
        v = given[name]
        if not ranked:
            return [v] * local
        if not isinstance(v, (list, tuple)) or len(v) not in (local, self.world_size):
            raise invalid(
                f"forward: in ranked mode input {name!r} must be a list of {local} "
                f"tensor(s), one per rank; got {_spec_text(v)}"
            )
        return list(v) if len(v) == local else [v[r] for r in self.group.ranks]

    # ---- saving --------------------------------------------------------------------------

    def save(self, path_to_save: str | os.PathLike, save_weights: bool = False) -> None:
        """Save every bucket (graphs, kernels' IR, estimates), the routing information and,
        with ``save_weights=True``, every local rank's weights, as one archive whose members
        are hash-checked when loaded."""
        saving.save(self, path_to_save, save_weights)

    @classmethod
    def load(
        cls,
        path_to_model: str | os.PathLike,
        start_rank: int | None = None,
        local_ranks_size: int | None = None,
    ) -> NxDModel:
        """Load a model saved by ``save`` (weights included if they were saved; call
        ``to_neuron()`` next). A corrupted, foreign or other-version archive is an
        ``err_invalid_artifact`` error."""
        return saving.load(cls, path_to_model, start_rank, local_ranks_size)


def _user_name(bucket: Bucket, argname: str) -> str:
    """The model parameter a user-input placeholder of the graph is for."""
    users = [a for k, _, a in bucket.program.inputs if k == InputKind.USER_INPUT]
    return bucket.metaneff.inputs[users.index(argname)][0]
