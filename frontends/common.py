"""Framework-independent pieces of the frontends: resolving a kernel and its launch grid,
finding a kernel's output signature without running it, boundary errors, and running the
simulator on NumPy arrays.

Nothing here imports torch or jax."""

from __future__ import annotations

import inspect
import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from nki import dtypes
from nki.errors import NKIError, NKIShapeError, NKITypeError, SrcLoc, user_facing
from nki.grids import check_grid_fits, parse_grid
from nki.ir import KernelIR
from nki.jit import Kernel, Launch
from nki.language.core import nc, spmd_dim

# Frames in these packages are never "the user's line" for an error raised at the framework
# boundary (a jax.jit trace or a torch.compile graph puts many of their frames in between).
_SKIP_MODULES = ("nki", "simulator", "frontends", "jax", "jaxlib", "torch", "functools")


def _skip_dirs() -> tuple[str, ...]:
    dirs = []
    for name in _SKIP_MODULES:
        mod = sys.modules.get(name)
        f = getattr(mod, "__file__", None)
        if f:
            d = os.path.dirname(os.path.abspath(f))
            # a single-file module (functools.py) lives in the stdlib dir: skip only that file
            dirs.append(d + os.sep if os.path.basename(f) == "__init__.py" else os.path.abspath(f))
    return tuple(dirs)


def boundary_loc() -> SrcLoc:
    """The caller's source line for an error at the framework boundary (skips nki-sim, jax,
    torch and contextlib frames)."""
    skip = _skip_dirs()
    frame = sys._getframe(1)
    while frame is not None:
        fn = os.path.abspath(frame.f_code.co_filename)
        if not (fn.startswith(skip) or "<frozen" in fn or fn.endswith("contextlib.py")):
            return SrcLoc(frame.f_code.co_filename, frame.f_lineno, 0, frame.f_code.co_name)
        frame = frame.f_back
    return SrcLoc("<unknown>", 0, 0, "")


def resolve_launch(kernel: Any, grid: Any = None, *, api: str = "nki_call") -> Launch:
    """A :class:`nki.jit.Launch` for ``kernel`` (a plain function, an ``@nki.jit`` kernel or a
    launch ``k[gx, gy]``) over ``grid``.

    ``grid`` must be ``None`` or a tuple of positive ints (``nl.nc(k)`` / ``nl.spmd_dim`` items
    are accepted for multi-core launches); a launch that already has a grid cannot get another.
    """
    if isinstance(kernel, Launch):
        launch = kernel
    elif callable(kernel):  # (an @nki.jit kernel, or a function; its default grid, if any)
        k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
        launch = Launch(k, k.default_grid)
    else:
        raise NKITypeError(
            f"{api}: expected an NKI kernel (a function or an @nki.jit kernel), got "
            f"{type(kernel).__name__}",
            code="err_invalid_argument",
            loc=boundary_loc(),
        )
    if grid is None:
        return launch
    check_grid(grid, api=api)
    if launch.grid.dims:
        raise NKIError(
            f"{api}: the kernel is already launched over grid {launch.grid}; pass grid= only "
            "for an unlaunched kernel",
            code="err_invalid_grid",
            loc=boundary_loc(),
        )
    return Launch(launch.kernel, parse_grid(tuple(grid)))


def check_grid(grid: Any, *, api: str = "nki_call") -> None:
    """``grid``: a non-empty tuple (or list) of positive ints, ``nl.nc`` or ``nl.spmd_dim``."""

    def ok(g: Any) -> bool:
        if isinstance(g, (nc, spmd_dim)):
            return True
        return isinstance(g, (int, np.integer)) and not isinstance(g, bool) and int(g) >= 1

    if not isinstance(grid, (tuple, list)) or len(grid) == 0 or not all(ok(g) for g in grid):
        bad = (
            next((g for g in grid if not ok(g)), None)
            if isinstance(grid, (tuple, list)) and grid
            else grid
        )
        raise NKIError(
            f"{api}: grid must be a tuple of positive ints, e.g. grid=(2, 4), got "
            f"{grid!r} (bad entry: {bad!r})",
            code="err_invalid_grid",
            loc=boundary_loc(),
        )


def kernel_name(launch: Launch) -> str:
    return launch.kernel.fn.__name__


def check_dtype(np_dtype: np.dtype, what: str, framework: str, shown: str) -> str:
    """The NKI dtype name of an argument's dtype; an NKITypeError for dtypes NKI does not have
    (64-bit, complex)."""
    try:
        return dtypes.name_of(np_dtype)
    except NKITypeError:
        pass
    raise unsupported_dtype(what, framework, shown)


def unsupported_dtype(what: str, framework: str, shown: str) -> NKITypeError:
    """The error for an argument whose dtype NKI does not have."""
    return NKITypeError(
        f"{what} has {framework} dtype {shown}, which NKI does not support; supported: "
        "float32, bfloat16, float16, float8 (e4m3/e5m2), int8/16/32, uint8/16/32, bool "
        "(no 64-bit or complex types) - convert it first, e.g. to float32",
        code="err_unsupported_dtype",
        loc=boundary_loc(),
    )


