"""Binding a launch's arguments to a kernel's parameters without ``inspect.Signature.bind``
where the signature is plain (every parameter positional-or-keyword): a launch binds on every
call, and ``Signature.bind`` costs several microseconds of the per-launch overhead."""

from __future__ import annotations

import inspect
from typing import Any

# (parameter names, how many lead ones have no default)
PlainParams = tuple[tuple[str, ...], int]


def plain_params(sig: inspect.Signature) -> PlainParams | None:
    """The parameter names and the count of required ones, when every parameter is a plain
    positional-or-keyword one (None otherwise: ``Signature.bind`` binds those calls)."""
    params = list(sig.parameters.values())
    if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params):
        return None
    # (Python puts parameters without a default before those with one)
    required = sum(p.default is inspect.Parameter.empty for p in params)
    return tuple(p.name for p in params), required


def bind_plain(
    sig: inspect.Signature, plain: PlainParams, args: tuple, kwargs: dict[str, Any]
) -> inspect.BoundArguments | None:
    """What ``sig.bind(*args, **kwargs)`` returns for a call that fits the plain signature
    (defaults not applied); None for any other call, which ``Signature.bind`` then binds or
    rejects with its own words."""
    names, required = plain
    n = len(args)
    if n > len(names):
        return None
    if not kwargs:
        return inspect.BoundArguments(sig, dict(zip(names, args))) if n >= required else None
    rest = names[n:]
    if not all(name in kwargs for name in names[n:required]) or not all(k in rest for k in kwargs):
        return None
    got = dict(zip(names, args))
    got.update((name, kwargs[name]) for name in rest if name in kwargs)
    return inspect.BoundArguments(sig, got)
