"""``torch.compile(model, backend="nki")``: run a PyTorch model's ATen operations as NKI
kernels on the simulator, with CPU fallback for the rest.

Dynamo captures the graph, ``aot_autograd`` lowers it to ATen forward and backward graphs,
and each graph is run node by node: an op whose registry entry accepts the call (its guard
checks shapes and dtypes) runs as an NKI kernel from :mod:`nki.kernels` (or a user kernel
registered with :func:`register_kernel`, which overrides the built-in one); metadata-only ops
(views, transposes as strides) stay torch views; everything else runs eagerly on the CPU.
Each compiled graph keeps a :class:`GraphReport` (which ops ran as kernels, which fell back and
why, counts, simulated time per kernel), printed when ``log_level="INFO"``.

Traced kernel IR is cached across processes in ``cache_dir`` (one pickle per kernel, keyed by
the kernel's name and source file; inside it, by shapes, dtypes and target)."""

from __future__ import annotations

import hashlib
import inspect
import logging
import operator
import os
import pickle
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

import nki.ir
from nki.errors import NKIError
from nki.estimates import estimate
from nki.jit import Kernel, Launch

from . import torch_ops, torch_ops_nn  # noqa: F401  (their @builtin adapters fill the registry)
from .torch_registry import (
    NKI_CUSTOM_OPS,
    Guard,
    builtin_entry,
    kernel_name,
    lookup,
    register_kernel,
    registry_table,
    unregister_kernel,
)

log = logging.getLogger("nki.torch_backend")

__all__ = [
    "GraphReport",
    "Guard",
    "init_backend",
    "register_kernel",
    "unregister_kernel",
    "registry_table",
    "reports",
]


@dataclass
class _Options:
    cache_dir: str | None = None
    target: str | None = None
    checks: str | None = None
    log_level: int = logging.WARNING


OPTIONS = _Options()


def init_backend(
    cache_dir: str | None = None,
    log_level: str | int = "WARNING",
    target: str | None = None,
    checks: str | None = None,
) -> None:
    """Options of the ``"nki"`` torch.compile backend (process-wide).

    ``cache_dir``: directory for traced kernel IR shared across processes (default: none, IR
    cached in memory only). ``log_level``: ``"INFO"`` prints each graph's report after its
    first run. ``target``: ``trn1`` / ``trn2`` / ``trn3`` (default: the simulator's).
    ``checks``: ``none`` / ``static`` / ``full`` for every kernel launch (default: the
    simulator's, ``NKI_SIM_CHECKS``)."""
    if cache_dir is not None:
        os.makedirs(cache_dir, exist_ok=True)
    OPTIONS.cache_dir = cache_dir
    OPTIONS.target = target
    OPTIONS.checks = checks
    level = logging.getLevelName(log_level) if isinstance(log_level, str) else log_level
    if not isinstance(level, int):
        raise ValueError(f"init_backend: unknown log_level {log_level!r}")
    OPTIONS.log_level = level
    log.setLevel(level)
    if not log.handlers:
        log.addHandler(logging.StreamHandler())


# --------------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------------


@dataclass
class OpStats:
    """What happened to one ATen op of a graph across its runs."""

    op: str
    status: str  # "nki", "cpu" or "view"
    kernels: tuple[str, ...] = ()
    reason: str = ""
    count: int = 0
    seconds: float = 0.0


