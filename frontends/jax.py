"""JAX frontend: ``nki_call`` as a JAX primitive, and ``jax.custom_vjp`` functions built from a
forward / backward kernel pair.

``nki_call(kernel, *args, grid=..., out_shape=...)`` binds the primitive ``nki_call``:

* abstract evaluation: the output shapes/dtypes come from ``out_shape`` and are checked against
  what the kernel returns (found by tracing the kernel on shape-only placeholders);
* eager execution: the simulator runs on the arrays' host memory (zero-copy on the CPU);
* under ``jax.jit``: lowered to a host callback (``jax.pure_callback``) into the simulator;
* under ``jax.vmap``: the kernel runs once per batch element (``lax.map``, sequential).

Differentiation goes through :func:`custom_vjp` (the primitive itself has no JVP rule).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from nki.errors import NKIError
from nki.frameworks import register_frontend
from nki.jit import Launch

from . import common
from .common import OutSpec, as_tuple, boundary_loc, check_dtype, placeholder
from .pair import KernelPair, is_kernel

__all__ = ["nki_call", "custom_vjp", "nki_call_p", "KernelPair"]

nki_call_p = Primitive("nki_call")
nki_call_p.multiple_results = True


@dataclass(frozen=True, eq=False)
class _Call:
    """Static description of one ``nki_call``: the launch, where each kernel argument comes
    from (an operand of the primitive or a static Python value) and the declared outputs."""

    launch: Launch
    # per positional argument: ("op", operand index), ("static", value) or, for a list / tuple
    # holding arrays at any depth, ("list", its type, its elements' sources)
    args: tuple
    kwargs: tuple  # (name, ("op", i) | ("static", v) | ("list", type, sources))
    out_specs: tuple[OutSpec, ...] | None
    legacy: bool

    def rebuild(self, operands: list) -> tuple[tuple, dict]:
        def get(src: tuple) -> Any:
            if src[0] == "list":
                return src[1](get(e) for e in src[2])
            return operands[src[1]] if src[0] == "op" else src[1]

        return tuple(get(s) for s in self.args), {k: get(s) for k, s in self.kwargs}

    def signature(self, shapes: list) -> common.Signature:
        """The kernel's outputs for operands of these (shape, dtype) pairs."""
        args, kwargs = self.rebuild([placeholder(s, d) for s, d in shapes])
        return common.trace_signature(self.launch, args, kwargs, self.out_specs)


def _is_operand(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray)) or (
        hasattr(x, "shape") and hasattr(x, "dtype") and not np.isscalar(x)
    )


def _holds_operand(x: Any) -> bool:
    """An array, or a list / tuple holding one at any depth (per-layer weights, pairs)."""
    if isinstance(x, (list, tuple)):
        return any(map(_holds_operand, x))
    return _is_operand(x)


def _out_specs(out_shape: Any) -> tuple[OutSpec, ...] | None:
    if out_shape is None:
        return None
    specs = []
    for i, o in enumerate(as_tuple(out_shape)):
        if not (hasattr(o, "shape") and hasattr(o, "dtype")):
            raise NKIError(
                f"nki_call: out_shape[{i}] must be a jax.ShapeDtypeStruct (or have .shape and "
                f".dtype), got {o!r}",
                code="err_invalid_argument",
                loc=boundary_loc(),
            )
        d = np.dtype(o.dtype)
        check_dtype(d, f"out_shape[{i}]", "jax", str(d))
        specs.append(OutSpec(tuple(int(s) for s in o.shape), d))
    return tuple(specs)


def _check_operand(x: Any, what: str) -> None:
    d = np.dtype(x.dtype)
    check_dtype(d, what, "jax", str(d))
    if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
        plats = {dev.platform for dev in x.devices()}
        if plats != {"cpu"}:
            raise NKIError(
                f"{what} lives on {sorted(plats)}; the NKI simulator runs on the CPU - move it "
                "with jax.device_put(x, jax.devices('cpu')[0])",
                code="err_unsupported_device",
                loc=boundary_loc(),
            )


