"""Loop-carried dependencies through on-chip tiles in ``nl.affine_range`` are found statically
(as for HBM): a tile allocated outside the loop that several iterations overwrite, when one
iteration can see another's value. Legal patterns (scratch reuse, reductions, PSUM
accumulation, per-iteration tiles and blocks) stay clean."""

from __future__ import annotations

import warnings

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIDependencyError
from simulator.checks.unwritten import UnwrittenOutputWarning

from helpers import expect
from helpers import randn as rand


def last_iteration_wins(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(2):
        t[...] = nl.load(a[i])  # ERR
    nl.store(out, t)  # READ
    return out


def test_last_iteration_wins_over_sbuf_is_reported_statically():
    e = expect(
        last_iteration_wins,
        rand((2, 128, 8)),
        api="classic",  # (the current API runs such a loop in program order)
        cls=NKIDependencyError,
        code="err_unexpected_output_dependencies",
        values=["iterations 0 and 1", "SBUF tile", "read after the loop"],
    )
    from helpers import line_of

    assert any(loc.line == line_of(last_iteration_wins, "# READ") for _, loc in e.related)


def previous_iteration(a):
    out = nl.ndarray((4, 128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.zeros((128, 8), dtype=a.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(4):
        nl.store(out[i], t)  # reads what iteration i - 1 loaded
        t[...] = nl.load(a[i])  # ERR
    return out


def test_reading_the_previous_iterations_tile_is_reported():
    expect(
        previous_iteration,
        rand((4, 128, 8)),
        api="classic",  # (the current API runs such a loop in program order)
        code="err_unexpected_output_dependencies",
        values=["reads it before writing it", "SBUF tile"],
    )


def legal_patterns(a, b):
    # scratch reused by every iteration (written before read), per-iteration blocks, a tile
    # allocated inside the loop, SBUF reductions (nl.add, nisa.tensor_tensor) and a PSUM
    # accumulation
    n = a.shape[0]
    out = nl.ndarray((n, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    total = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    top = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    mm = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    scratch = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    blocks = nl.ndarray((n, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    big = nl.full((128, 64), -1.0, dtype=nl.float32, buffer=nl.sbuf)
    ps = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(n):
        scratch[...] = nl.multiply(nl.load(a[i]), 2.0)
        blocks[i] = nl.add(scratch, 1.0)
        own = nl.exp(blocks[i])
        acc[...] = nl.add(acc, own)
        big[...] = nisa.tensor_tensor(big, own, op=nl.maximum)
        ps += nl.matmul(nl.load(b[i]), own, transpose_x=True)
        nl.store(out[i], blocks[i])
    nl.store(total, acc)
    nl.store(top, big)
    nl.store(mm, ps)
    return out, total, top, mm


def test_legal_on_chip_patterns_stay_clean():
    a = rand((3, 128, 64)) * 0.1
    b = rand((3, 128, 128), seed=1) * 0.1
    out, total, top, mm = nki.jit(legal_patterns, api="classic")(a, b)
    np.testing.assert_allclose(out, 2 * a + 1, rtol=1e-6)
    e = np.exp(2 * a + 1)
    np.testing.assert_allclose(total, e.sum(0), rtol=1e-5)
    np.testing.assert_array_equal(top, e.max(0).astype(np.float32))
    want = sum(b[i].T @ e[i] for i in range(3))
    np.testing.assert_allclose(mm, want, rtol=1e-4)


def chained_blocks(a):
    out = nl.ndarray((128, 4, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((128, 4, 64), dtype=nl.float32, buffer=nl.sbuf)
    buf[:, 0, :] = nl.load(a)
    for i in nl.affine_range(3):
        buf[:, i + 1, :] = nl.multiply(buf[:, i, :], 2.0)  # ERR
    nl.store(out, buf)
    return out


def chained_rows(a):
    out = nl.ndarray((4, 128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0], nl.load(a))
    for i in nl.affine_range(3):
        t = nl.load(out[i])  # ERR
        nl.store(out[i + 1], nl.multiply(t, 2.0))
    return out


def test_reading_what_another_iteration_writes_is_reported():
    # iteration i reads the block (SBUF) or rows (HBM) iteration i - 1 writes: the result
    # depends on the order the iterations run in
    for fn, mem in ((chained_blocks, "SBUF"), (chained_rows, "HBM")):
        expect(
            fn,
            rand((128, 64)),
            api="classic",
            code="err_unexpected_output_dependencies",
            values=["iteration 1 of 'i'", "that iteration 0 writes", f"{mem} tensor"],
        )


def chained_rows_in_order(a):
    out = nl.ndarray((4, 128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0], nl.load(a))
    for i in nl.sequential_range(3):
        nl.store(out[i + 1], nl.multiply(nl.load(out[i]), 2.0))
    return out


def test_the_same_chain_in_sequential_range_runs():
    a = rand((128, 64))
    got = nki.jit(chained_rows_in_order, api="classic")(a)
    np.testing.assert_array_equal(got, np.stack([a * np.float32(2**k) for k in range(4)]))


def reads_its_own_columns_through_a_mask(a):
    # a 128-column window whose mask keeps the columns this iteration wrote: no dependency
    out = nl.ndarray((128, 320), dtype=a.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:128]
    for i in nl.affine_range(4):
        nl.store(out[:, nl.ds(64 * i, 64)], nl.load(a[i]))
        t = nl.load(out[ip, 64 * i + jf], mask=(jf < 64))
        nl.store(out[:, nl.ds(64 * i, 64)], nl.add(t[:, 0:64], 1.0))
    return out


def test_a_masked_read_of_the_iterations_own_elements_is_no_dependency():
    a = rand((4, 128, 64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnwrittenOutputWarning)  # (columns 256-319: unwritten)
        got = nki.jit(reads_its_own_columns_through_a_mask, api="classic")(a)
    np.testing.assert_array_equal(got[:, :256], np.concatenate(list(a + np.float32(1)), axis=1))
