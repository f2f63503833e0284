"""Executors of nki.language reductions over free axes (``nl.sum`` / ``max`` / ``min`` / ``prod``
/ ``all`` / ``mean`` / ``var``), per partition."""

from __future__ import annotations

import numpy as np

from nki.ir import Access, Instr
from nki.optable import OPS

from .. import numerics
from ..executors import executes
from ..memory import Ctx
from .common import is_int_access

_REDUCE_ROW = {"sum": "add", "max": "maximum", "min": "minimum", "prod": "multiply",
               "all": "logical_and"}  # fmt: skip


@executes("reduce")
def _reduce(instr: Instr, ctx: Ctx) -> None:
    """nl.sum / max / min / prod / all / mean / var over free axes, per partition."""
    src = instr.srcs[0]
    assert isinstance(src, Access) and instr.dst is not None
    axes = tuple(instr.attr("axes"))
    exact = instr.op in _REDUCE_ROW and is_int_access(src, ctx)
    sel = ctx.mask(instr, src.shape)
    # masked-off lanes are not read (under checks=full they may be uninitialised)
    x = numerics.to_compute(ctx.read(src, sel), exact_int=exact)
    out_sel = None
    if sel is not None:
        # masked-out inputs do not take part: replace them with the reduction's identity
        ident = {"sum": 0, "mean": 0, "var": 0, "prod": 1, "all": 1}.get(instr.op)
        if instr.op == "max":
            ident = np.iinfo(np.int64).min if exact else -np.inf
        elif instr.op == "min":
            ident = np.iinfo(np.int64).max if exact else np.inf
        x = np.where(sel, x, np.asarray(ident, dtype=x.dtype))
        out_sel = np.any(sel, axis=axes).reshape(instr.dst.shape)
    if instr.op in _REDUCE_ROW:
        fn = OPS[_REDUCE_ROW[instr.op]].reduce
        assert fn is not None
        if instr.op == "all":
            out = fn(x, axis=axes, keepdims=False)
        else:
            out = fn(x, axis=axes)
    else:
        xf = x.astype(np.float32)
        if sel is not None:
            n = np.maximum(np.sum(sel, axis=axes, keepdims=True), 1).astype(np.float32)
        else:
            n = np.float32(np.prod([x.shape[a] for a in axes]))
        mean = (np.sum(xf, axis=axes, keepdims=True, dtype=np.float32) / n).astype(np.float32)
        if instr.op == "mean":
            out = mean
        else:
            d = xf - mean
            if sel is not None:
                d = np.where(sel, d, np.float32(0))
            out = np.sum(d * d, axis=axes, keepdims=True, dtype=np.float32) / n
        out = np.asarray(out, dtype=np.float32)
    out = np.asarray(out).reshape(instr.dst.shape)
    ctx.write(instr.dst, out, out_sel, instr.accumulate)