def call(launch: Launch, args: tuple, kwargs: dict, out_shape: Any = None) -> Any:
    """Bind the ``nki_call`` primitive for ``launch`` (see :func:`nki_call`)."""
    specs = _out_specs(out_shape)
    params = list(inspect.signature(launch.kernel.fn).parameters)
    operands: list = []
    shapes: list = []

    def src(x: Any, what: str) -> tuple:
        if _is_operand(x):
            _check_operand(x, what)
            operands.append(x)
            shapes.append((tuple(int(s) for s in x.shape), np.dtype(x.dtype)))
            return ("op", len(operands) - 1)
        if isinstance(x, (list, tuple)) and any(map(_holds_operand, x)):
            return ("list", type(x), tuple(src(e, what) for e in x))
        return ("static", x)

    name = common.kernel_name(launch)
    arg_src = tuple(
        src(a, f"argument '{params[i] if i < len(params) else i}' of kernel '{name}'")
        for i, a in enumerate(args)
    )
    kw_src = tuple((k, src(v, f"argument '{k}' of kernel '{name}'")) for k, v in kwargs.items())
    probe = _Call(launch, arg_src, kw_src, specs, False)
    sig = probe.signature(shapes)  # validates out_shape against the kernel's return
    c = _Call(launch, arg_src, kw_src, specs if sig.legacy else None, sig.legacy)
    outs = nki_call_p.bind(*operands, call=c)
    single = (out_shape is not None and not isinstance(out_shape, (tuple, list))) or (
        out_shape is None and len(outs) == 1
    )
    return outs[0] if single else tuple(outs)


def nki_call(kernel: Any, *args: Any, grid: Any = None, out_shape: Any = None, **kwargs: Any):
    """Classic ``jax_neuronx.nki_call``: run an NKI kernel on JAX arrays.

    ``grid`` is ``None`` or a tuple of positive ints (the SPMD launch grid). ``out_shape`` is a
    ``jax.ShapeDtypeStruct`` (or a tuple of them) describing the output(s); it must agree with
    what the kernel returns. Legacy kernels that take their outputs as trailing parameters get
    zero-filled arrays of ``out_shape`` and their final contents are returned. Without
    ``out_shape`` the outputs are found by tracing the kernel. Arrays must be on the CPU with
    an NKI dtype (no float64 / complex). Works eagerly, under ``jax.jit`` and ``jax.vmap``."""
    launch = common.resolve_launch(kernel, grid, api="nki_call")
    return call(launch, args, kwargs, out_shape)


# --------------------------------------------------------------------------------------------
# Primitive rules
# --------------------------------------------------------------------------------------------


def _host(c: _Call, *arrays: Any) -> tuple:
    """Run the simulator on host arrays; returns the outputs as a tuple of NumPy arrays."""
    arrs = [np.asarray(a) for a in arrays]
    args, kwargs = c.rebuild(arrs)
    if c.legacy:
        outs = tuple(np.zeros(o.shape, o.dtype) for o in c.out_specs)
        common.run(c.launch, args + outs, kwargs)
    else:
        outs = as_tuple(common.run(c.launch, args, kwargs))
    return tuple(np.asarray(o) for o in outs)


def _abstract_eval(*avals: Any, call: _Call) -> list:
    sig = call.signature([(a.shape, np.dtype(a.dtype)) for a in avals])
    return [jax.core.ShapedArray(o.shape, o.dtype) for o in sig.outputs]


def _impl(*args: Any, call: _Call) -> list:
    return [jnp.asarray(o) for o in _host(call, *args)]


def _lowering(ctx: Any, *args: Any, call: _Call) -> Any:
    shapes = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in ctx.avals_out)

    def cb(*xs: Any) -> Any:
        return jax.pure_callback(
            functools.partial(_host, call), shapes, *xs, vmap_method="sequential"
        )

    return mlir.lower_fun(cb, multiple_results=True)(ctx, *args)


def _batch(args: list, dims: list, *, call: _Call) -> tuple:
    # vmap: one kernel run per batch element, in order (lax.map is a sequential scan)
    idx = [i for i, d in enumerate(dims) if d is not None]  # None: not mapped
    xs = tuple(jnp.moveaxis(args[i], dims[i], 0) for i in idx)

    def body(xb: tuple) -> tuple:
        full = list(args)
        for i, x in zip(idx, xb):
            full[i] = x
        return tuple(nki_call_p.bind(*full, call=call))

    outs = jax.lax.map(body, xs)
    return list(outs), [0] * len(outs)


