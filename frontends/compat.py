"""Opt-in module aliases so classic NKI code runs unmodified on nki-sim.

``install()`` registers ``neuronxcc``, ``neuronxcc.nki`` (-> ``nki``), ``neuronxcc.nki.language``,
``neuronxcc.nki.isa``, ``neuronxcc.nki.typing``, ``torch_neuronx`` (``nki_jit``, also as
``torch_neuronx.xla_impl.ops.nki_jit``) and ``jax_neuronx`` (``nki_call``). torch / jax are
imported only when ``torch_neuronx.nki_jit`` / ``jax_neuronx.nki_call`` is first used.

``torch_xla`` and ``torch_xla.core.xla_model`` are registered too, for AWS's torch examples,
which move their tensors to the XLA device before launching a kernel: there the device is the
CPU (``torch_xla.device()``, ``xm.xla_device()``), and ``torch_xla.sync()`` /
``xm.mark_step()`` / ``xm.wait_device_ops()`` do nothing (the simulator runs each launch as it
is called). Any other ``torch_xla`` name is an AttributeError that says so.

It also registers the model-level reference APIs' modules (:data:`MODEL_ALIASES`):
``neuronx_distributed`` (ModelBuilder, NxDModel, parallel layers: ``frontends.model_builder``)
and ``pybuda`` (the pipeline runtime: ``frontends.pipeline``), imported on first use.

Run a classic script with the aliases in place::

    python -m frontends.compat script.py [args...]
    nki-compat script.py [args...]

Print the current-API version of a classic file as a diff, and what needs a person
(``frontends/migrate.py``)::

    nki-compat --migrate file.py
"""

from __future__ import annotations

import os
import runpy
import sys
import types
from typing import Any

import nki
import nki.compiler
import nki.isa
import nki.isa.constants  # (aliased: loaded as neuronxcc.nki.isa.constants its imports fail)
import nki.language
import nki.typing
from nki.classic import classic_mode, set_classic_mode
from nki.estimates import record_launches
from simulator.cost import estimate_ir
from simulator.cost.export import write_trace

from . import migrate

__all__ = ["install", "uninstall", "main"]

_saved: dict[str, Any] = {}


def _lazy_module(name: str, attrs: dict[str, tuple[str, str]]) -> types.ModuleType:
    """A module whose attributes are imported on first access (``attr -> (module, name)``)."""
    mod = types.ModuleType(name, f"nki-sim compatibility alias ({name})")

    def __getattr__(attr: str) -> Any:
        if attr in attrs:
            import importlib

            m, a = attrs[attr]
            return getattr(importlib.import_module(m), a)
        raise AttributeError(f"module {name!r} (nki-sim alias) has no attribute {attr!r}")

    mod.__getattr__ = __getattr__  # type: ignore[attr-defined]
    mod.__all__ = list(attrs)  # type: ignore[attr-defined]
    return mod


