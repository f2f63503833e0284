"""Executors of the LNC=2 synchronisation instructions (IR kind ``lnc``: ``nisa.core_barrier``,
``nisa.sendrecv``, ``nki.collectives``).

An ``lnc`` instruction is a meeting point of the two cores (``executors.COLLECTIVES``): each
core's walk runs the executor once to post its input and stops; when both cores have stopped,
:func:`meet` checks that they stopped at matching instructions and computes what each receives;
each core's walk then runs the executor again to write it. A core that ends, or stops at a
different kind of meeting, while the other waits is a located error (on hardware: a hang)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nki.errors import NKIRuntimeError
from nki.ir import Access, Instr

from .. import numerics
from ..executors import executes
from ..memory import Ctx
from ..poison import REPORT, RULES
from .formulas import alu

RULES[("lnc", "*")] = REPORT

_POSTED = "lnc.posted"  # ctx.state key: what this core posted at the current meeting
_RESULT = "lnc.result"  # ctx.state key: what this core receives

# op -> combine(instrs by core, posted values by core) -> result per core
COMBINERS: dict[str, Callable[[dict[int, Instr], dict[int, Any]], dict[int, Any]]] = {}


@executes("lnc")
def _lnc(instr: Instr, ctx: Ctx) -> None:
    """First run: post this core's input. Second run (after :func:`meet`): write the result."""
    if _RESULT in ctx.state:
        result = ctx.state.pop(_RESULT)
        if result is not None:
            WRITERS.get(instr.op, _write_dst)(instr, ctx, result)
        return
    ctx.state[_POSTED] = POSTERS.get(instr.op, _post_nothing)(instr, ctx)


def _post_nothing(instr: Instr, ctx: Ctx) -> Any:
    return None


def _post_src(instr: Instr, ctx: Ctx) -> Any:
    src = instr.srcs[0]
    assert isinstance(src, Access)
    return np.array(ctx.read(src), copy=True), ctx.decl(src.tensor).dtype


def _write_dst(instr: Instr, ctx: Ctx, value: Any) -> None:
    assert instr.dst is not None
    ctx.write(instr.dst, value)


POSTERS: dict[str, Callable[[Instr, Ctx], Any]] = {"sendrecv": _post_src}
WRITERS: dict[str, Callable[[Instr, Ctx, Any], None]] = {}


def _where(instr: Instr) -> str:
    return f"'{instr.api}' at line {instr.loc.line if instr.loc else '?'}"


def meet(waiting: dict[tuple[int, ...], Instr], ctxs: dict[tuple[int, ...], Ctx]) -> None:
    """Both cores stopped at an ``lnc`` instruction: check they match, compute and hand out
    each core's result."""
    by_core = {ctxs[inst].core: (inst, instr) for inst, instr in waiting.items()}
    first_inst, first = next(iter(waiting.items()))
    ctx0 = ctxs[first_inst]
    if len(by_core) < len(ctxs) or len(ctxs) < 2:
        gone = sorted(set(c.core for c in ctxs.values()) - set(by_core))
        raise NKIRuntimeError(
            f"core {ctx0.core} waits at {_where(first)} for the other core of the LNC=2 "
            f"launch, but core(s) {gone} finished without reaching it (on hardware the kernel "
            "hangs); both cores must run the same barriers, sendrecvs and collectives",
            code="err_collective_mismatch",
        ).with_context(loc=first.loc, instance=first_inst, core=ctx0.core)
    instrs = {c: i for c, (_, i) in by_core.items()}
    ops = {i.op for i in instrs.values()}
    if len(ops) > 1 or any(i.kind != "lnc" for i in instrs.values()):
        desc = "; ".join(f"core {c} at {_where(i)}" for c, i in sorted(instrs.items()))
        raise NKIRuntimeError(
            f"the two cores of an LNC=2 launch reached different synchronisations ({desc}); "
            "both cores must run the same barriers, sendrecvs and collectives in the same order",
            code="err_collective_mismatch",
        ).with_context(loc=first.loc, instance=first_inst, core=ctx0.core)
    posted = {c: ctxs[inst].state.pop(_POSTED, None) for c, (inst, _) in by_core.items()}
    results = COMBINERS.get(first.op, lambda i, p: {c: None for c in i})(instrs, posted)
    for c, (inst, _) in by_core.items():
        ctxs[inst].state[_RESULT] = results[c]


