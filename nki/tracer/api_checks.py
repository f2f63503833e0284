"""Telling a kernel it broke a documented rule (a row of ``nki/api_rules.py``), in the API
generations the rule holds in.

A rule of both generations is an error (or warning) at once. A rule of one generation is told
when the kernel being traced is of that generation; while the kernel's generation is still
undecided, the breach is kept and told at the end of the trace if the kernel turned out to be
of that generation (:func:`finish`). Warnings always wait for the end of the trace, so a trace
that is restarted (a loop unrolled, a kernel found to be current-API) warns once."""

from __future__ import annotations

import warnings

from .. import api_rules
from ..errors import NKIError, SrcLoc, user_loc
from ..optable import Op
from .state import TraceState, classic_mode, current


def _generation(st: TraceState) -> str | None:
    if st.generation is None and classic_mode():
        return api_rules.CLASSIC
    return st.generation


def broken(key: str, detail: str, loc: SrcLoc | None = None) -> None:
    """The kernel broke rule ``key``; ``detail`` says how, with the values involved. Raises the
    rule's error now, or keeps the breach for :func:`finish` (a warning, or a rule of another
    generation than the kernel's, which may still be decided)."""
    rule = api_rules.get(key)
    loc = loc or user_loc()
    st = current()
    one_generation = rule.generations != api_rules.BOTH
    if st is None and one_generation:
        return  # not in a kernel: no generation to judge by
    gen = _generation(st) if st is not None else None
    if gen is not None and gen not in rule.generations:
        return
    if st is not None and (rule.warning or (gen is None and one_generation)):
        if (rule, detail, loc) not in st.rule_breaches:  # (one call may check a rule twice)
            st.rule_breaches.append((rule, detail, loc))
        return
    _tell(rule, detail, loc)


def finish(st: TraceState, warn: bool = True) -> None:
    """At the end of a trace: raise the first kept breach of a rule of the kernel's (now
    known) generation, then give the warnings (unless ``warn`` is False: a second per-core
    trace of the same kernel)."""
    gen = _generation(st) or api_rules.CLASSIC
    kept = [b for b in st.rule_breaches if gen in b[0].generations]
    for rule, detail, loc in kept:
        if not rule.warning:
            _tell(rule, detail, loc)
    if warn:
        for rule, detail, loc in kept:
            _tell(rule, detail, loc)


def _tell(rule: api_rules.ApiRule, detail: str, loc: SrcLoc) -> None:
    msg = rule.message(detail)
    if rule.warning:
        warnings.warn_explicit(msg, rule.category, loc.file, loc.line)
        return
    cls = rule.category
    assert issubclass(cls, NKIError)
    raise cls(msg, code=rule.code, loc=loc)


def op_on_target(op: Op, api: str) -> None:
    """``op`` (a row of the op table) must exist on the NeuronCore being traced for
    (``Op.since_gen``): rule ``alu.since_gen``."""
    st = current()
    if st is None or op.since_gen <= st.target.gen:
        return
    t = st.target
    what = f"'{api}'" if api == f"nl.{op.name}" else f"'{api}' got op nl.{op.name}"
    broken(
        "alu.since_gen",
        f"{what} on {t.name} (NeuronCore-v{t.gen}); NeuronCore-v{op.since_gen} introduced it",
    )
