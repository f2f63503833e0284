"""``@nki.jit`` kernels: tracing once per input signature, caching the IR, launching over SPMD
grids in the simulator."""

from __future__ import annotations

import copy
import difflib
import functools
import inspect
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from simulator.checks.program_order import with_program_order
from simulator.launch import SimConfig
from simulator.launch import launch as simulator_launch
from simulator.vacuous_masks import without_vacuous_masks

from . import dtypes
from .binding import (
    DTYPE_NAMES,
    array_list,
    bind_plain,
    dtype_name,
    flat_arrays,
    grid_key,
    is_array,
    list_key,
    list_params,
    misused_argument,
    nested_items,
    plain_params,
    static_key,
)
from .collection import paused
from .compiler import check_kernel_configs
from .cores import merge_cores
from .errors import (
    DiscardedResultWarning,
    NKIError,
    NKIShapeError,
    NKITypeError,
    SrcLoc,
    kernel_def_loc,
    locate_in_traceback,
    recursion_error,
    result_discarded,
    return_loc,
    user_facing,
    user_loc,
    user_stacklevel,
)
from .frameworks import dispatch, framework_of
from .grids import check_grid_fits, lnc_grid, lnc_shaped, parse_grid
from .ir import Grid, KernelIR, TensorDecl
from .outputs import check_param_writes, kernel_outputs, warn_unreturned, written_bases
from .targets import get_target
from .tracer import (
    NeedsPerCore,
    NkiTensor,
    TraceState,
    held_output,
    kernel_body,
    new_trace,
    release,
    trace_with_unrolling,  # classic `if` on loop iterators
    tracing,
)
from .tracer.api_checks import broken
from .tracer.api_checks import finish as finish_rules
from .tracer.dependencies import Schedule, labelled, schedule_of
from .typing import annotation_of, local_shape_checks

MODES = ("auto", "simulation", "baremetal", "benchmark", "jax", "torchxla", "trace", "profile")
_CONFIG_KEYS = ("precise_fp", "checks", "shuffle_seed", "backend", "threads")
_JIT_KEYS = ("mode", "platform_target", "api", *_CONFIG_KEYS)


_LABELS = ("__name__", "__qualname__", "__module__", "__code__", "__globals__")


def kernel_function(fn: Any) -> Any:
    """The Python callable a kernel runs: a function, a bound method (a callable object's
    ``__call__``) or a ``functools.partial`` of one. A partial is copied and labelled with its
    function's name, code and globals, which errors and checks use to find the kernel's source.
    Anything else is a located error."""
    if isinstance(fn, Launch):
        fn = fn.kernel
    if isinstance(fn, Kernel):
        return fn.fn
    if inspect.isfunction(fn) or inspect.ismethod(fn):
        return fn
    if isinstance(fn, functools.partial):
        base = kernel_function(fn.func)
        inner = base.__func__ if inspect.ismethod(base) else base
        part = functools.partial(base, *fn.args, **fn.keywords)
        for attr in _LABELS:
            setattr(part, attr, getattr(inner, attr))
        return part
    call = getattr(fn, "__call__", None)  # noqa: B004 - a callable object's method
    if inspect.ismethod(call) and inspect.isfunction(call.__func__):
        return call  # a callable object: its bound __call__ is the kernel
    raise NKITypeError(
        f"nki.jit expects a function (or a functools.partial of one, or an object with a "
        f"__call__ method), got {type(fn).__name__}: {fn!r}"[:300],
        code="err_invalid_mode",
        loc=user_loc(),
    )


def _launch_grid(fn: Any) -> Grid:
    while isinstance(fn, functools.partial):
        fn = fn.func
    if isinstance(fn, Launch):
        return fn.grid
    return fn.default_grid if isinstance(fn, Kernel) else Grid(())


