"""``torch.compile(model, backend="nki")``: run a PyTorch model's ATen operations as NKI
kernels on the simulator, with CPU fallback for the rest.

Dynamo captures the graph, ``aot_autograd`` lowers it to ATen forward and backward graphs,
and each graph is run node by node: an op whose registry entry accepts the call (its guard
checks shapes and dtypes) runs as an NKI kernel from :mod:`nki.kernels` (or a user kernel
registered with :func:`register_kernel`, which overrides the built-in one); metadata-only ops
(views, transposes as strides) stay torch views; everything else runs eagerly on the CPU.
Chains of float element-wise ops run as one fused kernel launch each
(:mod:`frontends.torch_fusion`; ``init_backend(fuse=False)`` turns it off); what each node is,
the fused groups and the order of the steps are decided once per graph (:class:`_Plan`). Each
compiled graph keeps a :class:`GraphReport` (which ops ran as kernels, which fell back and why,
counts, simulated time per kernel), printed when ``log_level="INFO"``.

Dynamic shapes: graphs compiled with symbolic sizes (``dynamic=True``, or after a recompile in
the default mode) run with the sizes of each call; a kernel's result gets the dim order the
graph's fake value has (never its compile-time sizes). Integer results widen back to int64
where the graph expects it (kernels compute int32: NKI has no 64-bit types).

Traced kernel IR is cached across processes in ``cache_dir`` (one pickle per kernel, keyed by
the kernel's name and source file; inside it, by shapes, dtypes and target)."""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import operator
import os
import pickle
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

import nki.affine
import nki.ir
from nki.jit import Kernel, Launch

from . import (  # noqa: F401  (their @builtin adapters fill the registry)
    torch_attention,
    torch_distributed,
    torch_ops,
    torch_ops_elementwise,
    torch_ops_index,
    torch_ops_nn,
)
from . import torch_fusion as fusion
from .common import configured
from .gc_window import new_objects_only
from .torch_estimates import device_us
from .torch_fusion_rules import schema_name
from .torch_layout import conform, hint
from .torch_registry import (
    NKI_CUSTOM_OPS,
    Guard,
    builtin_entry,
    kernel_name,
    register_kernel,
    registry_table,
    unregister_kernel,
    user_entry,
)
from .torch_report import REPORTS, GraphReport, reports
from .torch_tensors import launch_traced

log = logging.getLogger("nki.torch_backend")

__all__ = [
    "GraphReport",
    "Guard",
    "init_backend",
    "register_kernel",
    "unregister_kernel",
    "registry_table",
    "reports",
    "on_cpu",
]


def _full_name(op: str) -> str:
    return op if "::" in op else f"aten::{op}"


@dataclass
class _Options:
    cache_dir: str | None = None
    target: str | None = None
    checks: str | None = None
    log_level: int = logging.WARNING
    rank: int | None = None
    world_size: int | None = None
    cpu_ops: frozenset[str] = frozenset()
    fuse: bool = True


OPTIONS = _Options()


