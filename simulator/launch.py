"""Launching a traced kernel: the one entry point ``nki.jit`` calls.

:func:`launch` runs the static checks (always at least the HBM capacity check: an oversized HBM
tensor would exhaust the host), copies the arguments into simulator storage, runs the kernel on
a backend and hands back the outputs (or writes them into the caller's arrays for kernels that
return nothing) with the :class:`RunInfo` of the run.

:func:`run` is the executor part alone (storage in, storage out): it allocates the launch's
shared HBM, schedules the instances and picks the backend. The backends are peers with one
interface, ``execute(ir, shared, config, schedule, info) -> bool`` (False: this backend does
not run this kernel, try the next); ``BACKENDS`` holds them in the registry's order of
preference (``backends.py``)."""

from __future__ import annotations

import contextlib
import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from nki import dtypes
from nki.errors import NKIError, NKIMemoryError
from nki.ir import KernelIR, TensorDecl

from . import backends, heap, interpreter, numerics, progress, threads
from .checks.coverage import unfilled_outputs
from .checks.lnc_races import dynamic_tensors, same_write_tensors
from .checks.static import start_checks, static_checks
from .config import SimConfig
from .executors import COLLECTIVES
from .host import (
    CHECKED_BYTES,
    host_array,
    output_array,
    output_view,
    storage_bytes,
    storage_config,
    storage_input,
    written_params,
)
from .instances import RunInfo, Schedule, schedule

__all__ = ["BACKENDS", "RunInfo", "SimConfig", "launch", "run"]

Execute = Callable[[KernelIR, dict[str, np.ndarray], SimConfig, Schedule, RunInfo], bool]


@dataclass(frozen=True)
class Loaded:
    """A registry entry with its module's ``execute``."""

    backend: backends.Backend
    execute: Execute


# tried in order; the last (the interpreter) runs every kernel
BACKENDS = tuple(Loaded(b, importlib.import_module(b.module).execute) for b in backends.BACKENDS)


def run(
    ir: KernelIR, inputs: dict[str, np.ndarray], config: SimConfig
) -> tuple[dict[str, np.ndarray], RunInfo]:
    """Execute a traced kernel over its grid. ``inputs`` maps parameter names to arrays in
    storage dtype (they are updated in place where the kernel writes them); returns the
    storage of every shared HBM tensor and what the launch did."""
    start_checks(ir, config)  # (the host memory a launch needs, before allocating anything)
    ready = _ready(ir, config)
    shared = dict(inputs)
    for decl, fill, sd, value in ready.fresh:
        if sd is None:  # (a large tensor: the host's memory checked first)
            shared[decl.name] = host_array(decl, config, fill)
            continue
        try:
            shared[decl.name] = (
                np.empty(decl.shape, sd) if value is None else np.full(decl.shape, value, sd)
            )
        except MemoryError:  # (reported at the tensor's declaration)
            shared[decl.name] = host_array(decl, config, fill)
    if ready.sched is None:
        info = RunInfo(ir.grid.shape, num_cores=ready.num_cores, target=ir.target)
        sched = schedule(ir, config, info)
    else:
        sched = ready.sched
        info = RunInfo(ir.grid.shape, dict(ready.placement), num_cores=ready.num_cores,
                       target=ir.target)  # fmt: skip
    info.threads = ready.threads if ready.threads is not None else threads.decide(ir, None)
    limit = progress.threshold()
    quiet = ready.estimate < limit or not math.isfinite(limit)  # (no progress to show)
    if quiet and not ready.limit_blas and not ir.cores:  # (most small launches: no context)
        _execute(ir, shared, config, sched, info, ready.backends)
        return shared, info
    # the BLAS pools limited to the launch's threads where it makes BLAS calls
    blas = (
        threads.blas_limit(info.threads, exact=config.threads is not None)
        if ready.limit_blas
        else contextlib.nullcontext()
    )
    with contextlib.nullcontext() if quiet else progress.shown(ir), blas:
        _run(ir, shared, config, sched, info, ready)
    return shared, info


@dataclass(frozen=True)
class _Ready:
    """What every run of one traced kernel under one setting decides before it starts (the
    same every run): the shared tensors it allocates (and whether each is filled), the
    instances' schedule and placement (None: shuffled, made per run), the BLAS threads when
    they do not depend on the machine's load now (None: decided per run), whether the BLAS
    pools are limited, the progress estimate and the backends the setting allows."""

    # (tensor, filled, storage dtype (None: a large tensor, ``host_array``'s), fill value)
    fresh: tuple[tuple[TensorDecl, bool, np.dtype | None, object], ...]
    num_cores: int
    sched: Schedule | None
    placement: dict[tuple[int, ...], int]
    threads: int | None
    limit_blas: bool
    estimate: float
    backends: tuple[Loaded, ...]


