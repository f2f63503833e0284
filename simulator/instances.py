"""Scheduling the SPMD instances of a launch: their placement on physical cores, the order they
run in (seeded shuffling with ``shuffle_seed``), and stepping them through collectives.

Instances run core by core; each core runs its share serially. An instance runs until it ends
or reaches a collective (its walk is a generator that stops there); when every running instance
has stopped or ended, the collectives of every group are combined and the instances go on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain, repeat

import numpy as np

from nki.ir import Instr, KernelIR

from .backends import REFERENCE
from .collectives import combine
from .config import SimConfig
from .executors import COLLECTIVES
from .isa.collectives import meet
from .memory import Ctx

Instance = tuple[int, ...]


@dataclass
class RunInfo:
    """What a launch did: instance placement on physical cores and the execution order."""

    grid: tuple[int, ...]
    placement: dict[Instance, int] = field(default_factory=dict)
    order: list[Instance] = field(default_factory=list)
    num_cores: int = 1
    target: str = ""
    backend: str = REFERENCE  # the name of the backend that ran the launch (``backends.py``)
    reason: str = ""  # why a preferred backend declined the kernel (empty: none did)
    threads: int = 1  # BLAS threads the launch ran with (``threads.py``)

    def instances_on(self, core: int) -> list[Instance]:
        return [i for i in self.order if self.placement[i] == core]


@dataclass(frozen=True)
class Schedule:
    """The instances of a launch in run order, each with its physical core, and the random
    generator of a shuffled run (None: program order)."""

    order: tuple[tuple[Instance, int], ...]
    rng: np.random.Generator | None
    collective_loops: frozenset[int]  # ids of loops holding a collective (never shuffled)

    @property
    def instances(self) -> list[Instance]:
        return [inst for inst, _ in self.order]

    @cached_property
    def in_order(self) -> tuple[list[Instance], dict[Instance, int]]:
        """The instances in run order and each one's core (read-only: made once per schedule,
        an unshuffled launch's being the same object every launch)."""
        return self.instances, dict(self.order)


def schedule(ir: KernelIR, config: SimConfig, info: RunInfo) -> Schedule:
    """Place the instances of ``ir``'s grid on cores and order them (recorded in ``info``)."""
    grid = ir.grid
    instances = list(grid.instances()) if grid.dims else [()]
    rng = np.random.default_rng(config.shuffle_seed) if config.shuffle_seed is not None else None
    if rng is not None:
        instances = [instances[i] for i in rng.permutation(len(instances))]
    by_core: dict[int, list[Instance]] = {}
    placed = any(core for d in grid.dims for _, core in d.factors)  # any nl.nc() factor
    if not placed:  # one core: the common case, built in bulk (grids of thousands)
        info.placement.update(dict.fromkeys(instances, 0))
        by_core[0] = instances
    for inst in instances if placed else ():
        core = grid.core_of(inst)
        info.placement[inst] = core
        by_core.setdefault(core, []).append(inst)
    order = tuple(chain.from_iterable(zip(by_core[c], repeat(c)) for c in sorted(by_core)))
    loops = collective_loops(ir) if rng is not None else frozenset()
    return Schedule(order, rng, loops)


def collective_loops(ir: KernelIR) -> frozenset[int]:
    """ids of the loops that hold a collective (their iterations keep their order)."""
    return frozenset(
        id(lp)
        for n, loops in ir.walk()
        if isinstance(n, Instr) and n.kind in COLLECTIVES
        for lp in loops
    )


def run_instances(
    sched: Schedule,
    start: Callable[[Instance, int], tuple[Ctx, Iterator[Instr]]],
    grid: tuple[int, ...],
    info: RunInfo,
) -> None:
    """Run the instances of ``sched``: ``start(instance, core)`` gives an instance's state and
    its walk, which stops at each collective. Without collectives each instance runs to the end
    before the next starts."""
    running: dict[Instance, Iterator[Instr]] = {}
    ctxs: dict[Instance, Ctx] = {}
    for inst, core in sched.order:
        ctxs[inst], running[inst] = start(inst, core)
        info.order.append(inst)
    while running:
        waiting: dict[Instance, Instr] = {}
        for inst in list(running):
            at = next(running[inst], None)
            if at is None:
                del running[inst]
            else:
                waiting[inst] = at
        if any(i.kind == "lnc" for i in waiting.values()):
            meet(waiting, ctxs)  # per-core traces of an LNC=2 launch
            for inst, at in waiting.items():
                ctxs[inst].epoch += at.kind == "lnc"
        elif waiting:
            combine(waiting, ctxs, grid)