def init_backend(
    cache_dir: str | None = None,
    log_level: str | int = "WARNING",
    target: str | None = None,
    checks: str | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    cpu_ops: tuple[str, ...] = (),
    fuse: bool = True,
) -> None:
    """Options of the ``"nki"`` torch.compile backend (process-wide).

    ``cache_dir``: directory for traced kernel IR shared across processes (default: none, IR
    cached in memory only). ``log_level``: ``"INFO"`` prints each graph's report after its
    first run. ``target``: ``trn1`` / ``trn2`` / ``trn3`` (default: the simulator's).
    ``checks``: ``none`` / ``static`` / ``full`` for every kernel launch (default: the
    simulator's, ``NKI_SIM_CHECKS``). ``rank`` / ``world_size``: this process's place in a
    tensor-parallel group (default: the initialised ``torch.distributed`` process group's, else
    a single process); collectives in compiled graphs exchange data through that group.
    ``cpu_ops``: ATen ops (``"aten::cat"``) always left to the CPU. ``fuse``: run chains of
    element-wise ops as one fused kernel launch each (default on; graphs compiled after the
    call follow it)."""
    if cache_dir is not None:
        os.makedirs(cache_dir, exist_ok=True)
    if (rank is None) != (world_size is None) or (
        rank is not None and not 0 <= rank < world_size  # type: ignore[operator]
    ):
        raise ValueError(f"init_backend: rank {rank} and world_size {world_size} do not fit")
    OPTIONS.cache_dir = cache_dir
    OPTIONS.target = target
    OPTIONS.checks = checks
    OPTIONS.rank, OPTIONS.world_size = rank, world_size
    OPTIONS.cpu_ops = frozenset(_full_name(o) for o in cpu_ops)
    OPTIONS.fuse = bool(fuse)
    level = logging.getLevelName(log_level) if isinstance(log_level, str) else log_level
    if not isinstance(level, int):
        raise ValueError(f"init_backend: unknown log_level {log_level!r}")
    OPTIONS.log_level = level
    log.setLevel(level)
    if not log.handlers:
        log.addHandler(logging.StreamHandler())


# --------------------------------------------------------------------------------------------
# Kernel IR cache across processes
# --------------------------------------------------------------------------------------------

_loaded: dict[tuple[str, int], str] = {}  # (cache_dir, id(kernel)) -> file


def _cache_file(k: Kernel) -> str:
    h = hashlib.sha256()
    for f in (inspect.getsourcefile(k.fn), nki.ir.__file__, nki.affine.__file__):
        with open(f, "rb") as fh:
            h.update(fh.read())
    h.update(k.fn.__qualname__.encode())
    return os.path.join(OPTIONS.cache_dir or "", f"{k.fn.__name__}-{h.hexdigest()[:16]}.pkl")


def _load_cache(k: Kernel) -> None:
    if OPTIONS.cache_dir is None:
        return
    key = (OPTIONS.cache_dir, id(k))
    if key in _loaded:
        return
    path = _loaded[key] = _cache_file(k)
    try:
        with open(path, "rb") as fh:
            stored = pickle.load(fh)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError):
        return
    for sig, ir in stored.items():
        k._cache.setdefault(sig, ir)


def _save_cache(k: Kernel) -> None:
    path = _loaded.get((OPTIONS.cache_dir or "", id(k)))
    if path is None:
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        pickle.dump(dict(k._cache), fh)
    os.replace(tmp, path)  # atomic: concurrent processes never read a half-written file


# --------------------------------------------------------------------------------------------
# Running a graph
# --------------------------------------------------------------------------------------------

# ATen ops that only change metadata (or copy for layout), and allocations without values: left
# to torch, reported as views (so are ops whose results have no elements)
VIEW_OPS = {
    f"aten::{n}"
    for n in (
        "view _unsafe_view reshape t transpose permute expand unsqueeze squeeze select slice "
        "detach alias as_strided split split_with_sizes unbind clone contiguous "
        "select_backward slice_backward empty empty_like empty_strided empty_permuted new_empty "
        "new_empty_strided view_as_real"
    ).split()
} | {
    f"_c10d_functional::{n}"
    for n in (
        "wait_tensor"  # waits for a collective that already ran synchronously
    ).split()
}


# called after every kernel launch, in the launching thread, with the kernel's name and its
# estimated device microseconds (None where the cost model has no estimate); the model-level
# runtimes (frontends.device_time) account per-thread device time with it
LAUNCH_HOOKS: list[Callable[[str, float | None], None]] = []


