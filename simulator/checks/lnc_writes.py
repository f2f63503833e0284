"""Run-time check of the shared-HBM elements both cores of an LNC=2 launch write between the
same two meetings (the static analysis, ``core_races.py``, finds the tensors where that may
happen and leaves them here).

Two DMA writes of the same bytes to one element leave that element the same whichever lands
last, so they are allowed (AWS's kernels have both cores store the same result when an input is
too small to split). Different values are a race: the element's final value depends on the
timing. Each element of a checked tensor remembers which core last wrote it, in which epoch (the
number of meetings that core had passed) and at which instruction; a write by the other core in
the same epoch must store exactly what is there.

Writes through a view of another element width (``.view`` / ``.ap(dtype=)``) are not tracked."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from nki.errors import NKIDependencyError, SrcLoc
from nki.ir import Access

if TYPE_CHECKING:
    from ..memory import Ctx


class SameWrites:
    """Per element of each checked tensor: the last writing core, its epoch and instruction."""

    def __init__(self, shared: dict[str, np.ndarray], names: frozenset[str]) -> None:
        self.roots = {n: shared[n] for n in names if n in shared}
        self.core = {n: np.full(a.size, -1, np.int8) for n, a in self.roots.items()}
        self.epoch = {n: np.zeros(a.size, np.int64) for n, a in self.roots.items()}
        self.site = {n: np.zeros(a.size, np.int64) for n, a in self.roots.items()}
        self.sites: list[tuple[SrcLoc | None, Access]] = []
        # (one entry per write site, not per write: keyed by the ids of the IR's loc and access)
        self._site_of: dict[tuple[int, int], int] = {}

    def check(
        self, ctx: Ctx, root: str, acc: Access, arr: np.ndarray, stored: np.ndarray,
        sel: np.ndarray | None,
    ) -> None:  # fmt: skip
        """Before ``stored`` is written through ``acc`` (storage ``arr``, a view of ``root``)."""
        base = self.roots[root]
        if arr.itemsize != base.itemsize:
            return
        idx = ctx.indices(acc, sel)
        start = arr.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        offsets = start + sum(i * s for i, s in zip(idx, arr.strides))
        flat = np.asarray(offsets // base.itemsize, dtype=np.int64)
        old = arr[idx]
        new = np.broadcast_to(stored, acc.shape).astype(arr.dtype, copy=False)
        if sel is not None:
            flat, old, new = flat[sel], old[sel], new[sel]
        flat, old, new = flat.ravel(), old.ravel(), new.ravel()
        other = (self.core[root][flat] == 1 - ctx.core) & (self.epoch[root][flat] == ctx.epoch)
        same = old == new
        if old.dtype.kind == "f" or old.dtype.kind == "V" or "float" in old.dtype.name:
            same |= np.isnan(old.astype(np.float32)) & np.isnan(new.astype(np.float32))
        clash = other & ~same
        loc = ctx.instr.loc if ctx.instr is not None else None
        if clash.any():
            k = int(np.argmax(clash))
            their_loc, their_acc = self.sites[int(self.site[root][flat[k]])]
            mine = (ctx.core, loc, acc)
            theirs = (1 - ctx.core, their_loc, their_acc)
            first, second = sorted((mine, theirs), key=lambda m: m[0])
            raise NKIDependencyError(
                f"race between the two cores of an LNC=2 launch: core {first[0]} writes "
                f"'{first[2]}' (line {first[1].line if first[1] else '?'}) and core "
                f"{second[0]} writes '{second[2]}' (line {second[1].line if second[1] else '?'}) "
                f"different values ({old[k]!r} and {new[k]!r}) to one element of shared HBM "
                f"tensor {ctx.ir.label(root)}, with no nisa.core_barrier (nor sendrecv or "
                "collective between the two cores) between them; the cores run at the same "
                "time, so the result depends on their timing. Give each core its own part "
                "(index with nl.program_id) or order the writes with nisa.core_barrier",
                code="err_core_race",
                loc=first[1],
                related=((f"core {second[0]}'s write", second[1]),) if second[1] else (),
            )
        site = self._site_of.setdefault((id(loc), id(acc)), len(self.sites))
        if site == len(self.sites):
            self.sites.append((loc, acc))
        self.core[root][flat] = ctx.core
        self.epoch[root][flat] = ctx.epoch
        self.site[root][flat] = site
