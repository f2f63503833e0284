"""A forward / backward kernel pair, declared once and turned into a torch autograd Function,
a ``torch.library`` custom op or a ``jax.custom_vjp`` function."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nki.errors import NKITypeError
from nki.jit import Kernel, Launch

from .common import as_tuple, boundary_loc, resolve_launch

GridSpec = Any  # None, a tuple of positive ints, or a callable of the tensor arguments


def is_kernel(x: Any) -> bool:
    """An NKI kernel (``@nki.jit`` function or a launch ``k[grid]``), as opposed to a plain
    Python function of framework tensors."""
    return isinstance(x, (Kernel, Launch))


@dataclass(frozen=True)
class KernelPair:
    """A differentiable NKI operation.

    * ``forward``: an NKI kernel (``@nki.jit`` or ``k[grid]``) taking the tensor inputs and
      returning the output tensor(s).
    * ``backward``: either an NKI kernel or a Python function of framework tensors. It is called
      as ``backward(*inputs, *grad_outputs)`` (``backward(*inputs, *outputs, *grad_outputs)``
      with ``save_outputs=True``) and returns one gradient per input, in order (a Python
      function may return ``None`` for an input that needs no gradient).
    * ``grid`` / ``backward_grid``: launch grid of each kernel: ``None`` (one instance), a tuple
      of positive ints, or a function of the call's tensors returning one (e.g.
      ``lambda a, b: (a.shape[0] // 128, a.shape[1] // 512)``).

    Example::

        pair = KernelPair(add_kernel, lambda a, b, g: (g, g), grid=add_grid)
        add = frontends.torch.autograd_function(pair).apply
    """

    forward: Any
    backward: Any = None
    grid: GridSpec = None
    backward_grid: GridSpec = None
    save_outputs: bool = False
    num_outputs: int = 1

    def __post_init__(self) -> None:
        if not is_kernel(self.forward):
            if not callable(self.forward):
                raise NKITypeError(
                    f"KernelPair.forward must be an NKI kernel, got {type(self.forward).__name__}",
                    code="err_invalid_argument",
                    loc=boundary_loc(),
                )
            object.__setattr__(self, "forward", Kernel(self.forward))
        if self.backward is not None and not callable(self.backward):
            raise NKITypeError(
                "KernelPair.backward must be an NKI kernel or a Python function, got "
                f"{type(self.backward).__name__}",
                code="err_invalid_argument",
                loc=boundary_loc(),
            )

    @staticmethod
    def of(forward: Any, backward: Any = None, **kw: Any) -> KernelPair:
        """``forward`` may already be a KernelPair; otherwise build one."""
        if isinstance(forward, KernelPair):
            return forward
        return KernelPair(forward, backward, **kw)

    def forward_launch(self, tensors: tuple) -> Launch:
        return resolve_launch(self.forward, _grid(self.grid, tensors), api="forward kernel")

    def backward_launch(self, tensors: tuple) -> Launch:
        return resolve_launch(
            self.backward, _grid(self.backward_grid, tensors), api="backward kernel"
        )

    def backward_args(self, inputs: tuple, outputs: tuple, grads: tuple) -> tuple:
        return tuple(inputs) + (tuple(outputs) if self.save_outputs else ()) + tuple(grads)

    def check_grads(self, grads: Any, n_inputs: int) -> tuple:
        g = as_tuple(grads)
        if len(g) != n_inputs:
            raise NKITypeError(
                f"backward of '{self.name}' returned {len(g)} gradient(s) for {n_inputs} "
                "input(s); return one gradient (or None) per forward input",
                code="err_invalid_argument",
                loc=boundary_loc(),
            )
        return g

    @property
    def name(self) -> str:
        f = self.forward.kernel if isinstance(self.forward, Launch) else self.forward
        return getattr(f, "__name__", None) or getattr(f.fn, "__name__", "kernel")


def _grid(spec: GridSpec, tensors: tuple) -> Any:
    if callable(spec):
        spec = spec(*tensors)
    if isinstance(spec, (tuple, list)):
        # symbolic sizes (torch SymInt under torch.compile) become concrete launch dims
        spec = tuple(int(g) if type(g).__name__ == "SymInt" else g for g in spec)
    return spec
