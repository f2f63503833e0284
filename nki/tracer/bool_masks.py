"""Python ``and`` / ``or`` between mask predicates (``mask=(ix < n // 2 or iy < m // 2)``).

Classic kernels write masks with ``and`` / ``or``, which the classic compiler read from the
kernel's source. Python evaluates ``a or b`` as ``bool(a)`` and then, when it is false, ``b``;
the tracer sees ``a`` only through ``bool()``. The byte code at the caller says whether that
``bool()`` is the test of a boolean expression whose value is kept (a mask) or of an ``if``.
In a mask expression ``bool()`` returns the value that makes Python go on to the next operand
(True after ``and``, False after ``or``), so every operand is evaluated; each is kept with the
jump Python would take, and when the last operand (a comparison) is made, the expression is
rebuilt from those jumps: a conjunction (a :class:`Pred`) or a disjunction (:class:`Disj`).

An IR mask is one conjunction of affine comparisons. A disjunction reaches the IR as a
:class:`MaskCover`: its DISJOINT pieces (``D1``, ``D2 and not D1``, ...), each a conjunction;
``expand_covers`` emits a masked instruction once per piece, so every element is written
exactly once, accumulating writes included."""

from __future__ import annotations

import dataclasses
import dis
import functools
import threading
import types
from dataclasses import dataclass
from typing import Any

from ..errors import NKIControlFlowError, NKIError, user_frame, user_loc
from ..ir import Access, Cond, Instr, Loop, Mask, SrcLoc
from ..symbolic import Pred

MAX_PIECES = 16  # disjoint conjunctions one masked instruction may become
_FLIP = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}

Conj = tuple[Cond, ...]


class Disj:
    """A mask that is a disjunction of conjunctions of affine comparisons (from Python ``or``
    in a mask expression). Combine with ``&``, ``~``, ``and`` and ``or``; pass as ``mask=``."""

    is_disjunction = True
    __slots__ = ("terms", "disjoint")

    def __init__(self, terms: tuple[Conj, ...], disjoint: bool = False) -> None:
        self.terms = terms
        self.disjoint = disjoint  # the terms are pairwise disjoint already

    def __and__(self, other: object) -> Any:
        if other is True:
            return self
        if not isinstance(other, (Pred, Disj)):
            return NotImplemented
        return conj(self, other)

    __rand__ = __and__

    def __invert__(self) -> Any:
        return negate(self)

    def __or__(self, other: object) -> Any:
        raise _unsupported("operator '|' on a mask built with 'or' (write 'or')")

    __ror__ = __or__

    def __bool__(self) -> bool:
        value = left_of_boolean(self)
        if value is None:
            raise NKIControlFlowError(
                "Python control flow (if / while / not) on a mask built with 'or': its value "
                "differs per element, so Python cannot decide it while tracing; pass it as "
                "mask= instead",
                code="err_control_flow_condition_depending_on_arange",
                loc=user_loc(),
            )
        return value

    def __repr__(self) -> str:
        return "<mask " + " or ".join(_conj_str(t) for t in self.terms) + ">"


def _conj_str(t: Conj) -> str:
    return "(" + " & ".join(str(c) for c in t) + ")" if t else "True"


def _unsupported(what: str) -> NKIError:
    return NKIError(
        f"unsupported expression in mask: {what}",
        code="err_unsupported_expression_in_mask",
        loc=user_loc(),
    )


# --------------------------------------------------------------------------------------------
# Boolean algebra on conjunctions (None: a conjunction that can select nothing)
# --------------------------------------------------------------------------------------------


def _terms(x: Any) -> tuple[Conj, ...]:
    if isinstance(x, Disj):
        return x.terms
    if x is True:
        return ((),)
    if x is False:
        return ()
    return (tuple(x.conds),)


def _meet(a: Conj, b: Conj) -> Conj | None:
    """``a & b`` without repeated or implied conditions; None when it selects nothing."""
    out = list(a)
    for c in b:
        if Cond(c.expr, _FLIP[c.op]) in out:
            return None
        if c not in out:
            out.append(c)
    return _tighten(tuple(out))


# `linear + k <op> 0` as a bound on `linear`: (is_lower, bound)
_BOUND = {"<": lambda k: (False, -k - 1), "<=": lambda k: (False, -k),
          ">": lambda k: (True, -k + 1), ">=": lambda k: (True, -k)}  # fmt: skip