@dataclass
class GraphReport:
    """Per compiled graph: for every ATen op, whether it ran as NKI kernels (which, simulated
    seconds) or on the CPU (and why: ``no kernel`` or ``guard failed: ...``), with counts."""

    name: str
    ops: dict[tuple[str, str, str], OpStats] = field(default_factory=dict)
    kernel_seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    kernel_calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # estimated device time (nki.estimate, the cost model), summed over launches
    kernel_device_us: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    runs: int = 0

    def record(self, op: str, status: str, kernels: tuple = (), reason: str = "", s=0.0) -> None:
        key = (op, status, reason)
        st = self.ops.get(key)
        if st is None:
            st = self.ops[key] = OpStats(op, status, tuple(kernels), reason)
        st.count += 1
        st.seconds += s

    def ran_as_nki(self, op: str) -> bool:
        """True if every call of ``op`` (``"aten::mm"``) in this graph ran as NKI kernels."""
        sts = [s for s in self.ops.values() if s.op == op]
        return bool(sts) and all(s.status == "nki" for s in sts)

    @property
    def nki_ops(self) -> set[str]:
        return {s.op for s in self.ops.values() if s.status == "nki"}

    @property
    def fallbacks(self) -> dict[str, str]:
        """op -> reason, for ops that ran on the CPU."""
        return {s.op: s.reason for s in self.ops.values() if s.status == "cpu"}

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for s in self.ops.values():
            out[s.status] += s.count
        return dict(out)

    def __str__(self) -> str:
        c = self.counts()
        lines = [
            f"nki backend report: {self.name} ({self.runs} run(s)): "
            f"{c.get('nki', 0)} op call(s) as NKI kernels, {c.get('cpu', 0)} on the CPU, "
            f"{c.get('view', 0)} views"
        ]
        rows = sorted(self.ops.values(), key=lambda s: (s.status, s.op))
        width = max((len(s.op) for s in rows), default=0)
        for s in rows:
            what = {"nki": ", ".join(s.kernels), "cpu": s.reason, "view": ""}[s.status]
            t = f"{s.seconds * 1e3:8.1f} ms  " if s.status == "nki" else " " * 13
            lines.append(f"  {s.status:4s} {s.op:{width}s} x{s.count:<4d} {t}{what}".rstrip())
        for k in sorted(self.kernel_seconds):
            dev = self.kernel_device_us.get(k)
            est = f", {dev:.1f} us estimated on device" if dev is not None else ""
            lines.append(
                f"  kernel {k}: {self.kernel_calls[k]} launch(es), "
                f"{self.kernel_seconds[k] * 1e3:.1f} ms simulated{est}"
            )
        return "\n".join(lines)


_REPORTS: list[GraphReport] = []


def reports() -> list[GraphReport]:
    """The reports of every graph compiled by the backend in this process (oldest first)."""
    return list(_REPORTS)


# --------------------------------------------------------------------------------------------
# Kernel IR cache across processes
# --------------------------------------------------------------------------------------------

_loaded: dict[tuple[str, int], str] = {}  # (cache_dir, id(kernel)) -> file


def _cache_file(k: Kernel) -> str:
    h = hashlib.sha256()
    for f in (inspect.getsourcefile(k.fn), nki.ir.__file__):
        with open(f, "rb") as fh:
            h.update(fh.read())
    h.update(k.fn.__qualname__.encode())
    return os.path.join(OPTIONS.cache_dir or "", f"{k.fn.__name__}-{h.hexdigest()[:16]}.pkl")


def _load_cache(k: Kernel) -> None:
    key = (OPTIONS.cache_dir or "", id(k))
    if OPTIONS.cache_dir is None or key in _loaded:
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

# ATen ops that only change metadata (or copy for layout): left to torch, reported as views
VIEW_OPS = {
    f"aten::{n}"
    for n in (
        "view _unsafe_view reshape t transpose permute expand unsqueeze squeeze select slice "
        "detach alias as_strided split split_with_sizes unbind clone contiguous "
        "select_backward slice_backward"
    ).split()
}


_ESTIMATES: dict[int, tuple[Any, float | None]] = {}  # id(IR) -> (IR kept alive, latency us)


def _device_us(runner: Any, args: tuple, kwargs: dict) -> float | None:
    """The cost model's estimated device latency of the launch just run (``nki.estimate``),
    once per traced IR; None where the cost model cannot estimate the kernel."""
    k = runner.kernel if isinstance(runner, Launch) else runner
    ir = k.last_ir
    hit = _ESTIMATES.get(id(ir))
    if hit is not None and hit[0] is ir:
        return hit[1]
    try:
        us: float | None = estimate(runner)(*args, **kwargs).latency_us
    except (NKIError, NotImplementedError):
        us = None
    _ESTIMATES[id(ir)] = (ir, us)
    return us