def _no_jvp(primals: Any, tangents: Any, *, call: _Call) -> Any:
    raise NKIError(
        f"nki_call of kernel '{common.kernel_name(call.launch)}' has no derivative rule; build "
        "a differentiable function from a forward/backward kernel pair with "
        "frontends.jax.custom_vjp(forward, backward)",
        code="err_invalid_argument",
        loc=boundary_loc(),
    )


nki_call_p.def_impl(_impl)
nki_call_p.def_abstract_eval(_abstract_eval)
mlir.register_lowering(nki_call_p, _lowering)
batching.primitive_batchers[nki_call_p] = _batch
ad.primitive_jvps[nki_call_p] = _no_jvp


# --------------------------------------------------------------------------------------------
# custom_vjp
# --------------------------------------------------------------------------------------------


def custom_vjp(
    forward: Any,
    backward: Any = None,
    *,
    grid: Any = None,
    backward_grid: Any = None,
    save_outputs: bool = False,
) -> Any:
    """A ``jax.custom_vjp`` function running the NKI kernel ``forward`` (via ``nki_call``) with
    ``backward`` as its VJP, so ``jax.grad`` trains through NKI kernels.

    ``backward`` (an NKI kernel or a function of JAX arrays) is called as
    ``backward(*inputs, *cotangents)`` (``backward(*inputs, *outputs, *cotangents)`` with
    ``save_outputs=True``) and returns one gradient per input; gradients are cast to the
    input's dtype and ``None`` means zero. ``forward`` may be a ready
    :class:`frontends.pair.KernelPair`. The arguments of the resulting function are arrays
    (or lists / tuples of arrays, whose gradients are lists of the same length); an integer
    output's cotangent reaches ``backward`` as zeros of its dtype."""
    pair = KernelPair.of(
        forward, backward, grid=grid, backward_grid=backward_grid, save_outputs=save_outputs
    )

    def run_forward(args: tuple) -> Any:
        return call(pair.forward_launch(args), args, {})

    @jax.custom_vjp
    def f(*args: Any) -> Any:
        return run_forward(args)

    def f_fwd(*args: Any) -> tuple:
        out = run_forward(args)
        # (a 0-d array per output: its dtype, for an integer output's float0 cotangent)
        kinds = tuple(jnp.zeros((), o.dtype) for o in as_tuple(out))
        return out, (args, as_tuple(out) if pair.save_outputs else (), kinds)

    def f_bwd(res: tuple, g: Any) -> tuple:
        inputs, outs, kinds = res
        # JAX gives an integer output's cotangent as float0: the kernel gets zeros of its dtype
        g = tuple(
            jnp.zeros(c.shape, k.dtype) if c.dtype == jax.dtypes.float0 else c
            for c, k in zip(as_tuple(g), kinds)
        )
        if pair.backward is None:
            raise NKIError(
                f"'{pair.name}' was declared without a backward; pass backward= to "
                "differentiate through it",
                code="err_invalid_argument",
                loc=boundary_loc(),
            )
        args = pair.backward_args(inputs, outs, as_tuple(g))
        if is_kernel(pair.backward):
            r = call(pair.backward_launch(args), args, {})
        else:
            r = pair.backward(*args)
        grads = pair.check_grads(r, len(inputs))
        return tuple(
            _cotangent(i, x, gr, pair.name) for i, (x, gr) in enumerate(zip(inputs, grads))
        )

    f.defvjp(f_fwd, f_bwd)
    return f


def _cotangent(i: int, x: Any, gr: Any, name: str) -> Any:
    """The gradient ``gr`` of input ``x`` (an array, or a list / tuple of arrays) cast to its
    dtype, zeros for None."""
    tree = jax.tree_util
    if gr is None:
        return tree.tree_map(jnp.zeros_like, x)
    xs, gs = tree.tree_leaves(x), tree.tree_leaves(gr)
    if len(gs) != len(xs):
        raise NKIError(
            f"the backward of '{name}' returned {len(gs)} gradient array(s) for input {i}, which "
            f"holds {len(xs)}",
            code="err_invalid_argument",
            loc=boundary_loc(),
        )
    cast = [jnp.asarray(gi).astype(xi.dtype) for gi, xi in zip(gs, xs)]
    return tree.tree_unflatten(tree.tree_structure(x), cast)


def _jit_call(launch: Launch, args: tuple, kwargs: dict) -> Any:
    return call(launch, tuple(args), dict(kwargs))


register_frontend("jax", ("jax", "jaxlib"), _jit_call)  # nki.jit kernels called with JAX arrays
