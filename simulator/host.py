"""Host storage of kernel tensors: fresh storage for a tensor, copies of the caller's arrays
into storage dtype, the storage of reshape / dtype views, and outputs back in the dtype the
caller sees. Both backends use these (a view's storage is the same for both)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from nki import dtypes
from nki.errors import NKIMemoryError
from nki.ir import KernelIR, TensorDecl, tensor_label

from . import numerics
from .config import SimConfig


def storage_bytes(decl: TensorDecl, precise_fp: bool) -> int:
    """Bytes of a tensor's host storage (its storage dtype's, every element)."""
    return numerics.storage_dtype(decl.dtype, precise_fp).itemsize * math.prod(decl.shape)


# fresh tensors above this many bytes are allocated after a look at the host's available memory
CHECKED_BYTES = 256 << 20


def host_array(decl: TensorDecl, config: SimConfig, fill: bool = True) -> np.ndarray:
    """Fresh storage for a tensor, filled with the uninitialised-memory sentinel (``fill=False``:
    left as it comes, for a tensor the kernel provably overwrites before anyone sees it).
    Running out of host memory is reported at the tensor's declaration, not as a bare
    MemoryError."""
    sd = numerics.storage_dtype(decl.dtype, config.precise_fp)
    nbytes = storage_bytes(decl, config.precise_fp)
    err = None
    if nbytes > CHECKED_BYTES and nbytes > host_available_bytes():
        err = "more than the host's available memory"  # filling it would invoke the OOM killer
    else:
        try:
            if not fill:
                return np.empty(decl.shape, dtype=sd)
            return np.full(decl.shape, numerics.fill_value(decl.dtype), dtype=sd)
        except MemoryError:
            err = "MemoryError"
    raise NKIMemoryError(
        f"the simulator cannot allocate {nbytes} bytes of host memory for {decl.buffer} "
        f"tensor {tensor_label(decl)} {decl.dtype}{list(decl.shape)} ({err})",
        code="err_host_memory_exhausted",
        loc=decl.loc,
    )


def host_available_bytes() -> int:
    """MemAvailable from /proc/meminfo (Linux); elsewhere, no limit is assumed."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


def storage_input(arr: np.ndarray, sd: np.dtype, written: bool = True) -> np.ndarray:
    """A user's array as simulator storage of dtype ``sd`` for an HBM parameter: a copy when
    the kernel writes it, else the caller's own array whenever it already is C-ordered
    storage dtype."""
    if not written:
        return np.ascontiguousarray(arr, dtype=sd)
    return np.array(arr, dtype=sd, copy=True, order="C")


_WRITTEN: dict[int, tuple[KernelIR, frozenset[str]]] = {}  # id(ir) -> (ir, written params)


def written_params(ir: KernelIR) -> frozenset[str]:
    """The parameters some instruction writes (directly or through a reshape / dtype view);
    computed once per traced kernel."""
    got = _WRITTEN.get(id(ir))
    if got is not None and got[0] is ir:
        return got[1]
    out: set[str] = set()
    for instr, _ in ir.instructions():
        if instr.dst is not None:
            d = ir.tensor(instr.dst.tensor)
            out.add(d.alias_of or d.name)
    names = frozenset(out) & frozenset(ir.params)
    if len(_WRITTEN) > 512:
        _WRITTEN.clear()
    _WRITTEN[id(ir)] = (ir, names)
    return names


def storage_config(ir: KernelIR, config: SimConfig) -> SimConfig:
    """The storage a launch of ``ir`` uses. Fast-fp storage keeps narrow floats as float32,
    which cannot reinterpret bytes, so a kernel that views a tensor as a type of another
    width (``scale_fp32.view(nl.float8_e4m3)``) or views a narrow float's bytes
    (``bf16_tile.view(nl.uint16)``) runs with exact storage."""
    if config.precise_fp:
        return config
    for kernel in (ir, *ir.cores):
        for d in kernel.tensors:
            if d.alias_of is None:
                continue
            base = kernel.tensor(d.alias_of).dtype
            if d.dtype != base and (
                dtypes.itemsize(d.dtype) != dtypes.itemsize(base)
                or any(numerics.storage_dtype(t, False).itemsize != dtypes.itemsize(t)
                       for t in (d.dtype, base))
            ):  # fmt: skip
                return dataclasses.replace(config, precise_fp=True)
    return config


def alias_array(base: np.ndarray, decl: TensorDecl, precise_fp: bool, lead: int = 0) -> np.ndarray:
    """The storage of an alias tensor (``t.reshape(shape)`` / ``t.view(dtype)``): the same
    memory as ``base`` in the alias's shape and type (``lead``: leading batch axes of ``base``
    kept as they are)."""
    sd = numerics.storage_dtype(decl.dtype, precise_fp)
    head = base.shape[:lead]
    if base.dtype != sd:  # tensor.view(dtype): the same bytes as another type
        base = base.reshape(*head, -1).view(sd)
    return base.reshape(*head, *decl.shape)


def output_view(
    arrays: dict[str, np.ndarray], ir: KernelIR, name: str, precise_fp: bool
) -> np.ndarray:
    """A returned tensor's storage; a returned reshape / dtype view of a tensor keeps its own
    shape and type."""
    d = ir.tensor(name)
    if d.alias_of is None:
        return arrays[name]
    return alias_array(arrays[d.alias_of], d, precise_fp)


def output_array(a: np.ndarray, want: np.dtype, copy: bool = True) -> np.ndarray:
    """A kernel output as the user sees it: ``want``, its declared dtype's NumPy dtype (undoing
    fast-fp storage). ``copy=False``: ``a`` itself when it already has that dtype (storage the
    launch owns)."""
    if a.dtype != want:
        return np.array(a, dtype=want, copy=True)
    return a.copy() if copy else a


def _extent(a: np.ndarray) -> tuple[int, int]:
    """The first and one past the last byte address ``a``'s elements occupy."""
    lo = hi = a.__array_interface__["data"][0]
    if a.size == 0:
        return lo, lo
    for n, st in zip(a.shape, a.strides):
        if st > 0:
            hi += st * (n - 1)
        else:
            lo += st * (n - 1)
    return lo, hi + a.itemsize


def within(view: np.ndarray, storage: np.ndarray) -> bool:
    """Whether every element of ``view`` lies within ``storage``'s memory."""
    lo, hi = _extent(view)
    base_lo, base_hi = _extent(storage)
    return view.size == 0 or (base_lo <= lo and hi <= base_hi)
