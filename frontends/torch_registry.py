"""The op registry of the ``"nki"`` torch.compile backend: which ATen op runs as which NKI
kernel. Built-in adapters (:mod:`frontends.torch_ops`, :mod:`frontends.torch_ops_nn`) declare
themselves with :func:`builtin`; users override them with :func:`register_kernel`. An adapter
raises :class:`Guard` when its kernel does not apply to a call. The backend
(:mod:`frontends.torch_backend`) looks entries up; nothing here runs a graph."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch._library.custom_ops import CustomOpDef

from nki.errors import NKITypeError
from nki.jit import Kernel, Launch

from .common import boundary_loc

__all__ = [
    "Entry",
    "Guard",
    "NKI_CUSTOM_OPS",
    "builtin",
    "builtin_entry",
    "kernel_name",
    "lookup",
    "register_kernel",
    "registry_table",
    "unregister_kernel",
    "user_entry",
]


class Guard(Exception):
    """Raised by an op adapter when its kernel does not apply to this call (the message is
    the reason shown in the report)."""


@dataclass(frozen=True)
class Entry:
    """How an ATen op runs as a kernel: ``adapter(run, *args, **kwargs)`` calls kernels through
    ``run(kernel, *tensors, **statics)`` and returns the op's result, or raises
    :class:`Guard`."""

    op: str
    adapter: Callable[..., Any]
    kernels: tuple[str, ...]
    user: bool = False
    doc: str = ""


_BUILTIN: dict[str, Entry] = {}
_USER: dict[str, Entry] = {}

# qualified names of the custom ops defined by frontends.torch.custom_op (the backend reports
# them as NKI kernels)
NKI_CUSTOM_OPS: set[str] = set()


def _op_name(op: str) -> str:
    op = op.replace(".", "::", 1) if "::" not in op and op.startswith("aten.") else op
    return op if "::" in op else f"aten::{op}"


def builtin(op: str, kernels: tuple[str, ...], doc: str) -> Callable[[Callable], Callable]:
    """Decorator used by :mod:`frontends.torch_ops` and :mod:`frontends.torch_ops_nn` to declare
    a built-in adapter."""

    def deco(fn: Callable) -> Callable:
        _BUILTIN[_op_name(op)] = Entry(_op_name(op), fn, kernels, doc=doc)
        return fn

    return deco


def kernel_name(k: Any) -> str:
    """A kernel's function name, or a custom op's qualified name."""
    k = k.kernel if isinstance(k, Launch) else k
    return k.fn.__name__ if isinstance(k, Kernel) else str(getattr(k, "_qualname", k))


def register_kernel(
    op: str, kernel: Any, *, guard: Callable[..., str | None] | None = None
) -> None:
    """Run ATen op ``op`` (``"aten::gelu"``) with ``kernel``, overriding the built-in kernel.

    ``kernel`` is an ``@nki.jit`` kernel (or a plain kernel function) or a ``torch.library``
    custom op built by :func:`frontends.torch.custom_op`; it is called with the op's full
    signature as the graph calls it: every positional argument in order (tensors, Python
    scalars, lists such as ``torch.cat``'s tensors or a ``dim``) and the keyword arguments, and
    returns the op's output (torch tensors on the inputs' device; NumPy arrays are accepted).
    ``guard``, if given, gets the same arguments and returns ``None`` when the kernel applies or
    a reason string when the call must fall back. When the guard refuses or the kernel raises,
    the built-in kernel runs (or the CPU, if there is none or it refuses too) and the report
    records why."""
    name = _op_name(op)
    if isinstance(kernel, CustomOpDef):
        op_obj = kernel

        def adapter(run: Callable, *args: Any, **kwargs: Any) -> Any:
            if guard is not None and (why := guard(*args, **kwargs)):
                raise Guard(why)
            return run(op_obj, *args, **kwargs)

        label = kernel_name(kernel)
    elif isinstance(kernel, (Kernel, Launch)) or callable(kernel):
        k = kernel if isinstance(kernel, (Kernel, Launch)) else Kernel(kernel)

        def adapter(run: Callable, *args: Any, **kwargs: Any) -> Any:
            if guard is not None and (why := guard(*args, **kwargs)):
                raise Guard(why)
            return run(k, *args, **kwargs)

        label = kernel_name(k)
    else:
        raise NKITypeError(
            f"register_kernel({op!r}, ...): expected an NKI kernel (an @nki.jit kernel or a "
            f"kernel function) or a frontends.torch custom op, got {type(kernel).__name__}",
            code="err_invalid_argument",
            loc=boundary_loc(),
        )
    _USER[name] = Entry(name, adapter, (label,), user=True, doc="user kernel")


def unregister_kernel(op: str) -> None:
    """Remove the user kernel registered for ``op`` (the built-in one applies again)."""
    _USER.pop(_op_name(op), None)


def lookup(op: str) -> Entry | None:
    """The entry that runs ``op``: the user kernel if one is registered, else the built-in."""
    return _USER.get(op) or _BUILTIN.get(op)


def user_entry(op: str) -> Entry | None:
    """The user kernel registered for ``op``, if any."""
    return _USER.get(op)


def builtin_entry(op: str) -> Entry | None:
    """The built-in entry of ``op`` (the fallback when a user kernel's guard fails)."""
    return _BUILTIN.get(op)


def registry_table() -> str:
    """The supported-op table (Markdown) generated from the built-in registry."""
    rows = ["| ATen op | NKI kernel(s) | applies when |", "|---|---|---|"]
    for name in sorted(_BUILTIN):
        e = _BUILTIN[name]
        rows.append(f"| `{name}` | {', '.join(f'`{k}`' for k in e.kernels)} | {e.doc} |")
    return "\n".join(rows)