class Kernel:
    """A kernel decorated with ``@nki.jit``. Call it with NumPy arrays (runs in the simulator and
    returns NumPy arrays), or launch it over a grid: ``kernel[2, 2](a, b)``."""

    __test__ = False  # a kernel named test_* in a test module is not a pytest test

    def __init__(
        self, fn: Any, mode: str = "auto", platform_target: str | None = None, **options: Any
    ) -> None:
        # a grid launch (``nki.benchmark(k[2])``, also in a partial) keeps its grid as default
        self.default_grid = _launch_grid(fn)
        base = fn.kernel if isinstance(fn, Launch) else fn
        inherited = base.api if isinstance(base, Kernel) else None  # nki.jit(nki.jit(f, api=..))
        fn = kernel_function(fn)
        if mode not in MODES:
            raise NKIError(
                f"unknown nki.jit mode {mode!r}; expected one of {MODES}",
                code="err_invalid_mode",
                loc=user_loc(),
            )
        self.fn = fn
        self.mode = mode
        self.platform_target = platform_target
        self.config_overrides = {k: options.pop(k) for k in _CONFIG_KEYS if k in options}
        api = options.pop("api", inherited)
        if api not in (None, "classic", "current"):
            raise NKIError(
                f"unknown nki.jit api {api!r}; expected 'classic' or 'current' (or leave it out: "
                "the kernel's first generation-specific construct decides)",
                code="err_invalid_argument",
                loc=user_loc(),
            )
        self.api: str | None = api
        for k in options:  # compile options are ignored; a misspelt setting must not be
            close = difflib.get_close_matches(k, _JIT_KEYS, n=1, cutoff=0.8)
            if close or k == "target":
                hint = "platform_target" if k == "target" else close[0]
                raise NKIError(
                    f"unknown nki.jit option '{k}'; did you mean '{hint}'? (nki.jit takes "
                    f"{', '.join(_JIT_KEYS)} and ignores compile options such as save_neff_name)",
                    code="err_invalid_config",
                    loc=user_loc(),
                )
        check_kernel_configs(options)
        self.options = options  # accepted and ignored (save_neff_name, artifacts_dir, ...)
        self.body = kernel_body(fn)  # what a trace calls: its bare `range` may be symbolic
        self._cache: dict[object, KernelIR] = {}
        self._cache_lock = threading.Lock()  # shared with configure()'s copies, like the cache
        self.trace_count = 0
        self.platform_target_at: SrcLoc | None = None  # where a deprecated platform_target= was
        self.last_run: Any = None
        self.last_ir: KernelIR | None = None
        self.schedule: Schedule | None = None  # ``with_schedule``'s edges
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    # ---- launching ----------------------------------------------------------------------------
    def __getitem__(self, grid: object) -> Launch:
        return Launch(self, parse_grid(grid))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return Launch(self, self.default_grid)(*args, **kwargs)

    def configure(self, **overrides: Any) -> Kernel:
        """This kernel with other simulator settings for the calls made through it
        (``target``, ``precise_fp``, ``checks``, ``shuffle_seed``, ``backend``, ``threads``), e.g.
        ``kernel.configure(checks="full")[2, 2](a, b)``. Shares the trace cache."""
        if bad := set(overrides) - {"target", *_CONFIG_KEYS}:
            keys = ", ".join(_CONFIG_KEYS)
            raise NKIError(f"unknown simulator setting(s) {sorted(bad)}; expected target, {keys}",
                           code="err_invalid_config", loc=user_loc())  # fmt: skip
        k = copy.copy(self)
        over = dict(overrides)
        if "target" in over:
            k.platform_target = over.pop("target")
            k.platform_target_at = None
        k.config_overrides = {**self.config_overrides, **over}
        k.config()  # validate now
        if result_discarded():
            msg = "kernel.configure(...) returns the configured kernel and leaves this one as it is"
            warnings.warn(msg + "; call the result", DiscardedResultWarning, user_stacklevel())
        return k

    def with_schedule(self, edges: Any, kind: Any = None) -> Kernel:
        """This kernel with scheduling edges between its named instructions:
        ``[(consumer, producer or [producers]), ...]`` by the ``name=`` of ``nki.isa`` calls.
        Results do not change; the cost model orders issue (``kind=nisa.dependency.runtime``:
        waits for the producers' ends). An unknown name is a located error when traced."""
        k = copy.copy(self)
        k.schedule = schedule_of(edges, kind)
        k._cache, k._cache_lock, k.trace_count = {}, threading.Lock(), 0  # (other IR)
        return k

    def config(self, **overrides: Any) -> SimConfig:
        cfg = SimConfig.from_env()
        if not overrides and not self.config_overrides and self.platform_target is None:
            return cfg
        over = dict(self.config_overrides)
        over.update({k: v for k, v in overrides.items() if v is not None})
        if self.platform_target is not None and "target" not in overrides:
            over["target"] = self.platform_target
        return cfg.with_(**over)

    @functools.cached_property
    def signature(self) -> inspect.Signature:
        """The kernel function's signature (read once: binding is per launch)."""
        return inspect.signature(self.fn)

    _plain = functools.cached_property(lambda self: plain_params(self.signature))
    _nparams = functools.cached_property(lambda self: len(self.signature.parameters))

    # ---- tracing ------------------------------------------------------------------------------
    def bind(
        self,
        args: tuple,
        kwargs: dict,
        api: str | None = None,
        loc: Callable[[], SrcLoc] = user_loc,
    ) -> inspect.BoundArguments:
        """The kernel's parameters bound to a call's arguments (defaults not applied). Arguments
        that do not fit the kernel's signature are an ``err_invalid_argument`` error located at
        ``loc()`` (the kernel author's call; a framework boundary passes its own), its message
        prefixed with ``api`` when given."""
        plain = self._plain
        if plain is not None:
            got = bind_plain(self.signature, plain, args, kwargs)
            if got is not None:
                return got
        try:
            return self.signature.bind(*args, **kwargs)
        except TypeError as e:
            prefix = f"{api}: " if api else ""
            raise NKITypeError(
                f"{prefix}bad arguments for kernel '{self.fn.__name__}': {e}",
                code="err_invalid_argument",
                loc=loc(),
            ) from None

    def trace(self, grid: Grid, bound: inspect.BoundArguments, target: str) -> KernelIR:
        """The kernel IR for these arguments (traced once per signature, then cached)."""
        key_parts = [grid_key(grid), target]
        names = DTYPE_NAMES  # (a dtype's NKI name; ``_param_dtype`` the first time)
        for name, v in bound.arguments.items():
            if isinstance(v, np.ndarray):  # (a packed MX dtype equals its storage: no dict key)
                dt = v.dtype.metadata is None and names.get(v.dtype)
                key_parts.append((name, "T", v.shape, dt or self._param_dtype(name, v)))
            elif isinstance(v, (list, tuple)) and array_list(v):
                dt_of = functools.partial(self._list_dtype, name)
                key_parts.append((name, "L", list_key(v, dt_of)))
            else:
                key_parts.append((name, "S", static_key(v)))
        key = tuple(key_parts)
        ir = self._cache.get(key)  # (entries are only added, under the lock, and complete)
        if ir is None:
            # traced outside the lock (tracing state is per thread, and a kernel may call
            # another kernel while tracing); the first finished trace of a key wins
            try:
                with paused():  # (no cyclic collections rescanning the growing IR)
                    traced = self._trace_launch(grid, bound, target)
            except NKIError as e:
                if e.code == "err_kernel_output_must_be_hbm" and e.loc is None:
                    again = functools.partial(self._trace_launch, grid, bound, target)
                    e.with_context(loc=return_loc(self.fn.__code__, again))
                raise
            except RecursionError as e:
                raise recursion_error(self.fn.__name__, self.fn.__code__, e) from None
            with self._cache_lock:
                ir = self._cache.setdefault(key, traced)
                if ir is traced:
                    self.trace_count += 1
        self.last_ir = ir
        return ir

    def _trace_launch(self, grid: Grid, bound: inspect.BoundArguments, target: str) -> KernelIR:
        """One trace, or one per core for a current-API launch on two cores
        (``nki/cores.py``): there ``nl.program_id(0)`` is a plain int on each core."""
        why = None
        printed: list[str] = []  # (dropped when the per-core traces print it again)
        try:
            with held_output() as printed:
                ir = trace_with_unrolling(lambda: self._trace(grid, bound, target))
        except NeedsPerCore as e:  # Python control flow on the program id, cores that meet
            why = (e.message.removesuffix(" needs one trace per core"), e.loc)
        except BaseException:
            release(printed)
            raise
        else:
            if ir.generation != "current" or tuple(grid.shape) != (2,):
                release(printed)
                return ir
        grid = lnc_grid(grid, target)  # kernel[2] of a current-API kernel: two cores
        trace = functools.partial(self._trace, grid, bound, target, why=why)
        return merge_cores(lambda c: trace_with_unrolling(lambda: trace(core=c)), grid)

    def generation(self, ir: KernelIR) -> str | None:
        """The API generation a traced IR of this kernel was decided to be (None: undecided)."""
        return ir.generation or self.api

    def _list_dtype(self, name: str, e: np.ndarray) -> str:
        """The NKI dtype name of an array list's element (``name``: the list's parameter)."""
        return (e.dtype.metadata is None and DTYPE_NAMES.get(e.dtype)) or self._param_dtype(name, e)

    def _param_dtype(self, name: str, v: np.ndarray) -> str:
        try:
            return dtype_name(v.dtype)
        except NKITypeError as e:
            code = self.fn.__code__
            raise NKITypeError(
                f"argument '{name}' of kernel '{self.fn.__name__}' has dtype {v.dtype}, which "
                f"NKI does not support: {e.message}",
                code="err_unsupported_dtype",
                loc=kernel_def_loc(code),
            ) from None

    def _trace(
        self,
        grid: Grid,
        bound: inspect.BoundArguments,
        target_name: str,
        core: int | None = None,
        why: tuple[str, SrcLoc | None] | None = None,
    ) -> KernelIR:
        target = get_target(target_name)
        st = TraceState(self.fn.__name__, target, grid.shape)
        st.core = core  # a per-core trace (nki/cores.py): nl.program_id(0) is this int
        code = self.fn.__code__
        def_loc = kernel_def_loc(code)
        if self.api is not None:  # nki.jit(api=...) forces the generation
            st.generation, st.generation_why = self.api, (f"nki.jit(api={self.api!r})", def_loc)
        elif why is not None:  # what made the launch trace per core decided the generation
            st.generation, st.generation_why = "current", why
        elif st.generation is None and not lnc_shaped(grid):  # kernel[2, 2], kernel[4]
            what = (
                f"the launch grid kernel[{', '.join(map(str, grid.shape))}] (an SPMD grid; a "
                "current-API kernel is launched as kernel[1] or kernel[2], its logical "
                "NeuronCore count)"
            )
            st.generation, st.generation_why = "classic", (what, def_loc)
        sig = self.signature
        call_args = dict(bound.arguments)
        mutable: set[str] = set()
        with new_trace(st):
            for name, v in bound.arguments.items():
                if array_list(v):
                    call_args[name] = list_params(st, name, v, def_loc)
                    continue
                if not is_array(v):
                    continue
                ann = annotation_of(sig.parameters[name].annotation, self.fn)
                if ann is not None:
                    if ann.mutable:
                        mutable.add(name)
                    if ann.shape is not None and tuple(ann.shape) != tuple(v.shape):
                        raise NKIShapeError(
                            f"parameter '{name}' is annotated {ann} but has shape {tuple(v.shape)}",
                            code="err_annotation_shape_mismatch",
                            loc=def_loc,
                        )
                decl = TensorDecl(
                    name,
                    tuple(int(s) for s in v.shape),
                    dtypes.name_of(v.dtype),
                    "shared_hbm",
                    "param",
                    0,
                    def_loc,
                )
                st.declare(decl)
                st.params.append(name)
                call_args[name] = NkiTensor(decl, ())
            b2 = inspect.BoundArguments(bound.signature, call_args)  # type: ignore[arg-type]
            with local_shape_checks(self.fn):  # x: nt.tensor[128, 512] = ... on locals
                try:
                    ret = self.body(*b2.args, **b2.kwargs)
                except NKIError as e:
                    locate_in_traceback(e)
                    raise
                except AttributeError as e:
                    raise misused_argument(e, bound.arguments) from e
            outputs, returns = kernel_outputs(st, ret)
            if self.platform_target_at is not None:
                broken(
                    "jit.platform_target",
                    f"kernel '{st.name}' is decorated with nki.jit(platform_target="
                    f"{self.platform_target!r})",
                    self.platform_target_at,
                )
        if st.generation is None:  # nothing decided it: `import nki` kernels are current-API
            st.generation = st.default_generation
        finish_rules(st, warn=core in (None, 0))
        written = written_bases(st)
        writes_back: tuple[str, ...] = ()
        if st.generation == "current":  # the current API writes modified inputs back
            writes_back = tuple(p for p in st.params if p in written)
        else:
            check_param_writes(st, returns, mutable, written)
        bases = {st.tensors[o].alias_of or o for o in outputs}
        for name in sorted(mutable):  # an in/out parameter must come back to the caller
            if returns and name in written and name not in bases:
                raise NKIError(
                    f"parameter '{name}' is annotated nt.mutable_tensor and written, but the "
                    "kernel does not return it; add it to the returned tensors",
                    code="err_mutable_parameter_not_returned",
                    loc=written[name],
                )
        ir = KernelIR(
            self.fn.__name__,
            tuple(st.params),
            tuple(st.tensors.values()),
            labelled(st, tuple(st.bodies[0]), self.schedule),
            outputs,
            returns,
            grid,
            target.name,
            def_loc,
            writes_back,
            st.generation,
        )
        if core in (None, 0):
            warn_unreturned(ir)
        ir = without_vacuous_masks(ir)  # (a mask that selects everything changes nothing)
        # current API: loops keep program order where iterations depend on each other
        return with_program_order(ir) if st.generation == "current" else ir


