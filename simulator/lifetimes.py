"""When the host storage of an on-chip tile may be dropped: each tile's window in program order.

On the device a tile allocated in a loop body is dead once the iteration has made its last use
of it, and a kernel's unrolled Python loop allocates a new tile per iteration; the simulator's
backends drop the host storage of such dead tiles so that host memory follows the tiles live
on the device, not the trip count.

Nodes are numbered in program (preorder) order. A tile's *scope* is the deepest node list
holding its ``Alloc`` and every access to it (reshape / dtype views count as the tile, a
device loop's bound and condition registers are read by the loop node); its *window* runs
from its ``Alloc`` to the end of the last node of its scope that accesses it. Each execution of
the scope allocates the tile afresh before any access (an access earlier in program order
than the ``Alloc`` reads a previous incarnation: such a tile is *kept*, as is a tensor with
several ``Alloc`` nodes), so at any program point outside the window the tile's storage is
never read again before its next ``Alloc``. A backend drops, when it runs an ``Alloc`` at
position ``x``, the storage of every tile whose window ``(start, end]`` does not hold ``x``;
the storage a launch holds at an allocation is then at most the tiles whose closed window
holds it (``peak``)."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property

from nki.ir import Alloc, Instr, KernelIR, Loop, Node, RuntimeLoop, TensorDecl


@dataclass(frozen=True)
class Lifetimes:
    """The windows of a kernel's on-chip tiles (one trace: ``KernelIR.body``)."""

    windows: dict[str, tuple[int, int]]  # tile -> (its Alloc's position, end of its window)
    kept: frozenset[str]  # on-chip tiles whose storage is never dropped
    views: dict[str, tuple[str, ...]]  # tile -> its reshape / dtype views

    def alloc_at(self, name: str) -> int | None:
        """The position of tile ``name``'s ``Alloc`` when dead tiles may be dropped there."""
        w = self.windows.get(name)
        return None if w is None else w[0]

    @cached_property
    def by_end(self) -> tuple[list[int], list[str]]:
        """The tiles in order of their windows' ends: (the ends, the tiles)."""
        order = sorted(self.windows, key=lambda n: self.windows[n][1])
        return [self.windows[n][1] for n in order], order

    @cached_property
    def _ended(self) -> dict[tuple[int, int], list[str]]:
        return {}  # (``ending``'s answers: a walk meets the same pairs every run of the kernel)

    def ending(self, after: int, x: int) -> list[str]:
        """The tiles whose windows end at ``after`` or later and before ``x``: those dead at
        the ``Alloc`` at ``x`` when the walk came there from the ``Alloc`` at ``after`` without
        going back (every tile stored since ``after``'s drop starts before ``x`` and ends at
        ``after`` or later)."""
        hit = self._ended.get((after, x))
        if hit is None:
            ends, names = self.by_end
            hit = names[bisect.bisect_left(ends, after) : bisect.bisect_left(ends, x)]
            if len(self._ended) >= _ENDED_MAX:
                self._ended.clear()
            self._ended[(after, x)] = hit
        return hit

    def dead(self, names: Iterable[str], x: int) -> list[str]:
        """The tiles among ``names`` whose storage is dead at the ``Alloc`` at position ``x``
        (names without a window, such as HBM tensors and views, are never listed)."""
        out = []
        windows = self.windows
        for n in names:
            w = windows.get(n)
            if w is not None and not w[0] < x <= w[1]:
                out.append(n)
        return out


_ENDED_MAX = 4096  # pairs of positions whose dead tiles ``Lifetimes.ending`` keeps

# id(ir) -> (ir, its lifetimes): the entry keeps its IR alive, so an id is never another's
_CACHE: dict[int, tuple[KernelIR, Lifetimes]] = {}


def lifetimes(ir: KernelIR) -> Lifetimes:
    """The windows of ``ir``'s on-chip tiles (computed once per traced kernel)."""
    hit = _CACHE.get(id(ir))
    if hit is not None and hit[0] is ir:
        return hit[1]
    got = _compute(ir)
    if len(_CACHE) >= 512:
        _CACHE.clear()
    _CACHE[id(ir)] = (ir, got)
    return got


