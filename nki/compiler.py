"""nki.compiler (classic ``neuronxcc.nki.compiler``, ``import neuronxcc.nki.compiler as ncc``):
direct-allocation buffers and compiler decorators.

``ncc.sbuf`` / ``ncc.psum`` (and their ``auto_alloc()``) are the ordinary SBUF / PSUM buffers.
``ncc.sbuf.alloc(func)``, ``ncc.sbuf.mod_alloc(base_addr=..., ...)`` and the PSUM versions
choose the physical place of each logical tile on hardware. The simulator accepts them and
validates their arguments, but gives every tensor its own storage: placement (and the memory
sharing that modulo allocation implies) is not simulated, so a correct kernel computes the
same result, while reusing a tile whose physical slot was already recycled is not detected.

The decorators ``skip_middle_end_transformations``, ``enable_stack_allocator`` and
``force_auto_alloc`` only steer the compiler; here they return the kernel unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import NKITypeError, user_loc
from .language.core import Buffer

__all__ = [
    "sbuf",
    "psum",
    "skip_middle_end_transformations",
    "enable_stack_allocator",
    "force_auto_alloc",
]


class AllocatedBuffer(Buffer):
    """A buffer with an explicit allocation (``alloc`` / ``mod_alloc``): same memory as the
    plain buffer; the allocation is kept for inspection only."""

    __slots__ = ("allocation",)

    def __init__(self, name: str, allocation: Any) -> None:
        super().__init__(name)
        self.allocation = allocation

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
