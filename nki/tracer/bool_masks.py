"""Python ``and`` between mask predicates (``mask=(ix < n // 2 and iy < m // 2)``).

Classic kernels write masks with ``and``, which the classic compiler read from the kernel's
source as a conjunction. Python evaluates ``a and b`` as ``bool(a)`` and then ``b``, so the
tracer sees the left predicate only through ``bool()``: the byte code at the caller says it is
the left operand of ``and``; the predicate is then kept as pending and joined to the next
comparison the same frame makes before the ``and`` ends (the right operand). A right operand
that is not a comparison, and ``or`` (a disjunction, which a mask cannot express), are located
errors naming ``&``."""

from __future__ import annotations

import dis
import functools
import threading
import types
from typing import Any

from ..errors import NKIError, user_frame, user_loc

_PENDING = threading.local()  # .items: list of (frame, end offset, predicate)


@functools.lru_cache(maxsize=256)
def _instructions(code: types.CodeType) -> dict[int, tuple[int, dis.Instruction]]:
    ins = list(dis.get_instructions(code))
    return {x.offset: (i, x) for i, x in enumerate(ins)}


def _boolean_op(frame: types.FrameType) -> tuple[str, int, dis.Instruction | None] | None:
    """('and' | 'or', end offset, last instruction of the right operand) when the frame is
    evaluating the left operand of a Python ``and`` / ``or``; None otherwise (``if``, ...)."""
    table = _instructions(frame.f_code)
    ins = [x for _, x in sorted(table.values(), key=lambda t: t[0])]
    here = table.get(frame.f_lasti)
    if here is None:
        return None
    i, x = here
    if x.opname == "TO_BOOL" and i + 1 < len(ins):  # 3.13+: bool() is its own instruction
        i, x = i + 1, ins[i + 1]
    if x.opname in ("JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP"):  # 3.10 / 3.11
        kind = "and" if "FALSE" in x.opname else "or"
    elif x.opname.startswith("POP_JUMP") and ("IF_FALSE" in x.opname or "IF_TRUE" in x.opname):
        j = i - 1 if i and ins[i - 1].opname != "TO_BOOL" else i - 2
        if j < 0 or ins[j].opname != "COPY" or ins[j].argval != 1:  # 3.12+: `and` keeps a copy
            return None
        kind = "and" if "IF_FALSE" in x.opname else "or"
    else:
        return None
    end = x.argval
    last = next((y for y in reversed(ins) if y.offset < end and y.opname != "NOP"), None)
    return kind, end, last


def left_of_boolean(pred: Any) -> bool:
    """Called from ``bool(pred)``: True when ``pred`` is the left operand of ``and`` in a mask
    expression (it is kept to be joined to the right operand); raises for ``or`` and for a
    right operand that is not a comparison; False for other control flow."""
    frame = user_frame(2)
    found = _boolean_op(frame) if frame is not None else None
    if found is None:
        return False
    kind, end, last = found
    if kind == "or":
        raise NKIError(
            "'or' between mask predicates: a mask is a conjunction of affine comparisons, so "
            "a disjunction cannot be expressed; split the instruction in two (one per "
            "condition, the second excluding the first) or rewrite the condition",
            code="err_unsupported_expression_in_mask",
            loc=user_loc(),
        )
    if last is None or last.opname != "COMPARE_OP":
        raise NKIError(
            "'and' between mask predicates is supported when the right operand is a "
            "comparison (mask=(ix < n and iy < m)); combine other predicates with '&'",
            code="err_unsupported_expression_in_mask",
            loc=user_loc(),
        )
    items = _items()
    items.append((frame, end, pred))
    return True


def _items() -> list[tuple[types.FrameType, int, Any]]:
    if not hasattr(_PENDING, "items"):
        _PENDING.items = []
    return _PENDING.items


def join_pending(pred: Any) -> Any:
    """A comparison just made ``pred``: if it is the right operand of a pending ``and`` in the
    same frame, the conjunction of both."""
    items = _items()
    if not items:
        return pred
    frame = user_frame(2)
    keep, out = [], pred
    for f, end, left in items:
        if f is frame and frame.f_lasti < end:
            out = left & out
        elif f.f_lasti < end and f is not frame:
            keep.append((f, end, left))  # another frame's `and` still being evaluated
    items[:] = keep
    return out


def clear_pending() -> None:
    """Forget pending ``and`` operands (a trace ended: their frames are done)."""
    _items().clear()
