"""Keyword checking of the ``nki.language`` calls: a keyword a call does not take is a located
error naming the closest valid one (``msk=`` -> "did you mean 'mask'?"), instead of being
swallowed by a ``**kwargs`` catch-all.

``IGNORED`` lists, per call (``"*"``: every call), the keywords the classic API accepted and
nki-sim ignores on purpose because they only steer the real compiler's code generation."""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from typing import Any

from ..errors import NKITypeError, binding_failed, user_loc

IGNORED: dict[str, frozenset[str]] = {
    # the instruction's label in the compiler's output (classic calls took **kwargs)
    "*": frozenset({"name"}),
    # scheduling hints of the classic compiler's loops (no effect on values): the directives
    # are ``nki.compiler.no_reorder()``, the order the simulator runs instructions in anyway
    "affine_range": frozenset({"precise_schedule", "directives"}),
    "sequential_range": frozenset({"precise_schedule", "directives"}),
    # whether the compiler may defer the fill to the tile's first use (AWS's flash attention
    # passes it): the tile holds the fill value either way
    **dict.fromkeys(("full", "zeros", "ones"), frozenset({"lazy_initialization"})),
}


def _valid(fn: Callable[..., Any]) -> list[str]:
    sig = inspect.signature(fn)
    return [
        p.name
        for p in sig.parameters.values()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and not p.name.startswith("_")
    ]


def checked(fn: Callable[..., Any], api: str) -> Callable[..., Any]:
    """``fn`` with its keywords checked (also where it swallows unknown ones), and a call whose
    arguments do not bind (one missing, one too many) a located error with its signature."""
    params = inspect.signature(fn).parameters
    valid = _valid(fn)
    named = [p.name for p in params.values() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    dropped = (IGNORED["*"] | IGNORED.get(api, frozenset())) - frozenset(named)
    allowed = frozenset(named) | dropped
    empty = inspect.Parameter.empty
    sig = inspect.Signature([p.replace(annotation=empty) for p in params.values()])

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        for k in kwargs:
            if k not in allowed:
                close = difflib.get_close_matches(k, valid, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise NKITypeError(
                    f"'nl.{api}' got an unexpected keyword argument '{k}'{hint} (valid: "
                    f"{', '.join(valid)})",
                    code="err_unexpected_keyword_argument",
                    loc=user_loc(),
                )
        for k in dropped.intersection(kwargs):
            del kwargs[k]
        try:
            return fn(*args, **kwargs)
        except TypeError as e:
            if not binding_failed(e):
                raise  # raised inside the function
            text = str(e).replace(f"{fn.__name__}()", f"nl.{api}()")
            raise NKITypeError(
                f"{text} (signature: nl.{api}{sig})", code="err_invalid_argument", loc=user_loc()
            ) from None

    return call


def check_module(namespace: dict[str, Any], names: list[str]) -> None:
    """Replace the functions ``names`` of a module namespace by their checked versions."""
    for name in names:
        fn = namespace.get(name)
        if inspect.isfunction(fn):
            namespace[name] = checked(fn, name)