def _classic_nki(nki: types.ModuleType) -> types.ModuleType:
    """``neuronxcc.nki``: ``nki`` whose kernels are always classic-API (``nki.jit(api="classic")``:
    a destination-first call in them is a located error, ``kernel[2]`` an SPMD grid)."""
    mod = types.ModuleType("neuronxcc.nki", "nki-sim compatibility alias (neuronxcc.nki)")
    mod.__path__ = []  # type: ignore[attr-defined]

    def classic(entry: Any) -> Any:
        def call(func: Any = None, *args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("api", "classic")
            return entry(func, *args, **kwargs)

        return call

    def __getattr__(attr: str) -> Any:
        return getattr(nki, attr)

    mod.__getattr__ = __getattr__  # type: ignore[attr-defined]
    mod.jit = classic(nki.jit)  # type: ignore[attr-defined]
    mod.baremetal = classic(nki.baremetal)  # type: ignore[attr-defined]
    for sub in ("language", "isa", "typing", "compiler"):
        setattr(mod, sub, getattr(nki, sub))
    return mod


# model-level reference APIs: alias module -> the nki-sim module whose names it forwards
MODEL_ALIASES: dict[str, str] = {
    **dict.fromkeys(
        [
            "neuronx_distributed",
            "neuronx_distributed.trace",
            "neuronx_distributed.trace.model_builder",
            "neuronx_distributed.trace.model_builder_utils",
            "neuronx_distributed.trace.nxd_model",
            "neuronx_distributed.trace.nxd_model.base_nxd_model",
            "neuronx_distributed.parallel_layers",
            "neuronx_distributed.parallel_layers.layers",
            "neuronx_distributed.parallel_layers.parallel_state",
            "neuronx_distributed.utils",
            "neuronx_distributed.utils.model_utils",
        ],
        "frontends.model_builder",
    ),
    "pybuda": "frontends.pipeline",
    "pybuda.op": "frontends.pipeline.ops",
    "pybuda.op.loss": "frontends.pipeline.loss",
    "pybuda.optimizers": "frontends.pipeline.optimizers",
    "pybuda.schedulers": "frontends.pipeline.optimizers",
    "pybuda.config": "frontends.pipeline.config",
    "pybuda._C": "frontends.pipeline.config",
    "pybuda._C.backend_api": "frontends.pipeline.config",
}


def _forwarding_module(name: str, target: str) -> types.ModuleType:
    """A package whose attributes are ``target``'s, imported on first access."""
    mod = types.ModuleType(name, f"nki-sim compatibility alias ({name} -> {target})")
    mod.__path__ = []  # type: ignore[attr-defined]

    def __getattr__(attr: str) -> Any:
        import importlib

        if attr.startswith("__"):
            raise AttributeError(attr)
        real = importlib.import_module(target)
        try:
            return getattr(real, attr)
        except AttributeError:
            raise AttributeError(
                f"module {name!r} (nki-sim alias of {target}) has no attribute {attr!r}"
            ) from None

    mod.__getattr__ = __getattr__  # type: ignore[attr-defined]
    return mod


def _cpu_device(*_: Any, **__: Any) -> Any:
    """The device AWS's torch examples move tensors to: the CPU here."""
    import torch

    return torch.device("cpu")


def _no_barrier(*_: Any, **__: Any) -> None:
    """An XLA barrier (``sync``, ``mark_step``, ``wait_device_ops``): each simulated launch has
    finished when it returns, so there is nothing to wait for."""


def _xla_module(name: str, attrs: dict[str, Any]) -> types.ModuleType:
    mod = types.ModuleType(name, f"nki-sim compatibility alias ({name}: the CPU as the device)")
    mod.__path__ = []  # type: ignore[attr-defined]
    mod.__dict__.update(attrs)

    def __getattr__(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise AttributeError(
            f"module {name!r} (nki-sim alias) has no attribute {attr!r}: the alias gives "
            f"{', '.join(sorted(attrs))}"
        )

    mod.__getattr__ = __getattr__  # type: ignore[attr-defined]
    return mod


def _xla_aliases() -> dict[str, types.ModuleType]:
    xm = _xla_module("torch_xla.core.xla_model", {"xla_device": _cpu_device,
                     "mark_step": _no_barrier, "wait_device_ops": _no_barrier})  # fmt: skip
    core = _xla_module("torch_xla.core", {"xla_model": xm})
    top = _xla_module("torch_xla", {"device": _cpu_device, "sync": _no_barrier, "core": core})
    return {"torch_xla": top, "torch_xla.core": core, "torch_xla.core.xla_model": xm}


def _model_aliases() -> dict[str, types.ModuleType]:
    mods = {name: _forwarding_module(name, target) for name, target in MODEL_ALIASES.items()}
    for name, mod in mods.items():  # a child is an attribute of its parent package
        parent, _, leaf = name.rpartition(".")
        if parent in mods:
            setattr(mods[parent], leaf, mod)
    return mods


def _aliases() -> dict[str, types.ModuleType]:
    neuronxcc = types.ModuleType("neuronxcc", "nki-sim compatibility alias (neuronxcc)")
    neuronxcc.__path__ = []  # a package, so 'import neuronxcc.nki' is allowed
    cnki = _classic_nki(nki)
    neuronxcc.nki = cnki  # type: ignore[attr-defined]
    tn = _lazy_module("torch_neuronx", {"nki_jit": ("frontends.torch", "nki_jit")})
    tn.__path__ = []  # type: ignore[attr-defined]
    xla_impl = types.ModuleType("torch_neuronx.xla_impl")
    xla_impl.__path__ = []  # type: ignore[attr-defined]
    ops = _lazy_module("torch_neuronx.xla_impl.ops", {"nki_jit": ("frontends.torch", "nki_jit")})
    xla_impl.ops = ops  # type: ignore[attr-defined]
    tn.xla_impl = xla_impl  # type: ignore[attr-defined]
    jn = _lazy_module("jax_neuronx", {"nki_call": ("frontends.jax", "nki_call")})
    return {
        "neuronxcc": neuronxcc,
        "neuronxcc.nki": cnki,
        "neuronxcc.nki.language": nki.language,
        "neuronxcc.nki.isa": nki.isa,
        "neuronxcc.nki.isa.constants": nki.isa.constants,
        "neuronxcc.nki.typing": nki.typing,
        "neuronxcc.nki.compiler": nki.compiler,
        "torch_neuronx": tn,
        "torch_neuronx.xla_impl": xla_impl,
        "torch_neuronx.xla_impl.ops": ops,
        "jax_neuronx": jn,
        **_xla_aliases(),
        **_model_aliases(),
    }


def install() -> list[str]:
    """Register the classic module names in ``sys.modules`` (replacing any real ones until
    :func:`uninstall`). Returns the names installed."""
    aliases = _aliases()
    _saved.setdefault("<classic_mode>", classic_mode())
    set_classic_mode(True)  # classic compiler behaviours (nki.classic.set_classic_mode)
    # the classic simulator computes bfloat16 / fp8 in fp32 precision (documented known issue);
    # classic scripts' own checks assume it, so do the same unless NKI_PRECISE_FP is set
    if "NKI_PRECISE_FP" not in os.environ:
        _saved.setdefault("<precise_fp>", None)
        os.environ["NKI_PRECISE_FP"] = "0"
    for name, mod in aliases.items():
        if name not in _saved:
            _saved[name] = sys.modules.get(name)
        sys.modules[name] = mod
    return list(aliases)


def uninstall() -> None:
    """Undo :func:`install` (restores modules that were there before)."""
    for name, prev in _saved.items():
        if name == "<classic_mode>":
            set_classic_mode(bool(prev))
        elif name == "<precise_fp>":
            os.environ.pop("NKI_PRECISE_FP", None)
        elif prev is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = prev
    _saved.clear()


def main(argv: list[str] | None = None) -> int:
    """``nki-compat [--profile[=trace.json]] script.py [args]``: run a classic NKI script with
    the aliases installed; ``--profile`` prints the performance estimate of every kernel the
    script launched and (with a path) writes the Perfetto / Chrome trace JSON of each.
    ``nki-compat --migrate file.py``: print the file ported to the current API as a diff, and
    what is left for a person (exit status 0: nothing, 1: something, 2: unreadable file)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--migrate":
        return migrate.main(argv[1:])
    profile, trace_out = False, None
    while argv and argv[0].startswith("--profile"):
        profile = True
        trace_out = argv.pop(0).partition("=")[2] or trace_out
    if not argv or argv[0] in ("-h", "--help"):
        print(
            "usage: python -m frontends.compat [--profile[=trace.json]] script.py [args...]\n"
            "       python -m frontends.compat --migrate file.py [file.py ...]",
            file=sys.stderr,
        )
        return 2
    if profile:
        with record_launches() as irs:
            code = _run_script(argv)
        _print_estimates(irs, trace_out)
        return code
    return _run_script(argv)


def _run_script(argv: list[str]) -> int:
    script = argv[0]
    install()
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


def _print_estimates(irs: list, trace_out: str | None) -> None:
    for i, ir in enumerate(irs):
        report = estimate_ir(ir)
        print(report.summary())
        if trace_out:
            stem, ext = os.path.splitext(trace_out)
            path = trace_out if i == 0 else f"{stem}-{i}{ext or '.json'}"
            print(f"  trace: {write_trace(report, path)}")


if __name__ == "__main__":
    sys.exit(main())
