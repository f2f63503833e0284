"""PyTorch frontend: launch NKI kernels on torch tensors, differentiate through them with
``torch.autograd``, and register them as ``torch.library`` custom ops (eager and
``torch.compile(fullgraph=True)``).

* :func:`nki_jit` (also a decorator) - ``kernel(a, b)`` returning torch tensors, or the legacy
  ``kernel[gx, gy](a, b, out)`` writing into ``out``. Any ``@nki.jit`` kernel accepts torch
  tensors too; this just spells the classic ``torch_neuronx.nki_jit``.
* :func:`autograd_function` - a ``torch.autograd.Function`` from a forward kernel and a
  backward (kernel or Python function).
* :func:`custom_op` - the same pair as a ``torch.library`` custom op with a fake (meta)
  implementation derived by tracing the kernel, and autograd.

Conversions are zero-copy where dtype and layout allow (contiguous tensors, bfloat16 included,
are viewed as NumPy arrays; returned arrays are wrapped without a copy); non-contiguous tensors
are copied first (and copied back if the kernel writes them), never misread. Tensors on other
devices (CUDA, ...) are copied to the host and the results returned on their device
(:mod:`frontends.torch_tensors`).
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch

from nki.errors import NKIError, NKITypeError
from nki.frameworks import register_frontend
from nki.jit import Kernel, Launch

from . import common
from .common import OutSpec, as_tuple, boundary_loc, placeholder
from .pair import KernelPair, is_kernel
from .torch_backend import init_backend
from .torch_registry import NKI_CUSTOM_OPS
from .torch_tensors import from_numpy, launch, np_dtype, to_numpy, torch_dtype

__all__ = [
    "nki_jit",
    "autograd_function",
    "custom_op",
    "to_numpy",
    "from_numpy",
    "torch_dtype",
    "launch",
    "KernelPair",
    "init_backend",
]


def nki_jit(kernel: Any = None, **kwargs: Any) -> Any:
    """Classic ``torch_neuronx.nki_jit``: make ``kernel`` callable with CPU torch tensors.

    Works as ``nki_jit(fn)``, ``@nki_jit`` and ``@nki_jit(platform_target='trn2')``. The result
    is an ``@nki.jit`` kernel: ``k(a, b)`` returns torch tensors for kernels that return their
    outputs; ``k[gx, gy](a, b, out)`` runs a legacy kernel that writes into ``out`` (in place).
    Tensors must be on the CPU with an NKI dtype (float32, bfloat16, float16, float8, int8-32,
    uint8-32, bool)."""
    if kernel is None:
        return lambda f: nki_jit(f, **kwargs)
    if isinstance(kernel, (Kernel, Launch)) and not kwargs:
        return kernel
    fn = kernel.fn if isinstance(kernel, Kernel) else kernel
    return Kernel(fn, **kwargs)


# --------------------------------------------------------------------------------------------
# Autograd
# --------------------------------------------------------------------------------------------


def _forward(pair: KernelPair, inputs: tuple, statics: dict[str, Any] | None = None) -> Any:
    return launch(pair.forward_launch(inputs), inputs, statics or {})


def _accepted(fn: Any, names: list[str]) -> list[str]:
    """The names among ``names`` that the Python function ``fn`` takes as keyword arguments."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return []
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return list(names)
    return [n for n in names if n in params and params[n].kind != params[n].POSITIONAL_ONLY]


def _backward(pair: KernelPair, inputs: tuple, outputs: tuple, grads: tuple) -> tuple:
    if pair.backward is None:
        raise NKIError(
            f"'{pair.name}' was declared without a backward; pass backward= (an NKI kernel or a "
            "function of the inputs and output gradients) to differentiate through it",
            code="err_invalid_argument",
            loc=boundary_loc(),
        )
    args = pair.backward_args(inputs, outputs, grads)
    if is_kernel(pair.backward):
        res = launch(pair.backward_launch(args), args, {})
    else:
        res = pair.backward(*args)
    return pair.check_grads(res, len(inputs))


