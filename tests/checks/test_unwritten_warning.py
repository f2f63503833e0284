"""Output elements no instruction writes are known before the kernel runs (stores are affine):
the default check level warns (``UnwrittenOutputWarning``, an ``NKIWarning``) with the output's
name, the unwritten region and the lines that wrote the rest; kernels whose stores cover their
outputs never warn."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import nki
import nki.language as nl
from nki.errors import NKIError, NKIWarning
from simulator.checks.unwritten import UnwrittenOutputWarning

from helpers import line_of


def _warned(fn, *args, grid=None, **opts):
    k = nki.jit(fn, **opts)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        result = (k[grid] if grid is not None else k)(*args)
    return result, [w for w in got if issubclass(w.category, NKIWarning)]


def _silent(fn, *args, grid=None, **opts):
    k = nki.jit(fn, **opts)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NKIWarning)
        return (k[grid] if grid is not None else k)(*args)


def _masked_last_row(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)  # OUT
    ip = nl.arange(128)[:, None]
    jf = nl.arange(64)[None, :]
    nl.store(out[ip, jf], value=nl.load(x), mask=(ip < 127))  # STORE
    return out


def test_a_mask_that_leaves_a_row_unwritten_warns_with_region_and_lines():
    got, ws = _warned(_masked_last_row, np.ones((128, 64), np.float32))
    assert np.isnan(got[127]).all() and not np.isnan(got[:127]).any()
    assert len(ws) == 1 and ws[0].category is UnwrittenOutputWarning
    msg = str(ws[0].message)
    assert "output 'out' [128, 64] has 64 element(s)" in msg
    assert "[127:128, 0:64]" in msg
    assert f"line {line_of(_masked_last_row, '# STORE')} writes the rest" in msg
    assert ws[0].lineno == line_of(_masked_last_row, "# OUT")


def test_full_checks_report_it_as_an_error_without_the_warning():
    k = nki.jit(_masked_last_row, checks="full")
    with warnings.catch_warnings():
        warnings.simplefilter("error", NKIWarning)
        with pytest.raises(NKIError) as e:
            k(np.ones((128, 64), np.float32))
    assert e.value.code == "err_unwritten_output"


def _zero_trip(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 256):
        nl.store(out[i * 128 : (i + 1) * 128, :], value=nl.load(x[i * 128 : (i + 1) * 128, :]))
    return out


def test_a_zero_trip_loop_warns_that_nothing_writes_the_output():
    _, ws = _warned(_zero_trip, np.ones((128, 8), np.float32))
    assert len(ws) == 1 and "no instruction writes any of it" in str(ws[0].message)


def _ragged_tiles(x):
    n = x.shape[0]
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ip = nl.arange(128)[:, None]
    jf = nl.arange(x.shape[1])[None, :]
    for i in nl.affine_range((n + 127) // 128):
        t = nl.load(x[i * 128 + ip, jf], mask=(i * 128 + ip < n))
        nl.store(out[i * 128 + ip, jf], value=t, mask=(i * 128 + ip < n))
    return out


def _ragged_tiles_short(x):
    n = x.shape[0]
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ip = nl.arange(128)[:, None]
    jf = nl.arange(x.shape[1])[None, :]
    for i in nl.affine_range((n + 127) // 128):
        t = nl.load(x[i * 128 + ip, jf], mask=(i * 128 + ip < n - 1))
        nl.store(out[i * 128 + ip, jf], value=t, mask=(i * 128 + ip < n - 1))
    return out


def test_ragged_masked_tiles_that_cover_the_output_do_not_warn():
    x = np.arange(300 * 4, dtype=np.float32).reshape(300, 4)
    np.testing.assert_array_equal(_silent(_ragged_tiles, x), x)


def test_ragged_tiles_masked_one_short_warn_about_the_last_row():
    x = np.ones((300, 4), np.float32)
    _, ws = _warned(_ragged_tiles_short, x)
    assert len(ws) == 1 and "4 element(s)" in str(ws[0].message)
    assert "[299:300, 0:4]" in str(ws[0].message)


def _interleaved(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    ip = nl.arange(128)[:, None]
    jf = nl.arange(4)[None, :]
    for i in nl.affine_range(2):
        nl.store(out[ip, 2 * jf + i], nl.load(a[ip, 2 * jf + i]))
    return out


def _every_other_column(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    ip = nl.arange(128)[:, None]
    jf = nl.arange(4)[None, :]
    nl.store(out[ip, 2 * jf], nl.load(a[ip, 2 * jf]))
    return out


def test_strided_stores_are_tracked_element_by_element():
    a = np.arange(1024, dtype=np.float32).reshape(128, 8)
    np.testing.assert_array_equal(_silent(_interleaved, a), a)
    _, ws = _warned(_every_other_column, a)
    assert len(ws) == 1 and "512 element(s)" in str(ws[0].message)


def _per_instance(x):
    out = nl.ndarray((384, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    p = nl.program_id(0)
    nl.store(out[p * 128 : (p + 1) * 128, :], value=nl.load(x[p * 128 : (p + 1) * 128, :]))
    return out


def test_grid_instances_cover_the_output_only_with_enough_instances():
    x = np.arange(384 * 8, dtype=np.float32).reshape(384, 8)
    np.testing.assert_array_equal(_silent(_per_instance, x, grid=3), x)
    _, ws = _warned(_per_instance, x, grid=2)
    assert len(ws) == 1 and "[256:384, 0:8]" in str(ws[0].message)


def _returned_psum(x):
    acc = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.psum)
    return acc


def test_a_returned_psum_tile_never_written_warns():
    got, ws = _warned(_returned_psum, np.ones((128, 8), np.float32))
    assert np.isnan(got).all()
    assert len(ws) == 1
    msg = str(ws[0].message)
    assert "no instruction writes any of it" in msg
    assert "PSUM tile 'acc' [128, 8], returned by the kernel," in msg


def _returned_psum_written(x):
    acc = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.psum)
    acc[...] = nl.load(x)
    return acc


def test_a_returned_psum_tile_that_is_written_does_not_warn():
    x = np.full((128, 8), 2.0, np.float32)
    np.testing.assert_array_equal(_silent(_returned_psum_written, x), x)


def _stored_unwritten_tile(x):
    out = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.sbuf)
    t[0:64, :] = nl.load(x[0:64, :])
    nl.store(out, value=t)  # STORE
    return out


def test_a_stored_tile_with_unwritten_rows_warns_at_the_store():
    _, ws = _warned(_stored_unwritten_tile, np.ones((128, 8), np.float32))
    assert len(ws) == 1
    msg = str(ws[0].message)
    line = line_of(_stored_unwritten_tile, "# STORE")
    assert f"SBUF tile 't' [128, 8], stored into an output at line {line}," in msg
    assert "[64:128, 0:8]" in msg


def test_box_marking_matches_point_enumeration():
    """The fast per-combination box marking and the plain point enumeration agree on random
    affine accesses and masks (strides, reversed axes, loop and grid terms, every operator)."""
    from nki.ir import Access, Affine, Cond, IndexExpr, LoopSym, Mask, PidSym
    from simulator.checks.unwritten import _mark_boxes, _mark_points

    rng = np.random.default_rng(7)
    syms = [PidSym(0), LoopSym(1, "i")]
    vals = np.array([(p, i) for p in range(2) for i in range(3)], dtype=np.int64)
    boxed = 0
    for _ in range(300):
        shape = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
        index = []
        for d in range(2):
            coeffs = [0, 0]
            coeffs[d if rng.random() < 0.8 else 1 - d] = int(rng.choice([-2, -1, 1, 2]))
            terms = tuple((s, int(rng.integers(-3, 4))) for s in syms if rng.random() < 0.5)
            index.append(IndexExpr(Affine(terms, int(rng.integers(0, 8))), tuple(coeffs), shape))
        conds = []
        for _ in range(int(rng.integers(0, 3))):
            coeffs = tuple(int(rng.integers(-2, 3)) if rng.random() < 0.6 else 0 for _ in range(2))
            terms = tuple((s, int(rng.integers(-2, 3))) for s in syms if rng.random() < 0.5)
            expr = IndexExpr(Affine(terms, int(rng.integers(-6, 6))), coeffs, shape)
            conds.append(Cond(expr, str(rng.choice(["<", "<=", ">", ">=", "=="]))))
        acc = Access("t", shape, tuple(index))
        mask = Mask(tuple(conds)) if conds else None
        a, b = np.zeros((12, 12), bool), np.zeros((12, 12), bool)
        if _mark_boxes(a, acc, mask, syms, vals):
            boxed += 1
            _mark_points(b, acc, mask, syms, vals)
            np.testing.assert_array_equal(a, b, err_msg=f"{acc} mask {mask}")
    assert boxed > 150  # most random accesses take the fast path
