"""The per-launch handling of a kernel's arguments, kept cheap (a launch does it on every call):
binding them to the kernel's parameters without ``inspect.Signature.bind`` where the signature
is plain (every parameter positional-or-keyword), and the parts of the trace-cache key that do
not change between launches (a grid's text, a dtype's NKI name, a compile-time argument's
key)."""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from . import dtypes
from .errors import NKITypeError, SrcLoc, locate_in_traceback
from .ir import Grid, TensorDecl
from .tracer import NkiTensor, TraceState

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


# NKI names of the NumPy dtypes launched with; the trace-key text of the grids launched
# (id -> (grid, text), bounded, the grid kept so that its id is not reused)
DTYPE_NAMES: dict[np.dtype, str] = {}
_GRID_KEYS: dict[int, tuple[Grid, str]] = {}


def dtype_name(dtype: np.dtype) -> str:
    """``dtypes.name_of(dtype)``, its error for a dtype NKI lacks included."""
    if dtype.metadata is not None:  # (a packed MX dtype is equal to its storage dtype: no key)
        return dtypes.name_of(dtype)
    name = DTYPE_NAMES.get(dtype)
    if name is None:
        name = DTYPE_NAMES.setdefault(dtype, dtypes.name_of(dtype))
    return name


def grid_key(grid: Grid) -> str:
    """``repr(grid)``, the grid's part of a trace key."""
    hit = _GRID_KEYS.get(id(grid))
    if hit is None or hit[0] is not grid:
        hit = (grid, repr(grid))
        if len(_GRID_KEYS) >= 256:
            _GRID_KEYS.clear()
        _GRID_KEYS[id(grid)] = hit
    return hit[1]


def static_key(v: object) -> object:
    """A cache key for a compile-time argument. Floats are keyed by their exact bits so that
    ``0.0`` and ``-0.0`` trace separately and a NaN (never equal to itself) hits the cache."""
    if isinstance(v, (float, np.floating)):
        return ("f", type(v).__name__, float(v).hex() if not math.isnan(v) else "nan")
    if isinstance(v, tuple):
        return _tuple_key(v)
    if isinstance(v, list):
        return ("s", type(v).__name__, tuple(static_key(e) for e in v))
    try:
        hash(v)
        return ("v", type(v).__name__, v)
    except TypeError:
        return ("r", repr(v))


class HashedKey(tuple):
    """A compile-time tuple's part of a trace key, equal to the plain tuple of its content but
    hashed once and made once per content (:func:`canonical`): a fused program's nested key is
    otherwise hashed, and compared item by item, at every launch. It pickles as its content
    (the torch backend keeps trace caches on disk, and string hashes differ between
    processes): unpickled, it is the process's own key of that content."""

    def __hash__(self) -> int:
        h = self.__dict__.get("h")
        if h is None:
            h = self.__dict__["h"] = tuple.__hash__(self)
        return h

    def __reduce__(self) -> tuple:
        return (canonical, (tuple(self),))


# content -> its HashedKey: bounded (a key made again after a clear is equal, only slower to
# compare with the old one)
_CANONICAL: dict[tuple, HashedKey] = {}


def canonical(content: tuple) -> HashedKey:
    """The one HashedKey of ``content`` in this process."""
    got = _CANONICAL.get(content)
    if got is None:
        if len(_CANONICAL) >= 4096:
            _CANONICAL.clear()
        got = _CANONICAL.setdefault(content, HashedKey(content))
    return got


# id(tuple) -> (the tuple, its key): a compile-time tuple (a fused op program) is often the
# same object launch after launch. Only hashable tuples are kept (one holding a list may
# change); bounded, the tuple kept so that its id is not reused while the entry lives.
_TUPLE_KEYS: dict[int, tuple[tuple, object]] = {}


def _tuple_key(v: tuple) -> object:
    hit = _TUPLE_KEYS.get(id(v))
    if hit is not None and hit[0] is v:
        return hit[1]
    key = ("s", type(v).__name__, tuple(static_key(e) for e in v))
    try:
        hash(v)
    except TypeError:
        return key
    hashed = canonical(key)
    if len(_TUPLE_KEYS) >= 1024:
        _TUPLE_KEYS.clear()
    _TUPLE_KEYS[id(v)] = (v, hashed)
    return hashed


