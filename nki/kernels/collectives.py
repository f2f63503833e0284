"""Collectives across the cores of an SPMD launch: each of the W instances of ``kernel[W]``
stands for one rank's NeuronCore and holds that rank's tensor (row r of a (W, N, D) stack).
``all_reduce_kernel`` reduces the instances' tiles with ``nl.all_reduce`` (fp32, in rank order)
and every instance stores the result; ``all_gather_kernel`` has every instance place its shard
in the gathered tensor. The torch backend runs them on data the ranks exchange through their
``torch.distributed`` process group (a reduce-scatter is an all-reduce of which each rank keeps
its slice)."""

from __future__ import annotations

import nki
import nki.language as nl

from ._tiles import P, row_tiles

F32 = nl.float32
_OPS = {"add": nl.add, "maximum": nl.maximum, "minimum": nl.minimum}


@nki.jit
def all_reduce_kernel(stack, op="add"):
    """out[r] = op-reduction over all ranks q of stack[q], for each rank r (launch over
    ``[W]``, one instance per rank). ``op``: ``"add"``, ``"maximum"`` or ``"minimum"``.

    Shapes: stack (W, N, D), any N, D <= 4096. Dtypes: float32, bfloat16 or float16 (reduced
    in fp32, rounded once to the stack's dtype)."""
    w, n, d = stack.shape
    out = nl.ndarray((w, n, d), dtype=stack.dtype, buffer=nl.shared_hbm)
    r = nl.program_id(0)
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(d)[None, :]
    for t in nl.affine_range(row_tiles(n)):
        rows = t * P + i_p
        tile = nl.zeros((P, d), dtype=stack.dtype, buffer=nl.sbuf)
        tile[i_p, i_f] = nl.load(stack[r, rows, i_f], mask=rows < n)
        red = nl.all_reduce(tile, _OPS[op], program_axes=0, dtype=F32)
        nl.store(out[r, rows, i_f], nl.copy(red, dtype=stack.dtype), mask=rows < n)
    return out


@nki.jit
def all_gather_kernel(stack):
    """out[r] = stack[r]: each instance of ``[W]`` (one per rank) stores its rank's shard in
    the gathered tensor, through SBUF.

    Shapes: stack (W, N, D), any N, D <= 4096. Dtypes: any NKI dtype."""
    w, n, d = stack.shape
    out = nl.ndarray((w, n, d), dtype=stack.dtype, buffer=nl.shared_hbm)
    r = nl.program_id(0)
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(d)[None, :]
    for t in nl.affine_range(row_tiles(n)):
        rows = t * P + i_p
        tile = nl.load(stack[r, rows, i_f], mask=rows < n)
        nl.store(out[r, rows, i_f], tile, mask=rows < n)
    return out
