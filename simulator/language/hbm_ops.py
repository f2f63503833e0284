"""Executors of the nki.language HBM operations: ``nl.shared_constant`` data and
``nl.atomic_rmw``."""

from __future__ import annotations

import numpy as np

from nki import dtypes
from nki.ir import Access, Const, Instr
from nki.optable import OPS

from .. import numerics
from ..executors import executes
from ..memory import Ctx, lanes_of
from .common import is_int_access


@executes("const")
def _const(instr: Instr, ctx: Ctx) -> None:
    """nl.shared_constant: write the compile-time data (rounded to the tensor's dtype)."""
    c = instr.srcs[0]
    assert isinstance(c, Const) and instr.dst is not None
    dt, shape, raw = c.value
    data = np.frombuffer(raw, dtype=np.dtype(dt)).reshape(shape)
    if data.dtype.kind == "f":
        data = data.astype(np.float32)  # engines / DMA see fp32 values
    ctx.write(instr.dst, data)


@executes("atomic_rmw")
def _atomic_rmw(instr: Instr, ctx: Ctx) -> None:
    """nl.atomic_rmw: dst = op(dst, value) element by element; repeated destination elements
    (an indirect index naming a row twice) receive every update, in tile order."""
    dst, src = instr.dst, instr.srcs[0]
    assert isinstance(dst, Access)
    sel = ctx.mask(instr)
    decl = ctx.decl(dst.tensor)
    arr = ctx.array(dst.tensor)
    int_dst = dtypes.is_int(decl.dtype) or dtypes.is_bool(decl.dtype)
    if isinstance(src, Const):  # a scalar value
        exact = int_dst and isinstance(src.value, int)
        value = np.asarray(src.value, dtype=np.int64 if exact else np.float32)
    else:
        exact = is_int_access(src, ctx) and int_dst
        # masked-off lanes of the value are never read (not an uninitialised read)
        value = numerics.to_compute(ctx.read(src, lanes_of(sel, src.shape)), exact_int=exact)
    vals = np.broadcast_to(value, dst.shape)
    idx = ctx.indices(dst, sel)
    if sel is not None:
        idx = tuple(i[sel] for i in idx)
        vals = vals[sel]
    # work on the touched elements only: gather, apply with ufunc.at, round once, scatter
    flat = np.ravel_multi_index(idx, arr.shape)
    uniq, inv = np.unique(np.ravel(flat), return_inverse=True)
    cur = numerics.to_compute(arr.reshape(-1)[uniq], exact_int=exact).copy()
    ufunc = OPS[instr.op].fn  # the tracer admits only the rows that are NumPy ufuncs
    assert isinstance(ufunc, np.ufunc)
    ufunc.at(cur, inv, np.ravel(vals).astype(cur.dtype))
    arr.reshape(-1)[uniq] = numerics.cast(cur, decl.dtype, ctx.config.precise_fp)