def is_array(x: object) -> bool:
    """Whether an argument is an array (an HBM tensor of the kernel)."""
    return isinstance(x, np.ndarray)


def array_list(x: object) -> bool:
    """A list / tuple argument of arrays (per-layer weights), or of such lists / tuples
    (``[(re, im), ...]`` pairs): each array is an HBM tensor."""
    if not isinstance(x, (list, tuple)) or not x:
        return False
    return all(map(isinstance, x, _ARRAYS)) or all(
        isinstance(e, np.ndarray) or array_list(e) for e in x
    )


_ARRAYS = itertools.repeat(np.ndarray)  # (``isinstance``'s second argument, for ``map``)


def list_key(v: list | tuple, dtype_of: Callable[[np.ndarray], str]) -> tuple:
    """An array list's part of a trace key: its type and each element's shape and dtype
    (``dtype_of``), or a nested list's own key."""
    return (type(v).__name__, tuple([
        (e.shape, dtype_of(e)) if isinstance(e, np.ndarray) else list_key(e, dtype_of)
        for e in v
    ]))  # fmt: skip


def list_params(st: TraceState, name: str, v: list | tuple, loc: SrcLoc) -> list | tuple:
    """The HBM tensors of array list ``v`` (argument ``name``) in its structure, declared in
    the trace ``st``: element i is parameter ``name[i]`` (nested, ``name[i][j]``)."""
    elems: list[Any] = []
    for i, e in enumerate(v):
        if not isinstance(e, np.ndarray):
            elems.append(list_params(st, f"{name}[{i}]", e, loc))
            continue
        shape = tuple(int(n) for n in e.shape)
        decl = TensorDecl(f"{name}[{i}]", shape, dtypes.name_of(e.dtype), "shared_hbm", "param",
                          0, loc)  # fmt: skip
        st.declare(decl)
        st.params.append(decl.name)
        elems.append(NkiTensor(decl, ()))
    return type(v)(elems)


def nested_items(values: list | tuple) -> Iterator[Any]:
    """``values`` and, at any depth, the elements of the lists / tuples among them."""
    for v in values:
        yield v
        if isinstance(v, (list, tuple)):
            yield from nested_items(v)


def array_leaves(name: str, x: Any) -> Iterator[tuple[str, np.ndarray]]:
    """The arrays of the array list ``x`` (argument ``name``), each under its parameter name:
    ``name[i]``, ``name[i][j]`` for nested lists."""
    for i, e in enumerate(x):
        if isinstance(e, np.ndarray):
            yield f"{name}[{i}]", e
        else:
            yield from array_leaves(f"{name}[{i}]", e)


def flat_arrays(arguments: dict[str, Any], lists: list[str]) -> dict[str, Any]:
    """The arguments with each element of the array lists ``lists`` (the names of those
    arguments) also under its parameter name ``name[i]`` (``arguments`` itself when there is
    none)."""
    if not lists:
        return arguments
    out = dict(arguments)
    for name in lists:
        out.update(array_leaves(name, arguments[name]))
    return out


# compile-time argument types whose object is the argument's own (a small int or an interned
# string may be any other value of the kernel too)
_OWN_OBJECTS = (list, tuple, dict, set, frozenset)


def misused_argument(exc: AttributeError, arguments: dict[str, Any]) -> Exception:
    """``exc`` itself, raised while tracing, or an error at the kernel's line when the
    attribute was looked up on a compile-time argument (a list, tuple, dict or set): a kernel
    that uses it as a tensor (``x.shape``) was given, say, a Python list where it takes an
    array."""
    obj = getattr(exc, "obj", None)
    if not isinstance(obj, _OWN_OBJECTS):
        return exc
    name = next((n for n, v in arguments.items() if v is obj), None)
    if name is None:
        return exc
    text = repr(obj)
    err = NKITypeError(
        f"argument '{name}' of the kernel is a Python {type(obj).__name__} "
        f"({text if len(text) <= 60 else text[:57] + '...'}), used here as a tensor "
        f"(.{exc.name}): a kernel's tensor arguments are arrays (NumPy, torch, JAX); pass "
        f"np.asarray({name}) for a tensor, and a list only for compile-time values",
        code="err_invalid_argument",
    )
    return locate_in_traceback(err.with_traceback(exc.__traceback__))
