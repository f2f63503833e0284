"""Tensor parallelism for the ``"nki"`` torch.compile backend: every rank of a
``torch.distributed`` process group simulates its own NeuronCore; the functional collectives of
a compiled graph (``all_reduce``, ``all_gather_into_tensor``, ``reduce_scatter_tensor``, as
``torch.distributed._functional_collectives`` and in-graph ``dist.all_reduce`` produce them)
exchange the ranks' tensors through the process group (gloo) and run as the simulator's
collective kernels (:mod:`nki.kernels.collectives`, one SPMD instance per rank), with their
estimated device time in the report.

``torch.distributed.init_process_group("nki")`` is accepted: a gloo process group under the
name the backend's users expect."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

import nki.kernels as K

from .torch_ops import FLOATS
from .torch_ops_elementwise import _binary_call
from .torch_registry import Guard, builtin

__all__ = ["group_of", "rank_and_size"]

_REDUCE = {"sum": "add", "avg": "add", "max": "maximum", "min": "minimum"}


def group_of(name: Any) -> Any:
    """The process group a functional collective names (its group name), or the default."""
    from torch.distributed.distributed_c10d import _resolve_process_group

    return _resolve_process_group(name) if isinstance(name, str) else name


def rank_and_size(group: Any = None) -> tuple[int, int]:
    """This process's (rank, world size) in ``group`` (the default group if None), or (0, 1)
    without an initialised process group."""
    if not dist.is_available() or not dist.is_initialized():
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def _exchange(x: torch.Tensor, group: Any) -> torch.Tensor:
    """The (W, ...) stack of every rank's ``x`` (rank order), exchanged as raw bytes through
    the process group (gloo moves any dtype that way, bfloat16 included)."""
    rank, w = rank_and_size(group)
    if w == 1:
        return x.unsqueeze(0)
    raw = x.detach().contiguous().cpu().view(torch.uint8).reshape(-1)
    parts = [torch.empty_like(raw) for _ in range(w)]
    dist.all_gather(parts, raw, group=group)
    return torch.stack([p.view(x.dtype).reshape(x.shape) for p in parts])


def _rows3(stack: torch.Tensor) -> torch.Tensor:
    """A (W, ...) stack as (W, N, D) with D the last dim (1 for 0-d tensors)."""
    w = stack.shape[0]
    d = stack.shape[-1] if stack.dim() > 1 else 1
    return stack.reshape(w, -1, d)


def _all_reduce(run: Any, x: torch.Tensor, op: str, group: Any) -> torch.Tensor:
    if x.dtype not in FLOATS or x.numel() == 0:
        raise Guard(f"dtype {x.dtype}")
    if op not in _REDUCE:
        raise Guard(f"reduce op {op}")
    rank, w = rank_and_size(group)
    stack = _exchange(x, group)
    out = run(K.all_reduce_kernel[w], _rows3(stack), op=_REDUCE[op])[rank].reshape(x.shape)
    return _binary_call(run, "mul", out, 1.0 / w, True) if op == "avg" else out


_DOC = "float32 / bfloat16 / float16; sum, avg, max, min; any group of the process"


@builtin("_c10d_functional::all_reduce", ("all_reduce_kernel",), _DOC)
def _c10d_all_reduce(run: Any, x: Any, op: str, group_name: Any) -> Any:
    return _all_reduce(run, x, str(op).lower(), group_of(group_name))


@builtin("_c10d_functional::reduce_scatter_tensor", ("all_reduce_kernel",), _DOC)
def _c10d_reduce_scatter(run: Any, x: Any, op: str, group_size: int, group_name: Any) -> Any:
    group = group_of(group_name)
    rank, w = rank_and_size(group)
    if w != group_size or x.shape[0] % w:
        raise Guard(f"group size {group_size}, first dim {x.shape[0]}")
    full = _all_reduce(run, x, str(op).lower(), group)
    return full.reshape(w, x.shape[0] // w, *x.shape[1:])[rank]


@builtin("_c10d_functional::all_gather_into_tensor", ("all_gather_kernel",), _DOC)
def _c10d_all_gather(run: Any, x: Any, group_size: int, group_name: Any) -> Any:
    group = group_of(group_name)
    _, w = rank_and_size(group)
    if w != group_size or x.numel() == 0:
        raise Guard(f"group size {group_size}")
    out = run(K.all_gather_kernel[w], _rows3(_exchange(x, group)))
    return out.reshape(w * x.shape[0], *x.shape[1:]) if x.dim() else out.reshape(w)


def _create_nki_group(store: Any, rank: int, size: int, timeout: Any) -> Any:
    return dist.ProcessGroupGloo(store, rank, size, timeout)


if dist.is_available() and "nki" not in dist.Backend.backend_list:
    dist.Backend.register_backend("nki", _create_nki_group, devices=["cpu"])
