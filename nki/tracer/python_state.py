"""The Python side of a symbolic loop in the current API, read from the kernel's bytecode.

In the current API a loop is Python's ``range``: every iteration runs the body with a plain int.
nki-sim traces the body once with a symbolic iterator instead, which gives the same program
only when the Python state the body leaves behind is the state it started from. This module
finds out, for one ``for`` statement:

* whether a loop call is the iterable of a ``for`` statement (``for i in nl.affine_range(n)``)
  rather than an argument of ``list`` / ``zip`` / a comprehension, which need real ints;
* which variables carry a value from one iteration to the next (read in the body before the
  body writes them, and written by it: ``off += 128``, ``acc = nl.add(acc, t)``), by liveness
  analysis of the function's bytecode;
* a fingerprint of the objects the body reads, so that an in-place change (``tiles.append(t)``,
  ``cfg.count += 1``, ``d[k] = v``) is seen when the body ends.

Any of these makes the trace unroll that loop (see ``nki.tracer.state.symbolic_loop``)."""

from __future__ import annotations

import dis
import functools
import sys
import types
from typing import Any

import numpy as np

# opcodes by what they do to a variable (CPython 3.10-3.13 names); values are namespaces
_USES = {
    "LOAD_FAST": "l", "LOAD_FAST_CHECK": "l", "LOAD_FAST_AND_CLEAR": "l", "LOAD_DEREF": "l",
    "LOAD_CLASSDEREF": "l", "LOAD_FROM_DICT_OR_DEREF": "l", "LOAD_FAST_LOAD_FAST": "l",
    "LOAD_GLOBAL": "g", "LOAD_NAME": "g",
}  # fmt: skip
_DEFS = {
    "STORE_FAST": "l", "DELETE_FAST": "l", "STORE_DEREF": "l", "DELETE_DEREF": "l",
    "STORE_FAST_STORE_FAST": "l", "STORE_GLOBAL": "g", "DELETE_GLOBAL": "g", "STORE_NAME": "g",
    "DELETE_NAME": "g",
}  # fmt: skip
_UNCONDITIONAL = {
    "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP_ABSOLUTE", "JUMP",
    "JUMP_NO_INTERRUPT",
}  # fmt: skip
_TERMINAL = {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"}
_JUMPS = set(dis.hasjrel) | set(dis.hasjabs)
_COMPREHENSIONS = ("<listcomp>", "<genexpr>", "<setcomp>", "<dictcomp>")
_MAX_ITEMS = 4096  # containers larger than this are compared by identity and length only
# type -> the object a value of that type stands for (``t += x`` rebinds ``t`` to a marker of
# the same tile: the tracer's handles register it), so the rebinding is not a change
SAME_AS: dict[type, Any] = {}


@functools.lru_cache(maxsize=512)
def _instructions(code: types.CodeType) -> tuple[dis.Instruction, ...]:
    return tuple(dis.get_instructions(code))


def for_statement(frame: types.FrameType) -> int | None:
    """The offset of the ``FOR_ITER`` when the call running in ``frame`` is the iterable of a
    ``for`` statement (the call is followed by ``GET_ITER``, ``FOR_ITER``); None otherwise."""
    code = frame.f_code
    if code.co_name in _COMPREHENSIONS:
        return None
    ins = _instructions(code)
    # f_lasti: the call or its last cache entry; EXTENDED_ARG prefixes a long jump
    after = [i for i in ins if i.offset > frame.f_lasti and i.opname != "EXTENDED_ARG"][:2]
    if len(after) == 2 and after[0].opname == "GET_ITER" and after[1].opname == "FOR_ITER":
        return after[1].offset
    return None


def _names(ins: dis.Instruction) -> tuple[str, ...]:
    v = ins.argval
    return tuple(v) if isinstance(v, tuple) else (v,)


def _effects(ins: dis.Instruction) -> list[tuple[str, str]]:
    """("use" / "def", namespaced name) in execution order."""
    op = ins.opname
    if op == "STORE_FAST_LOAD_FAST":
        a, b = _names(ins)
        return [("def", "l:" + a), ("use", "l:" + b)]
    if op in _USES:
        return [("use", f"{_USES[op]}:{n}") for n in _names(ins)]
    if op in _DEFS:
        return [("def", f"{_DEFS[op]}:{n}") for n in _names(ins)]
    return []


def _successors(code: types.CodeType) -> list[list[int]]:
    ins = _instructions(code)
    index = {i.offset: k for k, i in enumerate(ins)}
    handlers: list[tuple[int, int, int]] = []
    parse = getattr(dis, "_parse_exception_table", None)
    if parse is not None:  # 3.11+: an exception may jump from anywhere in a range to its handler
        handlers = [(e.start, e.end, e.target) for e in parse(code)]
    out: list[list[int]] = []
    for k, i in enumerate(ins):
        succ: list[int] = []
        if i.opcode in _JUMPS and isinstance(i.argval, int) and i.argval in index:
            succ.append(index[i.argval])
        if i.opname not in _UNCONDITIONAL and i.opname not in _TERMINAL and k + 1 < len(ins):
            succ.append(k + 1)
        succ += [index[t] for s, e, t in handlers if s <= i.offset < e and t in index]
        out.append(succ)
    return out


@functools.lru_cache(maxsize=512)
def _live_in(code: types.CodeType) -> tuple[frozenset[str], ...]:
    """Per instruction, the variables live on entry (a backward data-flow fixpoint)."""
    ins = _instructions(code)
    succ = _successors(code)
    effects = [_effects(i) for i in ins]
    live: list[frozenset[str]] = [frozenset()] * len(ins)
    changed = True
    while changed:
        changed = False
        for k in range(len(ins) - 1, -1, -1):
            cur: set[str] = set()
            for s in succ[k]:
                cur |= live[s]
            for what, name in reversed(effects[k]):
                if what == "def":
                    cur.discard(name)
                else:
                    cur.add(name)
            new = frozenset(cur)
            if new != live[k]:
                live[k], changed = new, True
    return tuple(live)


@functools.lru_cache(maxsize=512)
def loop_body(code: types.CodeType, for_offset: int) -> tuple[frozenset[str], frozenset[str]]:
    """(carried, read) of the ``for`` statement at ``for_offset``: the variables the body reads
    before writing them and writes (a value carried to the next iteration), and every variable
    the body reads but never writes. Names are namespaced ``l:`` (locals, cells) and ``g:``
    (globals)."""
    ins = _instructions(code)
    k = next(j for j, i in enumerate(ins) if i.offset == for_offset)
    exit_offset = ins[k].argval if isinstance(ins[k].argval, int) else None
    body = [j for j in range(k + 1, len(ins)) if exit_offset is None or ins[j].offset < exit_offset]
    defs = {n for j in body for what, n in _effects(ins[j]) if what == "def"}
    uses = {n for j in body for what, n in _effects(ins[j]) if what == "use"}
    entry = _live_in(code)[k + 1] if k + 1 < len(ins) else frozenset()
    return frozenset(entry & defs), frozenset(uses - defs)


# objects of these packages (and of the standard library: a threading.Barrier the kernel waits
# on) are compared by identity: their state is not the kernel's
_LIBRARIES = frozenset(
    {"nki", "simulator", "frontends", "numpy", "ml_dtypes", "torch", "jax", "jaxlib"}
) | frozenset(sys.stdlib_module_names)
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.MethodType)


