"""Order independence: a correct kernel gives bit-identical results whatever order its SPMD
instances and ``affine_range`` iterations run in, except for the rounding of accumulations
across them (a reordered fp32 sum). A kernel whose result depends on the order otherwise has a
race between instances (e.g. one instance reads HBM another one writes) or a loop-carried
dependency in an ``affine_range`` loop."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from ..errors import NKIError, user_facing
from ..grids import parse_grid
from ..jit import Launch
from ..simulation import as_launch
from .tolerance import ACC_EPS, Accumulation, _as_numpy, accumulations

DEFAULT_SEEDS = (0, 1, 2, 3, 4, 5)


class OrderDependenceError(AssertionError):
    """A kernel's results differ between instance / iteration orders."""


def resolve_launch(kernel: Any, grid: Any = None) -> Launch:
    """``kernel`` (function, ``@nki.jit`` kernel or ``k[grid]`` launch) bound to ``grid``."""
    launch = as_launch(kernel)
    if grid is None or grid == ():
        return launch
    if launch.grid.dims:
        raise TypeError(
            f"kernel is already launched over grid {launch.grid}; pass the bare kernel when "
            f"giving grid={grid!r}"
        )
    return Launch(launch.kernel, parse_grid(grid))


def run(
    launch: Launch,
    args: Sequence[Any],
    kwargs: dict[str, Any] | None = None,
    *,
    seed: int | None = None,
    checks: str | None = None,
    target: str | None = None,
) -> tuple[tuple[np.ndarray, ...], list[Any]]:
    """Run ``launch`` on copies of ``args`` with simulator settings taken from the kernel and the
    environment, except: ``seed`` is *the* shuffle seed (``None`` runs instances and iterations
    in order, even when ``NKI_SIM_SHUFFLE_SEED`` is set), ``checks`` / ``target`` override when
    given. Returns the outputs and the instance order."""
    k = launch.kernel
    cfg = k.config(checks=checks, target=target)
    cfg = dataclasses.replace(cfg, shuffle_seed=seed)
    ins = [_as_numpy(a) if _foreign(a) else a for a in _copies(tuple(args))]
    kw = {n: _as_numpy(v) if _foreign(v) else v for n, v in _copies(dict(kwargs or {})).items()}
    try:
        out = launch.run_numpy(*ins, _config=cfg, **kw)
    except NKIError as e:
        raise user_facing(e) from e.__cause__  # keep the real cause of an err_runtime
    return as_tuple(out), list(getattr(k.last_run, "order", []))


def _foreign(x: Any) -> bool:
    return type(x).__module__.split(".")[0] in ("torch", "jax", "jaxlib")


def as_tuple(out: Any) -> tuple[np.ndarray, ...]:
    """Kernel outputs as a tuple of NumPy arrays."""
    if out is None:
        return ()
    items = out if isinstance(out, (tuple, list)) else (out,)
    return tuple(np.asarray(o) for o in items)


