"""``nl.loop_reduce``: reduce a tile across the iterations of enclosing loops."""

from __future__ import annotations

from typing import Any

from .. import dtypes
from ..errors import NKITypeError, user_loc
from ..ir import Alloc, Const, LoopSym, TensorDecl
from ..optable import lookup
from ..symbolic import Scalar
from ..tracer import NkiTensor, _Assigned, emit, operand, state

__all__ = ["loop_reduce"]


def loop_reduce(
    x: Any, op: Any, loop_indices: Any, *, dtype: Any = None, mask: Any = None, **_kw: Any
) -> NkiTensor:
    """Reduce ``x`` with ``op`` (add, multiply, maximum, minimum) across the iterations of the
    loops whose iterators are in ``loop_indices``: the result is an accumulator tile that lives
    outside the outermost of those loops, starts at the op's identity (0 for add, -inf for
    max, ...) and is updated ``acc = op(acc, x)`` on every iteration, so after the loops it
    holds the reduction over all of them (``b = nl.loop_reduce(a, np.add, [k])`` inside
    ``for k in nl.affine_range(n)`` sums ``a`` over ``k``). With no symbolic loop index the
    result is ``op(identity, x)``, i.e. ``x`` in ``dtype``.

    Example: ``m = nl.loop_reduce(t, op=np.max, loop_indices=[i], dtype=nl.float32)``."""
    api = "nl.loop_reduce"
    st = state(api)
    row = lookup(op)
    if row.identity is None:
        raise NKITypeError(
            f"'{api}' needs a reduction operator (add, multiply, maximum, minimum, ...); "
            f"{row.name} has no identity",
            code="err_unsupported_op",
            loc=user_loc(),
        )
    if isinstance(x, _Assigned):
        x = x.view
    acc_x, tx = operand(x, api, "x")
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
    loc = user_loc()
    name = st.fresh("lr")
    decl = TensorDecl(name, shape, out_dt, "sbuf", "local", 0, loc)
    st.declare(decl)
    acc = NkiTensor(decl, tuple(st.loops[:level]))
    # allocation and initialisation go before the loop at `level` (appended to its parent body,
    # which receives the Loop node only when the loop finishes)
    from ..ir import Instr

    init = Instr("memset", "memset", acc.access_(), (Const(row.identity),), (), None, loc, None,
                 api)  # fmt: skip
    st.bodies[level].append(Alloc(name, loc))
    st.bodies[level].append(init)
    st.written.setdefault(name, loc)
    from ..tracer import to_mask

    emit("ew", row.name, acc.access_(), (acc.access_(), acc_x), mask=to_mask(mask, shape, api),
         api=api)  # fmt: skip
    return acc
