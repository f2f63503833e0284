"""``ModelBuilder``: trace a model once per bucket, compile every bucket, get an ``NxDModel``."""

from __future__ import annotations

import os
from typing import Any

import torch

from ..api_errors import invalid, invalid_type, names, not_applicable
from .compiling import DEFAULT_COMPILER_ARGS, DEFAULT_WORKDIR
from .compiling import compile as compile_bucket
from .model import NxDModel
from .tracing import TraceArtifacts, model_signature, trace

__all__ = ["ModelBuilder", "ModelBuilderConstants"]


class ModelBuilderConstants:
    """Defaults of the builder (names of the reference API)."""

    DEFAULT_COMPILER_WORKDIR = DEFAULT_WORKDIR
    DEFAULT_COMPILER_ARGS = DEFAULT_COMPILER_ARGS


class ModelBuilder:
    """``ModelBuilder(model).trace(args=..., tag="b1").trace(..., tag="b2").compile()`` ->
    an :class:`NxDModel` with one bucket per trace.

    Constraint (checked here): ``model`` is a ``torch.nn.Module`` or callable with explicit
    parameters (no ``*args`` / ``**kwargs``), at least one."""

    def __init__(self, model: Any) -> None:
        model_signature(model, "ModelBuilder")
        self.model = model
        self.traces: dict[str, TraceArtifacts] = {}

    def trace(
        self,
        args: None | torch.Tensor | tuple[torch.Tensor, ...] = None,
        kwargs: dict[str, torch.Tensor] | None = None,
        tag: str | None = None,
        spmd: bool = True,
    ) -> ModelBuilder:
        """Trace one bucket (see :func:`trace`); ``tag`` names it (default: a hash of the
        graph). Constraint: tags are unique. Returns ``self``."""
        artifacts = trace(self.model, args=args, kwargs=kwargs, spmd=spmd)
        tag = artifacts.hlo.digest() if tag is None else tag
        if not isinstance(tag, str) or not tag:
            raise invalid(f"ModelBuilder.trace: tag must be a non-empty string, got {tag!r}")
        if tag in self.traces:
            raise invalid(f"ModelBuilder.trace: a bucket tagged {tag!r} is already traced")
        self.traces[tag] = artifacts
        return self

    def compile(
        self,
        priority_model_key: str | None = None,
        compiler_workdir: str | os.PathLike | None = None,
        compiler_args: str | dict[str, str] | None = None,
        max_workers: int | None = None,
    ) -> NxDModel:
        """Compile every traced bucket and return the :class:`NxDModel` holding them.

        ``compiler_args``: flags for every bucket, or a dict ``tag -> flags``.
        ``priority_model_key`` (the bucket weight-layout optimisation would favour) must name a
        bucket; layouts are not optimised here, weights run as given. ``max_workers``: buckets
        compile one after another here (tracing is cheap), so it must be ``None`` or a positive
        int and changes nothing else."""
        if not self.traces:
            raise invalid("ModelBuilder.compile: nothing traced; call .trace(...) first")
        tags = list(self.traces)
        if priority_model_key is not None and priority_model_key not in self.traces:
            raise invalid(
                f"ModelBuilder.compile: priority_model_key={priority_model_key!r} is "
                f"not a traced bucket; the buckets are {names(tags)}"
            )
        if max_workers is not None and (not isinstance(max_workers, int) or max_workers < 1):
            raise invalid(
                f"ModelBuilder.compile: max_workers must be a positive int, got {max_workers!r}"
            )
        if isinstance(compiler_args, dict):
            unknown = set(compiler_args) - set(tags)
            if unknown:
                raise invalid(
                    f"ModelBuilder.compile: compiler_args for {names(unknown)}, which "
                    f"are not traced buckets ({names(tags)})"
                )
            per_tag = {t: compiler_args.get(t) for t in tags}
        elif compiler_args is None or isinstance(compiler_args, str):
            per_tag = {t: compiler_args for t in tags}
        else:
            raise invalid_type(
                f"ModelBuilder.compile: compiler_args must be a string or a dict "
                f"of tag -> string, got {type(compiler_args).__name__}"
            )
        worlds = {a.metaneff.world_size for a in self.traces.values()}
        if len(worlds) != 1:
            raise not_applicable(
                "buckets traced for different world sizes",
                f"one NxDModel has one world size, got {sorted(worlds)}",
            )
        model = NxDModel(world_size=worlds.pop())
        for tag, art in self.traces.items():
            comp = compile_bucket(art.hlo, art.metaneff, compiler_workdir, per_tag[tag], key=tag)
            model.add(tag, art, comp)
        return model
