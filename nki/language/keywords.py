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

from ..errors import NKITypeError, user_loc

IGNORED: dict[str, frozenset[str]] = {
    # a scheduling hint of the classic compiler's loops (no effect on values)
    "affine_range": frozenset({"precise_schedule"}),
    "sequential_range": frozenset({"precise_schedule"}),
}


def _valid(fn: Callable[..., Any]) -> list[str]:
    sig = inspect.signature(fn)
    return [
        p.name
        for p in sig.parameters.values()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and not p.name.startswith("_")
    ]


def checked(fn: Callable[..., Any], api: str) -> Callable[..., Any]:
    """``fn`` (which swallows unknown keywords) with its keywords checked."""
    params = inspect.signature(fn).parameters
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return fn
    valid = _valid(fn)
    allowed = frozenset(valid) | IGNORED.get(api, frozenset())

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
        return fn(*args, **kwargs)

    return call


def check_module(namespace: dict[str, Any], names: list[str]) -> None:
    """Replace the functions ``names`` of a module namespace by their checked versions."""
    for name in names:
        fn = namespace.get(name)
        if inspect.isfunction(fn):
            namespace[name] = checked(fn, name)