class _Run:
    """Launches kernels for one graph and times them into its report."""

    def __init__(self, report: GraphReport) -> None:
        self.report = report
        self.used: list[str] = []

    def __call__(self, kernel: Any, /, *args: Any, **kwargs: Any) -> Any:
        k = kernel
        name = kernel_name(k)
        if isinstance(k, (Kernel, Launch)):
            lk = k if isinstance(k, Launch) else Launch(k, k.default_grid)
            base = lk.kernel
            _load_cache(base)
            traced = len(base._cache)  # configure() copies share this dict
            runner = Launch(configured(base, OPTIONS.target, OPTIONS.checks), lk.grid)
            t0 = time.perf_counter()
            res, ir = launch_traced(runner, args, kwargs)
            dt = time.perf_counter() - t0
            if len(base._cache) != traced:
                _save_cache(base)
            us = device_us(runner, ir, args, kwargs, now=bool(LAUNCH_HOOKS))
            self.report.add_device_us(name, us)
            for hook in LAUNCH_HOOKS:  # (with hooks, ``us`` is the number)
                hook(name, us)  # type: ignore[arg-type]
        else:  # a frontends.torch custom op: its implementation launches the NKI kernel
            t0 = time.perf_counter()
            res = k(*args, **kwargs)
            dt = time.perf_counter() - t0
        self.account(name, dt)
        return res

    def account(self, name: str, seconds: float, device_us: float | None = None) -> None:
        """Count one launch of ``name`` (also used for collectives, which time themselves)."""
        self.report.kernel_seconds[name] += seconds
        self.report.kernel_calls[name] += 1
        self.report.add_device_us(name, device_us)
        self.used.append(name)


def _empty(val: Any) -> bool:
    """True when every tensor the node produces has no elements (nothing to compute)."""
    vals = val if isinstance(val, (tuple, list)) else [val]
    ts = [v for v in vals if isinstance(v, torch.Tensor)]
    return bool(ts) and all(any(hint(s) == 0 for s in t.shape) for t in ts)


def _alone(name: str) -> bool:
    """An op that never runs inside a fused launch: kept on the CPU or with a user kernel."""
    return name in OPTIONS.cpu_ops or user_entry(name) is not None


def _copy_cat(n: torch.fx.Node, name: str) -> bool:
    """A ``cat`` whose other tensors are all legacy empty 1-D tensors (a KV cache's start):
    a copy of its one tensor, left to torch as a layout copy."""
    if name != "aten::cat" or not n.args or not isinstance(n.args[0], (list, tuple)):
        return False
    vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in n.args[0]]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        return False
    return sum(not (v.dim() == 1 and hint(v.shape[0]) == 0) for v in vals) == 1