def _sendrecv(instrs: dict[int, Instr], posted: dict[int, Any]) -> dict[int, Any]:
    out = {}
    for c, instr in instrs.items():
        frm = instr.attr("recv_from")
        peer = instrs[frm]
        problem = ""
        if peer.attr("send_to") != c:
            problem = f"core {frm} sends to core {peer.attr('send_to')}, not to core {c}"
        elif peer.attr("pipe_id") != instr.attr("pipe_id"):
            problem = (
                f"core {c} uses pipe_id {instr.attr('pipe_id')} and core {frm} pipe_id "
                f"{peer.attr('pipe_id')}"
            )
        else:
            value, dtype = posted[frm]
            dst = instr.dst
            assert dst is not None
            if tuple(value.shape) != tuple(dst.shape):
                problem = (
                    f"core {frm} sends a {list(value.shape)} {dtype} tile but core {c} receives "
                    f"into {list(dst.shape)}"
                )
            out[c] = value
        if problem:
            raise NKIRuntimeError(
                f"'nisa.sendrecv': core {c} receives from core {frm} ({_where(instr)}), but "
                f"{problem}; the two calls must name each other and use the same pipe_id",
                code="err_collective_mismatch",
            ).with_context(loc=instr.loc, core=c)
    return out


COMBINERS["sendrecv"] = _sendrecv


# ---- nki.collectives: the ranks are the cores ---------------------------------------------------
_CC_KEYS = ("groups", "op", "dim", "pairs")


def _agree(instrs: dict[int, Instr]) -> None:
    """Both cores called the same collective with the same groups and parameters."""
    (c0, i0), (c1, i1) = sorted(instrs.items())[:2]
    for key in _CC_KEYS:
        if i0.attr(key) != i1.attr(key):
            raise NKIRuntimeError(
                f"'{i0.api}': core {c0} ({_where(i0)}) and core {c1} ({_where(i1)}) call it "
                f"with different {key} ({i0.attr(key)!r} and {i1.attr(key)!r}); every rank "
                "must pass the same parameters",
                code="err_collective_mismatch",
            ).with_context(loc=i0.loc, core=c0)


def _fold(op: str, values: list[np.ndarray]) -> np.ndarray:
    acc = numerics.to_compute(values[0])
    for v in values[1:]:
        acc = alu(op, acc, numerics.to_compute(v))
    return acc


def _per_group(
    fn: Callable[[Instr, list[np.ndarray], int], np.ndarray | None],
) -> Callable[[dict[int, Instr], dict[int, Any]], dict[int, Any]]:
    """A combiner that runs ``fn(instr, the group's sources in rank order, my position)``."""

    def combine(instrs: dict[int, Instr], posted: dict[int, Any]) -> dict[int, Any]:
        _agree(instrs)
        out: dict[int, Any] = {}
        for c, instr in instrs.items():
            group = next(g for g in instr.attr("groups") if c in g)
            out[c] = fn(instr, [posted[r][0] for r in group], group.index(c))
        return out

    return combine


def _all_reduce(instr: Instr, vals: list[np.ndarray], me: int) -> np.ndarray:
    return _fold(instr.attr("op"), vals)


def _all_gather(instr: Instr, vals: list[np.ndarray], me: int) -> np.ndarray:
    return np.concatenate(vals, axis=instr.attr("dim"))


def _reduce_scatter(instr: Instr, vals: list[np.ndarray], me: int) -> np.ndarray:
    return np.split(_fold(instr.attr("op"), vals), len(vals), axis=instr.attr("dim"))[me]


def _all_to_all(instr: Instr, vals: list[np.ndarray], me: int) -> np.ndarray:
    dim = instr.attr("dim")
    return np.concatenate([np.split(v, len(vals), axis=dim)[me] for v in vals], axis=dim)


def _permute(instrs: dict[int, Instr], posted: dict[int, Any]) -> dict[int, Any]:
    _agree(instrs)
    pairs = next(iter(instrs.values())).attr("pairs")
    got: dict[int, Any] = {c: None for c in instrs}
    for src, dst in pairs:
        got[dst] = posted[src][0]
    return got


for _op, _fn in (
    ("all_reduce", _all_reduce),
    ("all_gather", _all_gather),
    ("reduce_scatter", _reduce_scatter),
    ("all_to_all", _all_to_all),
):
    COMBINERS[_op] = _per_group(_fn)
    POSTERS[_op] = _post_src
COMBINERS["collective_permute"] = _permute
POSTERS["collective_permute"] = _post_src


# ring collectives: each rank receives what the previous rank of its group posted
def _from_previous(instr: Instr, vals: list[np.ndarray], me: int) -> np.ndarray:
    return vals[(me - 1) % len(vals)]


def _post_reduced(instr: Instr, ctx: Ctx) -> Any:
    """op(srcs0, srcs1) of this core, in fp32 (``permute_implicit_reduce``)."""
    a, b = (np.asarray(ctx.read(s)) for s in instr.srcs[:2])
    return _fold(instr.attr("op"), [a, b]), np.dtype(np.float32)


COMBINERS["permute_implicit"] = _per_group(_from_previous)
POSTERS["permute_implicit"] = _post_src
COMBINERS["permute_implicit_reduce"] = _per_group(_from_previous)
POSTERS["permute_implicit_reduce"] = _post_reduced


# ---- NkiScalar arithmetic: fixed-width two's-complement wraparound ------------------------------
