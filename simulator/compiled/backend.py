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
instructions the driver runs as plain Python. A launch compiles for at most a budget
(``numba_budget``: 3 s, ``$NKI_SIM_COMPILE_BUDGET``): what does not fit is hosted for that
launch and compiled at the next ones; ``kernel.last_run.reason`` says so. Everything compiled
is cached in memory and on
disk: generated modules are written to ``$NKI_SIM_CACHE_DIR`` (default ``~/.cache/nki-sim``)
under a hash of their source and compiled with numba's ``cache=True`` next to them, so a new
process loads them instead of compiling again; an entry numba cannot load is deleted and
rebuilt (:class:`CacheRepairedWarning`). Compiled loops poll for Ctrl-C.
``kernel.last_run.backend`` says which backend ran.
"""

from __future__ import annotations

import ctypes
import hashlib
import time
import warnings
from typing import Any

import numpy as np

from nki.errors import NKIError, user_stacklevel
from nki.ir import KernelIR, PidSym
from nki.optable import OPS
from nki.parsing import PARSE_LOCK

from .. import numerics
from ..checks.bounds import check_bounds
from ..config import SimConfig
from ..executors import NUMBA
from ..host import alias_array
from ..instances import RunInfo, Schedule
from ..interpreter import execute_instruction
from . import budget
from . import kernels as lib
from .buffers import tile_buffers
from .codegen import Plan, Unsupported, generate
from .kernels import cache_dir

# The cost model "auto" decides by, in seconds, measured on the 2-core development machine
# (benchmarks/numba_vs_numpy.py and a compile-time sweep over kernel sizes). The interpreter pays
# a fixed cost per instruction execution and vectorised NumPy per element; compiled loops pay
# per element only (they do not vectorise across bfloat16 rounding, so big tiles favour NumPy).
INTERP_PER_EXEC = 50e-6
INTERP_PER_ELEMENT = 0.5e-9
NUMBA_PER_ELEMENT = 2.5e-9
# a cold compile (from runs on the shared 2-core machine): each library kernel not yet built,
# and the driver (none for a plain-Python driver): a base, per instruction and per library
# kernel it calls (numba links their code in and optimises it again with the driver's)
KERNEL_COMPILE = 0.6
DRIVER_BASE = 0.3
DRIVER_PER_INSTR = 0.02
DRIVER_PER_KERNEL = 0.08
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
    with PARSE_LOCK:  # (numba's compiler converts ASTs: one thread at a time)
        if args is not None and not p.python:
            fn.compile(_signature(args))
        elif args is not None:  # plain-Python driver: build each library kernel it will call
            for _, disp, sig in _kernel_calls(p, args):
                disp.compile(sig)
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
    reason = unsupported_reason(ir, config)
    if reason is not None:
        return False, reason
    if config.backend == NUMBA:
        return True, ""
    p, _ = plan(ir, config)
    assert p is not None
    interp, compiled = estimate(p)
    why = f"compiling does not pay off: interpreter ~{interp:.3g} s, compiled ~{compiled:.3g} s"
    if compiled >= interp:
        return False, why
    # looked up only when it can matter (it imports numba)
    setup, compiled = this_launch(interp, compiled, setup_cost(p))
    if compiled + setup < interp:
        return True, ""
    return False, f"{why} + {setup:.3g} s to compile or load"


def this_launch(interp: float, compiled: float, setup: float) -> tuple[float, float]:
    """(compile seconds, run seconds) of this launch on the Numba backend, for a kernel taking
    ``interp`` / ``compiled`` seconds interpreted / fully compiled and ``setup`` seconds of
    compiling: at most the compile budget is spent, and the share of the work whose compile
    does not fit runs hosted at the interpreter's speed."""
    limit = budget.budget()
    if setup <= limit:
        return setup, compiled
    done = limit / setup
    return limit, done * compiled + (1.0 - done) * interp


def estimate(p: Plan) -> tuple[float, float]:
    """(interpreter seconds, compiled seconds) for one launch of the natively compiled part of
    ``p`` (hosted instructions cost the same either way)."""
    interp = p.native_work * INTERP_PER_EXEC + p.native_elements * INTERP_PER_ELEMENT
    return interp, p.native_elements * NUMBA_PER_ELEMENT


def setup_cost(p: Plan) -> float:
    """Seconds of compiling before the kernel runs fully compiled: 0 when compiled in this
    process, else loading or compiling the driver (growing linearly with its instructions) and
    each library kernel not yet built. ``choose`` spends at most the compile budget of it per
    launch (``numba_budget``)."""
    if is_compiled(p):
        return 0.0
    if not p.python and lib.on_disk(_driver_stem(p)):
        return DISK_LOAD  # the driver's cache entry holds its kernels' code
    cost = 0.0
    on_disk = lib.disk_stems()
    for spec in p.kernels:
        stem = f"nki_k_{spec.key}"
        if not lib.built(stem):
            cost += DISK_LOAD if stem in on_disk else KERNEL_COMPILE
    if not p.python:
        cost += driver_estimate(p)
    return cost