# (id(ir), config.key) -> (ir, ready): bounded, the IR kept so that its id is not reused
_READY: dict[tuple[int, tuple], tuple[KernelIR, _Ready]] = {}


def _ready(ir: KernelIR, config: SimConfig) -> _Ready:
    hit = _READY.get((id(ir), config.key))
    if hit is not None and hit[0] is ir:
        return hit[1]
    heap.keep_freed_memory()  # (once per process, before its first run allocates)
    unfilled = unfilled_outputs(ir)
    fresh = tuple(
        _fresh(d, d.name not in unfilled, config)
        for d in ir.tensors
        if d.buffer == "shared_hbm" and d.kind in ("output", "local") and d.alias_of is None
    )
    probe = RunInfo(ir.grid.shape, num_cores=max(1, ir.grid.num_cores), target=ir.target)
    sched = None if config.shuffle_seed is not None else schedule(ir, config, probe)
    ready = _Ready(
        fresh,
        max(1, ir.grid.num_cores),
        sched,
        dict(probe.placement),
        threads.fixed(ir, config.threads),
        config.threads is not None or threads.matmul_work(ir)[0] >= threads.SERIAL_MAX,
        progress.estimate_seconds(ir),
        tuple(one for one in BACKENDS if one.backend.allowed(config.backend)),
    )
    if len(_READY) >= 512:
        _READY.clear()
    _READY[(id(ir), config.key)] = (ir, ready)
    return ready


def _fresh(
    d: TensorDecl, fill: bool, config: SimConfig
) -> tuple[TensorDecl, bool, np.dtype | None, object]:
    """``_Ready.fresh``'s entry of shared tensor ``d``."""
    big = storage_bytes(d, config.precise_fp) > CHECKED_BYTES
    sd = numerics.storage_dtype(d.dtype, config.precise_fp)
    return d, fill, None if big else sd, numerics.fill_value(d.dtype) if fill else None


def _run(
    ir: KernelIR,
    shared: dict[str, np.ndarray],
    config: SimConfig,
    sched: Schedule,
    info: RunInfo,
    ready: _Ready,
) -> None:
    if not ir.cores:
        _execute(ir, shared, config, sched, info, ready.backends)
    elif (
        config.checks == "full"
        or any(i.kind in COLLECTIVES for i, _ in ir.instructions())
        or same_write_tensors(ir)
        or dynamic_tensors(ir)
    ):
        # per-core traces whose cores meet (barrier, sendrecv, collectives), checked as one
        # launch (outputs written by either core), writing one element on both cores (checked
        # for equal values) or reaching the other core's elements through dynamic offsets
        # (checked per element): the interpreter steps both cores together
        interpreter.execute(ir, shared, config, sched, info)
    else:  # cores that never meet: each core's one-instance trace runs alone on shared HBM
        for inst, core in sched.order:
            n = len(info.order)
            one = Schedule((((), core),), sched.rng, frozenset())
            _execute(ir.cores[core], shared, config, one, info, ready.backends)
            info.order[n:] = [inst]


def _execute(
    ir: KernelIR,
    shared: dict[str, np.ndarray],
    config: SimConfig,
    sched: Schedule,
    info: RunInfo,
    allowed: tuple[Loaded, ...],
) -> None:
    for one in allowed:
        if one.execute(ir, shared, config, sched, info):
            info.backend = one.backend.name
            break


def launch(ir: KernelIR, arguments: Mapping[str, Any], config: SimConfig) -> tuple[Any, RunInfo]:
    """Check and run ``ir`` on the caller's arguments (NumPy arrays for its parameters).

    Returns the kernel's outputs as the caller sees them (one array, a tuple, or None for a
    kernel that writes its outputs into parameters, which are then updated in place; returned
    mutable parameters are updated in place too) and the launch's :class:`RunInfo`. Running
    out of host memory anywhere in the launch is an ``err_host_memory_exhausted`` error."""
    try:
        return _launch(ir, arguments, config)
    except MemoryError as e:
        raise NKIMemoryError.host_exhausted(e, f"simulating kernel '{ir.name}'", ir.loc) from None