def _tighten(conds: Conj) -> Conj | None:
    """Keep the tightest lower and upper bound on each linear expression (``j >= 60`` makes
    ``j >= 32`` redundant); None when the bounds cross (``j < 32 & j >= 60``)."""
    best: dict[tuple[Any, ...], list[Any]] = {}  # key -> [lower, lower cond, upper, upper cond]
    for c in conds:
        if c.op not in _BOUND:
            continue
        e = c.expr
        key = (e.base.terms, e.coeffs, e.shape)
        lower, v = _BOUND[c.op](e.base.const)
        b = best.setdefault(key, [None, None, None, None])
        if lower and (b[0] is None or v > b[0]):
            b[0], b[1] = v, c
        if not lower and (b[2] is None or v < b[2]):
            b[2], b[3] = v, c
    if any(b[0] is not None and b[2] is not None and b[0] > b[2] for b in best.values()):
        return None
    keep = {id(c) for b in best.values() for c in (b[1], b[3]) if c is not None}
    return tuple(c for c in conds if c.op not in _BOUND or id(c) in keep)


def _absorb(terms: list[Conj]) -> list[Conj]:
    """Drop repeated terms and terms that contain another (``x or (x & y)`` is ``x``)."""
    sets = [frozenset(t) for t in terms]
    out = []
    for k, t in enumerate(terms):
        if any(u < sets[k] or (u == sets[k] and m < k) for m, u in enumerate(sets) if m != k):
            continue
        out.append(t)
    return out


def _make(terms: list[Conj], disjoint: bool) -> Any:
    terms = terms if disjoint else _absorb(terms)
    if len(terms) > 4 * MAX_PIECES:
        raise _too_many(len(terms))
    if len(terms) == 1:
        return Pred(terms[0]) if terms[0] else True
    return Disj(tuple(terms), disjoint)


def conj(x: Any, y: Any) -> Any:
    """``x & y`` distributed over the disjunctions."""
    out = [t for a in _terms(x) for b in _terms(y) if (t := _meet(a, b)) is not None]
    if not out:
        return Disj((), True)
    disjoint = all(not isinstance(v, Disj) or v.disjoint for v in (x, y))
    return _make(out, disjoint)


def disj(x: Any, y: Any) -> Any:
    return _make(list(_terms(x) + _terms(y)), False)


def _not_conj(t: Conj) -> list[Conj]:
    """``not (c1 & c2 & ...)`` as disjoint conjunctions: ``~c1``, ``c1 & ~c2``, ..."""
    return [t[:i] + (Cond(c.expr, _FLIP[c.op]),) for i, c in enumerate(t)]


def negate(x: Any) -> Any:
    """``~x`` (De Morgan), as disjoint conjunctions."""
    out: Any = True
    for t in _terms(x):
        out = conj(out, Disj(tuple(_not_conj(t)), True) if len(t) > 1 else _single_not(t))
    return out


def _single_not(t: Conj) -> Any:
    return Pred((Cond(t[0].expr, _FLIP[t[0].op]),)) if t else Disj((), True)


def disjoint_cover(x: Any) -> list[Conj]:
    """Pairwise disjoint conjunctions whose union is ``x``: D1, D2 & ~D1, D3 & ~D1 & ~D2, ..."""
    if isinstance(x, Disj) and x.disjoint:
        return list(x.terms)
    pieces: list[Conj] = []
    terms = sorted(_terms(x), key=len)  # the complement of a short term splits into few pieces
    for k, t in enumerate(terms):
        part = [t]
        for prev in terms[:k]:
            part = [m for p in part for n in _not_conj(prev) if (m := _meet(p, n)) is not None]
            if len(part) + len(pieces) > MAX_PIECES:
                raise _too_many(len(part) + len(pieces))
        pieces.extend(part)
    return pieces


def _too_many(n: int) -> NKIError:
    return _unsupported(
        f"this 'or' expression splits into more than {MAX_PIECES} disjoint conjunctions "
        f"({n} so far), one masked instruction each; simplify the condition or write the "
        "instruction several times with simpler masks"
    )


# --------------------------------------------------------------------------------------------
# Reading `a and b` / `a or b` from the caller's byte code
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Jump:
    """The conditional jump after one operand: taken when the operand is ``when``; ``keeps``
    the operand as the value (``and`` / ``or`` in an expression) or pops it."""

    offset: int
    when: bool
    keeps: bool
    target: int
    next_start: int  # where the next operand starts when the jump is not taken


