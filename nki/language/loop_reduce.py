"""``nl.loop_reduce``: reduce a tile across the iterations of enclosing loops."""

from __future__ import annotations

from typing import Any

from .. import dtypes
from ..errors import user_frame, user_loc
from ..ir import Alloc, Const, Instr, LoopSym, TensorDecl, assigned_name
from ..optable import lookup_reducer
from ..symbolic import Scalar
from ..tracer import NkiTensor, _Assigned, check_start_partition, emit, operand, state, to_mask

__all__ = ["loop_reduce"]


def loop_reduce(
    x: Any, op: Any, loop_indices: Any, *, dtype: Any = None, mask: Any = None, **_kw: Any
) -> NkiTensor:
    """Reduce ``x`` with ``op`` (add, multiply, maximum, minimum) across the iterations of the
    loops whose iterators are in ``loop_indices``. The destination is the accumulator: when
    the result is assigned into a tile (``acc_t[i] = nl.loop_reduce(a, np.add, [k])``) each
    iteration performs ``acc_t[i] = op(acc_t[i], a)``. When it is only bound to a name
    (``b = nl.loop_reduce(a, np.add, [k])`` inside ``for k in nl.affine_range(n)``) the
    destination is ``b`` as it was before the call, when that is an on-chip tile of the result's
    shape (``b = nl.zeros(...)`` before the loop, or the previous iteration's result in an
    unrolled loop): each iteration performs ``b = op(b, a)`` in place. Otherwise the result is
    an accumulator tile living outside the outermost of those loops, starting at the op's
    identity (0 for add, -inf for max, ...), so after the loops it holds the reduction over all
    of them.

    Example: ``m = nl.loop_reduce(t, op=np.max, loop_indices=[i], dtype=nl.float32)``."""
    api = "nl.loop_reduce"
    st = state(api)
    row = lookup_reducer(op, api)
    if isinstance(x, _Assigned):
        x = x.view
    acc_x, tx = operand(x, api, "x")
    check_start_partition(acc_x, tx, api, "x")
    items = list(loop_indices) if isinstance(loop_indices, (list, tuple)) else [loop_indices]
    syms = {
        s
        for it in items
        if isinstance(it, Scalar)
        for s in it.aff.symbols()
        if isinstance(s, LoopSym)
    }
    levels = [i for i, s in enumerate(st.loops) if s in syms]
    level = min(levels) if levels else len(st.loops)  # allocate outside the outermost loop
    out_dt = dtypes.name_of(dtype) if dtype is not None else tx.decl.dtype
    shape = tuple(acc_x.shape)
    prior = _bound_tile(shape)
    if prior is not None:  # (b = nl.loop_reduce(...): b, as it is now, accumulates)
        emit("ew", row.name, prior.access_(), (prior.access_(), acc_x), mask=to_mask(mask, shape,
             api), api=api)  # fmt: skip
        return prior
    loc = user_loc()
    name = st.fresh("lr")
    decl = TensorDecl(name, shape, out_dt, "sbuf", "local", 0, loc)
    st.declare(decl)
    acc = NkiTensor(decl, tuple(st.loops[:level]))
    # allocation and initialisation go before the loop at `level` (appended to its parent body,
    # which receives the Loop node only when the loop finishes)
    init = Instr("memset", "memset", acc.access_(), (Const(row.identity),), (), None, loc, None,
                 api)  # fmt: skip
    st.bodies[level].append(Alloc(name, loc))
    st.bodies[level].append(init)
    st.written.setdefault(name, loc)
    m = to_mask(mask, shape, api)
    instr = emit("ew", row.name, acc.access_(), (acc.access_(), acc_x), mask=m, api=api)
    # ``dst[...] = nl.loop_reduce(x, ...)``: the destination itself is the accumulator
    # (dst = op(dst, x)); the tracer's assign looks this up
    st.loop_reduce_results[name] = (row.name, acc_x, m, instr)
    return acc


def _bound_tile(shape: tuple[int, ...]) -> NkiTensor | None:
    """In ``b = nl.loop_reduce(...)`` (the kernel's statement calling now), ``b``'s current
    value when it is a whole on-chip tile of ``shape``; None otherwise (no such statement, ``b``
    unbound, an HBM tensor, a view)."""
    frame = user_frame(1)
    if frame is None:
        return None
    name = assigned_name(user_loc(1))
    value = frame.f_locals.get(name) if name else None
    if not isinstance(value, NkiTensor) or not value.decl.on_chip or value.shape != shape:
        return None
    return value
