"""Keyword checking of the ``nki.language`` calls: a keyword a call does not take is a located
error naming the closest valid one (``msk=`` -> "did you mean 'mask'?"), instead of being
swallowed by a ``**kwargs`` catch-all.

``IGNORED`` lists, per call (``"*"``: every call), the keywords the classic API accepted and
nki-sim ignores on purpose because they only steer the real compiler's code generation.

NKI 0.7 (SDK 2.32) declares the calls' parameters without the classic keyword-only marker
(classic kernels still break rule ``nl.keyword_only`` passing them by position):
``nl.exp(x, nl.bfloat16)``, ``nl.sum(x, 1, nl.float32, True)``, ``nl.zeros_like(x, dt, nl.sbuf)``
pass by position what classic kernels pass by keyword. Past a call's own positional parameters,
its keyword parameters of ``POSITIONAL_TAIL`` bind by position, in that order; ``RENAMED`` maps
the parameter names NKI 0.7 uses where the classic ones differ."""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from typing import Any

from ..errors import NKITypeError, binding_failed, user_loc
from ..tracer.api_checks import broken

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

# (NKI 0.7's order of the parameters after the operands: a call binds the ones it declares)
POSITIONAL_TAIL = ("dtype", "keepdims", "compute_dtype", "transpose_x", "buffer", "name")

RENAMED: dict[str, dict[str, str]] = {  # call -> {NKI 0.7's name: nki-sim's (classic) name}
    "copy": {"x": "src"},
    "zeros_like": {"x": "a"},
    "empty_like": {"x": "a"},
    "expand_dims": {"x": "data"},
    "broadcast_to": {"x": "src"},
    "device_print": {"print_prefix": "prefix", "tensor": "x"},
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
    renamed = RENAMED.get(api, {})
    valid = [*_valid(fn), *renamed]
    named = [p.name for p in params.values() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    dropped = (IGNORED["*"] | IGNORED.get(api, frozenset())) - frozenset(named)
    allowed = frozenset(named) | dropped | frozenset(renamed)
    empty = inspect.Parameter.empty
    sig = inspect.Signature([p.replace(annotation=empty) for p in params.values()])
    kinds = [p.kind for p in params.values()]
    npos = kinds.count(inspect.Parameter.POSITIONAL_OR_KEYWORD)
    keyword_only = {p.name for p in params.values() if p.kind is p.KEYWORD_ONLY}
    tail = (
        ()
        if inspect.Parameter.VAR_POSITIONAL in kinds
        else tuple(n for n in POSITIONAL_TAIL if n in keyword_only)
    )

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if len(args) > npos and len(args) <= npos + len(tail):
            names = tail[: len(args) - npos]
            broken("nl.keyword_only", f"'nl.{api}' got {', '.join(names)} by position")
            args, kwargs = args[:npos], _by_name(api, tail, args[npos:], kwargs)
        if renamed:
            kwargs = _renamed(api, renamed, kwargs)
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


def _by_name(api: str, names: tuple[str, ...], values: tuple, kwargs: dict) -> dict:
    """``kwargs`` with the extra positional ``values`` bound to ``names`` in order."""
    out = dict(kwargs)
    for name, value in zip(names, values):
        if name in out:
            raise NKITypeError(
                f"'nl.{api}' got multiple values for argument '{name}' (by position and by "
                "keyword)",
                code="err_invalid_argument",
                loc=user_loc(),
            )
        out[name] = value
    return out


def _renamed(api: str, renamed: dict[str, str], kwargs: dict) -> dict:
    """``kwargs`` with NKI 0.7's parameter names turned into the implementation's."""
    if not renamed.keys() & kwargs.keys():
        return kwargs
    out: dict = {}
    given: dict[str, str] = {}  # implementation name -> the keyword the call used
    for k, v in kwargs.items():
        new = renamed.get(k, k)
        if new in out:
            raise NKITypeError(
                f"'nl.{api}' got both '{given[new]}' and '{k}', two names of one parameter",
                code="err_invalid_argument",
                loc=user_loc(),
            )
        out[new], given[new] = v, k
    return out


def check_module(namespace: dict[str, Any], names: list[str]) -> None:
    """Replace the functions ``names`` of a module namespace by their checked versions."""
    for name in names:
        fn = namespace.get(name)
        if inspect.isfunction(fn):
            namespace[name] = checked(fn, name)
