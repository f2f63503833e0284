"""Discrepancies found by auditing nki.isa against the official NKI documentation: each test
checks real values against an independent NumPy formulation of the documented semantics, or a
located error for a documented restriction."""

import numpy as np

import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIMemoryError

from .util import close, expect_error, rand, run


def _out(shape, dtype=np.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.shared_hbm)


# --------------------------------------------------------------------------------------------
# tensor_tensor_scan: "data0 and data1 cannot both reside in PSUM"
# --------------------------------------------------------------------------------------------


def k_scan_psum(a, b, one_in_psum):
    out = _out(a.shape)
    pa = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.psum)
    pa[...] = nl.load(a)
    if one_in_psum:
        sb = nl.load(b)
    else:
        sb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.psum)
        sb[...] = nl.load(b)
    r = nisa.tensor_tensor_scan(pa, sb, 0.5, np.multiply, np.add)  # ERR
    nl.store(out, r)
    return out


def test_scan_operands_not_both_psum():
    a, b = rand((16, 12), lo=0.1, hi=0.9), rand((16, 12))
    got = run(k_scan_psum, a, b, True)
    want = np.empty_like(a)
    prev = np.full(16, 0.5, np.float32)
    for i in range(a.shape[1]):  # r[:, i] = (data0[:, i] * r[:, i-1]) + data1[:, i]
        prev = a[:, i] * prev + b[:, i]
        want[:, i] = prev
    close(got, want, rtol=1e-5)
    expect_error(
        k_scan_psum,
        a,
        b,
        False,
        cls=NKIMemoryError,
        code="err_unsupported_memory",
        fragments=["'data0'", "'data1'", "nisa.tensor_tensor_scan", "PSUM"],
    )
