"""The products of the batched matmul executors (``ops.py``): a batch of ``x.T @ y`` tile
products, each with the reference interpreter's sums (``simulator/language/matmul.py``,
``simulator/isa/tensor.py``: one fp32 gemm of the tile's shapes).

A tiled matmul kernel's products over a batch of (M tile, N tile) positions are blocks of one
large product when the stationary operand varies only along batch axes the moving one does
not vary along (lhsT indexed by the M tile, rhs by the N tile): ``stacked`` computes them as
one gemm of all those rows and columns instead of one small gemm per position (NumPy loops a
stack of products one gemm at a time; BLAS does not thread small ones). ``accumulate`` adds
it to PSUM a few M tiles at a time, the blocks run on the threads the launch was given
(``simulator/threads.run_blocks``). Tiles of at least ``TILE_MIN`` multiply-adds are instead
added by BLAS itself (``cblas``: ``C += A @ B``): no product array and no separate pass adding
it. PSUM whose N tiles are columns of one matrix (the batched backend lays a tiled matmul's
PSUM out so, ``BCtx.as_matrix``) takes one such call per few M tiles' rows, other PSUM one
per tile (slower: BLAS packs each tile's operands again).

The blocks keep the reference's bits where every block's sum is the same sequence of fused
multiply-adds over K as the tile's own gemm: BLAS partitions a product's rows and columns
among its threads and kernel calls, not the sum over K (at most 128, inside one K block of
every BLAS). Two cases do not: a tile of one row or one column (NumPy then calls gemv, which
sums in another order) and a small product in the untransposed layout (OpenBLAS's small-matrix
and "direct" kernels, used below about 100^3 multiply-adds, sum in another order than its
large-product kernel). Both keep one gemm per position. Whether this BLAS gives blocks its
tile gemm's bits is also checked once per process, layout and thread count on a few shapes
(``agrees``); a BLAS that does not keeps one gemm per position everywhere. So is whether the
calls adding into PSUM give each tile's gemm plus an fp32 add, in both layouts (they do where
the sum over K fits one K block, as here); if not, the blocks are added by NumPy. Where the
blocks do not keep the bits, or the batch is too small to stack, tiles of at least ``TILE_MIN``
are still added into PSUM by one BLAS call each, when such a call alone gives the tile's gemm
plus an fp32 add (``agrees(per_tile=True)``, probed apart: an OpenBLAS 0.3.31 on an AMD EPYC
sums a product's blocks otherwise, but adds a lone tile so; ``_tile_by_tile``). Batches of
less than ``STACK_MIN`` multiply-adds in all keep one gemm per position too: for them it is the
faster way. The gemms per position of a large batch run on the launch's threads too
(``per_item``), split by its leading batch axes: each position's gemm is the one it would be
alone, on one BLAS thread."""

from __future__ import annotations

import math
import threading

import numpy as np

from ..threads import WORK_PER_THREAD, blas_threads_now, cores, run_blocks
from . import cblas

# the smallest product (multiply-adds) of the untransposed layout taken by a large-product
# kernel: OpenBLAS's small-matrix kernels take those up to 100^3
_NN_MIN = 100**3 + 1
# below this many multiply-adds in all, one gemm per position is faster than gathering the
# operands into one product (the copies and the arrangement of the result cost more than the
# gemms they save)
STACK_MIN = 1 << 24
_BLOCK_BYTES = 2 << 20  # a block of the product (a few M tiles) computed while it is in cache