def driver_estimate(p: Plan) -> float:
    """Seconds a cold compile of the driver of ``p`` is expected to take (scaled by how fast
    library kernels compiled in this process)."""
    base = DRIVER_BASE + DRIVER_PER_INSTR * len(p.instrs) + DRIVER_PER_KERNEL * len(p.kernels)
    return base * budget.speed(KERNEL_COMPILE)


def left_to_compile(p: Plan) -> int:
    """Library kernels of ``p`` neither built in this process nor in the disk cache, plus one
    for the driver when it is compiled code not yet built (0: the kernel runs fully compiled)."""
    if is_compiled(p):
        return 0
    on_disk = lib.disk_stems()
    cold = [s for s in p.kernels if not lib.built(f"nki_k_{s.key}")]
    n = sum(f"nki_k_{s.key}" not in on_disk for s in cold)
    return n + (not p.python and _driver_stem(p) not in on_disk)


class _Host:
    """Runs hosted instructions (the ones not compiled natively) with the interpreter's executors,
    on the compiled kernel's arrays, with per-instance engine state like the interpreter's."""

    def __init__(self, ir: KernelIR, config: SimConfig, p: Plan) -> None:
        self.ir, self.config, self.plan = ir, config, p
        self.states: dict[tuple[int, ...], dict[str, Any]] = {}
        self.arrays: dict[str, np.ndarray] = {}  # tensors and scratch buffers by name
        self.env = np.zeros(64, dtype=np.int64)  # symbol values at a call back
        self.err = np.zeros(64, dtype=np.int64)  # where compiled code stopped (return code 1)
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
    shared_tiles = tile_buffers(ir, p, precise)
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
            a = shared_tiles.get(d.name)
            a = np.empty(d.shape, dtype=sd) if a is None else a.view(sd).reshape(d.shape)
        if not a.flags.c_contiguous:
            raise Unsupported(f"non-contiguous storage for '{b.tensor}'")
        by_name[b.tensor] = a.view(b.dtype)
        out.append(by_name[b.tensor].reshape(-1))
    return out, by_name


_EXTRA = ("order", "ERR", "ENV", "EPOCH", "CB", "P", "D", "FC", "Z", "SIGCHECK", "SIGCLEAR")


def _kernel_calls(p: Plan, args: list[Any]) -> list[budget.KernelCall]:
    """(library kernel, its dispatcher, numba signature) of every distinct call the driver
    makes with ``args``."""
    named = dict(zip([b.arg for b in p.args] + list(_EXTRA), args))
    out = []
    for spec, names in p.calls:
        sig = _signature([0 if a == "#" else named[a] for a in names])
        out.append((spec, lib.kernel(spec), sig))
    return out


def _python_driver(p: Plan) -> Any:
    """The driver of ``p`` as a plain Python function (kept in memory, not in the cache)."""
    for spec in p.kernels:
        lib.kernel(spec)  # the driver imports its kernels' modules by name
    ns: dict[str, Any] = {}
    with PARSE_LOCK:
        code = compile(p.py_source, f"<nki-sim driver {p.key}>", "exec")
    exec(code, ns)
    return ns[p.func]


def prepare(
    ir: KernelIR, config: SimConfig, p: Plan, args: list[Any], start: float
) -> tuple[Plan, Any, bool, str]:
    """Build what the launch of ``p`` with ``args`` runs, compiling within the compile budget
    counted from ``start`` (``numba_budget``): (the plan to run, its driver, whether the driver
    is plain Python, the note for ``RunInfo.reason``). The plan is ``p``, or a version of it
    hosting the instructions whose library kernels were left for the next launches."""
    fn = _FUNCS.get(_source_key(p))
    if fn is not None:
        return p, fn, p.python, ""
    if not p.python and lib.on_disk(_driver_stem(p)):
        return p, compiled(p, args), False, ""  # its cache entry links its kernels in
    limit = budget.budget()
    built = budget.build_kernels(_kernel_calls(p, args), p.uses, limit, start, KERNEL_COMPILE)
    if built.deferred:
        try:
            part = generate(ir, config, p.func, built.deferred)
        except Unsupported:  # hosting cannot replace them here: build them all now
            calls = _kernel_calls(p, args)
            budget.build_kernels(calls, p.uses, float("inf"), start, KERNEL_COMPILE)
        else:
            hosted = len(part.hosted_ops) - len(p.hosted_ops)
            n = len(built.deferred)
            note = budget.hosted_note(limit, hosted, len(p.instrs), n, not p.python)
            return part, _python_driver(part), True, note
    if p.python:
        return p, compiled(p, args), True, ""
    est = driver_estimate(p)
    if time.perf_counter() - start + est <= limit:
        return p, compiled(p, args), False, ""
    return p, _python_driver(p), True, budget.driver_note(limit, est)


# Python's pending signal handlers (Ctrl-C) run from compiled loops through the C API; the
# exception a handler raised is cleared there and re-raised as KeyboardInterrupt by run()
_SIGCHECK = ctypes.CFUNCTYPE(ctypes.c_int)(("PyErr_CheckSignals", ctypes.pythonapi))
_SIGCLEAR = ctypes.CFUNCTYPE(None)(("PyErr_Clear", ctypes.pythonapi))


