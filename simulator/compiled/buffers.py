"""Memory for the Numba driver's per-instance tiles: tiles that are never live together take
turns in one buffer (``simulator/lifetimes.py``), so a kernel's unrolled loop needs the memory
of the tiles live in one iteration, not of every iteration's."""

from __future__ import annotations

import heapq

import numpy as np

from nki.ir import KernelIR

from ..host import storage_bytes
from ..lifetimes import lifetimes
from .codegen import Plan


def tile_buffers(ir: KernelIR, p: Plan, precise: bool) -> dict[str, np.ndarray]:
    """Bytes for the per-instance tiles of ``p`` that may share memory (``_sharing``), fresh
    for this launch; tiles absent here get their own array."""
    sizes, owner = _sharing(ir, p, precise)
    pools = [np.empty(n, dtype=np.uint8) for n in sizes]
    return {name: pools[k][:n] for name, (k, n) in owner.items()}


# id(plan) -> (plan, precise_fp, buffer sizes, tile -> (its buffer, its bytes)): bounded
_SHARING: dict[int, tuple[Plan, bool, list[int], dict[str, tuple[int, int]]]] = {}


def _sharing(ir: KernelIR, p: Plan, precise: bool) -> tuple[list[int], dict[str, tuple[int, int]]]:
    """(bytes of each shared buffer, tile -> (its buffer, its bytes)): tiles whose windows
    (``simulator/lifetimes.py``: from the Alloc to the last access, ends included) never
    overlap take turns in one buffer, so an unrolled loop's tiles need the memory of one
    iteration. Each Alloc refills its tile (or the next instruction overwrites all of it)
    before anything reads it, as for a tile of its own. Made once per plan."""
    hit = _SHARING.get(id(p))
    if hit is not None and hit[0] is p and hit[1] == precise:
        return hit[2], hit[3]
    lt = lifetimes(ir)
    need: dict[str, int] = {}
    for b in p.args:
        if b.tensor is not None and b.tensor in lt.windows:
            need[b.tensor] = storage_bytes(ir.tensor(b.tensor), precise)
    sizes: list[int] = []  # bytes of each buffer
    owner: dict[str, tuple[int, int]] = {}
    busy: list[tuple[int, int]] = []  # (window end, buffer) of the buffers in use
    free: list[int] = []
    for name in sorted(need, key=lambda n: lt.windows[n][0]):
        start, end = lt.windows[name]
        while busy and busy[0][0] < start:
            free.append(heapq.heappop(busy)[1])
        fits = [k for k in free if sizes[k] >= need[name]]
        if fits or free:  # the smallest that fits, else the largest, grown
            k = min(fits, key=sizes.__getitem__) if fits else max(free, key=sizes.__getitem__)
            free.remove(k)
            sizes[k] = max(sizes[k], need[name])
        else:
            k = len(sizes)
            sizes.append(need[name])
        owner[name] = (k, need[name])
        heapq.heappush(busy, (end, k))
    if len(_SHARING) >= 512:
        _SHARING.clear()
    _SHARING[id(p)] = (p, precise, sizes, owner)
    return sizes, owner
