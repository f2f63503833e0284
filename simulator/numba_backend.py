"""The Numba backend: runs a traced kernel as compiled code instead of walking its IR.

``SimConfig.backend`` selects it:

* ``"numpy"``: always the reference interpreter.
* ``"numba"``: compile the kernel when it is in the supported subset; otherwise warn once per
  traced kernel and reason (:class:`BackendFallbackWarning`) and run the interpreter.
* ``"auto"`` (default): compile when the kernel is in the supported subset and a cost model
  (``estimate``) says the compiled run plus the compile (or disk-cache load) beats the
  interpreter for this launch: many small tiles pay off, a few big ones do not; otherwise the
  interpreter, silently.

Results are those of the interpreter, bit for bit (see ``numba_codegen``): instructions that
cannot be compiled that way run the interpreter's own executor from inside the compiled code
("hosted", through ``interpreter.execute_instruction``). Settings that need the interpreter's
bookkeeping always use it:
``checks="full"`` (uninitialised-read tracking) and ``shuffle_seed`` (shuffled order); with
``checks="none"`` the kernel must still pass the static bounds check (compiled code does not
bounds-check unmasked accesses).

A kernel compiles as a thin driver (``numba_codegen``) calling small library kernels, one per
instruction kind and access shape (``numba_kernels``), so compile time grows linearly with the
kernel and the library kernels are shared between kernels; above ``PY_DRIVER_MIN``
instructions the driver runs as plain Python. Everything compiled is cached in memory and on
disk: generated modules are written to ``$NKI_SIM_CACHE_DIR`` (default ``~/.cache/nki-sim``)
under a hash of their source and compiled with numba's ``cache=True`` next to them, so a new
process loads them instead of compiling again; an entry numba cannot load is deleted and
rebuilt (:class:`CacheRepairedWarning`). Compiled loops poll for Ctrl-C.
``kernel.last_run.backend`` says which backend ran.
"""

from __future__ import annotations

import ctypes
import hashlib
import warnings
from typing import Any

import numpy as np

from nki.errors import NKIError, user_stacklevel
from nki.ir import KernelIR, PidSym
from nki.optable import OPS

from . import numba_kernels as lib
from . import numerics
from .bounds import check_bounds
from .config import SimConfig
from .host import alias_array
from .instances import RunInfo, Schedule
from .interpreter import execute_instruction
from .numba_codegen import Plan, Unsupported, generate
from .numba_kernels import cache_dir

NAME = "numba"

# The cost model "auto" decides by, in seconds, measured on the 2-core development machine
# (benchmarks/numba_vs_numpy.py and a compile-time sweep over kernel sizes). The interpreter pays
# a fixed cost per instruction execution and vectorised NumPy per element; compiled loops pay
# per element only (they do not vectorise across bfloat16 rounding, so big tiles favour NumPy).
INTERP_PER_EXEC = 50e-6
INTERP_PER_ELEMENT = 0.5e-9
NUMBA_PER_ELEMENT = 2.5e-9
# a cold compile (from runs on the shared 2-core machine): the driver, base + per instruction
# (none for a plain-Python driver), and each library kernel not yet built
DRIVER_BASE = 0.4
DRIVER_PER_INSTR = 0.03
KERNEL_COMPILE = 0.6
DISK_LOAD = 0.05  # loading one compiled module from the disk cache
_VERSION = "2"  # bump when the generated code changes meaning


class BackendFallbackWarning(UserWarning):
    """``backend="numba"`` was asked for a kernel it cannot compile; the interpreter ran it."""


class CacheRepairedWarning(UserWarning):
    """A corrupted Numba disk-cache entry of a kernel was deleted and the kernel recompiled."""


# id(ir) -> (ir, precise_fp, plan or None, reason); the IR is kept alive so ids are not reused
_PLANS: dict[int, tuple[KernelIR, bool, Plan | None, str]] = {}
_FUNCS: dict[str, Any] = {}  # source hash -> compiled numba dispatcher
_WARNED: set[tuple[int, str]] = set()


def plan(ir: KernelIR, config: SimConfig) -> tuple[Plan | None, str]:
    """The generated code for ``ir`` (cached per traced kernel), or None and the reason."""
    hit = _PLANS.get(id(ir))
    if hit is not None and hit[0] is ir and hit[1] == config.precise_fp:
        return hit[2], hit[3]
    try:
        p: Plan | None = generate(ir, config)
        reason = ""
    except Unsupported as e:
        p, reason = None, str(e)
    except Exception as e:  # a code generator bug must not stop the kernel: interpret it
        p, reason = None, f"code generation failed ({type(e).__name__}: {str(e)[:200]})"
    if len(_PLANS) > 512:
        _PLANS.clear()
    _PLANS[id(ir)] = (ir, config.precise_fp, p, reason)
    return p, reason


