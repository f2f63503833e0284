"""Uninitialised-value ("poison") tracking under ``checks="full"``.

Like valgrind's memcheck, an on-chip instruction may compute on uninitialised lanes (e.g. the
masked-off rows of a ragged tile): its results are marked uninitialised instead of reported,
and the report comes when such data reaches HBM or an instruction whose rule is ``REPORT``.

``RULES`` says, per instruction (``(kind, op)``, ``"*"`` for every op of a kind), how
uninitialised input elements reach the result when operands and result are on chip:

* ``ELEMENT``: the same position (broadcast);
* ``ROW``: the whole result row of the partition;
* ``MATMUL``: the output rows / columns of the operand columns;
* ``TRANSPOSE``: the mirror element;
* ``REPORT``: none; reading an uninitialised element is reported.

Every executed instruction needs an entry (``rule_of`` raises otherwise): a new instruction
chooses its rule explicitly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import nki.isa_spec as spec
from nki.errors import NKIRuntimeError
from nki.ir import Access, Instr

ELEMENT, ROW, MATMUL, TRANSPOSE, REPORT = "element", "row", "matmul", "transpose", "report"

Rule = str | Callable[[Instr], str]

RULES: dict[tuple[str, str], Rule] = {
    # nki.language kinds
    ("ew", "*"): ELEMENT,
    ("copy", "*"): ELEMENT,
    ("dma", "*"): ELEMENT,
    ("select", "*"): ELEMENT,
    ("dropout", "*"): ELEMENT,
    ("reduce", "*"): ROW,
    ("softmax", "*"): ROW,
    ("rms_norm", "*"): ROW,
    ("matmul", "*"): MATMUL,
    ("transpose", "*"): TRANSPOSE,
    ("memset", "*"): REPORT,
    ("print", "*"): REPORT,
    ("all_reduce", "*"): REPORT,
    ("reshape", "*"): REPORT,
    ("gather", "*"): REPORT,
    ("seed", "*"): REPORT,
    ("rand", "*"): REPORT,
    ("const", "*"): REPORT,
    ("atomic_rmw", "*"): REPORT,
    # nki.isa instructions: the rule of each is a column of the instruction spec
    ("isa", "*"): lambda instr: spec.by_ir_op(instr.op).poison_rule(dict(instr.attrs)),
}


def rule_of(instr: Instr) -> str:
    """The propagation rule of ``instr`` (one of the constants above)."""
    rule = RULES.get((instr.kind, instr.op))
    if rule is None:
        rule = RULES.get((instr.kind, "*"))
    if rule is None:
        raise NKIRuntimeError(
            f"internal error: no uninitialised-value rule for '{instr.kind}.{instr.op}' "
            "(add it to simulator/poison.py RULES)",
            code="err_internal",
        )
    return rule(instr) if callable(rule) else rule


class Poison:
    """The uninitialised-value state of one instance: the current instruction's rule and the
    result elements it has poisoned so far, and where each tensor's poison came from."""

    def __init__(self) -> None:
        self.rule = REPORT
        self.mask: np.ndarray | None = None  # result elements computed from poison
        self.root: Any = None  # where the current instruction's poison came from
        self.origin: dict[str, Any] = {}  # tensor -> SrcLoc where its poison came from

    def start(self, rule: str) -> None:
        """A new instruction begins (``rule``: REPORT unless it runs wholly on chip)."""
        self.rule, self.mask, self.root = rule, None, None

    def absorb(self, instr: Instr | None, acc: Access, bad: np.ndarray) -> bool:
        """Poison the result elements a read with uninitialised elements ``bad`` reaches;
        False when the read must be reported instead."""
        if self.rule == REPORT:
            return False
        got = _propagated(instr, self.rule, acc, bad)
        if got is None:
            return False
        self.mask = got if self.mask is None else (self.mask | got)
        if self.root is None and instr is not None:
            self.root = self.origin.get(acc.tensor) or instr.loc
        return True

    def written(self, acc: Access) -> np.ndarray:
        """Shadow values for a write: initialised except where the sources were poisoned."""
        if self.mask is None or self.mask.shape != acc.shape:
            return np.ones(acc.shape, dtype=bool)
        if self.mask.any() and self.root is not None:
            self.origin.setdefault(acc.tensor, self.root)
        return ~self.mask


def _propagated(instr: Instr | None, rule: str, acc: Access, bad: np.ndarray) -> np.ndarray | None:
    """The destination elements that a read with uninitialised elements ``bad`` poisons under
    ``rule``, or None when the read must be reported."""
    if instr is None or instr.dst is None:
        return None
    shape = tuple(instr.dst.shape)
    if acc == instr.dst or rule == ELEMENT:  # (an accumulating read of the destination)
        try:
            return np.broadcast_to(bad, shape)
        except ValueError:
            return None
    if rule == ROW:  # per partition: output row p depends on input row p only
        if bad.ndim == 0 or not shape:
            return None
        rows = bad.reshape(bad.shape[0], -1).any(axis=1)
        if bad.shape[0] != shape[0]:
            if bad.shape[0] != 1:
                return None
            rows = np.full(shape[0], rows[0])
        return np.broadcast_to(rows.reshape((-1,) + (1,) * (len(shape) - 1)), shape)
    if rule == TRANSPOSE and bad.ndim == 2 and bad.T.shape == shape:
        return bad.T
    if rule == MATMUL and len(shape) == 2 and bad.ndim == 2:
        # out[m, n] = sum_k x[k, m] * y[k, n]: a bad element of the contraction (partition)
        # axis of an operand column poisons that output row (stationary) or column (moving)
        which = next((i for i, s in enumerate(instr.srcs) if s is acc), None)
        if which is None:
            which = next((i for i, s in enumerate(instr.srcs) if s == acc), None)
        transposed = instr.kind == "isa" or instr.attr("transpose_x", False)
        if which == 0:
            rows = bad.any(axis=0) if transposed else bad.any(axis=1)
            if rows.shape == (shape[0],):
                return np.broadcast_to(rows[:, None], shape)
        elif which == 1:
            cols = bad.any(axis=0)
            if cols.shape == (shape[1],):
                return np.broadcast_to(cols[None, :], shape)
    return None
