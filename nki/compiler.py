"""nki.compiler (classic ``neuronxcc.nki.compiler``, ``import neuronxcc.nki.compiler as ncc``):
direct-allocation buffers and compiler decorators.

``ncc.sbuf`` / ``ncc.psum`` (and their ``auto_alloc()``) are the ordinary SBUF / PSUM buffers.
``ncc.sbuf.alloc(func)``, ``ncc.sbuf.mod_alloc(base_addr=..., ...)`` and the PSUM versions
choose the physical place of each logical tile on hardware. The simulator validates their
arguments and checks the placement against the memory (PSUM banks, SBUF bytes per partition;
such tensors are not added to the automatic allocations' total, as kernels overlap them on
purpose), but gives every tensor its own storage: the memory sharing that placement implies
is not simulated, so a correct kernel computes the same result, while reusing a tile whose
physical slot was already recycled is not detected.

The decorators ``skip_middle_end_transformations``, ``enable_stack_allocator`` and
``force_auto_alloc`` only steer the compiler; here they return the kernel unchanged, and so does
the loop directive ``no_reorder()`` (``nl.sequential_range(n, directives=ncc.no_reorder())``).
"""

from __future__ import annotations

import enum
import inspect
import itertools
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from . import dtypes
from .errors import NKITypeError, user_loc
from .language.core import Buffer
from .language.loops import no_reorder as _no_reorder_block

__all__ = [
    "AddressRotation",
    "CompileConfig",
    "SpecializationConfig",
    "sbuf",
    "psum",
    "skip_middle_end_transformations",
    "enable_stack_allocator",
    "force_auto_alloc",
    "no_reorder",
]


class AllocatedBuffer(Buffer):
    """A buffer with an explicit allocation (``alloc`` / ``mod_alloc``): same memory as the
    plain buffer; the allocation is kept for inspection only."""

    __slots__ = ("allocation",)

    def __init__(self, name: str, allocation: Any) -> None:
        super().__init__(name)
        self.allocation = allocation

    def placement(self, shape: tuple[int, ...], par_dim: int, dtype: str) -> tuple[int, ...]:
        """Where a tensor of this shape allocated in this buffer lives (see ``placement_of``)."""
        return placement_of(self, shape, par_dim, dtype)

    def __repr__(self) -> str:
        return f"ncc.{self.name}.allocated({self.allocation!r})"


def _tiles(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value
    ):
        raise NKITypeError(
            f"{what} must be a tuple of positive ints, got {value!r}",
            code="err_invalid_allocation",
            loc=user_loc(),
        )
    return tuple(value)