class Launch:
    """A kernel bound to a launch grid: ``kernel[grid]``."""

    def __init__(self, kernel: Kernel, grid: Grid) -> None:
        self.kernel = kernel
        self.grid = grid

    @property
    def last_run(self) -> Any:
        return self.kernel.last_run

    def configure(self, **overrides: Any) -> Launch:
        """``kernel[grid].configure(...)``: ``kernel.configure(...)[grid]``."""
        return Launch(self.kernel.configure(**overrides), self.grid)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if tracing():  # a kernel called from inside another kernel is inlined
            if self.grid.dims:
                raise NKIError(
                    "a kernel called from inside another kernel cannot have an SPMD grid",
                    code="err_nested_kernel_with_spmd_grid",
                    loc=user_loc(),
                )
            return self.kernel.body(*args, **kwargs)
        if kwargs or any(type(a) is not np.ndarray for a in args):  # (not NumPy arrays alone)
            if fw := {framework_of(a) for a in nested_items([*args, *kwargs.values()])} - {None}:
                return dispatch(self, fw, args, kwargs)  # type: ignore[arg-type]
        try:
            return self.run_numpy(*args, **kwargs)
        except NKIError as e:
            raise user_facing(e) from e.__cause__  # keep the real cause of an err_runtime

    def run_numpy(self, *args: Any, _config: Any = None, **kwargs: Any) -> Any:
        return self.run_bound(self.kernel.bind(args, kwargs), _config)

    def run_bound(self, bound: inspect.BoundArguments, config: SimConfig | None = None) -> Any:
        """``run_numpy`` on arguments already bound (``Kernel.bind``) by a frontend."""
        return self.run_traced(bound, config)[0]

    def run_traced(
        self, bound: inspect.BoundArguments, config: SimConfig | None = None
    ) -> tuple[Any, KernelIR]:
        """``run_bound``, with the traced kernel the launch ran (``Kernel.last_ir`` may be
        another thread's by the time a frontend could read it)."""
        k = self.kernel
        cfg = config if config is not None else k.config()
        if len(bound.arguments) != k._nparams:
            bound.apply_defaults()
        lists = []  # (the array-list arguments)
        for name, v in bound.arguments.items():  # (values replaced in place: the keys stay)
            if type(v) is np.ndarray:
                continue
            # NumPy scalars (np.float32("-inf")) and scalar types (a dtype) stay compile-time
            if (
                not isinstance(v, (np.generic, type))
                and hasattr(v, "__array__")
                and not is_array(v)
                and not np.isscalar(v)
            ):
                bound.arguments[name] = np.asarray(v)
            elif isinstance(v, (list, tuple)) and array_list(v):
                lists.append(name)
        grid = self.grid
        if k.api == "current":
            grid = lnc_grid(self.grid, cfg.target)
        if _FITS.get((id(grid), cfg.target)) is not grid:
            check_grid_fits(grid, cfg.target)
            if len(_FITS) >= 256:
                _FITS.clear()
            _FITS[(id(grid), cfg.target)] = grid
        ir = k.trace(grid, bound, cfg.target)
        if k.api is None and ir.generation == "current" and grid is self.grid and not ir.cores:
            # a current-API kernel: kernel[n] is a launch on n cores (LNC), not an SPMD grid
            lgrid = lnc_grid(self.grid, cfg.target)
            if lgrid != self.grid:
                ir = k.trace(lgrid, bound, cfg.target)
        result, k.last_run = simulator_launch(ir, flat_arrays(bound.arguments, lists), cfg)
        return result, ir


