"""HBM-side helpers of nki.language: compile-time constant tensors (``nl.shared_constant``,
``nl.shared_identity_matrix``) and ``nl.atomic_rmw`` (read-modify-write of HBM data, e.g. a
scatter-add through an indirect index)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import NKIError, NKIShapeError, NKITypeError, user_loc
from ..ir import HBM_BUFFERS, Const
from ..optable import ATOMIC_UFUNCS, lookup
from ..tracer import (
    NkiTensor,
    _Assigned,
    check_broadcast_into,
    emit,
    generation,
    new_tensor,
    operand,
    require_buffer,
    state,
    to_mask,
)


def shared_constant(constant: Any, dtype: Any = None, **_kw: Any) -> NkiTensor:
    """A shared-HBM tensor holding a compile-time constant (a NumPy array, or the path of a
    ``.npy`` file holding one; converted to ``dtype`` if given; 64-bit arrays are narrowed to 32
    bits), ``nl.load``-ed like any HBM tensor. Made inside a loop, it still exists once for
    the whole kernel."""
    api = "nl.shared_constant"
    st = state(api)
    if isinstance(constant, (str, os.PathLike)):
        try:
            constant = np.load(constant, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise NKIError(
                f"'{api}' could not read the .npy file {str(constant)!r}: {e}",
                code="err_invalid_argument",
                loc=user_loc(),
            ) from None
    arr = np.asarray(constant)
    if arr.ndim == 0:
        raise NKIShapeError(
            f"'{api}' needs an array, got a scalar", code="err_invalid_shape", loc=user_loc()
        )
    if dtype is None:
        narrow = {"f": np.float32, "i": np.int32, "u": np.uint32, "b": np.bool_}
        dt = dtypes.name_of(narrow[arr.dtype.kind] if arr.dtype.itemsize > 4 else arr.dtype)
    else:
        dt = dtypes.name_of(dtype)
    t = new_tensor(tuple(int(s) for s in arr.shape), dt, "shared_hbm", kind="local", api=api)
    data = np.ascontiguousarray(arr.astype(np.float64 if arr.dtype.kind == "f" else np.int64))
    value = (str(data.dtype), tuple(data.shape), data.tobytes())  # hashable, exact
    emit("const", "shared_constant", t.access_(), (Const(value),), api=api)
    if st.loops:  # compile-time data: one copy for the kernel, even when made inside a loop
        body = st.bodies[-1]
        st.bodies[0].extend(body[-2:])  # its allocation and its fill
        del body[-2:]
    return t


def shared_identity_matrix(n: int, dtype: Any = "uint8", dst: Any = None, **_kw: Any) -> Any:
    """An ``(n, n)`` identity matrix. Classic API: a shared-HBM constant (see
    ``shared_constant``). Current API: an SBUF tile holding it (written into ``dst`` when
    given, an ``(n, n)`` on-chip tensor), ready as a matmul operand."""
    c = shared_constant(np.identity(int(n)), dtype=dtype)
    if dst is None and generation(sensitive=True) != "current":
        return c
    api = "nl.shared_identity_matrix"
    if dst is None:
        dst = new_tensor((int(n), int(n)), dtypes.name_of(dtype), "sbuf", api=api)
    dacc, dt = operand(dst.view if isinstance(dst, _Assigned) else dst, api, "dst")
    require_buffer(dt, ("sbuf", "psum"), api, "dst")
    check_broadcast_into(c.access_().shape, dacc.shape, api)
    emit("dma", "copy", dacc, (c.access_(),), api=api)
    return dst


def atomic_rmw(dst: Any, value: Any, op: Any, *, mask: Any = None, **_kw: Any) -> None:
    """``dst = op(dst, value)`` on HBM, atomically per element: when an indirect index names
    the same row several times every update is applied (a scatter-add keeps all of them).
    ``op`` is an add/subtract/multiply/max/min or bitwise op (``nl.add``, ``np.add``...)."""
    api = "nl.atomic_rmw"
    row = lookup(op)
    if not row.atomic:
        raise NKITypeError(
            f"'{api}' supports op in {sorted(ATOMIC_UFUNCS)}, got {row.name}",
            code="err_unsupported_op",
            loc=user_loc(),
        )
    dacc, dt = operand(dst.view if isinstance(dst, _Assigned) else dst, api, "dst")
    require_buffer(dt, HBM_BUFFERS, api, "dst")
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        src: Any = Const(value.item() if isinstance(value, np.number) else value)  # a scalar
    else:
        vacc, vt = operand(value.view if isinstance(value, _Assigned) else value, api, "value")
        require_buffer(vt, ("sbuf", "psum"), api, "value")
        check_broadcast_into(vacc.shape, dacc.shape, api)
        src = vacc
    emit("atomic_rmw", row.name, dacc, (src,), mask=to_mask(mask, dacc.shape, api), api=api)


__all__ = ["atomic_rmw", "shared_constant", "shared_identity_matrix"]