def _tiles_per_block(m: int, cols: int) -> int:
    """M tiles (of ``m`` rows) of a product with ``cols`` columns in one block."""
    return max(1, _BLOCK_BYTES // (m * cols * 4))


def unbroadcast(a: np.ndarray) -> np.ndarray:
    """A batched operand with its repeated batch axes (stride 0: the operand does not depend
    on that batch symbol) cut to length 1; ``np.matmul`` broadcasts them back without copies."""
    nb = a.ndim - 2
    strides, shape = a.strides, a.shape
    if 0 not in strides[:nb] or not [b for b in range(nb) if strides[b] == 0 and shape[b] > 1]:
        return a
    return a[tuple([slice(0, 1) if strides[b] == 0 else slice(None) for b in range(nb)])]


def product(x: np.ndarray, y: np.ndarray, nn: bool) -> np.ndarray:
    """``x.T @ y`` over leading batch axes in fp32: ``x`` (batch..., K, M), ``y`` (batch..., K, N),
    both unbroadcast; ``nn``: the reference multiplies ``x.T`` as a C-ordered (M, K) copy (else
    as the transposed view of (K, M) storage). One gemm when ``stacked`` applies, else one per
    position."""
    out = None if x.ndim == 2 else stacked(x, y, nn)  # (no batch axes: no blocks to stack)
    return per_item(x, y, nn) if out is None else out


def stacked(
    x: np.ndarray, y: np.ndarray, nn: bool, probed: bool = True, rows: bool | None = None
) -> np.ndarray | None:
    """``product`` as one gemm (the result a view with the batch axes' order), or None when
    the batch is not blocks of one product (or its blocks would not keep the tiles' bits;
    ``probed``: only where ``agrees``; ``rows``: ``_operands``')."""
    ops = _operands(x, y, nn, probed, rows)
    if ops is None:
        return None
    lhs, rhs, sx, sy, _ = ops
    out = np.empty((lhs.shape[0], rhs.shape[1]), dtype=np.float32)
    # (blocks of a few M tiles on the launch's workers, as ``accumulate``'s: one gemm on BLAS's
    # own threads would leave them spinning for a while after it, against the workers of the
    # next instruction's blocks)
    m = x.shape[-1]
    per = _tiles_per_block(m, rhs.shape[1]) * m  # (rows per block)
    blocks = [slice(r, r + per) for r in range(0, lhs.shape[0], per)]
    run_blocks(lambda r: np.matmul(lhs[r], rhs, out=out[r]), blocks, out.size * rhs.shape[0])
    sizes = {b: x.shape[b] for b in sx} | {b: y.shape[b] for b in sy}
    return _arranged(out, sizes, sx, sy, list(range(x.ndim - 2)), (x.shape[-1], y.shape[-1]))


def accumulate(
    dst: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    nn: bool,
    probed: bool = True,
    rows: bool | None = None,
) -> bool:
    """``dst += product(x, y, nn)`` into the fp32 view ``dst`` (batch..., M, N), the product
    computed as one gemm a few M tiles at a time, each block added while it is still in cache
    (the same fp32 additions as the whole product's); False (nothing done) when ``stacked``
    does not apply."""
    ops = _operands(x, y, nn, probed, rows)
    if ops is None:
        return probed and _tile_by_tile(dst, x, y, nn)
    if probed and _into_tiles(dst, x, y, nn, ops, probed):
        return True
    lhs, rhs, sx, sy, _ = ops
    mn = (x.shape[-1], y.shape[-1])
    outer, last = sx[:-1], sx[-1:]  # (a block: one position of the outer axes, tiles of the last)
    tiles = x.shape[last[0]] if last else 1
    group = min(tiles, _tiles_per_block(mn[0], rhs.shape[1]))
    inner = [b for b in range(x.ndim - 2) if b not in outer]  # (a block's batch axes)
    blocks: list[tuple[np.ndarray, tuple[int | slice, ...], dict[int, int]]] = []
    for at, lead in enumerate(np.ndindex(*(x.shape[b] for b in outer))):
        where: list[int | slice] = [slice(None)] * (x.ndim - 2)
        for b, i in zip(outer, lead):
            where[b] = i
        for j0 in range(0, tiles, group):
            j1 = min(tiles, j0 + group)
            sizes = {b: y.shape[b] for b in sy}
            if last:
                where[last[0]] = slice(j0, j1)
                sizes[last[0]] = j1 - j0
            rows = lhs[(at * tiles + j0) * mn[0] : (at * tiles + j1) * mn[0]]
            blocks.append((rows, tuple(where), sizes))

    def add(block: tuple[np.ndarray, tuple[int | slice, ...], dict[int, int]]) -> None:
        rows, where, sizes = block
        sub = dst[where]
        prod = np.matmul(rows, rhs, out=_scratch((rows.shape[0], rhs.shape[1])))
        np.add(sub, _arranged(prod, sizes, last, sy, inner, mn), out=sub)

    run_blocks(add, blocks, lhs.shape[0] * rhs.shape[0] * rhs.shape[1])
    return True


# multiply-adds of one tile product from which one BLAS call per tile adding into PSUM
# (``_into_tiles``) is faster than the product's blocks added by NumPy
TILE_MIN = 1 << 20
_TILES_PER_BLOCK = 4  # tile gemms a worker runs per block


def _tile_by_tile(dst: np.ndarray, x: np.ndarray, y: np.ndarray, nn: bool) -> bool:
    """``accumulate`` where a product's blocks do not keep the tiles' bits (``agrees``) or the
    batch is too small to stack, as one BLAS call per tile adding into PSUM, when each such call
    gives the tile's own gemm plus an fp32 add (``agrees(per_tile=True)``): the left operand in
    the reference's layout, no product array and no pass adding it."""
    k, m = x.shape[-2:]
    if x.ndim == 2 or m * y.shape[-1] * k < TILE_MIN or cblas.sgemm() is None:
        return False
    if not agrees(nn, fused=True, per_tile=True):
        return False
    ops = _operands(x, y, nn, probed=False, rows=nn)
    return ops is not None and _into_tiles(dst, x, y, nn, ops, probed=False, per_tile=True)


def _into_tiles(
    dst: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    nn: bool,
    ops: Operands,
    probed: bool,
    per_tile: bool = False,
) -> bool:
    """``accumulate`` as BLAS calls that add the products into PSUM (``cblas``: ``C += A @ B``),
    on the stacked operands ``ops``: one call per few M tiles' rows by every column when
    ``dst`` is one matrix (``_one_matrix``) and not ``per_tile``, else one per tile; False
    (nothing done) for small tiles, a destination BLAS cannot address, no callable BLAS, or
    (``probed``) a BLAS whose added products differ from the reference's tile gemm plus an fp32
    add."""
    lhs, rhs, sx, sy, by_rows = ops
    k, m = x.shape[-2:]
    n = y.shape[-1]
    nb = x.ndim - 2
    batch, step = dst.shape[:nb], dst.strides[:nb]
    if (
        (probed and m * n * k < TILE_MIN)
        or dst.dtype != np.float32
        or not dst.flags.writeable
        or dst.shape[nb:] != (m, n)
        or dst.strides[-1] != 4
        or any(s < 0 or s % 4 for s in dst.strides)
        or dst.strides[-2] < 4 * n
        or any(s == 0 and d > 1 for s, d in zip(step, batch))  # (two positions, one tile)
        or any(d != (x.shape[b] if b in sx else y.shape[b] if b in sy else d)
               for b, d in enumerate(batch))
    ):  # fmt: skip
        return False
    gemm = cblas.sgemm()
    if gemm is None or (probed and not agrees(nn, fused=True, rows=by_rows and not nn)):
        return False
    if by_rows:  # (lhs: C-ordered rows of every M tile)
        a0, lda, a_row = lhs.ctypes.data, k, 4 * k
    else:  # (lhs: the transposed view of (K, rows) storage)
        a0, lda, a_row = lhs.ctypes.data, lhs.shape[0], 4
    b0, ldb, ldc = rhs.ctypes.data, rhs.shape[1], dst.strides[-2] // 4
    calls: list[tuple[int, int, int, int]]  # (rows, A, B, C)
    if not per_tile and _one_matrix(dst, sx, sy, rhs.shape[1]):  # (a few M tiles' rows per call)
        rows = _tiles_per_block(m, rhs.shape[1]) * m
        calls = [
            (min(rows, lhs.shape[0] - r), a0 + r * a_row, b0, dst.ctypes.data + r * 4 * ldc)
            for r in range(0, lhs.shape[0], rows)
        ]
        cols, per_block = rhs.shape[1], 1
    else:  # (one tile per call)
        at = np.indices(batch).reshape(nb, -1)  # (every position; ``_operands``: nb >= 1)
        c = dst.ctypes.data + np.dot(np.asarray(step, dtype=np.intp), at)
        none = np.zeros(at.shape[1], dtype=np.intp)
        px = np.ravel_multi_index(tuple(at[sx]), [batch[b] for b in sx]) if sx else none
        py = np.ravel_multi_index(tuple(at[sy]), [batch[b] for b in sy]) if sy else none
        order = np.lexsort((px, py))  # (the tiles of one moving tile together, in cache)
        calls = [
            (m, a0 + int(px[t]) * m * a_row, b0 + int(py[t]) * 4 * n, int(c[t])) for t in order
        ]
        cols, per_block = n, _TILES_PER_BLOCK

    def run(part: list[tuple[int, int, int, int]]) -> None:
        for r, a, b, cc in part:
            gemm(not by_rows, r, cols, k, a, lda, b, ldb, cc, ldc)

    blocks = [calls[i : i + per_block] for i in range(0, len(calls), per_block)]
    run_blocks(run, blocks, lhs.shape[0] * rhs.shape[1] * k)
    return True


def columns(x: np.ndarray, y: np.ndarray, nn: bool) -> list[int]:
    """The batch axes along which only the moving operand ``y`` varies (its N tiles), when
    ``accumulate`` adds the products by BLAS (``_into_tiles``; else none): PSUM laid out with
    them as columns (``BCtx.as_matrix``) takes one BLAS call per few M tiles, not per tile."""
    k, m = x.shape[-2:]
    if m * y.shape[-1] * k < TILE_MIN:
        return []
    axes = _batch_axes(x, y, nn, probed=True)
    if axes is None or cblas.sgemm() is None or not agrees(nn, fused=True):
        return []
    return axes[1]


def _one_matrix(dst: np.ndarray, sx: list[int], sy: list[int], cols: int) -> bool:
    """Whether ``dst`` (batch..., M, N) is one strided (rows, cols) matrix whose rows are the M
    tiles' rows in the order of the product's (``sx``'s positions, then M) and whose columns
    are the N tiles' columns (``sy``'s, then N): each batch axis of ``sx`` a whole number of
    the rows after it, each of ``sy`` of the columns (PSUM laid out so: ``BCtx.as_matrix``)."""
    nb = dst.ndim - 2
    if any(dst.shape[b] > 1 for b in range(nb) if b not in sx and b not in sy):
        return False
    for axes, span in ((sx, dst.shape[-2] * dst.strides[-2]), (sy, dst.shape[-1] * 4)):
        for b in reversed(axes):
            if dst.strides[b] != span:
                return False
            span *= dst.shape[b]
    return dst.strides[-2] >= 4 * cols


_SCRATCH = threading.local()  # a thread's product block, reused from block to block
_SCRATCH_BYTES = 4 * _BLOCK_BYTES  # the largest one a thread keeps


def _scratch(shape: tuple[int, int]) -> np.ndarray:
    """An fp32 (rows, cols) array of this thread, its memory reused by the next block (a fresh
    2 MB product per block costs the allocator and the page faults); larger than
    ``_SCRATCH_BYTES``, a fresh one."""
    n = shape[0] * shape[1]
    if 4 * n > _SCRATCH_BYTES:  # (a block of one huge tile: not kept)
        return np.empty(shape, dtype=np.float32)
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.size < n:
        buf = _SCRATCH.buf = np.empty(max(n, _BLOCK_BYTES // 4), dtype=np.float32)
    return buf[:n].reshape(shape)


def _arranged(
    out: np.ndarray,
    sizes: dict[int, int],
    sx: list[int],
    sy: list[int],
    axes: list[int],
    mn: tuple[int, int],
) -> np.ndarray:
    """A gemm's result (rows: the positions along x's batch axes ``sx``, then M; columns:
    along y's ``sy``, then N; ``sizes``: the positions along each) as a view (batch..., M, N)
    over the batch axes ``axes``, of length 1 along those neither operand varies along."""
    m, n = mn
    out = out.reshape(*(sizes[b] for b in sx), m, *(sizes[b] for b in sy), n)
    src = {b: i for i, b in enumerate(sx)} | {b: len(sx) + 1 + i for i, b in enumerate(sy)}
    order = [src[b] for b in axes if b in src] + [len(sx), out.ndim - 1]
    return out.transpose(order).reshape(*(sizes.get(b, 1) for b in axes), m, n)


def _batch_axes(
    x: np.ndarray, y: np.ndarray, nn: bool, probed: bool
) -> tuple[list[int], list[int]] | None:
    """The batch axes ``x`` and ``y`` vary along, when the batch's products are blocks of one
    product that keeps the tiles' bits (``probed``: also large enough to stack, and where
    ``agrees``); else None."""
    nb = x.ndim - 2
    sx = [b for b in range(nb) if x.shape[b] > 1]
    sy = [b for b in range(nb) if y.shape[b] > 1]
    if set(sx) & set(sy) or not (sx or sy) or y.ndim != x.ndim:
        return None
    k, m = x.shape[-2:]
    n = y.shape[-1]
    if m < 2 or n < 2 or (nn and m * n * k < _NN_MIN):
        return None
    if (
        probed
        and math.prod(x.shape[b] for b in sx) * math.prod(y.shape[b] for b in sy) * (m * n * k)
        < STACK_MIN
    ):
        return None
    if probed and not agrees(nn):
        return None
    return sx, sy


# (the left operand (rows, K), the right one (K, columns), the batch axes x and y vary along,
# whether the left one is C-ordered rows (else the transposed view of (K, rows) storage))
Operands = tuple[np.ndarray, np.ndarray, list[int], list[int], bool]


def _operands(
    x: np.ndarray, y: np.ndarray, nn: bool, probed: bool, rows: bool | None = None
) -> Operands | None:
    """The one gemm's operands (fp32 copies: the left one the rows of every M tile, the right
    one the columns of every N tile) and the batch axes ``x`` and ``y`` vary along; None when
    the batch is not blocks of one product or they would not keep the tiles' bits. The left
    one is laid out as the reference's (``nn``: C-ordered rows, else (K, rows) storage), or
    with ``rows`` as C-ordered rows; by default also so when ``x`` is a transposed view (its K
    axis in memory order, as a transpose's copy is) of a large product whose layouts agree
    (``agrees(rows=True)``): its copy is then in memory order, not a transposing one."""
    axes = _batch_axes(x, y, nn, probed)
    if axes is None:
        return None
    sx, sy = axes
    nb = x.ndim - 2
    k, m = x.shape[-2:]
    n = y.shape[-1]
    if rows is None:
        rows = nn or (probed and as_rows(x, n))
    xs = x[tuple(slice(None) if b in sx else 0 for b in range(nb))]
    ys = y[tuple(slice(None) if b in sy else 0 for b in range(nb))]
    nr, cols = math.prod(xs.shape[:-2]) * m, math.prod(ys.shape[:-2]) * n
    if rows:  # (rows of x.T, C-ordered)
        a = np.empty((*xs.shape[:-2], m, k), dtype=np.float32)
        np.copyto(a, np.swapaxes(xs, -1, -2), casting="unsafe")
        lhs = a.reshape(nr, k)
    else:  # (x's storage (K, rows), multiplied transposed)
        a = np.empty((k, *xs.shape[:-2], m), dtype=np.float32)
        np.copyto(a, np.moveaxis(xs, -2, 0), casting="unsafe")
        lhs = a.reshape(k, nr).T
    b_ = np.empty((k, *ys.shape[:-2], n), dtype=np.float32)
    np.copyto(b_, np.moveaxis(ys, -2, 0), casting="unsafe")
    return lhs, b_.reshape(k, cols), sx, sy, rows


def per_item(x: np.ndarray, y: np.ndarray, nn: bool) -> np.ndarray:
    """``product`` as one gemm per position (NumPy's stacked matmul), each in the reference's
    layout: ``x.T`` the transposed view of fp32 (K, M) storage (``x`` itself when it already
    is fp32 with unit-stride rows: BLAS reads it in place), or with ``nn`` a C-ordered (M, K)
    copy (OpenBLAS sums small products of the two layouts differently). A transposed view
    (a PE transpose copied back to SBUF) of a large product is multiplied as the C-ordered rows
    it already is where the layouts agree (``agrees(rows=True)``), not copied into (K, M)."""
    if nn or as_rows(x, y.shape[-1]):
        lhs = np.ascontiguousarray(x.swapaxes(-1, -2), dtype=np.float32)
    elif _blasable(x):
        lhs = x.swapaxes(-1, -2)
    else:
        lhs = np.ascontiguousarray(x, dtype=np.float32).swapaxes(-1, -2)
    rhs = y if _blasable(y) else np.ascontiguousarray(y, dtype=np.float32)
    if lhs.ndim == rhs.ndim == 2:
        return np.matmul(lhs, rhs)
    batch = np.broadcast_shapes(lhs.shape[:-2], rhs.shape[:-2])
    items, (m, k), n = math.prod(batch), lhs.shape[-2:], rhs.shape[-1]
    lead = _lead_axes(batch, cores())
    if lead == 0 or items * m * k * n < 2 * WORK_PER_THREAD:
        return np.matmul(lhs, rhs)
    # (the positions' gemms split among the launch's threads by their leading batch axes: each
    # block one stacked matmul, the same gemm per position as the whole one)
    out = np.empty((*batch, m, n), dtype=np.float32)
    lhs = lhs.reshape((1,) * (len(batch) + 2 - lhs.ndim) + lhs.shape)  # (the batch's rank)
    rhs = rhs.reshape((1,) * (len(batch) + 2 - rhs.ndim) + rhs.shape)

    def one(at: tuple[int, ...]) -> None:
        pick = [tuple(i if d > 1 else 0 for i, d in zip(at, a.shape)) for a in (lhs, rhs)]
        np.matmul(lhs[pick[0]], rhs[pick[1]], out=out[at])

    run_blocks(one, list(np.ndindex(*batch[:lead])), items * m * k * n)
    return out


def _lead_axes(batch: tuple[int, ...], threads: int) -> int:
    """How many leading batch axes ``per_item`` splits its positions by: the fewest whose
    positions give each of ``threads`` a few blocks (0: one position, or one thread)."""
    if threads < 2 or math.prod(batch) < 2:
        return 0
    blocks = 1
    for j, d in enumerate(batch):
        blocks *= d
        if blocks >= 4 * threads:
            return j + 1
    return len(batch)


def as_rows(x: np.ndarray, n: int) -> bool:
    """Whether ``x`` (batch..., K, M), a transposed view (its K axis in memory order), is
    multiplied with ``n`` columns as C-ordered rows: a product large enough that OpenBLAS sums
    both layouts alike (``agrees(rows=True)``)."""
    k, m = x.shape[-2:]
    return (
        abs(x.strides[-2]) < abs(x.strides[-1])
        and m * k * n >= _NN_MIN
        and agrees(False, rows=True)
    )


def _blasable(a: np.ndarray) -> bool:
    """fp32 rows of unit stride, apart by at least a row (what NumPy hands BLAS in place)."""
    row = a.strides[-2]
    return (
        a.dtype == np.float32
        and a.strides[-1] == a.itemsize
        and row % a.itemsize == 0
        and row >= a.shape[-1] * a.itemsize
    )


# ---- does this BLAS give a large product's blocks its tile gemm's bits? -----------------------

# tile products (M, K, N) checked, with the layouts' limits: small ones (OpenBLAS's small-matrix
# kernels in the transposed layout), ragged ones, full ones, K of 1 and of 128
_PROBES = (
    (64, 128, 64), (8, 128, 8), (33, 47, 100), (128, 128, 512), (2, 1, 3), (128, 64, 256),
    (100, 128, 300), (128, 128, 128),
)  # fmt: skip
_AGREES: dict[tuple[bool, bool, bool, tuple[int, ...]], bool] = {}
_PROBE_LOCK = threading.Lock()


def agrees(nn: bool, fused: bool = False, rows: bool = False, per_tile: bool = False) -> bool:
    """Whether a product of 3 x 2 tiles computed as one gemm equals each tile's own gemm bit for
    bit on the probe shapes, in the layout ``nn`` and with the BLAS threads set now (checked
    once per process, layouts and thread counts); with ``fused``, whether each tile's gemm
    added by BLAS into PSUM (``_into_tiles``) equals its gemm plus an fp32 add, on the probe
    shapes of at least ``TILE_MIN`` multiply-adds (``per_tile``: only that, one call per tile,
    whatever the blocks of one product give); with ``rows``, all that with the left
    operand stacked as C-ordered rows whatever the reference's layout, on the probe shapes of
    at least ``_NN_MIN`` (OpenBLAS's small-matrix kernels sum the two layouts differently)."""
    key = (nn, fused, rows, per_tile, tuple(blas_threads_now()))
    got = _AGREES.get(key)
    if got is None:
        with _PROBE_LOCK:
            got = _AGREES.get(key)
            if got is None:
                least = max(TILE_MIN if fused else 0, _NN_MIN if nn or rows else 0)
                shapes = [s for s in _PROBES if math.prod(s) >= least]
                got = all(_probe(m, k, n, nn, fused, rows, per_tile) for m, k, n in shapes)
                _AGREES[key] = got
    return got


def _probe(
    m: int, k: int, n: int, nn: bool, fused: bool, rows: bool = False, per_tile: bool = False
) -> bool:
    """3 x 2 tiles (M, K) x (K, N) as one product, and accumulated into PSUM values (blocks
    added by NumPy; with ``fused``, added by BLAS tile by tile into C-ordered PSUM and a few
    tiles' rows at a time into PSUM laid out as one matrix), the left operand stacked in the
    reference's layout (``rows``: as C-ordered rows), against each tile's own gemm in the
    reference's layout and its fp32 sum with those values. ``per_tile`` (with ``fused``): only
    the tile by tile calls into C-ordered PSUM."""
    rng = np.random.default_rng(m * 1000 + k + n)
    x = rng.standard_normal((3, 1, k, m)).astype(np.float32)  # 3 M tiles, batch axis 0
    y = rng.standard_normal((1, 2, k, n)).astype(np.float32)  # 2 N tiles, batch axis 1
    layout = nn or rows
    whole = None if per_tile else stacked(x, y, nn, probed=False, rows=layout)
    was = rng.standard_normal((3, 2, m, n)).astype(np.float32) * np.float32(k)
    ops = _operands(x, y, nn, probed=False, rows=layout)
    if (whole is None and not per_tile) or ops is None:
        return False
    if fused and per_tile:
        intos = [was.copy()]
        done = _into_tiles(intos[0], x, y, nn, ops, probed=False, per_tile=True)
    elif fused:
        matrix = np.empty((3, m, 2, n), dtype=np.float32).transpose(0, 2, 1, 3)
        intos = [was.copy(), matrix]
        matrix[...] = was
        done = all(_into_tiles(into, x, y, nn, ops, probed=False) for into in intos)
    else:
        intos = [was.copy()]
        done = accumulate(intos[0], x, y, nn, probed=False, rows=layout)
    if not done:
        return False
    for i, j in np.ndindex(3, 2):
        lhs = np.ascontiguousarray(x[i, 0].T) if nn else x[i, 0].T
        tile = np.matmul(lhs, y[0, j])
        plus = was[i, j] + tile
        if whole is not None and not _same_bits(tile, whole[i, j]):
            return False
        # (``per_item`` multiplies a single tile's rows too)
        if rows and not _same_bits(tile, np.matmul(np.ascontiguousarray(x[i, 0].T), y[0, j])):
            return False
        if not all(_same_bits(plus, into[i, j]) for into in intos):
            return False
    return True


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(
        np.ascontiguousarray(a).view(np.uint32), np.ascontiguousarray(b).view(np.uint32)
    )