# (id(grid), target) -> the grid, which fits the target: bounded, the grid kept (its id not reused)
_FITS: dict[tuple[int, str], Grid] = {}


def jit(func: Any = None, mode: str = "auto", **kwargs: Any) -> Any:
    """Decorate a kernel: ``@nki.jit``, ``@nki.jit(mode='simulation', platform_target='trn2')``,
    ``nki.jit(fn)``, ``nki.jit(fn=fn)`` or ``func=fn``. ``platform_target`` selects trn1 / trn2 /
    trn3; ``precise_fp``, ``checks``, ``shuffle_seed`` set simulator options for this kernel."""
    func = kwargs.pop("fn", None) if func is None else func
    at = user_loc() if kwargs.get("platform_target") is not None else None

    def make(f: Any) -> Kernel:
        k = Kernel(f, mode=mode, **kwargs)
        k.platform_target_at = at
        return k

    return make if func is None else make(func)


def baremetal(kernel: Any = None, **kwargs: Any) -> Any:
    """Classic ``nki.baremetal``: NumPy in, NumPy out. Here it runs in the simulator (compile
    options such as ``save_neff_name`` are accepted and ignored)."""
    if kernel is None:
        return lambda f: Kernel(f, mode="baremetal", **kwargs)
    return Kernel(kernel, mode="baremetal", **kwargs)
