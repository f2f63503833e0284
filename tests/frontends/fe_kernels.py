"""Kernels shared by the frontend tests."""

import numpy as np

import nki
import nki.language as nl


@nki.jit
def mul(a, b):
    """c = a * b for a [P<=128, F] tile."""
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip = nl.arange(a.shape[0])[:, None]
    jf = nl.arange(a.shape[1])[None, :]
    nl.store(c[ip, jf], value=nl.multiply(nl.load(a[ip, jf]), nl.load(b[ip, jf])))
    return c


@nki.jit
def mul_bwd(a, b, g):
    """(g * b, g * a): the gradients of a * b."""
    ga = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    gb = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip = nl.arange(a.shape[0])[:, None]
    jf = nl.arange(a.shape[1])[None, :]
    gt = nl.load(g[ip, jf])
    nl.store(ga[ip, jf], value=nl.multiply(gt, nl.load(b[ip, jf])))
    nl.store(gb[ip, jf], value=nl.multiply(gt, nl.load(a[ip, jf])))
    return ga, gb


@nki.jit
def add_rows(a, b):
    """Grid over row tiles of 128: c = a + b."""
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    jf = nl.arange(a.shape[1])[None, :]
    nl.store(c[ip, jf], value=nl.load(a[ip, jf]) + nl.load(b[ip, jf]))
    return c


@nki.jit
def scale_rows(a, alpha=2.0):
    """Grid over row tiles of 128: c = a * alpha."""
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    jf = nl.arange(a.shape[1])[None, :]
    nl.store(c[ip, jf], value=nl.multiply(nl.load(a[ip, jf]), alpha))
    return c


def add_rows_legacy(a, b, c):
    """Legacy convention: the output is the last parameter."""
    ip = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    jf = nl.arange(a.shape[1])[None, :]
    nl.store(c[ip, jf], value=nl.load(a[ip, jf]) + nl.load(b[ip, jf]))


@nki.jit
def axpy(a, b, alpha=1.0, negate=False):
    """alpha * a + b (negated when ``negate``): scalar parameters with defaults."""
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    r = nl.add(nl.multiply(nl.load(a), alpha), nl.load(b))
    nl.store(c, value=nl.negative(r) if negate else r)
    return c


@nki.jit
def axpy_bwd(a, b, g, alpha=1.0):
    """(alpha * g, g): the gradients of alpha * a + b."""
    ga = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    gb = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    gt = nl.load(g)
    nl.store(ga, value=nl.multiply(gt, alpha))
    nl.store(gb, value=nl.copy(gt))
    return ga, gb


@nki.jit
def dot_pairs(pairs, extra):
    """sum(a * b for a, b in pairs) + sum(extra): nested and flat lists of [P, F] tensors."""
    out = nl.ndarray(extra[0].shape, dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros(extra[0].shape, dtype=nl.float32)
    for a, b in pairs:
        acc[...] = nl.add(acc, nl.multiply(nl.load(a), nl.load(b)))
    for e in extra:
        acc[...] = nl.add(acc, nl.load(e))
    nl.store(out, acc)
    return out


def dot_pairs_ref(pairs, extra):
    """NumPy's ``dot_pairs``: the same fp32 operations in the same order."""
    acc = np.zeros(np.shape(extra[0]), dtype=np.float32)
    for a, b in pairs:
        acc = acc + np.asarray(a, dtype=np.float32) * np.asarray(b, dtype=np.float32)
    for e in extra:
        acc = acc + np.asarray(e, dtype=np.float32)
    return acc