def _grad_free(fn: Callable, /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with autograd off (``no_grad`` is entered only when it is on)."""
    if not torch.is_grad_enabled():
        return fn(*args, **kwargs)
    with torch.no_grad():
        return fn(*args, **kwargs)


def _run_node(n: torch.fx.Node, name: str, args: tuple, kwargs: dict, report: GraphReport) -> Any:
    """One ATen node of a graph: as an NKI kernel where a registry entry accepts it, else on
    the CPU, recorded in ``report``."""
    if name in OPTIONS.cpu_ops or _on_cpu(n):
        report.record(name, "cpu", reason="kept on the CPU")
        return n.target(*args, **kwargs)
    if name in NKI_CUSTOM_OPS:  # a frontends.torch custom op: its impl runs the NKI kernel
        t0 = time.perf_counter()
        res = n.target(*args, **kwargs)
        report.record(name, "nki", [name], s=time.perf_counter() - t0)
        return res
    notes: list[str] = []
    t0 = time.perf_counter()
    user = user_entry(name)
    if user is not None:
        run = _Run(report)
        try:
            res = _grad_free(user.adapter, run, *args, **kwargs)
        except Guard as g:
            notes.append(f"user kernel {user.kernels[0]} refused: {g}")
        except Exception as e:  # noqa: BLE001 (a failing user kernel falls back, recorded)
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            notes.append(f"user kernel {user.kernels[0]} failed: {type(e).__name__}: {first}")
        else:
            report.record(name, "nki", run.used, s=time.perf_counter() - t0)
            return conform(res, n.meta.get("val"))
    entry = builtin_entry(name)
    if entry is None:
        notes.append("no kernel")
    else:
        run = _Run(report)
        try:
            res = _grad_free(entry.adapter, run, *args, **kwargs)
        except Guard as g:
            notes.append(f"guard failed: {g}")
        else:
            reason = "; ".join(notes)
            report.record(name, "nki", run.used, reason, s=time.perf_counter() - t0)
            return conform(res, n.meta.get("val"))
    report.record(name, "cpu", reason="; ".join(notes))
    return n.target(*args, **kwargs)


# what the runner does with a call_function node, decided once per graph
_PLAIN, _VIEW, _ATEN = 0, 1, 2
_GROUPS = fusion.STEPS

# a plain or view node's call: (function, its positional arguments, the (position, node) pairs
# filled from the values computed, its keyword arguments)
_Call = tuple[Callable, tuple, list[tuple[int, torch.fx.Node]], dict]


def _direct_call(n: Any, kind: dict) -> _Call | None:
    """How a plain or view node is called, when its only inputs are nodes passed whole as
    positional arguments (None otherwise: it runs through ``_Plan._node``)."""
    if isinstance(n, _GROUPS) or kind.get(n, (_ATEN,))[0] == _ATEN:
        return None
    slots = [(j, a) for j, a in enumerate(n.args) if isinstance(a, torch.fx.Node)]
    every: list[torch.fx.Node] = []
    torch.fx.node.map_arg((n.args, n.kwargs), every.append)
    if len(every) != len(slots):
        return None  # (a node inside a list or a keyword argument)
    return n.target, tuple(n.args), slots, dict(n.kwargs)


class _Plan:
    """A compiled graph as a list of steps, decided once: each node's kind (plain Python call,
    view, ATen op) and its op name, the fused groups (:mod:`frontends.torch_fusion`) in an
    order where every step's inputs are computed before it, and after which step each value is
    last used (freed then)."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.gm = gm
        nodes = list(gm.graph.nodes)
        self.kind: dict[torch.fx.Node, tuple[int, str | None]] = {}
        specs = {}
        for n in nodes:
            if n.op != "call_function":
                continue
            torch_attention.drop_unread_lse(n)  # (an inference graph never reads it)
            name = None if n.target is operator.getitem else schema_name(n.target)
            if name is None:
                self.kind[n] = (_PLAIN, None)
                continue
            empty = _empty(n.meta.get("val")) or _copy_cat(n, name)
            self.kind[n] = (_VIEW if name in VIEW_OPS or empty else _ATEN, name)
            # (a view of columns, a broadcast or a slice's gradient may join a fused chain)
            if OPTIONS.fuse and not empty and not _on_cpu(n) and not _alone(name):
                spec = fusion.fusable(n, name)
                if spec is not None:
                    specs[n] = spec
        mms = {n for n in nodes if self._grouped(n, "aten::mm") and n not in specs}
        chains: list[Any] = fusion.find_groups(nodes, specs)
        grouped = {m for g in chains for m in g.members}
        cats = {n for n in nodes if self._grouped(n, "aten::cat") and n not in grouped}
        chains = fusion.join_cats(chains, fusion.find_cats(nodes, cats))
        groups = chains + fusion.find_matmuls(nodes, mms)
        # (the schedule refuses steps that make a circle of dependencies: then the next try)
        tries = (fusion.with_epilogues(nodes, groups, mms), groups, chains)
        self.steps = next(filter(None, (fusion.schedule(nodes, t) for t in tries)), nodes)
        last: dict[torch.fx.Node, int] = {}
        for i, st in enumerate(self.steps):
            for m in st.members if isinstance(st, _GROUPS) else [st]:
                for a in m.all_input_nodes:
                    last[a] = i
        outs = {a for n in nodes if n.op == "output" for a in n.all_input_nodes}
        self.free: list[list[torch.fx.Node]] = [[] for _ in self.steps]
        for a, i in last.items():
            if a not in outs:
                self.free[i].append(a)
        # plain and view steps called directly, and the views' records counted once per run
        self.calls = [_direct_call(st, self.kind) for st in self.steps]
        self.views = Counter(
            self.kind[st][1]
            for st, c in zip(self.steps, self.calls)
            if c is not None and self.kind[st][0] == _VIEW
        )
        self.names: dict[int, tuple[tuple[str, int], ...]] = {}  # id(group) -> ``_group``'s

    def _grouped(self, n: torch.fx.Node, name: str) -> bool:
        """``n`` is an ATen ``name`` node that may run in a launch with others."""
        alone = _on_cpu(n) or _alone(name)
        return self.kind.get(n) == (_ATEN, name) and OPTIONS.fuse and not alone

    def run(self, args: tuple, report: GraphReport) -> Any:
        env: dict[torch.fx.Node, Any] = {}
        it = iter(args)
        for i, (st, call) in enumerate(zip(self.steps, self.calls)):
            if call is not None:
                fn, given, slots, kwargs = call
                a = list(given)
                for j, x in slots:
                    a[j] = env[x]
                env[st] = fn(*a, **kwargs)
            elif isinstance(st, _GROUPS):
                self._group(st, env, report)
            elif st.op == "placeholder":
                env[st] = next(it)
            elif st.op == "get_attr":
                env[st] = operator.attrgetter(st.target)(self.gm)
            elif st.op == "output":
                for name, k in self.views.items():
                    report.record(name, "view", count=k)
                return torch.fx.node.map_arg(st.args[0], env.__getitem__)
            else:
                env[st] = self._node(st, env, report)
            for a in self.free[i]:
                env.pop(a, None)  # (a value inside a fused group was never stored)
        return None

    def _node(self, n: torch.fx.Node, env: dict, report: GraphReport) -> Any:
        args = torch.fx.node.map_arg(n.args, env.__getitem__)
        kwargs = torch.fx.node.map_arg(n.kwargs, env.__getitem__)
        kind, name = self.kind[n]
        if kind == _PLAIN:
            return n.target(*args, **kwargs)
        if kind == _VIEW:
            report.record(name, "view")
            return n.target(*args, **kwargs)
        return _run_node(n, name, args, kwargs, report)  # type: ignore[arg-type]

    def _group(self, g: Any, env: dict, report: GraphReport) -> None:
        names = self.names.get(id(g))
        if names is None:  # (each op's name with its count in the group, found once)
            names = self.names[id(g)] = tuple(Counter(g.names).items())
        if not any(_alone(nm) for nm, _ in names):
            run = _Run(report)
            t0 = time.perf_counter()
            try:
                res = _grad_free(fusion.run_step, run, g, env)
            except Guard:
                pass  # the nodes run one by one, each under its own guard
            else:
                share = (time.perf_counter() - t0) / len(g.members)
                env.update((m, conform(r, m.meta.get("val"))) for m, r in zip(g.outputs, res))
                for nm, k in names:
                    report.record(nm, "nki", run.used, s=share * k, count=k)
                for nm in getattr(g, "view_names", ()):
                    report.record(nm, "view")
                return
        for m in getattr(g, "parts", None) or g.members:  # (parts of a launch: on their own)
            if isinstance(m, _GROUPS):
                self._group(m, env, report)
            else:
                env[m] = self._node(m, env, report)