class _Run:
    """Launches kernels for one graph and times them into its report."""

    def __init__(self, report: GraphReport) -> None:
        self.report = report
        self.used: list[str] = []

    def __call__(self, k: Any, *args: Any, **kwargs: Any) -> Any:
        name = kernel_name(k)
        if isinstance(k, (Kernel, Launch)):
            base = k.kernel if isinstance(k, Launch) else k
            _load_cache(base)
            traced = len(base._cache)  # configure() copies share this dict
            over = {}
            if OPTIONS.target is not None:
                over["target"] = OPTIONS.target
            if OPTIONS.checks is not None:
                over["checks"] = OPTIONS.checks
            runner = base.configure(**over) if over else base
            if isinstance(k, Launch):
                runner = runner[k.grid.dims]
            t0 = time.perf_counter()
            res = runner(*args, **kwargs)
            dt = time.perf_counter() - t0
            if len(base._cache) != traced:
                _save_cache(base)
            us = _device_us(runner, args, kwargs)
            if us is not None:
                self.report.kernel_device_us[name] += us
        else:  # a frontends.torch custom op: its implementation launches the NKI kernel
            t0 = time.perf_counter()
            res = k(*args, **kwargs)
            dt = time.perf_counter() - t0
        self.report.kernel_seconds[name] += dt
        self.report.kernel_calls[name] += 1
        self.used.append(name)
        return res


def _schema_name(target: Any) -> str | None:
    schema = getattr(target, "_schema", None)
    return schema.name if schema is not None else None


def _custom_nki_op(name: str) -> bool:
    return name in NKI_CUSTOM_OPS


def _like(res: Any, val: Any) -> Any:
    """``res`` with the strides the traced graph expects (``val``, the node's fake value): later
    view ops of the graph rely on the layout the eager op produces."""
    if isinstance(res, (tuple, list)) and isinstance(val, (tuple, list)):
        return type(res)(_like(r, v) for r, v in zip(res, val))
    if isinstance(res, torch.Tensor) and isinstance(val, torch.Tensor):
        if tuple(res.shape) == tuple(val.shape) and res.stride() != val.stride():
            out = torch.empty_strided(val.shape, val.stride(), dtype=res.dtype)
            out.copy_(res)
            return out
    return res


class _Interpreter(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule, report: GraphReport) -> None:
        super().__init__(gm)
        self.report = report

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op != "call_function" or n.target is operator.getitem:
            return super().run_node(n)
        name = _schema_name(n.target)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        if name is None:
            return n.target(*args, **kwargs)
        if name in VIEW_OPS:
            self.report.record(name, "view")
            return n.target(*args, **kwargs)
        if _custom_nki_op(name):  # a frontends.torch custom op: its impl runs the NKI kernel
            t0 = time.perf_counter()
            res = n.target(*args, **kwargs)
            self.report.record(name, "nki", (name,), s=time.perf_counter() - t0)
            return res
        entry = lookup(name)
        reason = "no kernel"
        if entry is not None:
            run = _Run(self.report)
            t0 = time.perf_counter()
            try:
                with torch.no_grad():
                    res = entry.adapter(run, *args, **kwargs)
            except Guard as g:
                reason = f"guard failed: {g}"
                if entry.user and (b := builtin_entry(name)) is not None:
                    try:
                        with torch.no_grad():
                            res = b.adapter(run, *args, **kwargs)
                        self.report.record(name, "nki", tuple(run.used), s=time.perf_counter() - t0)
                        return res
                    except Guard as g2:
                        reason = f"guard failed: {g}; built-in: {g2}"
            else:
                self.report.record(name, "nki", tuple(run.used), s=time.perf_counter() - t0)
                return _like(res, n.meta.get("val"))
        self.report.record(name, "cpu", reason=reason)
        return n.target(*args, **kwargs)


def _compiler(kind: str) -> Callable:
    def compile_graph(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        from functorch.compile import make_boxed_func

        report = GraphReport(f"{kind} graph {sum(r.name.startswith(kind) for r in _REPORTS)}")
        _REPORTS.append(report)

        def run(*args: Any) -> Any:
            out = _Interpreter(gm, report).run(*args)
            report.runs += 1
            if report.runs == 1:
                log.info("%s", report)
            return out

        return make_boxed_func(run)

    return compile_graph


def nki_backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """The ``"nki"`` torch.compile backend (aot_autograd with NKI-kernel graph runners)."""
    from torch._dynamo.backends.common import aot_autograd

    torch_ops_nn.rewrite_rms_norm(gm)  # keep rms_norm whole for the fused kernels
    return aot_autograd(fw_compiler=_compiler("forward"), bw_compiler=_compiler("backward"))(
        gm, example_inputs
    )


def _register() -> None:
    from torch._dynamo import list_backends, register_backend

    if "nki" not in list_backends(exclude_tags=()):
        register_backend(name="nki")(nki_backend)


_register()
