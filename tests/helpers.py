"""Helpers shared by the test files: run a kernel on a target, check a located NKIError, make
inputs and outputs, compare against a float32 reference.

Test files import this module as ``helpers``; ``tests/conftest.py`` puts ``tests/`` on
``sys.path``. (``tests/simulator`` must stay a plain directory, not a package, or it would
shadow the ``simulator`` package.)"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError

ROOT = Path(__file__).resolve().parents[1]
BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(1234)
DTS = [np.float32, BF16]  # the float dtypes every instruction test covers
# ALU op name -> (the op a kernel passes, nl or NumPy, its NumPy reference)
ALU_OPS = {
    "add": (np.add, np.add),
    "subtract": (nl.subtract, np.subtract),
    "multiply": (np.multiply, np.multiply),
    "maximum": (nl.maximum, np.maximum),
    "minimum": (np.minimum, np.minimum),
}


def run(fn, *args, target: str = "trn2", jit_opts: dict | None = None, **kw):
    """Run ``fn`` as an @nki.jit kernel on ``target`` with NumPy inputs (``jit_opts``: simulator
    options such as ``precise_fp`` / ``checks`` for this kernel). The target is set with
    ``configure`` (``nki.jit(platform_target=...)`` is deprecated in the current API)."""
    return nki.jit(fn, **(jit_opts or {})).configure(target=target)(*args, **kw)


def line_of(fn, marker: str = "# ERR") -> int:
    """The absolute source line of ``fn`` that carries ``marker`` (exactly one must)."""
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, text in enumerate(lines) if marker in text]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times in {fn.__name__}"
    return hits[0]


def _assert_located(e: NKIError, fn, marker: str) -> None:
    """The error points at the line of ``fn`` carrying ``marker``, in ``fn``'s file."""
    assert e.loc is not None and e.loc.line == line_of(fn, marker), (e.loc, str(e))
    assert e.loc.file == inspect.getsourcefile(fn), (e.loc, str(e))


def expect_error(fn, *args, cls, code, fragments=(), target="trn2", marker="# ERR", **kw):
    """Running ``fn`` on ``target`` fails with ``cls`` / ``code``, a message containing every
    fragment, located at the kernel line carrying ``marker``."""
    with pytest.raises(cls) as ei:
        run(fn, *args, target=target, **kw)
    e = ei.value
    assert e.code == code, (e.code, e.message)
    for f in fragments:
        assert f in e.message, (f, e.message)
    _assert_located(e, fn, marker)
    return e


def expect(
    fn, *args, cls=NKIError, code: str, values=(), marker="# ERR", grid=None, target=None, **opts
) -> NKIError:
    """Run ``fn`` (jitted here with ``opts``, on ``target`` if given, launched on ``grid`` if
    given) and check the error it raises: class, classic code, every value in the text and the
    reported kernel line."""
    k = nki.jit(fn, **opts)
    if target is not None:
        k = k.configure(target=target)
    launch = k[grid] if grid is not None else k
    with pytest.raises(cls) as ei:
        launch(*args)
    e = ei.value
    assert e.code == code, str(e)
    for v in values:
        assert str(v) in str(e), f"{v!r} not in: {e}"
    _assert_located(e, fn, marker)
    return e


def rand(shape, dtype=np.float32, lo=-2.0, hi=2.0):
    """Uniform values in [lo, hi) from the shared generator, rounded into ``dtype``."""
    return RNG.uniform(lo, hi, size=shape).astype(np.float32).astype(dtype)


def randn(shape, seed=0, dtype=np.float32):
    """Standard-normal values from a generator seeded with ``seed``."""
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def f32(x):
    return np.asarray(x).astype(np.float32)


def close(got, want, dtype=np.float32, rtol=None, atol=None):
    """Compare against an fp32 reference rounded to the output dtype (bf16: 1e-2, else 1e-5)."""
    want = np.asarray(want, dtype=np.float32)
    if dtype == BF16:
        rtol = 1e-2 if rtol is None else rtol
        atol = 1e-2 if atol is None else atol
    else:
        rtol = 1e-5 if rtol is None else rtol
        atol = 1e-5 if atol is None else atol
    np.testing.assert_allclose(f32(got), want, rtol=rtol, atol=atol)


def hbm_out(shape, dtype=np.float32):
    """A kernel output tensor in shared HBM (called inside a kernel)."""
    return nl.ndarray(shape, dtype=dtype, buffer=nl.shared_hbm)


def stored(tile):
    """A kernel output in shared HBM holding ``tile`` (called inside a kernel)."""
    out = nl.ndarray(tile.shape, tile.dtype, buffer=nl.shared_hbm)
    nl.store(out, tile)
    return out


def sbuf_tile(shape, dtype=nl.float32):
    """A new SBUF tile (called inside a kernel)."""
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


def load_sbuf(a):
    """``a`` copied into a new SBUF tile with a destination-first DMA (current API)."""
    t = sbuf_tile(a.shape, a.dtype)
    nisa.dma_copy(t, a)
    return t


def all_reduce_kernel(op, axes, dtype=None):
    """A kernel whose instance (i, j) reduces its (128, 64) block of ``x`` with ``nl.all_reduce``
    over ``axes`` and stores the result in its block of the output."""

    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=dtype or x.dtype, buffer=nl.shared_hbm)
        i, j = nl.program_id(0), nl.program_id(1)
        rows, cols = nl.ds(i * 128, 128), nl.ds(j * 64, 64)
        t = nl.load(x[rows, cols])
        nl.store(out[rows, cols], nl.all_reduce(t, op=op, program_axes=axes, dtype=dtype))
        return out

    return k


def run_threads(target: Callable[[int], None], n: int, switch: float = 1e-5) -> None:
    """Run ``target(i)`` in ``n`` threads at once with Python switching threads every
    ``switch`` seconds (as often as it can); asserts every thread finished."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(switch)
    try:
        threads = [threading.Thread(target=target, args=(t,)) for t in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads)


_KEEPS: list[bool] = []


def blas_keeps_bits() -> bool:
    """Whether this machine's BLAS gives each column block of a product the bits the whole
    product gives it. OpenBLAS 0.3.31 on an AMD EPYC does not (it switches kernels by the
    size of a product), so there one launch computing several products side by side, or one
    product of another shape, is bitwise only where its tiles are the same shapes."""
    if not _KEEPS:
        rng = np.random.default_rng(0)
        kept = True
        for m, k, ns in ((18, 32, (24, 24, 24)), (130, 200, (96, 256)), (128, 128, (256, 256))):
            a = rng.standard_normal((m, k)).astype(np.float32)
            bs = [rng.standard_normal((k, n)).astype(np.float32) for n in ns]
            whole = a @ np.concatenate(bs, axis=1)
            kept = kept and np.array_equal(whole, np.concatenate([a @ b for b in bs], axis=1))
        _KEEPS.append(kept)
    return _KEEPS[0]


def same_product_bits(got, want) -> None:
    """``got`` has ``want``'s bits where ``blas_keeps_bits``; elsewhere it is within rounding of
    the same sums (the products' last bits depend on BLAS's kernels). NumPy arrays or torch
    tensors."""
    g = np.asarray(got.detach() if hasattr(got, "detach") else got)
    w = np.asarray(want.detach() if hasattr(want, "detach") else want)
    if blas_keeps_bits():
        assert g.dtype == w.dtype and g.shape == w.shape
        assert np.array_equal(g.view(f"u{g.dtype.itemsize}"), w.view(f"u{w.dtype.itemsize}"))
        return
    tol = 1e-2 if g.dtype.itemsize == 2 else 1e-4
    np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol)
