"""Collectives between the ranks of a tensor-parallel model, run with the simulator's
collective kernels.

In a traced graph a collective is one op of the ``nki_tp`` library (``all_reduce``,
``all_gather``, ``scatter``), the same on every rank. A compiled ``NxDModel`` runs the graph
rank by rank up to a collective, then the collective once over all ranks' values:
``all_reduce`` and ``all_gather`` are NKI kernels launched over a grid whose first axis is the
rank (one SPMD instance per rank, every rank's value in shared HBM), and the exchange is
``nl.all_reduce`` across that axis: a sum for ``all_reduce`` (fp32, in rank order); for
``all_gather`` a maximum over tiles that hold the rank's shard in its own block and ``-inf``
elsewhere, which reproduces every shard bit for bit. ``scatter`` takes the rank's slice (no
data moves between ranks). Over ``torch.distributed`` each process holds some of the ranks:
the processes exchange their ranks' values through the process group, then each runs the
kernel and keeps its own ranks' results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

import nki
import nki.language as nl
from nki.errors import NKIError

from ..api_errors import call_order, invalid_shape, invalid_type
from ..torch import from_numpy, to_numpy

P = 128  # rows per tile (partitions)
CHUNK = 512  # columns per tile

__all__ = ["all_gather", "all_reduce", "scatter", "COLLECTIVES", "RankGroup"]


# --------------------------------------------------------------------------------------------
# The kernels: grid (rank, row tile, [block,] column chunk) over (ranks, rows, cols)
# --------------------------------------------------------------------------------------------


@nki.jit
def all_reduce_kernel(x):
    """``out[r] = x[0] + x[1] + ... + x[R-1]`` for every rank ``r`` of the stacked (R, n, d)
    input; grid ``(R, ceil(n / 128), ceil(d / 512))``."""
    _, n, d = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    r, t, c = nl.program_id(0), nl.program_id(1), nl.program_id(2)
    w = min(d, CHUNK)
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(w)[None, :]
    rows, cols = t * P + i_p, c * w + i_f
    tile = nl.zeros((P, w), dtype=x.dtype, buffer=nl.sbuf)
    tile[i_p, i_f] = nl.load(x[r, rows, cols], mask=(rows < n) & (cols < d))
    total = nl.all_reduce(tile, op=nl.add, program_axes=0)
    nl.store(out[r, rows, cols], total, mask=(rows < n) & (cols < d))
    return out


@nki.jit
def all_gather_kernel(x):
    """``out[r] = concat(x[0], ..., x[R-1], axis=-1)`` for every rank ``r`` of the stacked
    (R, n, d) input; grid ``(R, ceil(n / 128), R, ceil(d / 512))``. Block ``b`` of the result
    is the maximum over the ranks of a tile that is rank ``b``'s shard on rank ``b`` and
    ``-inf`` on the others: exact, signed zeros included."""
    ranks, n, d = x.shape
    out = nl.ndarray((ranks, n, ranks * d), dtype=x.dtype, buffer=nl.shared_hbm)
    r, t, b, c = nl.program_id(0), nl.program_id(1), nl.program_id(2), nl.program_id(3)
    w = min(d, CHUNK)
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(w)[None, :]
    rows, cols = t * P + i_p, c * w + i_f
    tile = nl.full((P, w), -np.inf, dtype=x.dtype, buffer=nl.sbuf)
    own = (rows < n) & (cols < d) & (r - b >= 0) & (b - r >= 0)
    tile[i_p, i_f] = nl.load(x[r, rows, cols], mask=own)
    block = nl.all_reduce(tile, op=nl.maximum, program_axes=0)
    nl.store(out[r, rows, b * d + cols], block, mask=(rows < n) & (cols < d))
    return out


def _tiles(n: int, d: int) -> tuple[int, int]:
    return (n + P - 1) // P, (d + CHUNK - 1) // CHUNK


FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _stack_2d(xs: Sequence[torch.Tensor], what: str) -> np.ndarray:
    """The ranks' values as one (R, rows, last dim) array."""
    x0 = xs[0]
    if x0.dtype not in FLOAT_DTYPES:
        raise invalid_type(
            f"{what}: {x0.dtype} tensors are not supported (float32, bfloat16, float16)"
        )
    d = x0.shape[-1] if x0.dim() else 1
    return to_numpy(torch.stack([x.reshape(-1, d) for x in xs]).contiguous(), what)