def placeholder(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A read-only array of the given shape and dtype backed by a single element: enough for
    tracing, which only looks at shapes and dtypes."""
    return np.broadcast_to(np.zeros((), dtype=np.dtype(dtype)), tuple(int(s) for s in shape))


@dataclass(frozen=True)
class OutSpec:
    """Shape and NumPy (storage) dtype of one kernel output."""

    shape: tuple[int, ...]
    dtype: np.dtype


@dataclass(frozen=True)
class Signature:
    """How a kernel call produces its outputs.

    ``legacy`` kernels take their outputs as trailing parameters (``out_params`` names them) and
    return nothing; other kernels return ``outputs``."""

    ir: KernelIR
    outputs: tuple[OutSpec, ...]
    legacy: bool
    out_params: tuple[str, ...] = ()


def bind(launch: Launch, args: tuple, kwargs: dict, api: str) -> inspect.BoundArguments:
    """The launch's kernel parameters bound to a framework call's arguments; an error names
    ``api`` and the framework caller's line."""
    return launch.kernel.bind(args, kwargs, api=api, loc=boundary_loc)


def trace_signature(
    launch: Launch,
    args: tuple,
    kwargs: dict,
    out_specs: tuple[OutSpec, ...] | None = None,
    api: str = "nki_call",
) -> Signature:
    """Trace ``launch`` on NumPy (placeholder) arrays and report its outputs.

    If the arguments leave parameters unbound and ``out_specs`` is given, the kernel uses the
    legacy convention: the missing trailing parameters are the outputs, with ``out_specs``'
    shapes. Tracing is cached by the kernel, so a later run with the same shapes is free."""
    legacy = False
    out_params: tuple[str, ...] = ()
    try:
        bound = bind(launch, args, kwargs, api)
    except NKITypeError:
        if not out_specs:
            raise
        ph = tuple(placeholder(o.shape, o.dtype) for o in out_specs)
        bound = bind(launch, tuple(args) + ph, kwargs, api)
        legacy = True
        names = list(bound.arguments)
        out_params = tuple(names[len(args) : len(args) + len(ph)])
    bound.apply_defaults()
    cfg = launch.kernel.config()
    try:
        check_grid_fits(launch.grid, cfg.target)
        ir = launch.kernel.trace(launch.grid, bound, cfg.target)
    except NKIError as e:
        raise user_facing(e) from e.__cause__  # keep the real cause of an err_runtime
    if legacy:
        return Signature(ir, tuple(out_specs), True, out_params)
    if not ir.returns_outputs:
        raise NKIError(
            f"{api}: kernel '{kernel_name(launch)}' returns nothing and all its parameters are "
            "bound; either return the output tensors (nl.ndarray(..., buffer=nl.shared_hbm)) or "
            "take the outputs as trailing parameters and pass out_shape=",
            code="err_invalid_argument",
            loc=boundary_loc(),
        )
    outs = tuple(
        OutSpec(ir.tensor(n).shape, dtypes.storage(ir.tensor(n).dtype)) for n in ir.outputs
    )
    if out_specs is not None:
        check_out_specs(launch, outs, tuple(out_specs), api)
    return Signature(ir, outs, False)


def check_out_specs(
    launch: Launch, got: tuple[OutSpec, ...], want: tuple[OutSpec, ...], api: str
) -> None:
    """``out_shape`` must agree with what the kernel returns: count, shapes and dtypes."""
    name = kernel_name(launch)
    if len(got) != len(want):
        raise NKIShapeError(
            f"{api}: out_shape declares {len(want)} output(s) but kernel '{name}' returns "
            f"{len(got)}: {[_fmt(o) for o in got]}",
            code="err_out_shape_mismatch",
            loc=boundary_loc(),
        )
    for i, (g, w) in enumerate(zip(got, want)):
        if tuple(g.shape) != tuple(w.shape) or np.dtype(g.dtype) != np.dtype(w.dtype):
            raise NKIShapeError(
                f"{api}: out_shape[{i}] is {_fmt(w)} but kernel '{name}' returns {_fmt(g)} for "
                f"output {i}",
                code="err_out_shape_mismatch",
                loc=boundary_loc(),
            )


def _fmt(o: OutSpec) -> str:
    return f"{np.dtype(o.dtype).name}{list(o.shape)}"


def run(launch: Launch, args: tuple, kwargs: dict) -> Any:
    """Run ``launch`` in the simulator on NumPy arguments (errors end at the kernel line)."""
    try:
        return launch.run_numpy(*args, **kwargs)
    except NKIError as e:
        raise user_facing(e) from e.__cause__  # keep the real cause of an err_runtime


# (id(kernel), target, checks) -> (kernel, its configured copy): bounded, the kernel kept so
# that its id is not reused
_CONFIGURED: dict[tuple[int, str | None, str | None], tuple[Kernel, Kernel]] = {}


def configured(k: Kernel, target: str | None, checks: str | None) -> Kernel:
    """``k.configure(target=..., checks=...)`` with the settings given (``k`` itself when
    neither is), made once per kernel and settings (``Kernel.configure`` validates them)."""
    if target is None and checks is None:
        return k
    key = (id(k), target, checks)
    hit = _CONFIGURED.get(key)
    if hit is not None and hit[0] is k:
        return hit[1]
    over = {n: v for n, v in (("target", target), ("checks", checks)) if v is not None}
    out = k.configure(**over)
    if len(_CONFIGURED) >= 512:
        _CONFIGURED.clear()
    _CONFIGURED[key] = (k, out)
    return out


def run_traced(launch: Launch, bound: inspect.BoundArguments) -> tuple[Any, KernelIR]:
    """``run`` on arguments already bound (``bind``) and converted to NumPy; also returns the
    traced kernel the launch ran."""
    try:
        return launch.run_traced(bound)
    except NKIError as e:
        raise user_facing(e) from e.__cause__  # keep the real cause of an err_runtime


def as_tuple(x: Any) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)