def unsupported_reason(ir: KernelIR, config: SimConfig) -> str | None:
    """Why ``ir`` cannot run on the Numba backend under ``config`` (None when it can)."""
    if config.checks == "full":
        return "checks='full' tracks uninitialised reads in the interpreter"
    if config.shuffle_seed is not None:
        return "shuffle_seed reorders instances / iterations in the interpreter"
    if ir.has_runtime_loops:
        return "device loops (nl.fori_loop with a register bound, nl.while_loop) run per trip"
    if config.checks == "none":
        # compiled code does not bounds-check unmasked accesses: they must be proven in bounds
        try:
            check_bounds(ir)
        except NKIError:
            return "an unmasked access fails the static bounds check"
    p, reason = plan(ir, config)
    return None if p is not None else reason


def _source_key(p: Plan) -> str:
    import numba

    text = f"{_VERSION}\n{numba.__version__}\n{np.__version__}\n{p.source}"
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _driver_stem(p: Plan) -> str:
    return f"nki_{_source_key(p)}"


def _signature(args: list[Any]) -> tuple:
    import numba

    return tuple(numba.typeof(a) for a in args)


def compiled(p: Plan, args: list[Any] | None = None) -> Any:
    """The driver of a plan, its library kernels loaded (from memory, from the disk cache or
    compiled now); with ``args``, the compiled driver is built for them before it runs, so a
    cache entry numba cannot load fails here, before anything has run."""
    key = _source_key(p)
    fn = _FUNCS.get(key)
    if fn is not None:
        return fn
    for spec in p.kernels:
        lib.kernel(spec)
    fn = getattr(lib.load(_driver_stem(p), p.source), p.func)
    if args is not None and not p.python:
        fn.compile(_signature(args))
    elif args is not None:  # plain-Python driver: build each library kernel it will call
        for disp, call in _kernel_calls(p, args):
            disp.compile(_signature(call))
    _FUNCS[key] = fn
    return fn


def _purge(p: Plan) -> bool:
    """Forget the compiled driver of ``p`` and its library kernels and delete their disk-cache
    entries; False when there was no Numba cache entry on disk (then a failure is not the
    cache's fault)."""
    _FUNCS.pop(_source_key(p), None)
    found = False
    for stem in [_driver_stem(p)] + [f"nki_k_{spec.key}" for spec in p.kernels]:
        found = lib.purge(stem) or found
    return found


def forget_compiled() -> None:
    """Drop every compiled driver and library kernel from memory (as in a new process: the
    next run loads them from the disk cache)."""
    _FUNCS.clear()
    lib.forget()


def is_compiled(p: Plan) -> bool:
    """Compiled (or loaded) in this process."""
    return _source_key(p) in _FUNCS


def on_disk(p: Plan) -> bool:
    """The compiled driver is in the disk cache (a plain-Python driver needs none)."""
    return p.python or lib.on_disk(_driver_stem(p))


def choose(ir: KernelIR, config: SimConfig) -> tuple[bool, str]:
    """(use numba, reason when not) for ``config.backend``."""
    if config.backend == "numpy":
        return False, "backend='numpy'"
    reason = unsupported_reason(ir, config)
    if reason is not None:
        return False, reason
    if config.backend == "numba":
        return True, ""
    p, _ = plan(ir, config)
    assert p is not None
    interp, compiled = estimate(p)
    why = f"compiling does not pay off: interpreter ~{interp:.3g} s, compiled ~{compiled:.3g} s"
    if compiled >= interp:
        return False, why
    setup = setup_cost(p)  # looked up only when it can matter (it imports numba)
    if compiled + setup < interp:
        return True, ""
    return False, f"{why} + {setup:.3g} s to compile or load"


def estimate(p: Plan) -> tuple[float, float]:
    """(interpreter seconds, compiled seconds) for one launch of the natively compiled part of
    ``p`` (hosted instructions cost the same either way)."""
    interp = p.native_work * INTERP_PER_EXEC + p.native_elements * INTERP_PER_ELEMENT
    return interp, p.native_elements * NUMBA_PER_ELEMENT


def setup_cost(p: Plan) -> float:
    """Seconds before the compiled kernel can run: 0 when compiled in this process, else
    loading or compiling the driver (growing linearly with its instructions) and each library
    kernel not yet loaded."""
    if is_compiled(p):
        return 0.0
    cost = 0.0
    for spec in p.kernels:
        stem = f"nki_k_{spec.key}"
        if not lib.loaded(stem):
            cost += DISK_LOAD if lib.on_disk(stem) else KERNEL_COMPILE
    if not p.python:
        on = lib.on_disk(_driver_stem(p))
        cost += DISK_LOAD if on else DRIVER_BASE + DRIVER_PER_INSTR * len(p.instrs)
    return cost


