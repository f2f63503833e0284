"""Names of the current NKI API's ``nki.language`` that have no classic counterpart:
``nl.NKIObject`` (base of kernel configuration classes), ``nl.NkiTensor`` (the tensor handle
type), ``nl.MemoryRegion`` and the buffer queries ``nl.is_hbm / is_on_chip / is_psum /
is_sbuf``, and ``nl.range`` (the plain Python loop real kernels use)."""

from __future__ import annotations

import builtins
import dataclasses
import inspect
from enum import Enum
from typing import Any

from ..errors import NKIUnsupportedError, user_loc
from ..tracer import TileOps, loop
from .core import Buffer, _buffer_name


def _generated_init_fields(cls: type) -> list[str]:
    """The fields of a ``@dataclass`` whose ``__init__`` the dataclass generated (not one the
    user wrote) that have no default."""
    init = cls.__dict__.get("__init__") if dataclasses.is_dataclass(cls) else None
    if init is None or getattr(init, "__code__", None) is None:
        return []
    if init.__code__.co_filename != "<string>":  # written by the user
        return []
    missing = (dataclasses.MISSING,)
    return [
        f.name
        for f in dataclasses.fields(cls)
        if f.init and f.default in missing and f.default_factory in missing
    ]


class _NKIObjectMeta(type):
    """NKI synthesises a keyword per class attribute: ``Cfg(size=4)`` sets ``size`` even when
    a ``@dataclass`` subclass declares ``size = None`` without an annotation (no dataclass
    field, so the generated ``__init__`` would not take it). The initializer NKI generates
    gives every field a default, None for a field declared without one (``C()`` of
    ``x: int`` has ``x is None``), so a field left out is None instead of a TypeError."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        params = inspect.signature(cls.__init__).parameters
        extra = {}
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            extra = {k: kwargs.pop(k) for k in list(kwargs) if k not in params and hasattr(cls, k)}
        required = _generated_init_fields(cls)
        for name in required[len(args) :]:
            kwargs.setdefault(name, None)
        obj = super().__call__(*args, **kwargs)
        for k, v in extra.items():
            setattr(obj, k, v)
        return obj


class NKIObject(metaclass=_NKIObjectMeta):
    """Base class of kernel dataclasses and configuration objects (``@dataclass class
    Cfg(nl.NKIObject)``). Kernels pass them as arguments or build them inside the body; in
    nki-sim they are ordinary Python objects (the body runs as Python). ``NKIObject(**kw)``
    sets one attribute per keyword (a subclass takes a keyword for each class attribute);
    equality is structural (same class, same attributes)."""

    def __init__(self, **kwargs: Any) -> None:
        for k, v in kwargs.items():
            setattr(self, k, v)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return vars(self) == vars(other)

    __hash__ = object.__hash__


# every tensor handle (allocations and views) is a TileOps: `isinstance(x, nl.NkiTensor)`
NkiTensor = TileOps


class MemoryRegion(Enum):
    """The memory a tensor lives in; ``nl.sbuf`` etc. compare equal to these."""

    sbuf = "sbuf"
    psum = "psum"
    private_hbm = "private_hbm"
    shared_hbm = "shared_hbm"


def _region(buffer: Any) -> str:
    if isinstance(buffer, MemoryRegion):
        return buffer.value
    if isinstance(buffer, TileOps):
        buffer = buffer.buffer
    return _buffer_name(buffer if isinstance(buffer, (Buffer, str)) else str(buffer))


def is_hbm(buffer: Any) -> bool:
    """Whether ``buffer`` (a buffer, a MemoryRegion or a tensor) is HBM (private or shared)."""
    return _region(buffer) in ("private_hbm", "shared_hbm")


def is_on_chip(buffer: Any) -> bool:
    """Whether ``buffer`` is SBUF or PSUM."""
    return _region(buffer) in ("sbuf", "psum")


def is_psum(buffer: Any) -> bool:
    """Whether ``buffer`` is PSUM."""
    return _region(buffer) == "psum"


def is_sbuf(buffer: Any) -> bool:
    """Whether ``buffer`` is SBUF."""
    return _region(buffer) == "sbuf"


def range(*args: int) -> Any:  # noqa: A001 - the current API's name
    """``nl.range(...)``: Python's ``range``. In a current-API kernel the iterable of a ``for``
    statement is traced once as a symbolic loop in program order and unrolled where Python
    needs the iterator's int (see ``nl.affine_range``); everywhere else it is the range."""
    return loop("range", builtins.range(*args))


# ---- named by the newest pages, not simulated ---------------------------------------------------


def _not_simulated(name: str, what: str) -> Any:
    raise NKIUnsupportedError(
        f"nl.{name} ({what}) is not simulated by nki-sim: AWS's pages do not state how a "
        "selection of several on-chip tiles is laid out; slice the tensor into its tiles "
        "(t[i * P : (i + 1) * P, j * F : (j + 1) * F]) and copy each with nisa.dma_copy",
        code="err_not_simulated",
        loc=user_loc(),
    )


def tiles(source: Any, *, tile_shape: Any = None) -> Any:
    """``nl.tiles``, a view of a tensor as a grid of tiles (newest NKI pages): not simulated,
    a located ``err_not_simulated``."""
    return _not_simulated("tiles", "a view of a tensor as a grid of tiles")


def blocks(source: Any, *, tile_shape: Any = None, block_shape: Any) -> Any:
    """``nl.blocks``, a view of a tensor as a grid of blocks of tiles (newest NKI pages): not
    simulated, a located ``err_not_simulated``."""
    return _not_simulated("blocks", "a view of a tensor as a grid of blocks of tiles")


def alloc_tiles(
    *, tile_shape: Any, element_shape: Any, buffer: Any, dtype: Any, address: Any = None,
    name: str = "",
) -> Any:  # fmt: skip
    """``nl.alloc_tiles``, storage allocated as a grid of tiles (newest NKI pages): not
    simulated, a located ``err_not_simulated``."""
    return _not_simulated("alloc_tiles", "storage allocated as a grid of tiles")


def alloc_blocks(
    *, tile_shape: Any, block_shape: Any, element_shape: Any, buffer: Any, dtype: Any,
    address: Any = None, name: str = "",
) -> Any:  # fmt: skip
    """``nl.alloc_blocks``, storage allocated as a grid of tile blocks (newest NKI pages): not
    simulated, a located ``err_not_simulated``."""
    return _not_simulated("alloc_blocks", "storage allocated as a grid of tile blocks")