@dataclass(frozen=True)
class _Layout:
    """What a launch of one traced kernel under one setting does with the caller's arrays (the
    same every launch): its storage setting, each parameter's dtype and whether the kernel
    writes it, the parameters written in place, and each output's tensor, dtype and whether
    the launch owns its storage. Made once the static checks passed on the kernel under that
    setting (a layout in the table means they did)."""

    config: SimConfig
    params: tuple[tuple[str, np.dtype, bool], ...]  # (name, storage dtype, written)
    # parameters the kernel writes that the caller sees updated, with their NumPy dtypes
    in_place: tuple[tuple[str, np.dtype], ...]
    # (name, NumPy dtype, own storage, a reshape / dtype view of another tensor)
    outputs: tuple[tuple[str, np.dtype, bool, bool], ...]
    writable: tuple[str, ...]  # parameters written in place (the caller's array must allow it)


def _layout_names(ir: KernelIR) -> tuple[str, ...]:
    """The parameters an output is stored in or the kernel writes back, each once."""
    names = [ir.storage_of(n) for n in ir.outputs] + list(ir.writes_back)
    return tuple(n for n in dict.fromkeys(names) if n in ir.params)


def updated_params(ir: KernelIR) -> tuple[str, ...]:
    """The parameters whose caller's arrays a launch of ``ir`` updates: a legacy kernel's
    outputs; otherwise the parameters an output is stored in or the kernel writes back."""
    return tuple(ir.outputs) if not ir.returns_outputs else _layout_names(ir)


# (id(ir), config.key) -> (ir, layout): bounded, the IR kept so that its id is not reused
_LAYOUTS: dict[tuple[int, tuple], tuple[KernelIR, _Layout]] = {}


def _layout(ir: KernelIR, config: SimConfig) -> _Layout:
    hit = _LAYOUTS.get((id(ir), config.key))
    if hit is not None and hit[0] is ir:
        return hit[1]
    cfg = storage_config(ir, config)
    static_checks(ir, cfg)  # (under "none" too: an oversized HBM tensor would exhaust the host)
    written = written_params(ir)  # parameters the kernel only reads are not copied
    params = tuple(
        (n, numerics.storage_dtype(ir.tensor(n).dtype, cfg.precise_fp), n in written)
        for n in ir.params
    )
    bases = [ir.storage_of(n) for n in ir.outputs]
    outputs = tuple(
        # storage the launch created is handed out as is (not copied a second time)
        (n, _np_dtype(ir, n), base not in ir.params and bases.count(base) == 1, base != n)
        for n, base in zip(ir.outputs, bases)
    )
    # legacy outputs, mutable / written parameters: the caller's arrays are updated
    in_place = updated_params(ir)
    updated = tuple((n, _np_dtype(ir, n)) for n in in_place)
    out = _Layout(cfg, params, updated, outputs, _layout_names(ir))
    if len(_LAYOUTS) >= 512:
        _LAYOUTS.clear()
    _LAYOUTS[(id(ir), config.key)] = (ir, out)
    return out


def _launch(ir: KernelIR, arguments: Mapping[str, Any], config: SimConfig) -> tuple[Any, RunInfo]:
    lay = _layout(ir, config)  # (the static checks passed)
    config = lay.config
    if lay.writable:
        _check_writable(lay.writable, arguments, ir)
    inputs = {name: storage_input(arguments[name], sd, written) for name, sd, written in lay.params}
    arrays, info = run(ir, inputs, config)
    for name, want in lay.in_place:
        arguments[name][...] = output_array(arrays[name], want, copy=False)
    if not ir.returns_outputs:
        return None, info
    outs = [
        output_array(
            output_view(arrays, ir, n, config.precise_fp) if view else arrays[n], dtype, not own
        )
        for n, dtype, own, view in lay.outputs
    ]
    return (outs[0] if len(outs) == 1 else tuple(outs)), info


def _np_dtype(ir: KernelIR, name: str) -> np.dtype:
    """The NumPy dtype the caller sees tensor ``name`` of ``ir`` in."""
    return dtypes.storage(ir.tensor(name).dtype)


def _check_writable(names: tuple[str, ...], arguments: Mapping[str, Any], ir: KernelIR) -> None:
    """Caller arrays the kernel writes in place (legacy outputs, mutable parameters) must be
    writable: checked before the run rather than failing after it."""
    for name in names:
        arr = arguments.get(name)
        if isinstance(arr, np.ndarray) and not arr.flags.writeable:
            raise NKIError(
                f"argument '{name}' is written by the kernel (an output parameter) but the "
                "array passed for it is read-only; pass a writable array (e.g. arr.copy())",
                code="err_readonly_output",
                loc=ir.loc,
            )