class _Host:
    """Runs hosted instructions (the ones not compiled natively) with the interpreter's executors,
    on the compiled kernel's arrays, with per-instance engine state like the interpreter's."""

    def __init__(self, ir: KernelIR, config: SimConfig, p: Plan) -> None:
        self.ir, self.config, self.plan = ir, config, p
        self.states: dict[tuple[int, ...], dict[str, Any]] = {}
        self.arrays: dict[str, np.ndarray] = {}  # tensors and scratch buffers by name
        self.env = np.zeros(64, dtype=np.int64)  # symbol values at a call back
        self.error: BaseException | None = None
        self.epoch = np.zeros(max(1, len(p.alloc_slots)), dtype=np.int64)
        self.views: dict[str, tuple[int, np.ndarray]] = {}

    def storage(self, name: str, a: np.ndarray) -> np.ndarray:
        """The tensor in its storage dtype: one array object per allocation of the tensor, as
        in the interpreter (executors may key per-allocation state on the object)."""
        slot = self.plan.alloc_slots.get(name)
        epoch = int(self.epoch[slot]) if slot is not None else -1
        hit = self.views.get(name)
        if hit is not None and hit[0] == epoch:
            return hit[1]
        sd = numerics.storage_dtype(self.ir.tensor(name).dtype, self.config.precise_fp)
        v = a.view(sd)  # a new ndarray object on the same memory
        self.views[name] = (epoch, v)
        return v

    def run_instr(self, index: int, env_vals: tuple) -> None:
        """Instruction ``index`` with the interpreter's executor, symbols set to ``env_vals``."""
        instr, syms, names = self.plan.instrs[index]
        env = dict(zip(syms, (int(v) for v in env_vals)))
        ndim = len(self.ir.grid.shape)
        inst = tuple(env[PidSym(a)] for a in range(ndim))
        core = self.ir.grid.core_of(inst) if self.ir.grid.dims else 0
        arrays = {n: self.storage(n, self.arrays[n]) for n in names}
        state = self.states.setdefault(inst, {})
        execute_instruction(self.ir, self.config, instr, arrays, env, state, inst, core)

    def callback(self, kind: int, index: int) -> int:
        """Entry point from compiled code: 0 done, 2 raised (the error is kept in ``error``)."""
        try:
            if kind == 0:
                syms = self.plan.instrs[index][1]
                self.run_instr(index, tuple(self.env[: len(syms)]))
            else:
                op, shape, operands, res = self.plan.ew_calls[index]
                vals = [self.arrays[o] if isinstance(o, str) else np.float32(o) for o in operands]
                with np.errstate(all="ignore"):  # the assignment broadcasts and casts to fp32
                    self.arrays[res][...] = OPS[op].fn(*vals)
        except BaseException as e:  # noqa: BLE001 - re-raised by run() after the call returns
            self.error = e
            return 2
        return 0


def _array_args(
    ir: KernelIR, p: Plan, shared: dict[str, np.ndarray], precise: bool
) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """The driver's array arguments (flat, in the dtypes numba sees) and, by name, the same
    memory in the tensor's shape (what hosted instructions and NumPy call-backs use)."""
    out, by_name = [], {}
    for b in p.args:
        if b.tensor is None:  # scratch
            a = np.empty(b.shape, dtype=b.dtype)
            out.append(a.reshape(-1))
            by_name[b.arg] = a
            continue
        d = ir.tensor(b.tensor)
        root = d.alias_of or d.name
        sd = numerics.storage_dtype(d.dtype, precise)
        if ir.tensor(root).buffer == "shared_hbm":
            a = shared[root]
            if d.alias_of is not None:  # reshape / dtype view of a shared tensor
                a = alias_array(a, d, precise)
        else:  # per-instance tensor: filled by its Alloc inside the compiled code
            a = np.empty(d.shape, dtype=sd)
        if not a.flags.c_contiguous:
            raise Unsupported(f"non-contiguous storage for '{b.tensor}'")
        by_name[b.tensor] = a.view(b.dtype)
        out.append(by_name[b.tensor].reshape(-1))
    return out, by_name


_EXTRA = ("order", "ERR", "ENV", "EPOCH", "CB", "P", "D", "FC", "Z", "SIGCHECK", "SIGCLEAR")


def _kernel_calls(p: Plan, args: list[Any]) -> list[tuple[Any, list[Any]]]:
    """(library kernel, example arguments) for every distinct call the driver makes."""
    named = dict(zip([b.arg for b in p.args] + list(_EXTRA), args))
    return [
        (lib.kernel(spec), [0 if a == "#" else named[a] for a in names]) for spec, names in p.calls
    ]


