"""torch tensors at the simulator's boundary: dtype mapping, zero-copy NumPy views (bfloat16 and
float8 through their bits, never ``np.asarray`` of a tensor NumPy cannot read), devices, and
running a kernel launch on tensors.

Tensors on any device with data (CUDA, a PrivateUse1 device, ...) are copied to the host,
simulated, and their results are returned on the device they came from (allocated with
``new_empty`` on an input of that device, then copied in). Meta tensors have no data: an
``err_unsupported_device`` error."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import torch

from nki.errors import NKIError, NKITypeError
from nki.ir import KernelIR
from nki.jit import Launch
from simulator.launch import updated_params

from . import common
from .common import boundary_loc, unsupported_dtype

__all__ = ["check_tensor", "from_numpy", "launch", "to_numpy", "torch_dtype"]

# torch dtype -> (NumPy dtype, integer torch dtype of the same width used to view the bits, if
# NumPy cannot see the torch dtype directly)
_DTYPES: dict[torch.dtype, tuple[np.dtype, torch.dtype | None]] = {
    torch.float32: (np.dtype(np.float32), None),
    torch.float16: (np.dtype(np.float16), None),
    torch.bfloat16: (np.dtype(ml_dtypes.bfloat16), torch.int16),
    torch.float8_e4m3fn: (np.dtype(ml_dtypes.float8_e4m3fn), torch.uint8),
    torch.float8_e5m2: (np.dtype(ml_dtypes.float8_e5m2), torch.uint8),
    torch.int8: (np.dtype(np.int8), None),
    torch.int16: (np.dtype(np.int16), None),
    torch.int32: (np.dtype(np.int32), None),
    torch.uint8: (np.dtype(np.uint8), None),
    torch.uint16: (np.dtype(np.uint16), None),
    torch.uint32: (np.dtype(np.uint32), None),
    torch.bool: (np.dtype(np.bool_), None),
}
_BY_NP: dict[np.dtype, torch.dtype] = {npd: td for td, (npd, _) in _DTYPES.items()}


def np_dtype(t: torch.Tensor, what: str) -> tuple[np.dtype, torch.dtype | None]:
    """(NumPy dtype, bit-view dtype or None) of a tensor; an error for dtypes NKI lacks."""
    entry = _DTYPES.get(t.dtype)
    if entry is None:
        raise unsupported_dtype(what, "torch", str(t.dtype))
    return entry  # type: ignore[return-value]


def torch_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype of a kernel output's NumPy dtype."""
    d = np.dtype(dtype)
    if d not in _BY_NP:
        raise NKITypeError(
            f"kernel output dtype {d.name} has no PyTorch equivalent (torch has float8_e4m3fn "
            "and float8_e5m2, not IEEE float8_e4m3); return another dtype",
            code="err_unsupported_dtype",
            loc=boundary_loc(),
        )
    return _BY_NP[d]


def check_tensor(t: torch.Tensor, what: str) -> np.dtype:
    """A kernel argument must hold data (not a meta tensor) and have an NKI dtype (no float64 /
    complex / int64)."""
    if t.device.type == "meta":
        raise NKIError(
            f"{what} is a tensor on device 'meta', which holds no data to simulate; pass a "
            "tensor with data (any device: it is copied to the host and back)",
            code="err_unsupported_device",
            loc=boundary_loc(),
        )
    return np_dtype(t, what)[0]


def on_cpu(t: torch.Tensor) -> bool:
    """Whether ``t`` is on the CPU (a subclass may report another device: asked through
    ``t.device``; a plain tensor through its cheaper flag)."""
    return t.is_cpu if type(t) is torch.Tensor else t.device.type == "cpu"


def host(t: torch.Tensor) -> torch.Tensor:
    """``t`` on the CPU (itself when it already is; a device-to-host copy otherwise)."""
    return t if on_cpu(t) else t.detach().to("cpu")


def _plain_view(t: torch.Tensor) -> np.ndarray | None:
    """``to_numpy`` of the common case, checked with the tensor's cheapest properties: a
    contiguous CPU tensor of a dtype NumPy has (None for any other tensor)."""
    entry = _DTYPES.get(t.dtype)
    if entry is not None and entry[1] is None and on_cpu(t) and t.is_contiguous():
        return (t.detach() if t.requires_grad else t).numpy()
    return None


def to_numpy(t: torch.Tensor, what: str = "tensor") -> np.ndarray:
    """A NumPy view of a tensor's memory (no copy for contiguous CPU tensors; bfloat16 and
    float8 are viewed through their bits). Non-contiguous tensors are copied to contiguous
    memory first, so strides are never misread; tensors on other devices are copied to the
    host."""
    plain = _plain_view(t)
    if plain is not None:
        return plain
    check_tensor(t, what)
    npd, bits = np_dtype(t, what)
    src = host(t.detach())
    if not src.is_contiguous():
        src = src.contiguous()
    if bits is not None:
        return src.view(bits).numpy().view(npd)
    return src.numpy()


