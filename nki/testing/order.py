"""Order independence: a correct kernel gives bit-identical results whatever order its SPMD
instances and ``affine_range`` iterations run in. A kernel whose result depends on the order has
a race between instances (e.g. one instance reads HBM another one writes) or a loop-carried
dependency in an ``affine_range`` loop."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import NKIError, user_facing
from ..jit import Launch, _as_launch, parse_grid
from .tolerance import _as_numpy

DEFAULT_SEEDS = (0, 1, 2, 3, 4, 5)


class OrderDependenceError(AssertionError):
    """A kernel's results differ between instance / iteration orders."""


def resolve_launch(kernel: Any, grid: Any = None) -> Launch:
    """``kernel`` (function, ``@nki.jit`` kernel or ``k[grid]`` launch) bound to ``grid``."""
    launch = _as_launch(kernel)
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
        raise user_facing(e) from None
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
    failures = []
    agree = []
    for s in seeds:
        try:
            outs, order = run(launch, args, kwargs, seed=s, checks=checks, target=target)
        except NKIError as e:
            failures.append(f"seed {s} raised an error the default order does not:\n{e}")
            continue
        diff = describe_difference(base, outs, s, base_order, order)
        if diff is None:
            agree.append(s)
        else:
            failures.append(diff)
    if failures:
        name = getattr(launch.kernel.fn, "__name__", "kernel")
        bad = [s for s in seeds if s not in agree]
        raise OrderDependenceError(
            f"kernel '{name}' gives different results in different orders of its SPMD "
            f"instances / affine_range iterations (a race between instances or a loop-carried "
            f"dependency). Shuffle seeds that disagree with the default order: {bad}; seeds "
            f"that agree: {agree}.\n" + "\n".join(failures)
        )
    return base[0] if len(base) == 1 else base


def describe_difference(
    base: Sequence[np.ndarray],
    outs: Sequence[np.ndarray],
    seed: int,
    base_order: list[Any],
    order: list[Any],
) -> str | None:
    """A report of the first output that differs between the default order and ``seed``."""
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
        return (
            f"seed {seed}: output {k} first differs at index {idx}: {_value(b, idx)} vs "
            f"{_value(a, idx)} in the default order ({count} of {a.size} elements differ)" + orders
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
