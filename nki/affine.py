"""Affine expressions of the kernel IR (``nki/ir.py``): the symbols a kernel's indices depend on
(loop iterators and SPMD program ids), ``const + sum(coeff * sym)`` expressions over them, the
tile-axis index expressions built on those, and the values each symbol takes (``SymRange``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Union

# --------------------------------------------------------------------------------------------
# Scalar affine expressions over loop iterators and program ids
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class LoopSym:
    """The iterator of one symbolic loop."""

    id: int
    name: str = ""

    def __str__(self) -> str:
        return f"l{self.id}"


@dataclass(frozen=True, order=True)
class PidSym:
    """``nl.program_id(axis)``."""

    axis: int

    def __str__(self) -> str:
        return f"pid{self.axis}"


Sym = Union[LoopSym, PidSym]


def _sym_key(s: Sym) -> tuple[int, int]:
    return (0, s.axis) if isinstance(s, PidSym) else (1, s.id)


@dataclass(frozen=True)
class Affine:
    """``const + sum(coeff * sym)`` with integer coefficients."""

    terms: tuple[tuple[Sym, int], ...] = ()
    const: int = 0

    @staticmethod
    def of(sym: Sym, coeff: int = 1) -> Affine:
        return Affine(((sym, coeff),), 0) if coeff else Affine()

    @staticmethod
    def constant(c: int) -> Affine:
        return Affine((), int(c))

    @property
    def is_const(self) -> bool:
        return not self.terms

    def __add__(self, other: Affine | int) -> Affine:
        if isinstance(other, int):
            return Affine(self.terms, self.const + other)
        if not other.terms or not self.terms:  # (a constant on either side: no merge)
            return Affine(self.terms or other.terms, self.const + other.const)
        acc: dict[Sym, int] = dict(self.terms)
        for s, c in other.terms:
            acc[s] = acc.get(s, 0) + c
        terms = tuple(sorted(((s, c) for s, c in acc.items() if c), key=lambda t: _sym_key(t[0])))
        return Affine(terms, self.const + other.const)

    def scale(self, k: int) -> Affine:
        if k == 0:
            return Affine()
        return Affine(tuple((s, c * k) for s, c in self.terms), self.const * k)

    def evaluate(self, env: Mapping[Sym, int]) -> int:
        v = self.const
        for s, c in self.terms:
            v += c * env[s]
        return v

    def bounds(self, ranges: Mapping[Sym, tuple[int, int]]) -> tuple[int, int]:
        """Inclusive (min, max) over the given inclusive symbol ranges."""
        lo = hi = self.const
        for s, c in self.terms:
            a, b = ranges[s]
            lo += min(c * a, c * b)
            hi += max(c * a, c * b)
        return lo, hi

    def symbols(self) -> tuple[Sym, ...]:
        return tuple(s for s, _ in self.terms)

    def __str__(self) -> str:
        parts = []
        for s, c in self.terms:
            parts.append(str(s) if c == 1 else f"{c}*{s}")
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")


# --------------------------------------------------------------------------------------------
# Index expressions over tile axes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexExpr:
    """``base + sum(coeffs[d] * i_d)`` where ``i_d`` ranges over ``0 .. shape[d]-1``."""

    base: Affine
    coeffs: tuple[int, ...]
    shape: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    def bounds(self, ranges: Mapping[Sym, tuple[int, int]]) -> tuple[int, int]:
        lo, hi = self.base.bounds(ranges)
        for c, n in zip(self.coeffs, self.shape):
            if c and n > 0:
                lo += min(0, c * (n - 1))
                hi += max(0, c * (n - 1))
        return lo, hi

    def __str__(self) -> str:
        parts = [f"i{d}" if c == 1 else f"{c}*i{d}" for d, c in enumerate(self.coeffs) if c]
        if self.base.terms or self.base.const or not parts:
            parts.append(str(self.base))
        return " + ".join(parts).replace("+ -", "- ")


# --------------------------------------------------------------------------------------------
# The values of a symbol
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SymRange:
    """The values a symbol takes: ``range(start, stop, step)`` (a program id: ``range(n)``).
    The iterator of a device loop (``runtime``: ``nl.fori_loop`` with a register bound,
    ``nl.while_loop``) is described by the one symbolic trip the static passes see; its real
    values are known only when it runs."""

    start: int
    stop: int
    step: int = 1
    runtime: bool = False

    @property
    def values(self) -> range:
        return range(self.start, self.stop, self.step)

    @property
    def trips(self) -> int:
        return len(self.values)

    @property
    def bounds(self) -> tuple[int, int]:
        """Inclusive (min, max) of the values ((0, -1) when there are none)."""
        r = self.values
        return (min(r[0], r[-1]), max(r[0], r[-1])) if len(r) else (0, -1)