def first_difference(a: np.ndarray, b: np.ndarray) -> tuple[tuple[int, ...], int] | None:
    """``(index, count)`` of the first element where ``a`` and ``b`` differ bit for bit (NaNs of
    any payload are equal), or ``None`` when identical."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return ((), -1)
    if a.size == 0:
        return None
    ua = np.ascontiguousarray(a).reshape(-1)
    ub = np.ascontiguousarray(b).reshape(-1)
    bits = np.dtype(f"u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else None
    if bits is not None:
        same = ua.view(bits) == ub.view(bits)
    else:
        same = ua == ub
    if a.dtype.kind in "fV":
        with np.errstate(all="ignore"):
            fa, fb = ua.astype(np.float64), ub.astype(np.float64)
        same |= np.isnan(fa) & np.isnan(fb)
    if same.all():
        return None
    k = int(np.argmin(same))
    return tuple(int(i) for i in np.unravel_index(k, a.shape)), int((~same).sum())


def _value(a: np.ndarray, idx: tuple[int, ...]) -> str:
    v = a[idx]
    if a.dtype.kind in "fV":
        return f"{float(v):.8g}"
    return repr(v.item())


def assert_order_independent(
    kernel: Any,
    *args: Any,
    grid: Any = None,
    seeds: Iterable[int] = DEFAULT_SEEDS,
    checks: str | None = None,
    target: str | None = None,
    **kwargs: Any,
) -> Any:
    """Run ``kernel(*args, **kwargs)`` in the default order (instances in grid order, loop
    iterations in sequence, whatever ``NKI_SIM_SHUFFLE_SEED`` says) and once per shuffle seed
    (SPMD instances and ``affine_range`` iterations in a seeded random order, ``SimConfig.
    shuffle_seed``), and assert that every run gives bit-identical outputs (NaNs compare equal).
    Returns the default-order outputs. A shuffle seed set on the kernel
    (``nki.jit(shuffle_seed=)``) or in ``NKI_SIM_SHUFFLE_SEED`` is added to ``seeds``.

    Accumulation is the exception: an output fed by a legal accumulation across iterations or
    instances (``psum += nl.matmul(...)`` in ``affine_range``, ``nisa.dma_copy(...,
    dst_rmw_op=nl.add)``) is a reordered fp32 sum and may differ by its rounding, at most
    ``terms x 2**-24 x max|output|`` plus one rounding of the output's dtype (``terms``: the
    addends per element, from the traced kernel); every other output must match bit for bit.

    ``kernel`` is an ``@nki.jit`` kernel, a plain kernel function or a launch ``k[grid]``;
    ``grid`` launches a bare kernel over that grid. The arguments are copied for every run.

    Checks: ``checks=None`` keeps the kernel's / environment's level (``static`` by default), so
    races the static analysis can prove (two instances or ``affine_range`` iterations writing
    the same HBM element) are raised as an ``NKIError`` at the offending line before anything
    runs. What it cannot see -- a read of HBM another instance writes, data-dependent
    (indirect) or masked writes -- shows up here as differing outputs. ``checks="none"``
    skips the static analysis (compare orders only); ``checks="full"`` adds the run-time checks
    (e.g. reads of uninitialised on-chip memory). A run that raises an ``NKIError`` in a
    shuffled order but not in the default order is reported as order dependence too.

    Raises ``OrderDependenceError`` naming the seeds that disagree, the output, the index of
    the first differing element, both values and the instance orders of the two runs.
    Example: ``assert_order_independent(kernel, a, grid=(4,), seeds=range(8))``."""
    launch = resolve_launch(kernel, grid)
    seeds = [int(s) for s in seeds]
    configured_seed = launch.kernel.config().shuffle_seed  # jit(shuffle_seed=) or environment
    if configured_seed is not None and configured_seed not in seeds:
        seeds.append(configured_seed)
    if not seeds:
        raise ValueError("assert_order_independent needs at least one shuffle seed")
    base, base_order = run(launch, args, kwargs, checks=checks, target=target)
    accs = accumulations_of(launch, len(base))
    failures = []
    agree = []
    reassociated = []
    for s in seeds:
        try:
            outs, order = run(launch, args, kwargs, seed=s, checks=checks, target=target)
        except NKIError as e:
            failures.append(f"seed {s} raised an error the default order does not:\n{e}")
            continue
        diff = describe_difference(base, outs, s, base_order, order, accs)
        if diff is None:
            agree.append(s)
            if any(first_difference(a, b) is not None for a, b in zip(base, outs)):
                reassociated.append(s)
        else:
            failures.append(diff)
    if failures:
        name = getattr(launch.kernel.fn, "__name__", "kernel")
        bad = [s for s in seeds if s not in agree]
        within = (
            f" ({reassociated} only within the rounding of reordered accumulations)"
            if reassociated
            else ""
        )
        raise OrderDependenceError(
            f"kernel '{name}' gives different results in different orders of its SPMD "
            f"instances / affine_range iterations (a race between instances or a loop-carried "
            f"dependency). Shuffle seeds that disagree with the default order: {bad}; seeds "
            f"that agree: {agree}{within}.\n" + "\n".join(failures)
        )
    return base[0] if len(base) == 1 else base


def accumulations_of(launch: Launch, n_outputs: int) -> list[Accumulation]:
    """The accumulation behind each output of the launch's last run (see
    ``tolerance.accumulations``); no accumulation when the trace is not available."""
    ir = getattr(launch.kernel, "last_ir", None)
    if ir is None or len(ir.outputs) != n_outputs:
        return [Accumulation()] * n_outputs
    accs = accumulations(ir)
    return [accs[o] for o in ir.outputs]


def reassociation_bound(a: np.ndarray, acc: Accumulation) -> tuple[float, float] | None:
    """``(rtol, atol)`` within which two runs of an output summed by ``acc`` may differ when
    only the order of its ``affine_range`` / instance partial sums changed: the fp32
    summation bound ``terms x 2**-24 x max|output|`` plus one rounding of the output's dtype.
    None when the output must be bit-identical (no reordered accumulation, not a float)."""
    if acc.reordered <= 1 or a.dtype.kind not in "fV" or a.size == 0:
        return None
    eps = float(ml_dtypes.finfo(a.dtype).eps)
    with np.errstate(all="ignore"):
        f = np.abs(a.astype(np.float64))
    scale = float(np.max(f[np.isfinite(f)], initial=0.0))
    return eps, acc.terms * ACC_EPS * scale


def describe_difference(
    base: Sequence[np.ndarray],
    outs: Sequence[np.ndarray],
    seed: int,
    base_order: list[Any],
    order: list[Any],
    accumulations: Sequence[Accumulation] = (),
) -> str | None:
    """A report of the first output that differs between the default order and ``seed``.
    Outputs fed by an accumulation across ``affine_range`` iterations or instances
    (``accumulations[k].reordered > 1``) may differ within ``reassociation_bound`` (a legal
    reordered fp32 sum); every other output must be bit-identical. The report says which
    comparison failed."""
    for k, (a, b) in enumerate(zip(base, outs)):
        d = first_difference(a, b)
        if d is None:
            continue
        idx, count = d
        if count < 0:
            return (
                f"seed {seed}: output {k} is {b.dtype}{list(b.shape)}, but "
                f"{a.dtype}{list(a.shape)} in the default order"
            )
        orders = ""
        if len(base_order) > 1:
            orders = f"; instance order: default {base_order}, seed {seed} {order}"
        acc = accumulations[k] if k < len(accumulations) else Accumulation()
        bound = reassociation_bound(a, acc)
        if bound is None:
            why = (
                "; compared bit for bit: no accumulation across affine_range iterations or "
                "instances reaches this output, so this is a real order dependence"
            )
        else:
            rtol, atol = bound
            with np.errstate(all="ignore"):
                fa, fb = a.astype(np.float64), b.astype(np.float64)
                diff = np.abs(fa - fb)
                over = ~(diff <= atol + rtol * np.abs(fa)) & ~(np.isnan(fa) & np.isnan(fb))
            if not over.any():
                continue  # the same sum in another order: legal reassociation
            idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(over)), a.shape))
            count = int(over.sum())
            line = f" at line {acc.loc.line}" if acc.loc is not None else ""
            why = (
                f"; beyond reassociation: |difference| {float(diff[idx]):.3g} exceeds the "
                f"{atol + rtol * abs(float(fa[idx])):.3g} that reordering the {acc.reordered} "
                f"partial sums of the {acc.terms}-term accumulation{line} can cause, so this is "
                "a real order dependence, not fp32 rounding"
            )
        return (
            f"seed {seed}: output {k} first differs at index {idx}: {_value(b, idx)} vs "
            f"{_value(a, idx)} in the default order ({count} of {a.size} elements differ)"
            + why
            + orders
        )
    return None


def _copies(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _copies(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_copies(v) for v in x)
    if isinstance(x, np.ndarray):
        return x.copy()
    return x