def autograd_function(
    forward: Any,
    backward: Any = None,
    *,
    grid: Any = None,
    backward_grid: Any = None,
    save_outputs: bool = False,
) -> type[torch.autograd.Function]:
    """A ``torch.autograd.Function`` whose forward runs the NKI kernel ``forward`` and whose
    backward runs ``backward`` (see :class:`frontends.pair.KernelPair` for the conventions;
    ``forward`` may be a ready KernelPair). Call it as ``Fn.apply(a, b)``.

    Backward receives ``(*inputs, *grad_outputs)`` and returns one gradient per input."""
    pair = KernelPair.of(
        forward,
        backward,
        grid=grid,
        backward_grid=backward_grid,
        save_outputs=save_outputs,
    )

    def fwd(ctx: Any, *inputs: Any) -> Any:
        outs = _forward(pair, inputs)
        # (tensors are saved for backward; Python scalar arguments are kept as they are)
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
        ctx.save_for_backward(*tensors, *(as_tuple(outs) if pair.save_outputs else ()))
        ctx.scalars = [None if isinstance(x, torch.Tensor) else (x,) for x in inputs]
        return outs

    def bwd(ctx: Any, *grads: torch.Tensor) -> Any:
        saved = iter(ctx.saved_tensors)
        inputs = tuple(next(saved) if s is None else s[0] for s in ctx.scalars)
        return _backward(pair, inputs, tuple(saved), grads)

    name = f"{pair.name}_nki_function"
    return type(
        name,
        (torch.autograd.Function,),
        {"forward": staticmethod(fwd), "backward": staticmethod(bwd), "pair": pair},
    )


# --------------------------------------------------------------------------------------------
# torch.library custom op
# --------------------------------------------------------------------------------------------


def _fake_outputs(
    k: Launch, inputs: tuple, api: str, statics: dict[str, Any] | None = None
) -> tuple[OutSpec, ...]:
    """Output shapes/dtypes of ``k`` on tensors ``inputs`` (fake or real) by tracing it."""
    ph = []
    for i, t in enumerate(inputs):
        npd = np_dtype(t, f"input {i} of {api}")[0]  # fake/meta tensors: any device
        ph.append(placeholder(tuple(int(s) for s in t.shape), npd))
    return common.trace_signature(k, tuple(ph), dict(statics or {}), api=api).outputs


def _kernel_params(k: Any) -> list[Any]:
    """The parameters (``inspect.Parameter``) of a kernel or launch's Python function."""
    fn = (k.kernel if isinstance(k, Launch) else k).fn
    return list(inspect.signature(fn).parameters.values())


def _tensor_params(k: Any) -> list[str]:
    return [
        p.name
        for p in _kernel_params(k)
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]


_SCHEMA_TYPES = {bool: "bool", int: "int", float: "float"}


def _static_params(k: Any) -> dict[str, Any]:
    """The kernel's scalar parameters with defaults (``eps=1e-5``, ``n=4``, ``causal=False``):
    they become optional ``float`` / ``int`` / ``bool`` arguments of the custom op."""
    return {
        p.name: p.default
        for p in _kernel_params(k)
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and type(p.default) in _SCHEMA_TYPES
    }


def _schema(names: list[str], n_out: int, statics: dict[str, Any] | None = None) -> str:
    ret = "Tensor" if n_out == 1 else "(" + ", ".join(["Tensor"] * n_out) + ")"
    args = [f"Tensor {n}" for n in names]
    args += [_static_arg(n, v) for n, v in (statics or {}).items()]
    return "(" + ", ".join(args) + ") -> " + ret


def _static_arg(name: str, default: Any) -> str:
    t = _SCHEMA_TYPES[type(default)]
    if isinstance(default, float) and not math.isfinite(default):
        return f"{t}? {name}=None"  # (a schema's numbers are finite: None stands for inf / nan)
    return f"{t} {name}={default!r}"


def _define(
    qualname: str,
    names: list[str],
    n_out: int,
    run: Any,
    outs_of: Any,
    statics: dict[str, Any] | None = None,
) -> Any:
    """A custom op ``(tensors..., statics...) -> outputs``; ``run`` / ``outs_of`` get the
    tensors and a dict of the static values."""
    n_t, keys = len(names), list(statics or {})

    def split(args: tuple) -> tuple[tuple, dict[str, Any]]:
        given = zip(keys, args[n_t:])
        return args[:n_t], {k: statics[k] if v is None else v for k, v in given}  # type: ignore[index]

    def impl(*args: Any) -> Any:
        res = run(*split(args))
        res_t = as_tuple(res)
        if len(res_t) != n_out:
            raise NKIError(
                f"custom op {qualname} was declared with {n_out} output(s) but its kernel "
                f"returned {len(res_t)}; pass num_outputs={len(res_t)}",
                code="err_out_shape_mismatch",
                loc=boundary_loc(),
            )
        return res_t[0] if n_out == 1 else res_t

    def fake(*args: Any) -> Any:
        tensors, kw = split(args)
        specs = outs_of(tensors, kw)
        if len(specs) != n_out:
            raise NKIError(
                f"custom op {qualname} was declared with {n_out} output(s) but its kernel "
                f"returns {len(specs)}; pass num_outputs={len(specs)}",
                code="err_out_shape_mismatch",
                loc=boundary_loc(),
            )
        outs = tuple(tensors[0].new_empty(s.shape, dtype=torch_dtype(s.dtype)) for s in specs)
        return outs[0] if n_out == 1 else outs

    op = torch.library.custom_op(
        qualname, impl, mutates_args=(), schema=_schema(names, n_out, statics)
    )
    op.register_fake(fake)
    NKI_CUSTOM_OPS.add(qualname)
    return op


