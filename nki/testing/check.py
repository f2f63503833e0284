"""``check_kernel``: a property test of a kernel against a reference in one call.

Hypothesis draws the launch grid, the input shapes, dtypes and values; the kernel runs in the
simulator and the reference (a NumPy, torch or jax callable) on the same inputs; the outputs are
compared with the result dtype's tolerance. On a mismatch hypothesis shrinks to a minimal
example, and the error shows that example's grid, shapes, dtypes (and values when small) and the
mismatch report."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from .. import dtypes as _dt
from ..errors import NKIError
from .order import accumulations_of, describe_difference, resolve_launch, run
from .strategies import SMALL_ARRAY, arrays
from .tolerance import _as_numpy, accumulation_tolerance, compare


class KernelCheckError(AssertionError):
    """``check_kernel`` found an input on which the kernel and the reference disagree (or the
    kernel raised, or its results depend on the execution order)."""


class ToolkitUsageError(TypeError):
    """``check_kernel`` was called with arguments that do not fit the kernel (e.g. a number of
    shapes / dtypes different from the kernel's tensor parameters)."""


def _is_dtype(x: Any) -> bool:
    if isinstance(x, st.SearchStrategy):
        return False
    try:
        _dt.name_of(x)
        return True
    except Exception:
        return False


def _describe_array(name: str, a: np.ndarray) -> str:
    dt = _dt.name_of(a.dtype)
    head = f"{name}: {dt}{list(a.shape)}"
    if a.size <= SMALL_ARRAY:
        vals = np.asarray(a).astype(np.float64) if a.dtype.kind == "V" else a
        return f"{head} = {np.array2string(np.asarray(vals), separator=', ')}"
    with np.errstate(all="ignore"):
        f = a.astype(np.float64)
    lo, hi = np.nanmin(f), np.nanmax(f)
    if lo == hi:
        return f"{head} (all {lo:.4g})"
    return f"{head} (values in [{lo:.4g}, {hi:.4g}])"


@dataclass
class KernelExample:
    """One drawn input: the launch grid and the kernel's input arrays."""

    grid: Any
    names: tuple[str, ...]
    inputs: tuple[np.ndarray, ...]

    def __repr__(self) -> str:
        parts = [f"grid={self.grid!r}" if self.grid not in (None, ()) else "no grid"]
        parts += [_describe_array(n, a) for n, a in zip(self.names, self.inputs)]
        return "\n    ".join(parts)


def _tensor_params(fn: Callable[..., Any]) -> tuple[list[str], int]:
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    required = sum(1 for p in params if p.default is p.empty)
    return [p.name for p in params], required


def _arity_error(kname: str, names: list[str], required: int, what: str, n: int) -> str:
    want = str(required) if required == len(names) else f"{required} to {len(names)}"
    return (
        f"check_kernel: kernel '{kname}' takes {want} tensor argument(s) ({', '.join(names)}), "
        f"but {what} gives {n}"
    )


def _to_framework(a: np.ndarray, framework: str) -> Any:
    if framework == "numpy":
        return a
    if framework == "torch":
        import torch

        if a.dtype == _dt.storage("bfloat16"):
            return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
        if a.dtype.name.startswith("float8"):  # (the same bits in torch's format of that name)
            td = getattr(torch, a.dtype.name, None)
            if td is None:
                raise ToolkitUsageError(
                    f"check_kernel(framework='torch'): torch has no {a.dtype.name} dtype; use "
                    "float8_e4m3fn / float8_e5m2, or framework='numpy'"
                )
            return torch.from_numpy(np.ascontiguousarray(a).view(np.uint8)).view(td)
        return torch.from_numpy(np.ascontiguousarray(a))
    if framework == "jax":
        import jax.numpy as jnp

        return jnp.asarray(a)
    raise ToolkitUsageError(f"framework must be 'numpy', 'torch' or 'jax', got {framework!r}")


def check_kernel(
    kernel: Any,
    reference: Callable[..., Any],
    *,
    shapes: Any,
    dtypes: Any = "float32",
    grid: Any = None,
    max_examples: int | None = None,
    min_value: float | None = None,
    max_value: float | None = None,
    special: bool = False,
    values: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
    target: str | None = None,
    checks: str | None = None,
    shuffle_seeds: Sequence[int] = (),
    framework: str = "numpy",
    upcast: bool = True,
) -> int:
    """Property-test ``kernel`` against ``reference`` on drawn inputs; return the number of
    examples run. Raises ``KernelCheckError`` with a minimal (shrunk) failing example.

    * ``kernel``: an ``@nki.jit`` kernel, a plain kernel function or a launch ``k[grid]``. It
      must return its outputs (one HBM tensor or a tuple). Its positional parameters without a
      default are its tensor inputs.
    * ``reference``: called with the same inputs (as NumPy arrays, or torch / jax arrays with
      ``framework=``); returns one array or a tuple, matching the kernel's outputs. With
      ``upcast=True`` (default) float inputs reach it as float32 (exactly the same values), so it
      computes once in fp32 and the comparison applies the *kernel output's* dtype tolerance.
    * ``shapes``: one entry per tensor input, each a shape tuple or a strategy of shapes (use
      ``st.shared(strategy, key=...)`` for inputs that share a shape); or a strategy drawing the
      whole list; or a function of the drawn grid returning either.
    * ``dtypes``: one dtype for all inputs, a strategy (one drawn dtype shared by all inputs),
      or a sequence with one dtype / strategy per input.
    * ``grid``: ``None`` (no launch grid), a fixed grid, a strategy of grids (see ``grids``), or
      a function of the drawn shapes returning a grid (not together with a function ``shapes``).
    * Values: ``arrays`` with ``min_value`` / ``max_value`` / ``special``; or ``values``, a
      function ``(shape, dtype) -> strategy of arrays`` (or one such function per input).
    * ``rtol`` / ``atol``: override the default tolerances: the output dtype's (see
      ``tolerance``), widened for outputs the kernel sums from many terms (matmul contraction
      x accumulating loop iterations, found in the traced kernel) to the fp32 summation-order
      bound ``terms x 2**-24`` relative and ``terms x 2**-24 x max|reference|`` absolute
      (see ``accumulation_tolerance``).
    * ``target`` / ``checks``: simulator settings for the kernel (default: its own / env).
    * ``shuffle_seeds``: also run every example in these seeded instance / ``affine_range``
      orders and require bit-identical results, up to the rounding of accumulations across
      iterations / instances (see ``assert_order_independent``). The
      comparison with the reference runs in order; a shuffle seed set on the kernel
      (``nki.jit(shuffle_seed=)``) or in ``NKI_SIM_SHUFFLE_SEED`` is added to these seeds.
    * ``max_examples``: overrides the active hypothesis profile's count (see ``profiles``).

    Constraints checked before drawing: the number of shapes / dtypes / value functions must
    match the kernel's tensor parameters (``ToolkitUsageError`` otherwise).
    Example: ``check_kernel(add, np.add, shapes=[s, s], dtypes=dtypes(float_only=True))``
    with ``s = st.shared(tile_shapes(), key="s")``."""
    base = resolve_launch(kernel)
    kname = getattr(base.kernel.fn, "__name__", "kernel")
    names, required = _tensor_params(base.kernel.fn)
    shapes_fn = callable(shapes) and not isinstance(shapes, st.SearchStrategy)
    grid_fn = callable(grid) and not isinstance(grid, st.SearchStrategy)
    if shapes_fn and grid_fn:
        raise ToolkitUsageError("check_kernel: shapes and grid cannot both be functions")
    if grid is not None and base.grid.dims:
        raise ToolkitUsageError(
            f"check_kernel: kernel '{kname}' is already launched over grid {base.grid}; pass "
            "the bare kernel with grid="
        )
    if isinstance(shapes, (list, tuple)) and shapes and isinstance(shapes[0], int):
        raise ToolkitUsageError(
            f"check_kernel: shapes={shapes!r} looks like a single shape; give one shape per "
            f"tensor input, e.g. shapes=[{tuple(shapes)!r}]"
        )

    def check_count(what: str, n: int) -> None:
        if not (required <= n <= len(names)):
            raise ToolkitUsageError(_arity_error(kname, names, required, what, n))

    if isinstance(shapes, (list, tuple)):
        check_count("shapes", len(shapes))
    if not _is_dtype(dtypes) and isinstance(dtypes, (list, tuple)):
        check_count("dtypes", len(dtypes))
    if isinstance(values, (list, tuple)):
        check_count("values", len(values))
    _check_reference_arity(reference, kname, names, required, shapes)

    @st.composite
    def examples(draw: Any) -> KernelExample:
        g = None
        if not grid_fn:
            g = draw(grid) if isinstance(grid, st.SearchStrategy) else grid
        spec = shapes(g) if shapes_fn else shapes
        if isinstance(spec, st.SearchStrategy):
            spec = draw(spec)
        if not isinstance(spec, (list, tuple)) or (spec and isinstance(spec[0], int)):
            raise ToolkitUsageError(
                f"check_kernel: shapes must give a list of shapes (one per tensor input), "
                f"got {spec!r}"
            )
        shp = [tuple(draw(s)) if isinstance(s, st.SearchStrategy) else tuple(s) for s in spec]
        check_count("shapes", len(shp))
        if grid_fn:
            g = grid(shp)
        n = len(shp)
        if _is_dtype(dtypes):
            dts = [dtypes] * n
        elif isinstance(dtypes, st.SearchStrategy):
            dts = [draw(dtypes)] * n
        else:
            dts = [draw(d) if isinstance(d, st.SearchStrategy) else d for d in dtypes]
            check_count("dtypes", len(dts))
        vals = values if isinstance(values, (list, tuple)) else [values] * n
        ins = []
        for k, (s, d) in enumerate(zip(shp, dts)):
            if vals[k] is None:
                strat = arrays(d, s, min_value=min_value, max_value=max_value, special=special)
            else:
                strat = vals[k](s, d)
            a = np.asarray(draw(strat))
            if a.shape != s:
                raise ToolkitUsageError(
                    f"check_kernel: values for input '{names[k]}' drew shape {a.shape}, "
                    f"expected {s}"
                )
            ins.append(a)
        return KernelExample(g, tuple(names[: len(ins)]), tuple(ins))

    shuffle_seeds = [int(s) for s in shuffle_seeds]
    configured_seed = base.kernel.config().shuffle_seed  # jit(shuffle_seed=) or the environment
    if configured_seed is not None and configured_seed not in shuffle_seeds:
        shuffle_seeds.append(configured_seed)
    count = [0]

    def run_one(ex: KernelExample) -> None:
        count[0] += 1
        launch = resolve_launch(base, ex.grid)
        try:
            # in order (the shuffled orders come below), even under NKI_SIM_SHUFFLE_SEED
            got, base_order = run(launch, ex.inputs, checks=checks, target=target)
        except NKIError as e:
            raise KernelCheckError(f"the kernel raised on:\n    {ex!r}\n{e}") from None
        if not got:
            raise ToolkitUsageError(
                f"check_kernel: kernel '{kname}' returned nothing; it must return its output "
                "tensors"
            )
        ref_in = []
        for a in ex.inputs:
            b = a.astype(np.float32) if upcast and _dt.is_float(_dt.name_of(a.dtype)) else a
            ref_in.append(_to_framework(b.copy(), framework))
        want = reference(*ref_in)
        want = tuple(want) if isinstance(want, (tuple, list)) else (want,)
        if len(want) != len(got):
            raise ToolkitUsageError(
                f"check_kernel: kernel '{kname}' returned {len(got)} output(s) but the "
                f"reference returned {len(want)}"
            )
        accs = accumulations_of(launch, len(got))
        for k, (o, w) in enumerate(zip(got, want)):
            w = _as_numpy(w)
            with np.errstate(all="ignore"):
                f = np.abs(np.asarray(w, dtype=np.float64)) if w.size else np.zeros(1)
            scale = float(np.max(f[np.isfinite(f)], initial=0.0))
            r, a = accumulation_tolerance(o.dtype, accs[k].terms, scale, rtol, atol)
            msg = compare(o, w, rtol=r, atol=a)
            if msg is not None:
                which = f"output {k}" if len(got) > 1 else "the output"
                if accs[k].terms > 1 and (rtol is None or atol is None):
                    line = f" at line {accs[k].loc.line}" if accs[k].loc is not None else ""
                    msg += (
                        f"\n  (default tolerance widened for the {accs[k].terms}-term fp32 "
                        f"accumulation{line})"
                    )
                raise KernelCheckError(
                    f"{which} of the kernel and the reference differ on:\n    {ex!r}\n{msg}"
                )
        for s in shuffle_seeds:
            try:
                outs, order = run(launch, ex.inputs, seed=int(s), checks=checks, target=target)
            except NKIError as e:
                raise KernelCheckError(
                    f"order dependence: shuffle seed {s} raised an error the default order does "
                    f"not, on:\n    {ex!r}\n{e}"
                ) from None
            d = describe_difference(got, outs, int(s), base_order, order, accs)
            if d is not None:
                raise KernelCheckError(
                    f"order dependence (a race between instances or a loop-carried "
                    f"dependency) on:\n    {ex!r}\n{d}"
                )

    cur = settings()
    opts: dict[str, Any] = dict(
        deadline=None,
        # the 'explain' phase re-runs the kernel many times to annotate the failure; the
        # mismatch report already says what went wrong
        phases=[p for p in cur.phases if p != Phase.explain],
        suppress_health_check=[
            *cur.suppress_health_check,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )
    if max_examples is not None:
        opts["max_examples"] = int(max_examples)
    test = settings(cur, **opts)(given(ex=examples())(run_one))
    key = f"{getattr(base.kernel.fn, '__module__', '')}.{base.kernel.fn.__qualname__}|"
    key += getattr(reference, "__qualname__", repr(type(reference)))
    if hasattr(test, "_hypothesis_internal_database_key"):
        # one database entry per kernel / reference pair, not one shared by every call
        test._hypothesis_internal_database_key = hashlib.sha256(key.encode()).digest()[:16]
    try:
        test()
    except KernelCheckError as e:
        raise _report(e, kname, reference, count[0], [e]) from None
    except Exception as group:  # (an exception group: hypothesis found several failures)
        found = list(getattr(group, "exceptions", ()))
        if not found or not all(isinstance(e, KernelCheckError) for e in found):
            raise
        raise _report(found[0], kname, reference, count[0], found) from None
    return count[0]


def _report(
    first: KernelCheckError, kname: str, reference: Any, runs: int, found: list[KernelCheckError]
) -> KernelCheckError:
    """The error ``check_kernel`` raises: the (first) shrunk failure, with how many distinct
    ones hypothesis found, and its notes to reproduce it."""
    more = "".join(f"\n  also: {str(e).splitlines()[0]}" for e in found[1:])
    what = f"{len(found)} distinct failures; the first" if len(found) > 1 else "minimal example"
    err = KernelCheckError(
        f"check_kernel: kernel '{kname}' fails against reference "
        f"'{getattr(reference, '__name__', reference)}' ({what} after {runs} runs, shrunk by "
        f"hypothesis): {first}{more}"
    )
    for e in found:
        for note in getattr(e, "__notes__", []):
            if "reproduce_failure" in note or "@seed" in note:
                err.add_note(note)
    return err


def _check_reference_arity(
    reference: Any, kname: str, names: list[str], required: int, shapes: Any
) -> None:
    if not callable(reference):
        raise ToolkitUsageError(f"check_kernel: reference must be callable, got {reference!r}")
    if not isinstance(shapes, (list, tuple)):
        return
    try:
        sig = inspect.signature(reference)
    except (TypeError, ValueError):
        return  # NumPy ufuncs and builtins: checked by calling
    n = len(shapes)
    try:
        sig.bind(*range(n))
    except TypeError as e:
        raise ToolkitUsageError(
            f"check_kernel: the reference '{getattr(reference, '__name__', reference)}' cannot "
            f"take the kernel's {n} tensor input(s): {e}"
        ) from None