def _nonneg(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise NKITypeError(
            f"{what} must be a non-negative int, got {value!r}",
            code="err_invalid_allocation",
            loc=user_loc(),
        )
    return value


class Memory(Buffer):
    """``ncc.sbuf`` / ``ncc.psum``: usable directly as ``buffer=`` (automatic allocation) and
    as the namespace of the direct-allocation makers."""

    __slots__ = ()

    def auto_alloc(self) -> Buffer:
        """Automatic allocation by the compiler (same as ``nl.sbuf`` / ``nl.psum``)."""
        return Buffer(self.name)

    def alloc(self, func: Callable[..., Any]) -> AllocatedBuffer:
        """Place each logical tile with ``func(block_index, pdim_size, fdim_size)`` (returns
        the start partition and byte address; for PSUM also the bank). Accepted; placement is
        not simulated."""
        if not callable(func):
            raise NKITypeError(
                f"ncc.{self.name}.alloc expects a callable (idx, pdim_size, fdim_size), got "
                f"{type(func).__name__}",
                code="err_invalid_allocation",
                loc=user_loc(),
            )
        return AllocatedBuffer(self.name, ("alloc", func))

    def mod_alloc(
        self,
        base_addr: int = 0,
        *,
        base_bank: int = 0,
        num_bank_tiles: tuple[int, ...] = (),
        base_partition: int = 0,
        num_par_tiles: tuple[int, ...] = (),
        num_free_tiles: tuple[int, ...] = (),
    ) -> AllocatedBuffer:
        """Modulo allocation: logical tile ``idx`` goes to slot ``idx % num_*_tiles`` from the
        base address / partition (/ bank for PSUM). Arguments are validated; placement is not
        simulated."""
        spec = {
            "base_addr": _nonneg(base_addr, "base_addr"),
            "base_partition": _nonneg(base_partition, "base_partition"),
            "num_par_tiles": _tiles(num_par_tiles, "num_par_tiles"),
            "num_free_tiles": _tiles(num_free_tiles, "num_free_tiles"),
        }
        if self.name == "psum":
            spec["base_bank"] = _nonneg(base_bank, "base_bank")
            spec["num_bank_tiles"] = _tiles(num_bank_tiles, "num_bank_tiles")
        if spec["base_partition"] >= 128:
            raise NKITypeError(
                f"base_partition {base_partition} is beyond the 128 partitions",
                code="err_invalid_allocation",
                loc=user_loc(),
            )
        return AllocatedBuffer(self.name, ("mod_alloc", spec))


sbuf = Memory("sbuf")
psum = Memory("psum")

PSUM_BANK_BYTES = 2048


def _call_placement(func: Callable[..., Any], idx: tuple[int, ...], pdim: int, fdim: int) -> Any:
    """The classic compiler passes ``idx``, ``pdim_size`` and ``fdim_size`` by name (kernels
    bind other parameters first with ``functools.partial``); plain positional functions work
    too."""
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        params = {}
    if all(n in params for n in ("idx", "pdim_size", "fdim_size")):
        return func(idx=idx, pdim_size=pdim, fdim_size=fdim)
    return func(idx, pdim, fdim)


def placement_of(
    buffer: AllocatedBuffer, shape: tuple[int, ...], par_dim: int, dtype: str
) -> tuple[int, ...]:
    """Where a directly allocated tensor lives: the PSUM banks it uses, or the SBUF byte range
    ``(start, end)`` per partition. ``mod_alloc`` puts logical tile ``i`` in slot
    ``i % num_*_tiles`` (so fewer slots than tiles reuse memory on purpose); ``alloc(func)``
    asks ``func(block_index, pdim_size, fdim_size)`` for each block's (bank,) partition and
    byte address."""
    blocks = shape[:par_dim]
    per_block = dtypes.itemsize(dtype)
    for n in shape[par_dim + 1 :]:
        per_block *= n
    nblocks = 1
    for n in blocks:
        nblocks *= n
    how, spec = buffer.allocation
    if how == "mod_alloc":
        tiles = spec["num_bank_tiles"] if buffer.name == "psum" else spec["num_free_tiles"]
        slots = nblocks
        if tiles:
            slots = 1
            for n in tiles:
                slots *= n
            slots = min(slots, nblocks)
        if buffer.name == "psum":
            banks_per_tile = max(1, -(-per_block // PSUM_BANK_BYTES))
            first = spec["base_bank"]
            return tuple(range(first, first + slots * banks_per_tile))
        return (spec["base_addr"], spec["base_addr"] + slots * per_block)
    func = spec
    places = []
    for idx in itertools.product(*(range(n) for n in blocks)):
        try:
            got = _call_placement(func, tuple(idx), shape[par_dim], per_block)
        except Exception as e:
            raise NKITypeError(
                f"ncc.{buffer.name}.alloc: the placement function failed for block {idx}: "
                f"{type(e).__name__}: {e}",
                code="err_invalid_allocation",
                loc=user_loc(),
            ) from None
        got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
        got = tuple(int(v) if isinstance(v, np.integer) else v for v in got)
        if not got or not all(isinstance(v, int) and not isinstance(v, bool) for v in got):
            raise NKITypeError(
                f"ncc.{buffer.name}.alloc: the placement function must return ints "
                f"({'bank, partition, address' if buffer.name == 'psum' else 'partition, address'}"
                f"), got {got!r} for block {idx}",
                code="err_invalid_allocation",
                loc=user_loc(),
            )
        places.append(got)
    if buffer.name == "psum":
        return tuple(sorted({p[0] for p in places}))
    addrs = [p[-1] for p in places]
    return (min(addrs), max(addrs) + per_block)


def _passthrough(func: Any = None, **_kw: Any) -> Any:
    if func is None:
        return lambda f: f
    return func


def skip_middle_end_transformations(func: Any = None) -> Any:
    """Compiler hint (no middle-end passes); the kernel is returned unchanged."""
    return _passthrough(func)


def enable_stack_allocator(func: Any = None, log_level: int = 50) -> Any:
    """Compiler hint (stack allocation of SBUF/PSUM); the kernel is returned unchanged."""
    return _passthrough(func)


def force_auto_alloc(func: Any = None) -> Any:
    """Compiler hint (ignore direct allocations); the kernel is returned unchanged."""
    return _passthrough(func)


def no_reorder() -> Any:
    """Classic loop directive (``directives=ncc.no_reorder()`` of ``nl.affine_range`` /
    ``sequential_range``): the loop body's instructions stay in program order, which is the
    order the simulator runs them in, so it changes no result. Also a ``with`` block, as
    ``nl.no_reorder()`` (no device loops inside)."""
    return _no_reorder_block()


# ---- per-kernel configuration of the current API (nki 0.7: nki.jit(compile_config=...)) -------


class AddressRotation(enum.Enum):
    """Whether the compiler's backend may move a tensor's address for a better layout: ``AUTO``
    (the default: not for addresses the kernel or NKI's allocator fixed), ``ENABLE``,
    ``DISABLE``. A compiler knob: the simulator gives every tensor its own storage."""

    AUTO = "auto"
    ENABLE = "enable"
    DISABLE = "disable"


def _flag(value: Any, what: str) -> Any:
    if value is not None and not isinstance(value, bool):
        raise NKITypeError(
            f"{what} must be True or False (or None: the compiler's default), got {value!r}",
            code="err_invalid_config",
            loc=user_loc(),
        )
    return value


@dataclass(frozen=True)
class CompileConfig:
    """``nki.jit(compile_config=CompileConfig(...))``: options of the compiler's later passes.
    They steer code generation on the device only, so the simulator checks their types and
    otherwise ignores them; None leaves an option at the compiler's default (``prefetch_auto``
    off, ``nki_alloc_fallback`` on, per AWS's page)."""

    address_rotation: AddressRotation = AddressRotation.AUTO
    non_ssa_legalization: bool | None = None
    dead_code_elim: bool | None = None
    barrier_check: bool | None = None
    prefetch_auto: bool = False
    nki_alloc_fallback: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.address_rotation, AddressRotation):
            raise NKITypeError(
                "CompileConfig.address_rotation must be an nki.compiler.AddressRotation "
                f"member, got {self.address_rotation!r}",
                code="err_invalid_config",
                loc=user_loc(),
            )
        for f in fields(self)[1:]:
            _flag(getattr(self, f.name), f"CompileConfig.{f.name}")


@dataclass(frozen=True)
class SpecializationConfig:
    """``nki.jit(specialization_config=SpecializationConfig(...))``: options of tracing.
    ``allow_nested_config_override``: a top-level kernel inlines nested ``@nki.jit`` kernels
    whose configuration differs (the simulator inlines nested kernels with the top-level
    kernel's settings either way)."""

    allow_nested_config_override: bool = False

    def __post_init__(self) -> None:
        _flag(self.allow_nested_config_override, "allow_nested_config_override")


def check_kernel_configs(options: dict[str, Any]) -> None:
    """``nki.jit``'s ``compile_config`` / ``specialization_config``: None or the matching
    class (anything else is a located error)."""
    for key, cls in (("compile_config", CompileConfig), ("specialization_config",
                     SpecializationConfig)):  # fmt: skip
        value = options.get(key)
        if value is not None and not isinstance(value, cls):
            raise NKITypeError(
                f"nki.jit's {key} must be an nki.compiler.{cls.__name__} (or None), got {value!r}",
                code="err_invalid_config",
                loc=user_loc(),
            )