def from_numpy(a: np.ndarray, like: torch.Tensor | None = None) -> torch.Tensor:
    """A torch tensor sharing ``a``'s memory (copied only if ``a`` is read-only); with
    ``like`` on another device than the CPU, a tensor on ``like``'s device holding ``a``."""
    td = _BY_NP.get(a.dtype)
    if td is None:
        td = torch_dtype(a.dtype)  # (its error)
    flags = a.flags
    if not flags.writeable or not flags.c_contiguous:
        a = np.ascontiguousarray(a).copy()
    bits = _DTYPES[td][1]
    if bits is not None:
        t = torch.from_numpy(a.view(_DTYPES[bits][0])).view(td)
    else:
        t = torch.from_numpy(a)
    if like is None or on_cpu(like):
        return t
    return like.new_empty(t.shape, dtype=td).copy_(t)


def _holds_tensors(v: list | tuple) -> bool:
    """Whether a list / tuple argument holds a tensor at any depth (per-layer weights, pairs).
    Walked without recursion, and without ``isinstance(x, torch.Tensor)`` for the plain
    Python values (its metaclass check costs microseconds): most such arguments are a fused
    launch's program, nested tuples of names and numbers, scanned on every launch."""
    todo = [v]
    while todo:
        for x in todo.pop():
            t = type(x)
            if t in _PLAIN:
                continue
            if t is tuple or t is list or isinstance(x, (list, tuple)):
                todo.append(x)
            elif isinstance(x, torch.Tensor):
                return True
    return False


_PLAIN = frozenset({str, int, float, bool, type(None)})


def _list_arrays(v: list | tuple, what: str, devices: list[torch.Tensor]) -> list | tuple:
    """A list argument with each tensor at any depth as a NumPy array (a view where it can be:
    CPU, contiguous); tensors not on the CPU are added to ``devices``."""
    items = []
    for x in v:
        if isinstance(x, torch.Tensor):
            plain = _plain_view(x)  # (None for any tensor not on the CPU)
            if plain is None:
                if not on_cpu(x):
                    devices.append(x)
                plain = to_numpy(x, what)
            x = plain
        elif isinstance(x, (list, tuple)):
            x = _list_arrays(x, what, devices)
        items.append(x)
    return type(v)(items)


def launch(k: Launch, args: tuple, kwargs: dict) -> Any:
    """Run a kernel launch on torch tensors; returns torch tensors on the inputs' device
    (``None`` for legacy kernels, which write into the output tensors passed in)."""
    return launch_traced(k, args, kwargs)[0]


def launch_traced(k: Launch, args: tuple, kwargs: dict) -> tuple[Any, KernelIR]:
    """``launch``, with the traced kernel the launch ran."""
    name = k.kernel.fn.__name__
    bound = common.bind(k, tuple(args), dict(kwargs), api=f"kernel '{name}'")
    arguments = bound.arguments
    like = None  # the first tensor not on the CPU: results go back to its device
    copies: dict[str, tuple[torch.Tensor, np.ndarray]] = {}
    for pname, v in arguments.items():  # (values replaced in place: the keys stay)
        if isinstance(v, torch.Tensor):
            plain = _plain_view(v)  # (the common case, without the label of an error)
            if plain is not None:
                arguments[pname] = plain
                continue
            arr = to_numpy(v, f"argument '{pname}' of kernel '{name}'")
            if not v.is_contiguous() or not on_cpu(v):
                copies[pname] = (v, arr)
                if like is None and not on_cpu(v):
                    like = v
            arguments[pname] = arr
        elif isinstance(v, (tuple, list)) and _holds_tensors(v):
            devices: list[torch.Tensor] = []
            arguments[pname] = _list_arrays(v, f"argument '{pname}' of kernel '{name}'", devices)
            if like is None and devices:
                like = devices[0]
    res, ir = common.run_traced(k, bound)
    for pname in updated_params(ir) if copies else ():
        if pname in copies:  # the kernel wrote a copied tensor: write it back
            orig, arr = copies[pname]
            if any(st == 0 and n > 1 for st, n in zip(orig.stride(), orig.shape)):
                raise NKIError(
                    f"kernel '{name}' writes argument '{pname}', a view whose elements share "
                    f"memory (shape {list(orig.shape)}, strides {list(orig.stride())}: an "
                    "expand() / broadcast_to()); it cannot hold the kernel's writes: pass a "
                    "tensor of its own (.clone())",
                    code="err_readonly_output",
                    loc=boundary_loc(),
                )
            with torch.no_grad():
                orig.copy_(from_numpy(np.array(arr)))
    if res is None:
        return None, ir
    if isinstance(res, tuple):
        return tuple([from_numpy(r, like) for r in res]), ir
    return from_numpy(res, like), ir