def _plain(v: object) -> bool:
    """An object of the kernel author's own class, whose attributes the body may change."""
    top = (type(v).__module__ or "").partition(".")[0]
    return hasattr(v, "__dict__") and top not in _LIBRARIES and not isinstance(v, _OPAQUE)


def fingerprint(v: object, depth: int = 3) -> object:
    """What identifies ``v`` and the mutable state reachable from it (containers, attributes of
    the author's objects, small NumPy arrays), compared by identity below ``depth``."""
    same = SAME_AS.get(type(v))
    if same is not None:
        v = same(v)
    if depth <= 0:
        return id(v)
    if isinstance(v, (list, tuple)):
        if len(v) > _MAX_ITEMS:
            return (id(v), len(v))
        return (id(v), tuple(fingerprint(e, depth - 1) for e in v))
    if isinstance(v, dict):
        if len(v) > _MAX_ITEMS:
            return (id(v), len(v))
        return (id(v), tuple((id(k), fingerprint(x, depth - 1)) for k, x in v.items()))
    if isinstance(v, (set, frozenset)):
        return (id(v), frozenset(id(e) for e in v))
    if isinstance(v, np.ndarray):
        data = v.tobytes() if v.nbytes <= 1 << 16 else b""
        return (id(v), v.shape, hash(data))
    if _plain(v):
        return (id(v), fingerprint(dict(vars(v)), depth - 1))
    return id(v)


def snapshot(frame: types.FrameType, names: frozenset[str]) -> dict[str, Any]:
    """The fingerprint of each variable in ``names`` that is bound in ``frame``."""
    local = frame.f_locals
    out: dict[str, Any] = {}
    for n in names:
        space, _, name = n.partition(":")
        src = local if space == "l" else frame.f_globals
        if name in src:
            out[n] = fingerprint(src[name])
    return out


def changed(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """The first variable whose fingerprint differs (or that was bound or unbound), or None."""
    for n in sorted(set(before) | set(after)):
        if before.get(n, _UNSET) != after.get(n, _UNSET):
            return n.partition(":")[2]
    return None


_UNSET = object()
