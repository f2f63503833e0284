"""The keys the batched backend's caches are built from (``context.py``, ``masks.py``): each
symbol as a plain tuple, and the symbols of an access, a mask and an affine expression. A Sym's
dataclass hash and equality are Python calls; these keys hash in C, once per lookup."""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from nki.ir import Access, Instr, Sym

KEYS_MAX = 4096  # entries of each table here (each starts again past it)

# id(sym object) -> (the sym, its key): the key is a plain tuple of the symbol's class and
# fields, hashed in C (a Sym's dataclass hash and equality are Python calls, several times
# slower in the walk's lookups). Bounded; the sym is kept so that its id is not reused.
_SYM_KEYS: dict[int, tuple[Sym, tuple]] = {}
_KEYS: dict[int, tuple[Any, tuple]] = {}  # id(access / affine) -> (it, its symbols' keys)


def sym_key(s: Sym) -> tuple:
    """The key ``BCtx.values`` holds symbol ``s``'s value under (equal symbols, equal keys)."""
    hit = _SYM_KEYS.get(id(s))
    if hit is not None and hit[0] is s:
        return hit[1]
    key = (type(s).__name__, *(getattr(s, f.name) for f in fields(s)))
    if len(_SYM_KEYS) >= KEYS_MAX:
        _SYM_KEYS.clear()
    _SYM_KEYS[id(s)] = (s, key)
    return key


def keys_of(acc: Access) -> tuple[tuple, ...]:
    """The keys of the symbols of an access's index expressions (each once)."""
    hit = _KEYS.get(id(acc))
    if hit is not None and hit[0] is acc:
        return hit[1]
    keys = tuple(dict.fromkeys(sym_key(s) for e in acc.index for s, _ in e.base.terms))
    if len(_KEYS) >= KEYS_MAX:
        _KEYS.clear()
    _KEYS[id(acc)] = (acc, keys)
    return keys


def terms_of(base: Any) -> tuple[tuple[tuple, int], ...]:
    """An affine expression's terms with each symbol's key: (key, coefficient)."""
    hit = _KEYS.get(id(base))
    if hit is not None and hit[0] is base:
        return hit[1]
    terms = tuple((sym_key(s), k) for s, k in base.terms)
    if len(_KEYS) >= KEYS_MAX:
        _KEYS.clear()
    _KEYS[id(base)] = (base, terms)
    return terms


StateOf = Callable[[dict], Any] | None  # the values of some symbols in ``BCtx.values``


def _state_of(keys: tuple[tuple, ...]) -> StateOf:
    """A function giving the values of the symbols ``keys`` in ``BCtx.values`` (one value for
    one symbol, a tuple for several; None: no symbol): part of a cache key."""
    return operator.itemgetter(*keys) if keys else None


# id(instr) -> (instr, ``_state_of`` its mask's symbols): bounded, the instruction kept
MASK_STATES: dict[int, tuple[Instr, StateOf]] = {}


def mask_state(instr: Instr) -> tuple[Instr, StateOf]:
    """``MASK_STATES``'s entry of ``instr`` (a masked instruction)."""
    hit = MASK_STATES.get(id(instr))
    if hit is not None and hit[0] is instr:
        return hit
    assert instr.mask is not None
    terms = (s for c in instr.mask.conds for s, _ in c.expr.base.terms)
    got = (instr, _state_of(tuple(dict.fromkeys(sym_key(s) for s in terms))))
    if len(MASK_STATES) >= KEYS_MAX:
        MASK_STATES.clear()
    MASK_STATES[id(instr)] = got
    return got


_WHOLE: dict[int, tuple[Access, bool]] = {}


def whole(acc: Access) -> bool:
    """Whether the access is its tensor's element order itself: tile axis d walks tensor axis d
    from 0 in unit steps, with no symbol and no indirect index (it covers the whole tensor when
    the storage has the access's shape)."""
    hit = _WHOLE.get(id(acc))
    if hit is not None and hit[0] is acc:
        return hit[1]
    shape = acc.shape
    ok = not acc.indirect and len(acc.index) == len(shape)
    for d, e in enumerate(acc.index if ok else ()):  # (an axis of one position: any coefficient)
        steps = [(k, 1 if t == d else 0) for t, k in enumerate(e.coeffs) if shape[t] > 1]
        ok = ok and not e.base.terms and e.base.const == 0 and all(k == u for k, u in steps)
    if len(_WHOLE) >= KEYS_MAX:
        _WHOLE.clear()
    _WHOLE[id(acc)] = (acc, ok)
    return ok


# id(access) -> (the access, ``whole``, ``_state_of`` its symbols): what a view of the access
# looks up, in one lookup. Bounded, the access kept.
ACCESS_FACTS: dict[int, tuple[Access, bool, StateOf]] = {}


def access_facts(acc: Access) -> tuple[Access, bool, StateOf]:
    """``ACCESS_FACTS``'s entry of ``acc``."""
    hit = ACCESS_FACTS.get(id(acc))
    if hit is not None and hit[0] is acc:
        return hit
    got = (acc, whole(acc), _state_of(keys_of(acc)))
    if len(ACCESS_FACTS) >= KEYS_MAX:
        ACCESS_FACTS.clear()
    ACCESS_FACTS[id(acc)] = got
    return got