# --------------------------------------------------------------------------------------------
# Keeping code on the CPU
# --------------------------------------------------------------------------------------------

_CPU_TAG = "nki_cpu"


def on_cpu(fn: Callable) -> Callable:
    """Run a function or module call on the CPU inside a compiled model: ``model.head =
    on_cpu(model.head)`` or ``@on_cpu``. The call stays in the graph (no graph break); every ATen
    op it produces is reported as ``cpu`` with the reason ``kept on the CPU``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with torch.fx.traceback.annotate({_CPU_TAG: True}):
            return fn(*args, **kwargs)

    return wrapper


def _on_cpu(n: torch.fx.Node) -> bool:
    return bool((n.meta.get("custom") or {}).get(_CPU_TAG))


def _describe(example_inputs: list) -> str:
    """The graph's inputs: tensor shapes (symbolic sizes by name) and dtypes, SymInts."""
    parts = []
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            dims = ", ".join(str(s) for s in x.shape)
            parts.append(f"{str(x.dtype).replace('torch.', '')}[{dims}]")
        elif isinstance(x, torch.SymInt):
            parts.append(str(x))
    return " ".join(parts)


def _compiler(kind: str) -> Callable:
    def compile_graph(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        from functorch.compile import make_boxed_func

        count = sum(r.name.startswith(kind) for r in REPORTS)
        rank, world = torch_distributed.rank_and_size()  # (rank None in a single process)
        rank = OPTIONS.rank if OPTIONS.rank is not None else (rank if world > 1 else None)
        report = GraphReport(f"{kind} graph {count}", _describe(example_inputs), rank)
        REPORTS.append(report)

        plan: list[_Plan] = []

        def run(*args: Any) -> Any:
            with new_objects_only(report.runs == 0):  # (the first run plans and traces)
                if not plan:
                    plan.append(_Plan(gm))
                out = plan[0].run(args, report)
            report.runs += 1
            if report.runs == 1:
                log.info("%s", report)
            return out

        return make_boxed_func(run)

    return compile_graph


def _aot(gm: torch.fx.GraphModule, example_inputs: list, fw: Callable, bw: Callable) -> Callable:
    """``aot_autograd(fw_compiler=fw, bw_compiler=bw)(gm, example_inputs)``. Torch's wrapper
    imports the inductor (its scheduler and IR: about 0.07 s of a process's first compile) for
    one thing, the debug log of ``TORCH_COMPILE_DEBUG=1``; without that log, and for flat
    inputs (nested ones need the wrapper's flattening), ``aot_module_simplified`` is called as
    the wrapper calls it."""
    from torch._dynamo.backends.common import aot_autograd

    nested = any(isinstance(x, (list, tuple, dict)) for x in example_inputs)
    if nested or os.environ.get("TORCH_COMPILE_DEBUG", "0") == "1":
        return aot_autograd(fw_compiler=fw, bw_compiler=bw)(gm, example_inputs)
    from torch._dynamo import disable
    from torch._functorch.aot_autograd import aot_module_simplified

    def bw_disabled(*args: Any, **kwargs: Any) -> Any:
        # neither the backward compiler nor the backward graph it returns is traced by Dynamo
        compiled = disable(bw, reason="do not trace backward compiler function")(*args, **kwargs)
        return disable(compiled, reason="do not trace generated backwards pass")

    cg = aot_module_simplified(
        gm, example_inputs, fw_compiler=fw, bw_compiler=bw_disabled, inference_compiler=fw
    )
    return disable(cg, reason="do not trace AOT-compiled graph")


def nki_backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """The ``"nki"`` torch.compile backend (aot_autograd with NKI-kernel graph runners)."""
    with new_objects_only():
        torch_ops_nn.rewrite_rms_norm(gm)  # keep rms_norm whole for the fused kernels
        torch_attention.rewrite_sdpa(gm)  # and attention, whatever its mask or KV heads
        return _aot(gm, example_inputs, _compiler("forward"), _compiler("backward"))


def _register() -> None:
    from torch._dynamo import list_backends, register_backend

    if "nki" not in list_backends(exclude_tags=()):
        register_backend(name="nki")(nki_backend)


_register()