def custom_op(
    qualname: str,
    forward: Any,
    backward: Any = None,
    *,
    grid: Any = None,
    backward_grid: Any = None,
    save_outputs: bool = False,
    num_outputs: int = 1,
) -> Any:
    """Register the NKI kernel ``forward`` as the ``torch.library`` custom op ``qualname``
    (``"namespace::name"``), with a fake implementation (output shapes/dtypes come from tracing
    the kernel, so it also works on fake/meta tensors) and, if ``backward`` is given, autograd.

    The op's arguments are the kernel's parameters without defaults, all tensors, then its
    scalar parameters with defaults (``eps=1e-5``: ``float``, ``int`` or ``bool``, optional,
    passed positionally or by name); it returns ``num_outputs`` tensors. A kernel backward is
    given the scalar arguments it declares (by name); a Python backward gets them as keyword
    arguments if it accepts them. A kernel ``backward`` becomes a second custom op
    ``qualname + "_backward"``, so forward and backward both work inside
    ``torch.compile(fullgraph=True)``; a Python ``backward`` must use traceable torch ops (or
    custom ops) to be compiled. Returns the op (callable like a function)."""
    pair = KernelPair.of(
        forward,
        backward,
        grid=grid,
        backward_grid=backward_grid,
        save_outputs=save_outputs,
        num_outputs=num_outputs,
    )
    num_outputs, save_outputs = pair.num_outputs, pair.save_outputs  # (a ready pair's own)
    names = _tensor_params(pair.forward)
    if not names:
        raise NKITypeError(
            f"custom op {qualname}: kernel '{pair.name}' has no tensor parameters",
            code="err_invalid_argument",
            loc=boundary_loc(),
        )
    statics = _static_params(pair.forward)
    op = _define(
        qualname,
        names,
        num_outputs,
        lambda ts, kw: _forward(pair, ts, kw),
        lambda ts, kw: _fake_outputs(pair.forward_launch(ts), ts, f"custom op {qualname}", kw),
        statics,
    )
    if pair.backward is None:
        return op
    n_in = len(names)
    bwd_op = None
    b_statics: dict[str, Any] = {}
    if is_kernel(pair.backward):
        out_names = [f"out{i}" for i in range(num_outputs)] if save_outputs else []
        bnames = names + out_names + [f"grad{i}" for i in range(num_outputs)]
        bname = qualname + "_backward"
        b_statics = {n: v for n, v in _static_params(pair.backward).items() if n in statics}

        def run_bwd(ts: tuple, kw: dict[str, Any]) -> Any:
            return launch(pair.backward_launch(ts), ts, kw)

        bwd_op = _define(
            bname,
            bnames,
            n_in,
            run_bwd,
            lambda ts, kw: _fake_outputs(pair.backward_launch(ts), ts, f"custom op {bname}", kw),
            b_statics,
        )
    py_statics = [] if bwd_op is not None else _accepted(pair.backward, list(statics))

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        saved = tuple(inputs[:n_in]) + (as_tuple(output) if save_outputs else ())
        ctx.save_for_backward(*saved)
        ctx.statics = dict(zip(statics, inputs[n_in:]))

    def backward_fn(ctx: Any, *grads: torch.Tensor) -> Any:
        saved = ctx.saved_tensors
        args = pair.backward_args(saved[:n_in], saved[n_in:], grads)
        if bwd_op is not None:
            res = bwd_op(*args, **{n: ctx.statics[n] for n in b_statics})
        else:
            res = pair.backward(*args, **{n: ctx.statics[n] for n in py_statics})
        return pair.check_grads(res, n_in) + (None,) * len(statics)

    op.register_autograd(backward_fn, setup_context=setup_context)
    return op


register_frontend("torch", ("torch",), launch)  # nki.jit kernels called with torch tensors