def run_all_reduce(xs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Every rank's ``xs[r]`` summed (in rank order), one result per rank."""
    stacked = _stack_2d(xs, "all_reduce")
    ranks, n, d = stacked.shape
    out = from_numpy(all_reduce_kernel[(ranks, *_tiles(n, d))](stacked))
    return [out[r].reshape(xs[0].shape) for r in range(ranks)]


def run_all_gather(xs: Sequence[torch.Tensor], dim: int) -> list[torch.Tensor]:
    """Every rank's ``xs[r]`` concatenated along ``dim`` (rank order), one result per rank."""
    moved = [x.movedim(dim, -1) for x in xs]
    stacked = _stack_2d(moved, "all_gather")
    ranks, n, d = stacked.shape
    rows, chunks = _tiles(n, d)
    out = from_numpy(all_gather_kernel[(ranks, rows, ranks, chunks)](stacked))
    shape = (*moved[0].shape[:-1], ranks * d)
    return [out[r].reshape(shape).movedim(-1, dim).contiguous() for r in range(ranks)]


def run_scatter(
    xs: Sequence[torch.Tensor], dim: int, world: int, ranks: Sequence[int]
) -> list[torch.Tensor]:
    """Rank ``r``'s slice ``r`` (of ``world``) of ``xs[r]`` along ``dim`` (local: no data
    moves between ranks)."""
    out = []
    for x, r in zip(xs, ranks):
        n = x.shape[dim] // world
        out.append(x.narrow(dim, r * n, n).contiguous())
    return out


# --------------------------------------------------------------------------------------------
# The graph ops (what a traced model calls)
# --------------------------------------------------------------------------------------------


def _eager(name: str, world: int) -> None:
    if world != 1:
        raise call_order(
            f"nki_tp::{name} over {world} ranks runs only inside a compiled NxDModel "
            "(ModelBuilder(...).trace(...).compile()), where each rank is a simulated "
            "NeuronCore"
        )


@torch.library.custom_op("nki_tp::all_reduce", mutates_args=())
def _all_reduce_op(x: torch.Tensor, world: int) -> torch.Tensor:
    _eager("all_reduce", world)
    return x.clone()


@_all_reduce_op.register_fake
def _(x: torch.Tensor, world: int) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("nki_tp::all_gather", mutates_args=())
def _all_gather_op(x: torch.Tensor, dim: int, world: int) -> torch.Tensor:
    _eager("all_gather", world)
    return x.clone()


@_all_gather_op.register_fake
def _(x: torch.Tensor, dim: int, world: int) -> torch.Tensor:
    shape = list(x.shape)
    shape[dim] *= world
    return x.new_empty(shape)


@torch.library.custom_op("nki_tp::scatter", mutates_args=())
def _scatter_op(x: torch.Tensor, dim: int, world: int) -> torch.Tensor:
    _eager("scatter", world)
    return x.clone()


@_scatter_op.register_fake
def _(x: torch.Tensor, dim: int, world: int) -> torch.Tensor:
    shape = list(x.shape)
    shape[dim] //= world
    return x.new_empty(shape)


def all_reduce(x: torch.Tensor, world: int) -> torch.Tensor:
    """The sum of ``x`` over the ``world`` ranks of the tensor-parallel group."""
    return torch.ops.nki_tp.all_reduce(x, world)


def all_gather(x: torch.Tensor, dim: int, world: int) -> torch.Tensor:
    """The ranks' ``x`` concatenated along ``dim`` (rank order)."""
    return torch.ops.nki_tp.all_gather(x, dim, world)


def scatter(x: torch.Tensor, dim: int, world: int) -> torch.Tensor:
    """This rank's slice of ``x`` along ``dim``. Constraint: ``x.shape[dim]`` divisible by
    ``world``."""
    if x.shape[dim] % world:
        raise invalid_shape(
            f"scatter: dimension {dim} of size {x.shape[dim]} is not divisible by the "
            f"tensor-parallel degree {world}"
        )
    return torch.ops.nki_tp.scatter(x, dim, world)


@dataclass(frozen=True)
class Collective:
    """How a compiled model runs one ``nki_tp`` op: ``run(values of every rank, static
    arguments, local ranks) -> results of the local ranks``; ``exchanges``: whether it needs
    the other ranks' values."""

    name: str
    run: Callable[[list[torch.Tensor], tuple, Sequence[int]], list[torch.Tensor]]
    exchanges: bool = True


COLLECTIVES: dict[str, Collective] = {
    "nki_tp::all_reduce": Collective("all_reduce", lambda xs, st, ranks: run_all_reduce(xs)),
    "nki_tp::all_gather": Collective("all_gather", lambda xs, st, ranks: run_all_gather(xs, st[0])),
    "nki_tp::scatter": Collective(
        "scatter", lambda xs, st, ranks: run_scatter(xs, st[0], st[1], ranks), exchanges=False
    ),
}


class RankGroup:
    """The ranks this process simulates (``start_rank ... start_rank + local - 1`` of
    ``world_size``); with more than one process, values are exchanged through the default
    ``torch.distributed`` process group (each process holds the same number of ranks, in
    process-rank order)."""

    def __init__(self, world_size: int, start_rank: int = 0, local_ranks: int | None = None):
        self.world_size = world_size
        self.start_rank = start_rank
        self.local = world_size if local_ranks is None else local_ranks
        self.ranks = list(range(start_rank, start_rank + self.local))

    def run(self, coll: Collective, xs: list[torch.Tensor], static: tuple) -> list[torch.Tensor]:
        if not coll.exchanges:
            return coll.run(xs, static, self.ranks)
        every = self.gather(xs)
        out = coll.run(every, static, list(range(self.world_size)))
        return out[self.start_rank : self.start_rank + self.local]

    def gather(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        if self.local == self.world_size:
            return xs
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise call_order(
                f"this NxDModel simulates ranks {self.ranks} of {self.world_size}: the other "
                "ranks' values come through torch.distributed; call "
                "torch.distributed.init_process_group first"
            )
        mine = torch.stack(xs).contiguous()
        bits = mine.view(torch.int16) if mine.dtype == torch.bfloat16 else mine
        parts = [torch.empty_like(bits) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, bits)
        every = torch.cat(parts).view(mine.dtype)
        if every.shape[0] != self.world_size:
            raise NKIError(
                f"torch.distributed gave {every.shape[0]} ranks' values, the model has "
                f"{self.world_size} ranks (every process must hold {self.local})",
                code="err_invalid_call_order",
            )
        return list(every)


class WarmupGroup(RankGroup):
    """Rank 0 alone, standing in for all ranks (compile-time tracing of the kernels): a
    collective sees ``world_size`` copies of rank 0's value."""

    def __init__(self, world_size: int) -> None:
        super().__init__(world_size, 0, 1)

    def gather(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        return xs * self.world_size