@dataclass(frozen=True)
class _Region:
    """One boolean expression in a frame's code: its end and its last operand's last
    instruction (a comparison, so the tracer sees it made)."""

    end: int
    last: dis.Instruction | None


@functools.lru_cache(maxsize=256)
def _code_table(code: types.CodeType) -> tuple[list[dis.Instruction], dict[int, int]]:
    ins = list(dis.get_instructions(code))
    return ins, {x.offset: i for i, x in enumerate(ins)}


def _jump_at(code: types.CodeType, offset: int) -> _Jump | None:
    """The conditional jump testing the value whose ``bool()`` runs at ``offset``."""
    ins, index = _code_table(code)
    i = index.get(offset)
    if i is None:
        return None
    if ins[i].opname == "TO_BOOL" and i + 1 < len(ins):  # 3.13+: bool() is its own instruction
        i += 1
    x = ins[i]
    name = x.opname
    if name in ("JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP"):  # 3.10 / 3.11
        keeps = True
    elif name.startswith("POP_JUMP") and ("IF_FALSE" in name or "IF_TRUE" in name):
        j = i - 1 if i and ins[i - 1].opname != "TO_BOOL" else i - 2
        keeps = j >= 0 and ins[j].opname == "COPY" and ins[j].argval == 1  # 3.12+ keeps a copy
    else:
        return None
    if not isinstance(x.argval, int) or x.argval <= x.offset:
        return None  # a loop's backward jump
    nxt = i + 1
    if keeps and name.startswith("POP_JUMP") and nxt < len(ins) and ins[nxt].opname == "POP_TOP":
        nxt += 1  # 3.12+: the kept copy is dropped when the next operand is evaluated
    start = ins[nxt].offset if nxt < len(ins) else x.argval
    return _Jump(x.offset, "IF_TRUE" in name, keeps, x.argval, start)


@functools.lru_cache(maxsize=1024)
def _region(code: types.CodeType, offset: int) -> _Region | None:
    """The boolean expression whose first tested operand's jump is at ``offset``: its end is
    where the kept value is used. None for the test of an ``if`` / ``while`` (no jump keeps
    the value)."""
    ins, index = _code_table(code)
    first = _jump_at(code, offset)
    if first is None:
        return None
    far, kept_end, i = first.target, first.target if first.keeps else None, index[first.offset]
    while i + 1 < len(ins) and ins[i + 1].offset < far:
        i += 1
        j = _jump_at(code, ins[i].offset)
        if j is not None:
            far = max(far, j.target)
            if j.keeps:
                kept_end = j.target if kept_end is None else max(kept_end, j.target)
    if kept_end is None or kept_end != far:
        return None
    last = next((y for y in reversed(ins[: index.get(far, len(ins))]) if y.opname != "NOP"), None)
    return _Region(far, last)


class _Open:
    """An expression being evaluated: its frame, region, location and the operands tested."""

    __slots__ = ("frame", "region", "loc", "operands")

    def __init__(self, frame: types.FrameType, region: _Region, loc: SrcLoc) -> None:
        self.frame = frame
        self.region = region
        self.loc = loc
        self.operands: list[tuple[Any, _Jump]] = []


_PENDING = threading.local()  # .items: list of _Open


def _items() -> list[_Open]:
    if not hasattr(_PENDING, "items"):
        _PENDING.items = []
    return _PENDING.items


def check_pending() -> None:
    """Raise for a mask expression whose frame has moved past its end without its last
    operand being made: that operand compared Python values (``ix < n or m > 4``), so the
    expression's value is a Python bool that lost the traced operands."""
    items = _items()
    done = [o for o in items if o.frame.f_lasti >= o.region.end]
    if not done:
        return
    items[:] = [o for o in items if o not in done]
    raise NKIError(
        "'and' / 'or' between mask predicates needs a last operand that compares nl.arange "
        "indices, loop iterators or program ids; here it compares Python values, so the "
        "expression would be a plain True / False. Decide that part in Python first "
        "(mask=(ix < n) if flag else ...)",
        code="err_unsupported_expression_in_mask",
        loc=done[0].loc,
    )