# Python's pending signal handlers (Ctrl-C) run from compiled loops through the C API; the
# exception a handler raised is cleared there and re-raised as KeyboardInterrupt by run()
_SIGCHECK = ctypes.CFUNCTYPE(ctypes.c_int)(("PyErr_CheckSignals", ctypes.pythonapi))
_SIGCLEAR = ctypes.CFUNCTYPE(None)(("PyErr_Clear", ctypes.pythonapi))


def _no_signal() -> int:
    return 0


def run(
    ir: KernelIR, shared: dict[str, np.ndarray], config: SimConfig, order: list[tuple[int, ...]]
) -> None:
    """Run ``ir`` compiled over the instances in ``order``, updating ``shared`` (parameters and
    the launch's shared HBM tensors, already allocated). Errors are the interpreter's: a
    hosted instruction raises its own; a masked access found out of bounds before an
    instruction runs is handed, with the state at that point, to the interpreter's executor."""
    from .numba_rt import CALLBACK

    p, _ = plan(ir, config)
    assert p is not None
    host = _Host(ir, config, p)
    ndim = len(ir.grid.shape)
    order_arr = np.array(order, dtype=np.int64).reshape(len(order), ndim)
    arrays, host.arrays = _array_args(ir, p, shared, config.precise_fp)
    err = np.zeros(64, dtype=np.int64)
    zero = np.zeros(1, np.float32)
    if p.python:  # plain Python calls back directly; Ctrl-C interrupts it anyway
        cb: Any = host.callback
        sig: tuple[Any, Any] = (_no_signal, _no_signal)
    else:
        cb, sig = CALLBACK(host.callback), (_SIGCHECK, _SIGCLEAR)
    D = p.D.copy()  # the driver writes the symbol-dependent bases
    args = [*arrays, order_arr, err, host.env, host.epoch, cb, p.P, D, p.FC, zero, *sig]
    try:  # load or compile everything before anything runs
        fn = compiled(p, args)
    except (NKIError, Unsupported):
        raise
    except Exception as e:
        if not _purge(p):
            raise
        warnings.warn(
            f"nki-sim: the Numba disk-cache entry of kernel '{ir.name}' in {cache_dir()} could "
            f"not be loaded ({type(e).__name__}: {str(e)[:120]}); deleted it and compiling again",
            CacheRepairedWarning,
            stacklevel=user_stacklevel(),
        )
        fn = compiled(p, args)
    rc = fn(*args)
    if rc == 3:
        raise KeyboardInterrupt
    if rc == 2:
        assert host.error is not None
        raise host.error
    if rc == 1:
        instr, syms, _ = p.instrs[int(err[0])]
        host.run_instr(int(err[0]), tuple(int(v) for v in err[1 : 1 + len(syms)]))
        raise NKIError(  # the executor accepted what compiled code rejected: a backend bug
            f"internal error: the Numba backend stopped at '{instr}' but the interpreter "
            "ran it; please report this kernel",
            code="err_internal",
            loc=instr.loc,
        )


def execute(
    ir: KernelIR, shared: dict[str, np.ndarray], config: SimConfig, sched: Schedule, info: RunInfo
) -> bool:
    """The backend interface (see ``launch.py``): run ``ir`` over the instances of ``sched``
    when this backend should (``config.backend``, the supported subset, the cost model);
    False when the next backend must run it."""
    return maybe_run(ir, shared, config, sched.instances)


def maybe_run(
    ir: KernelIR, shared: dict[str, np.ndarray], config: SimConfig, order: list[tuple[int, ...]]
) -> bool:
    """True when the Numba backend ran the kernel over the instances in ``order``, False when
    the caller must run it on another backend."""
    try:
        use, reason = choose(ir, config)
    except NKIError:
        raise
    except Exception as e:  # e.g. numba missing or broken: the interpreter still runs the kernel
        use, reason = False, f"the Numba backend is unavailable ({type(e).__name__}: {e})"
    if use:
        try:
            run(ir, shared, config, order)
            return True
        except NKIError:
            raise
        except Unsupported as e:
            reason = str(e)
        except Exception as e:  # numba typing / compile failure: never a different result
            reason = f"numba could not compile it ({type(e).__name__}: {str(e)[:200]})"
            _PLANS[id(ir)] = (ir, config.precise_fp, None, reason)
    if config.backend == "numba" and (id(ir), reason) not in _WARNED and reason:
        _WARNED.add((id(ir), reason))
        warnings.warn(
            f"nki-sim: backend='numba' cannot compile kernel '{ir.name}' ({reason}); "
            "running it on the NumPy interpreter",
            BackendFallbackWarning,
            stacklevel=user_stacklevel(),
        )
    return False
