"""Run-time check of the shared-HBM elements both cores of an LNC=2 launch write between the
same two meetings (the static analysis, ``core_races.py``, finds the tensors where that may
happen and leaves them here).

Two DMA writes of the same bytes to one element leave that element the same whichever lands
last, so they are allowed (AWS's kernels have both cores store the same result when an input is
too small to split). Different values are a race: the element's final value depends on the
timing. Each element of a checked tensor remembers which core last wrote it, in which epoch (the
number of meetings that core had passed) and at which instruction; a write by the other core in
the same epoch must store exactly what is there.

Writes through a view of another element width (``.view`` / ``.ap(dtype=)``) are not tracked,
and a clash with a write placed through a dynamic offset is :class:`DynamicAccesses`' to report.

:class:`DynamicAccesses` checks the tensors an indirect (data-dependent) access of one core
touches while the other core also accesses them, which the static analysis cannot place: both
cores' reads, and their writes that change an element, are remembered per element for the
current epoch (the interpreter runs both cores between the same two meetings before either
passes the next, so one epoch is live at a time). A read of an element the other core changed
(and the reader did not write itself), a change of an element the other core read, and two
different changes of one element are races, each reported once per launch as a
``CoreRaceWarning`` at the first core's line: AWS's own kernels rely on the cores' timing there
(one core zeroing an output at its start that the other writes late), so the run goes on in the
simulator's order. A write that stores what is already there races with nothing (an identity
copy, both cores storing one result, both zeroing an output before they accumulate into
it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from nki.errors import CoreRaceWarning, NKIDependencyError, SrcLoc, warn_at
from nki.ir import Access

if TYPE_CHECKING:
    from ..memory import Ctx


class _Sites:
    """A run-time check's tensors (storage roots) and the access sites it names: one entry per
    site, not per access (keyed by the ids of the IR's loc and access)."""

    def __init__(self, shared: dict[str, np.ndarray], names: frozenset[str]) -> None:
        self.roots = {n: shared[n] for n in names if n in shared}
        self.sites: list[tuple[SrcLoc | None, Access]] = []
        self._site_of: dict[tuple[int, int], int] = {}

    def _site(self, ctx: Ctx, acc: Access) -> int:
        loc = ctx.instr.loc if ctx.instr is not None else None
        site = self._site_of.setdefault((id(loc), id(acc)), len(self.sites))
        if site == len(self.sites):
            self.sites.append((loc, acc))
        return site

    def _race(
        self, ctx: Ctx, root: str, acc: Access, mine_does: str, site: int, they_do: str,
        what: str, order: str,
    ) -> NKIDependencyError:  # fmt: skip
        """The race of ``ctx``'s access ``acc`` with the other core's at ``site``: ``what`` they
        did to tensor ``root``, ``order`` what the fix orders."""
        their_loc, their_acc = self.sites[site]
        loc = ctx.instr.loc if ctx.instr is not None else None
        mine = (ctx.core, mine_does, loc, acc)
        theirs = (1 - ctx.core, they_do, their_loc, their_acc)
        (c1, v1, l1, a1), (c2, v2, l2, a2) = sorted((mine, theirs), key=lambda m: m[0])
        return NKIDependencyError(
            f"race between the two cores of an LNC=2 launch: core {c1} {v1} '{a1}' (line "
            f"{l1.line if l1 else '?'}) and core {c2} {v2} '{a2}' (line "
            f"{l2.line if l2 else '?'}) {what} shared HBM tensor {ctx.ir.label(root)}, with no "
            "nisa.core_barrier (nor sendrecv or collective between the two cores) between them; "
            "the cores run at the same time, so the result depends on their timing. Give each "
            f"core its own part (index with nl.program_id) or order the {order} with "
            "nisa.core_barrier",
            code="err_core_race",
            loc=l1,
            related=((f"core {c2}'s {'write' if order == 'writes' else 'access'}", l2),)
            if l2
            else (),
        )


class SameWrites(_Sites):
    """Per element of each checked tensor: the last writing core, its epoch and instruction."""

    def __init__(self, shared: dict[str, np.ndarray], names: frozenset[str]) -> None:
        super().__init__(shared, names)
        self.core = {n: np.full(a.size, -1, np.int8) for n, a in self.roots.items()}
        self.epoch = {n: np.zeros(a.size, np.int64) for n, a in self.roots.items()}
        self.site = {n: np.zeros(a.size, np.int64) for n, a in self.roots.items()}

    def check(
        self, ctx: Ctx, root: str, acc: Access, arr: np.ndarray, stored: np.ndarray,
        sel: np.ndarray | None,
    ) -> None:  # fmt: skip
        """Before ``stored`` is written through ``acc`` (storage ``arr``, a view of ``root``)."""
        got = _elements(ctx, self.roots[root], acc, arr, sel, stored)
        if got is None:
            return
        flat, old, new = got
        other = (self.core[root][flat] == 1 - ctx.core) & (self.epoch[root][flat] == ctx.epoch)
        clash = other & ~_same(old, new)
        if clash.any():
            # a write placed through a dynamic offset (either of the two) is left to
            # DynamicAccesses, which reports such a race as a warning
            if acc.indirect:
                clash[:] = False
            else:
                dynamic = np.array([bool(a.indirect) for _, a in self.sites] or [False])
                clash &= ~dynamic[self.site[root][flat]]
        if clash.any():
            k = int(np.argmax(clash))
            raise self._race(
                ctx, root, acc, "writes", int(self.site[root][flat[k]]), "writes",
                f"different values ({old[k]!r} and {new[k]!r}) to one element of", "writes",
            )  # fmt: skip
        site = self._site(ctx, acc)
        self.core[root][flat] = ctx.core
        self.epoch[root][flat] = ctx.epoch
        self.site[root][flat] = site


def _elements(
    ctx: Ctx, base: np.ndarray, acc: Access, arr: np.ndarray, sel: np.ndarray | None,
    stored: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:  # fmt: skip
    """The flat element offsets in ``base`` (the storage root) of the elements ``acc`` touches
    through ``arr`` (a view of it), their values now and, for a write, the values ``stored``
    (None for a read); None through a view of another element width."""
    if arr.itemsize != base.itemsize:
        return None
    idx = ctx.indices(acc, sel)
    start = arr.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    offsets = start + sum(i * s for i, s in zip(idx, arr.strides))
    flat = np.asarray(offsets // base.itemsize, dtype=np.int64)
    old = arr[idx]
    new = None
    if stored is not None:
        new = np.broadcast_to(stored, acc.shape).astype(arr.dtype, copy=False)
    if sel is not None:
        flat, old = flat[sel], old[sel]
        new = None if new is None else new[sel]
    return flat.ravel(), old.ravel(), None if new is None else new.ravel()


def _same(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Where a store leaves an element's value as it was (NaN stays NaN)."""
    same = old == new
    if old.dtype.kind == "f" or old.dtype.kind == "V" or "float" in old.dtype.name:
        same |= np.isnan(old.astype(np.float32)) & np.isnan(new.astype(np.float32))
    return same


class DynamicAccesses(_Sites):
    """Per element of each checked tensor, in the live epoch: the site of each core's last read,
    last write and last write that changed the element (-1: none). Arrays are made on first
    use."""

    def __init__(self, shared: dict[str, np.ndarray], names: frozenset[str]) -> None:
        super().__init__(shared, names)
        self.epoch = 0
        self.warned: set[tuple[int, int, str]] = set()
        # (root, "read" / "wrote" / "changed", core) -> each element's site (-1: none this epoch)
        self.marks: dict[tuple[str, str, int], np.ndarray] = {}

    def _marks(self, root: str, kind: str, core: int) -> np.ndarray:
        m = self.marks.get((root, kind, core))
        if m is None:
            m = self.marks[(root, kind, core)] = np.full(self.roots[root].size, -1, np.int32)
        return m

    def _enter(self, ctx: Ctx) -> None:
        if ctx.epoch != self.epoch:  # (both cores passed a meeting: the last epoch is over)
            self.epoch = ctx.epoch
            for m in self.marks.values():
                m.fill(-1)

    def read(
        self, ctx: Ctx, root: str, acc: Access, arr: np.ndarray, sel: np.ndarray | None
    ) -> None:
        """Before ``acc`` (through ``arr``, a view of ``root``) is read by ``ctx``'s core."""
        got = _elements(ctx, self.roots[root], acc, arr, sel, None)
        if got is None:
            return
        self._enter(ctx)
        flat, c = got[0], ctx.core
        # (an element this core wrote itself this epoch reads the same whichever lands last: a
        # different value of the other core's would have been a clash of the two writes)
        theirs = np.where(
            self._marks(root, "wrote", c)[flat] >= 0, -1, self._marks(root, "changed", 1 - c)[flat]
        )
        self._clash(ctx, root, acc, theirs, "reads", "writes")
        self._marks(root, "read", c)[flat] = self._site(ctx, acc)

    def write(
        self, ctx: Ctx, root: str, acc: Access, arr: np.ndarray, stored: np.ndarray,
        sel: np.ndarray | None,
    ) -> None:  # fmt: skip
        """Before ``stored`` is written through ``acc`` by ``ctx``'s core."""
        got = _elements(ctx, self.roots[root], acc, arr, sel, stored)
        if got is None:
            return
        self._enter(ctx)
        every, old, new = got
        flat = every[~_same(old, new)]  # (only changes: storing what is there races with nothing)
        c, site = ctx.core, self._site(ctx, acc)
        self._clash(ctx, root, acc, self._marks(root, "read", 1 - c)[flat], "writes", "reads")
        self._clash(ctx, root, acc, self._marks(root, "changed", 1 - c)[flat], "writes", "writes")
        self._marks(root, "changed", c)[flat] = site
        self._marks(root, "wrote", c)[every] = site

    def _clash(
        self, ctx: Ctx, root: str, acc: Access, theirs: np.ndarray, mine_does: str,
        they_do: str,
    ) -> None:  # fmt: skip
        hit = theirs >= 0
        if not hit.any():
            return
        site = int(theirs[int(np.argmax(hit))])
        pair = (self._site(ctx, acc), site, mine_does)
        if pair in self.warned:  # (once per pair of sites and launch)
            return
        self.warned.add(pair)
        err = self._race(
            ctx, root, acc, mine_does, site, they_do,
            "the same elements, through a dynamic (run-time) offset, of", "accesses",
        )  # fmt: skip
        warn_at(
            f"{err.message} (nki-sim ran core 0's accesses between the two meetings before "
            "core 1's; a device may run them in another order)",
            CoreRaceWarning,
            err.loc,
        )