def left_of_boolean(pred: Any) -> bool | None:
    """Called from ``bool(pred)``. In a mask expression (``a and b`` / ``a or b`` whose value is
    kept), the value that makes Python evaluate the next operand (``pred`` is kept to rebuild
    the expression); None for other control flow (``if``). Raises when the expression's last
    operand is not a comparison."""
    frame = user_frame(2)
    if frame is None:
        return None
    jump = _jump_at(frame.f_code, frame.f_lasti)
    if jump is None:
        return None
    check_pending()
    items = _items()
    open_ = next((o for o in reversed(items) if o.frame is frame), None)
    if open_ is None:
        region = _region(frame.f_code, frame.f_lasti)
        if region is None:
            return None
        if region.last is None or region.last.opname != "COMPARE_OP":
            raise NKIError(
                "'and' / 'or' between mask predicates is supported when the last operand is a "
                "comparison (mask=(ix < n or iy < m)); write a mask built with '&' or '~' "
                "first, or assign the condition to a variable before the comparison",
                code="err_unsupported_expression_in_mask",
                loc=user_loc(),
            )
        open_ = _Open(frame, region, user_loc())
        items.append(open_)
    open_.operands.append((pred, jump))
    return not jump.when


def join_pending(pred: Any) -> Any:
    """A comparison just made ``pred``: when it is the last operand of a pending mask
    expression in the same frame, the whole expression (a Pred or a Disj)."""
    items = _items()
    if not items:
        return pred
    frame = user_frame(2)
    check_pending()
    for o in reversed(items):
        if o.frame is frame and o.region.last is not None and frame.f_lasti == o.region.last.offset:
            items.remove(o)
            return _rebuild(o, pred)
    return pred


def _rebuild(o: _Open, last: Any) -> Any:
    """The value of the expression from the jumps its operands would take."""
    ops = o.operands
    starts = {j.next_start: k + 1 for k, (_, j) in enumerate(ops)}
    code = o.frame.f_code
    memo: dict[int, Any] = {}

    def landing(j: _Jump) -> int:
        """Where a taken jump ends up: a kept operand whose truth is known (``j.when``) may
        land on the test of an enclosing ``and`` / ``or``, which then jumps or not."""
        target, seen = j.target, 0
        while target != o.region.end and target not in starts and seen < len(ops) + 2:
            nxt = _kept_test_at(code, target) if j.keeps else None
            if nxt is None:
                break
            target, seen = nxt.target if nxt.when == j.when else nxt.next_start, seen + 1
        return target

    def value(k: int) -> Any:
        if k == len(ops):
            return last
        if k in memo:
            return memo[k]
        p, j = ops[k]
        target = landing(j)
        if target == o.region.end and j.keeps:
            taken: Any = j.when  # the operand itself is the value: True after `or`, ...
        elif target in starts:
            taken = value(starts[target])
        else:
            raise _unsupported("a boolean expression this tracer cannot read")
        on_true, on_false = (taken, value(k + 1)) if j.when else (value(k + 1), taken)
        out = _ite(p, on_true, on_false)
        memo[k] = out
        return out

    return value(0)


def _kept_test_at(code: types.CodeType, offset: int) -> _Jump | None:
    """The value-keeping jump that tests the value on the stack at ``offset`` (3.12+: after
    ``COPY 1``), or None."""
    ins, index = _code_table(code)
    i = index.get(offset)
    if i is None:
        return None
    if ins[i].opname == "COPY" and i + 1 < len(ins):
        i += 1
    j = _jump_at(code, ins[i].offset)
    return j if j is not None and j.keeps else None


def _ite(p: Any, on_true: Any, on_false: Any) -> Any:
    """``on_true where p else on_false``."""
    if on_false is False:
        return conj(p, on_true)
    if on_true is True:
        return disj(p, on_false)
    if set(_terms(on_false)) <= set(_terms(on_true)):  # `(a and b) or c`: c wherever a is
        return disj(conj(p, on_true), on_false)
    return disj(conj(p, on_true), conj(negate(p), on_false))


def clear_pending() -> None:
    """Forget pending mask expressions (a trace ended: their frames are done)."""
    _items().clear()


# --------------------------------------------------------------------------------------------
# Instructions with a disjunctive mask: one per disjoint piece
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MaskCover:
    """The mask of an instruction traced with ``or``: disjoint conjunctions over ``shape`` (the
    tile the mask was given for). Trace-level only: ``expand_covers`` replaces the instruction
    by one per piece before the IR leaves the tracer."""

    pieces: tuple[Mask, ...]
    shape: tuple[int, ...]

    def __str__(self) -> str:
        return " or ".join(f"[{m}]" for m in self.pieces)