def _loop_registers(loop: Loop) -> list[str]:
    if not isinstance(loop, RuntimeLoop):
        return []
    return [a.tensor for a in (loop.lower, loop.upper, loop.cond) if a is not None]


def _compute(ir: KernelIR) -> Lifetimes:
    # per tile: its Alloc nodes as (position, path), its accesses as (position, path); a path is
    # the child indices from the body down to the node
    allocs: dict[str, list[tuple[int, tuple[int, ...]]]] = {}
    uses: dict[str, list[tuple[int, tuple[int, ...]]]] = {}
    ends: dict[tuple[int, ...], int] = {}  # path of a loop -> position of its last node
    tiles = {d.name for d in ir.tensors if d.on_chip and d.alias_of is None}
    base = {d.name: d.alias_of or d.name for d in ir.tensors}
    pos = 0

    def use(names: Iterable[str], at: int, path: tuple[int, ...]) -> None:
        for name in names:
            b = base.get(name, name)
            if b in tiles:
                uses.setdefault(b, []).append((at, path))

    def rec(nodes: tuple[Node, ...], path: tuple[int, ...]) -> None:
        nonlocal pos
        for i, n in enumerate(nodes):
            pos += 1
            here = path + (i,)
            if isinstance(n, Alloc):
                if n.tensor in tiles:
                    allocs.setdefault(n.tensor, []).append((pos, here))
            elif isinstance(n, Instr):
                use((u.access.tensor for u in n.uses()), pos, here)
            elif isinstance(n, Loop):
                use(_loop_registers(n), pos, here)  # (read throughout the loop)
                rec(n.body, here)
                ends[here] = pos

    rec(ir.body, ())
    windows: dict[str, tuple[int, int]] = {}
    kept = set()
    for name in tiles:
        got = allocs.get(name, [])
        if len(got) != 1:
            if got:
                kept.add(name)
            continue
        (at, apath), mine = got[0], uses.get(name, [])
        if any(p < at for p, _ in mine):
            kept.add(name)  # (read before its Alloc in program order: carried over)
            continue
        depth = len(apath) - 1  # the deepest list holding the Alloc and every access
        for _, upath in mine:
            common = 0
            while common < min(depth, len(upath) - 1) and apath[common] == upath[common]:
                common += 1
            depth = common
        end = at
        for p, upath in mine:  # (a loop of the scope holding an access: to the loop's end)
            end = max(end, ends.get(upath[: depth + 1], p))
        windows[name] = (at, end)
    views: dict[str, list[str]] = {}
    for d in ir.tensors:
        if d.alias_of is not None and d.alias_of in tiles:
            views.setdefault(d.alias_of, []).append(d.name)
    return Lifetimes(windows, frozenset(kept), {k: tuple(v) for k, v in views.items()})


def peak(ir: KernelIR, size: Callable[[TensorDecl], int]) -> tuple[int, list[str]]:
    """The most bytes (``size`` of each tile) the on-chip tiles of one instance hold at an
    allocation when dead tiles are dropped, and the tiles held there (kept tiles count
    throughout)."""
    lt = lifetimes(ir)
    kept = [d.name for d in ir.tensors if d.name in lt.kept]
    base = sum(size(ir.tensor(n)) for n in kept)
    order = sorted(lt.windows.items(), key=lambda kv: kv[1][0])
    live: list[tuple[int, int, str]] = []  # (end, position, tile)
    total, best, best_at = 0, 0, -1
    sizes = {n: size(ir.tensor(n)) for n, _ in order}
    for k, (name, (start, end)) in enumerate(order):
        while live and live[0][0] < start:
            total -= sizes[heapq.heappop(live)[2]]
        heapq.heappush(live, (end, k, name))
        total += sizes[name]
        if total > best:
            best, best_at = total, start
    held = [n for n, (s, e) in order if s <= best_at <= e]
    return base + best, kept + held