def _no_signal() -> int:
    return 0


def _launch_args(
    ir: KernelIR,
    config: SimConfig,
    p: Plan,
    shared: dict[str, np.ndarray],
    order: np.ndarray,
    python: bool,
) -> tuple[_Host, list[Any]]:
    """The host of ``p``'s call-backs and the driver's arguments for one launch (``python``:
    the driver runs as plain Python and calls back directly; Ctrl-C interrupts it anyway)."""
    from .rt import CALLBACK

    host = _Host(ir, config, p)
    arrays, host.arrays = _array_args(ir, p, shared, config.precise_fp)
    zero = np.zeros(1, np.float32)
    if python:
        cb: Any = host.callback
        sig: tuple[Any, Any] = (_no_signal, _no_signal)
    else:
        cb, sig = CALLBACK(host.callback), (_SIGCHECK, _SIGCLEAR)
    D = p.D.copy()  # the driver writes the symbol-dependent bases
    args = [*arrays, order, host.err, host.env, host.epoch, cb, p.P, D, p.FC, zero, *sig]
    return host, args


def run(
    ir: KernelIR, shared: dict[str, np.ndarray], config: SimConfig, order: list[tuple[int, ...]]
) -> str:
    """Run ``ir`` compiled over the instances in ``order``, updating ``shared`` (parameters and
    the launch's shared HBM tensors, already allocated); returns the note for
    ``RunInfo.reason`` (empty when the kernel ran fully compiled). Errors are the
    interpreter's: a hosted instruction raises its own; a masked access found out of bounds
    before an instruction runs is handed, with the state at that point, to the interpreter's
    executor."""
    start = time.perf_counter()
    p, _ = plan(ir, config)
    assert p is not None
    ndim = len(ir.grid.shape)
    order_arr = np.array(order, dtype=np.int64).reshape(len(order), ndim)
    host, args = _launch_args(ir, config, p, shared, order_arr, p.python)
    try:  # load or compile (within the budget) everything before anything runs
        run_p, fn, python, note = prepare(ir, config, p, args, start)
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
        run_p, fn, python, note = prepare(ir, config, p, args, time.perf_counter())
    if run_p is not p or python != p.python:
        host, args = _launch_args(ir, config, run_p, shared, order_arr, python)
    rc = fn(*args)
    if rc == 3:
        raise KeyboardInterrupt
    if rc == 2:
        assert host.error is not None
        raise host.error
    if rc == 1:
        err = host.err
        instr, syms, _ = run_p.instrs[int(err[0])]
        host.run_instr(int(err[0]), tuple(int(v) for v in err[1 : 1 + len(syms)]))
        raise NKIError(  # the executor accepted what compiled code rejected: a backend bug
            f"internal error: the Numba backend stopped at '{instr}' but the interpreter "
            "ran it; please report this kernel",
            code="err_internal",
            loc=instr.loc,
        )
    return note


def execute(
    ir: KernelIR, shared: dict[str, np.ndarray], config: SimConfig, sched: Schedule, info: RunInfo
) -> bool:
    """The backend interface (see ``launch.py``): run ``ir`` over the instances of ``sched``
    when this backend should (``config.backend``, the supported subset, the cost model);
    False when the next backend must run it."""
    return maybe_run(ir, shared, config, sched.instances, info)


def maybe_run(
    ir: KernelIR,
    shared: dict[str, np.ndarray],
    config: SimConfig,
    order: list[tuple[int, ...]],
    info: RunInfo | None = None,
) -> bool:
    """True when the Numba backend ran the kernel over the instances in ``order``, False when
    the caller must run it on another backend. A launch that hosted instructions or ran its
    driver as plain Python for the compile budget says so in ``info.reason``."""
    try:
        use, reason = choose(ir, config)
    except NKIError:
        raise
    except Exception as e:  # e.g. numba missing or broken: the interpreter still runs the kernel
        use, reason = False, f"the Numba backend is unavailable ({type(e).__name__}: {e})"
    if use:
        try:
            note = run(ir, shared, config, order)
            if note and info is not None:
                info.reason = "; ".join(r for r in (info.reason, note) if r)
            return True
        except NKIError:
            raise
        except Unsupported as e:
            reason = str(e)
        except Exception as e:  # numba typing / compile failure: never a different result
            reason = f"numba could not compile it ({type(e).__name__}: {str(e)[:200]})"
            _PLANS[id(ir)] = (ir, config.precise_fp, None, reason)
    if config.backend == NUMBA and (id(ir), reason) not in _WARNED and reason:
        _WARNED.add((id(ir), reason))
        warnings.warn(
            f"nki-sim: backend='numba' cannot compile kernel '{ir.name}' ({reason}); "
            "running it on the NumPy interpreter",
            BackendFallbackWarning,
            stacklevel=user_stacklevel(),
        )
    return False