# kinds whose mask only selects the destination elements written, each computed independently
# of the others: splitting one into disjoint pieces writes the same values
_SPLITTABLE = {"copy", "dma", "ew", "memset", "const", "select", "transpose", "gather", "matmul",
               "atomic_rmw", "all_reduce", "softmax", "rms_norm", "reshape", "isa"}  # fmt: skip
_RANDOM = "it draws random numbers or sets the random state, and each piece would again"
_REDUCES = "its mask selects the elements it reduces, and each piece would reduce only its own"
SEARCHES = "its mask selects the elements it searches, and each piece would search only its own"
_ACROSS = "its mask selects the partitions it reduces across, and each piece would reduce its own"
_WHY_NOT = {"reduce": _REDUCES, "rand": _RANDOM, "dropout": _RANDOM, "seed": _RANDOM,
            "isa.bn_stats": _REDUCES, "isa.tensor_reduce": _REDUCES, "isa.dropout": _RANDOM,
            "isa.rand2": _RANDOM, "isa.rand_set_state": _RANDOM,
            "isa.nc_match_replace8": SEARCHES, "isa.tensor_partition_reduce": _ACROSS}  # fmt: skip


def expand_covers(body: list[Any], tensors: dict[str, Any]) -> list[Any]:
    """``body`` with every instruction whose mask is a MaskCover emitted once per piece."""
    out: list[Any] = []
    for node in body:
        if isinstance(node, Loop):
            out.append(
                dataclasses.replace(node, body=tuple(expand_covers(list(node.body), tensors)))
            )
        elif isinstance(node, Instr) and isinstance(node.mask, MaskCover):
            _check_splittable(node, tensors)
            out.extend(dataclasses.replace(node, mask=m) for m in node.mask.pieces)
        else:
            out.append(node)
    return out


def _check_splittable(instr: Instr, tensors: dict[str, Any]) -> None:
    why = _WHY_NOT.get(instr.kind) or _WHY_NOT.get(f"{instr.kind}.{instr.op}")
    if why in (_REDUCES, SEARCHES) and _rows_only(instr.mask):
        return  # (each partition reduces or searches its own elements: whole rows split cleanly)
    if why is None:
        why = _split_problem(instr, tensors)
    if why is not None:
        raise or_refused(instr.api or instr.op, why, instr.loc)


def _rows_only(cover: Any) -> bool:
    """Whether every piece of ``cover`` selects whole partitions (conditions on axis 0 only)."""
    return all(not any(c.expr.coeffs[1:]) for m in cover.pieces for c in m.conds)


def or_refused(api: str, why: str, loc: Any) -> NKIError:
    """The error of a mask built with ``or`` on a call that cannot run once per piece."""
    return NKIError(
        f"a mask built with 'or' is emitted as one instruction per disjoint piece, which "
        f"'{api}' cannot be: {why}. Write it with a conjunction mask (&, and) per case instead",
        code="err_unsupported_expression_in_mask",
        loc=loc if isinstance(loc, SrcLoc) else None,
    )


def _split_problem(instr: Instr, tensors: dict[str, Any]) -> str | None:
    cover = instr.mask
    assert isinstance(cover, MaskCover)
    if instr.kind not in _SPLITTABLE:
        return "its mask does not only select the elements it writes"
    if instr.dst is None or tuple(instr.dst.shape) != tuple(cover.shape):
        return "its mask selects the elements it reads, not the ones it writes"
    if any(isinstance(v, Access) for _, v in instr.attrs):
        return "it writes a second output (reduce_res, ...) computed over the masked elements"
    base = _base(instr.dst.tensor, tensors)
    for s in instr.srcs:
        if isinstance(s, Access) and _touches(s, base, tensors) and s != instr.dst:
            return "it reads its own destination through another index"
    return None


def _base(name: str, tensors: dict[str, Any]) -> str:
    t = tensors.get(name)
    return getattr(t, "alias_of", None) or name if t is not None else name


def _touches(acc: Access, base: str, tensors: dict[str, Any]) -> bool:
    if _base(acc.tensor, tensors) == base:
        return True
    return any(_touches(a, base, tensors) for _, a in acc.indirect)
