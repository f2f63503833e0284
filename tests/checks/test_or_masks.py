"""Python `or` between mask predicates (classic kernels: `mask=(ix < n // 2 or iy < m // 2)`).

A disjunction is emitted as one instruction per disjoint piece; these tests compare every
masked call element-wise with NumPy references built with np.logical_or, on each backend, and
check that the static and dynamic checks still see the pieces at the kernel's line."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIControlFlowError, NKIDependencyError, NKIError, NKIRuntimeError
from nki.ir import Instr

from backends import BACKENDS
from helpers import expect, line_of
from helpers import randn as rand

P, F = 128, 64
IX, IY = np.mgrid[0:P, 0:F]


def k_load_store(x):
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(P)[:, None]
    iy = nl.arange(F)[None, :]
    t = nl.zeros((P, F), dtype=x.dtype, buffer=nl.sbuf)
    t[ix, iy] = nl.load(x[ix, iy], mask=(ix < 32 or iy >= 48))
    nl.store(out[ix, iy], value=nl.full((P, F), -1.0, dtype=x.dtype))
    nl.store(out[ix, iy], value=t, mask=(ix < 96 or iy < 8))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_or_masks_on_load_and_store_match_numpy(backend):
    x = rand((P, F))
    k = nki.jit(k_load_store, backend=backend)
    got = k(x)
    assert k.last_run.backend == backend
    loaded = np.where(np.logical_or(IX < 32, IY >= 48), x, 0)
    want = np.where(np.logical_or(IX < 96, IY < 8), loaded, -1)
    np.testing.assert_array_equal(got, want)


# every form a mask expression may take, with its NumPy meaning
FORMS = {
    "issue reproducer": (
        lambda i, j: i < P // 2 or j < F // 2,
        lambda i, j: np.logical_or(i < P // 2, j < F // 2),
    ),
    "a or b": (lambda i, j: i < 16 or j >= 40, lambda i, j: np.logical_or(i < 16, j >= 40)),
    "a or b or c": (
        lambda i, j: i < 16 or j < 8 or i >= 100,
        lambda i, j: np.logical_or.reduce([i < 16, j < 8, i >= 100]),
    ),
    "a and b or c": (
        lambda i, j: i < 64 and j < 32 or j >= 60,
        lambda i, j: np.logical_or((i < 64) & (j < 32), j >= 60),
    ),
    "(a and b) or (c and d)": (
        lambda i, j: (i < 8 and j < 4) or (i > 64 and j > 50),
        lambda i, j: np.logical_or((i < 8) & (j < 4), (i > 64) & (j > 50)),
    ),
    "a or b and c": (
        lambda i, j: i < 8 or j < 32 and i > 100,
        lambda i, j: np.logical_or(i < 8, (j < 32) & (i > 100)),
    ),
    "(a or b) & c": (
        lambda i, j: (i < 8 or j < 4) & (i < 100),
        lambda i, j: np.logical_or(i < 8, j < 4) & (i < 100),
    ),
    "c & (a or b)": (
        lambda i, j: (i >= 2) & (i < 8 or j < 4),
        lambda i, j: (i >= 2) & np.logical_or(i < 8, j < 4),
    ),
    "(a or b) and c": (
        lambda i, j: (i < 8 or j < 4) and i >= 2,
        lambda i, j: np.logical_or(i < 8, j < 4) & (i >= 2),
    ),
    "(a & b) or c": (
        lambda i, j: (i < 8) & (j < 4) or j == 63,
        lambda i, j: np.logical_or((i < 8) & (j < 4), j == 63),
    ),
    "(a or b) or (c or d)": (
        lambda i, j: (i < 8 or j < 4) or (i > 64 or j > 50),
        lambda i, j: np.logical_or.reduce([i < 8, j < 4, i > 64, j > 50]),
    ),
    "~(a or b)": (
        lambda i, j: ~(i < 8 or j < 4),
        lambda i, j: ~np.logical_or(i < 8, j < 4),
    ),
    "~((a or b) & c)": (
        lambda i, j: ~((i < 8 or j != 4) & (i < 100)),
        lambda i, j: ~(np.logical_or(i < 8, j != 4) & (i < 100)),
    ),
    "overlapping a or a": (lambda i, j: i < 20 or i < 10, lambda i, j: i < 20),
    "empty or b": (lambda i, j: (i < 0) or j >= 60, lambda i, j: np.logical_or(i < 0, j >= 60)),
}


def _masked_add(mask_of):
    def k(x, y):
        out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
        ix = nl.arange(P)[:, None]
        iy = nl.arange(F)[None, :]
        a = nl.load(x[ix, iy])
        b = nl.load(y[ix, iy])
        t = nl.zeros((P, F), dtype=x.dtype, buffer=nl.sbuf)
        t[ix, iy] = nl.add(a, b, mask=mask_of(ix, iy))
        nl.store(out[ix, iy], value=t)
        return out

    return k


@pytest.mark.parametrize("form", sorted(FORMS))
def test_mask_forms_match_numpy(form):
    mask_of, ref = FORMS[form]
    x, y = rand((P, F), seed=1), rand((P, F), seed=2)
    got = nki.jit(_masked_add(mask_of))(x, y)
    np.testing.assert_array_equal(got, np.where(ref(IX, IY), x + y, 0))


def k_mask_variable(x):
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(P)[:, None]
    iy = nl.arange(F)[None, :]
    m = ix < 10 or iy > 50  # assigned first, used by two calls
    nl.store(out[ix, iy], value=nl.zeros((P, F), dtype=x.dtype))
    t = nl.exp(nl.load(x[ix, iy]), mask=m)
    nl.store(out[ix, iy], value=t, mask=m)
    return out


@pytest.mark.parametrize("backend", ["numpy", "batched"])
def test_or_mask_assigned_to_a_variable_and_a_compute_op(backend):
    x = rand((P, F))
    got = nki.jit(k_mask_variable, backend=backend)(x)
    want = np.where(np.logical_or(IX < 10, IY > 50), np.exp(x), 0)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def k_psum_accumulate(x):
    out = nl.ndarray((64, F), dtype=nl.float32, buffer=nl.shared_hbm)
    ik = nl.arange(P)[:, None]
    im = nl.arange(64)[:, None]
    iy = nl.arange(F)[None, :]
    a = nl.load(x[ik, iy])
    acc = nl.zeros((64, F), dtype=nl.float32, buffer=nl.psum)
    for _ in nl.affine_range(3):
        acc[im, iy] += nl.matmul(
            a[ik, nl.arange(64)[None, :]], a[ik, iy], transpose_x=True, mask=(im < 16 or iy >= 40)
        )
    nl.store(out, value=nl.copy(acc))
    return out


@pytest.mark.parametrize("backend", ["numpy", "batched"])
def test_psum_accumulation_under_an_or_mask_adds_each_element_once_per_matmul(backend):
    x = rand((P, F))
    got = nki.jit(k_psum_accumulate, backend=backend)(x)
    a = x.astype(np.float64)
    i, j = np.mgrid[0:64, 0:F]
    want = np.where(np.logical_or(i < 16, j >= 40), 3 * (a[:, :64].T @ a), 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def k_ragged_rows(x):
    n = x.shape[0]
    out = nl.ndarray((n, F), dtype=x.dtype, buffer=nl.shared_hbm)
    ip = nl.arange(P)[:, None]
    jf = nl.arange(F)[None, :]
    for i in nl.affine_range((n + P - 1) // P):
        rows = i * P + ip
        nl.store(out[rows, jf], value=nl.zeros((P, F), dtype=x.dtype), mask=rows < n)
        t = nl.load(x[rows, jf], mask=(rows < n))
        nl.store(out[rows, jf], value=t, mask=(rows < n and jf < 40 or jf >= 60 and rows < n))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_or_mask_over_loop_iterators_on_a_ragged_last_tile(backend):
    x = rand((300, F))
    k = nki.jit(k_ragged_rows, backend=backend)
    got = k(x)
    assert k.last_run.backend == backend
    jf = np.arange(F)[None, :]
    np.testing.assert_array_equal(got, np.where(np.logical_or(jf < 40, jf >= 60), x, 0))


def k_loop_dependent_accumulation(x):
    out = nl.ndarray((64, F), dtype=nl.float32, buffer=nl.shared_hbm)
    ik = nl.arange(P)[:, None]
    im = nl.arange(64)[:, None]
    iy = nl.arange(F)[None, :]
    a = nl.load(x[ik, iy])
    acc = nl.zeros((64, F), dtype=nl.float32, buffer=nl.psum)
    for r in nl.sequential_range(4):  # the selected region grows with r
        acc[im, iy] += nl.matmul(
            a[ik, nl.arange(64)[None, :]], a[ik, iy], transpose_x=True, mask=(im < 8 * r or iy < r)
        )
    nl.store(out, value=nl.copy(acc))
    return out


@pytest.mark.parametrize("backend", ["numpy", "batched"])
def test_accumulation_under_a_loop_dependent_or_mask_counts_each_trip_once(backend):
    x = rand((P, F))
    got = nki.jit(k_loop_dependent_accumulation, backend=backend)(x)
    a = x.astype(np.float64)
    i, j = np.mgrid[0:64, 0:F]
    trips = sum(np.logical_or(i < 8 * r, j < r).astype(np.float64) for r in range(4))
    np.testing.assert_allclose(got, trips * (a[:, :64].T @ a), rtol=1e-4, atol=1e-4)


def k_isa(x):
    out = nl.ndarray((3, P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    ix = nl.arange(P)[:, None]
    iy = nl.arange(F)[None, :]
    t = nl.load(x[ix, iy])
    e = nl.zeros((P, F), dtype=nl.float32, buffer=nl.sbuf)
    e[ix, iy] = nisa.activation(op=nl.exp, data=t, mask=(ix < 32 or iy > 50))
    s = nl.zeros((P, F), dtype=nl.float32, buffer=nl.sbuf)
    s[ix, iy] = nisa.tensor_tensor(t, t, op=nl.multiply, mask=(iy < 3 or ix >= 120))
    acc = nl.zeros((P, F), dtype=nl.float32, buffer=nl.sbuf)
    for _ in nl.sequential_range(2):  # dst_rmw_op: accumulating DMA, each element once per trip
        nisa.dma_copy(dst=acc[ix, iy], src=t, mask=(ix < 4 or iy == 7), dst_rmw_op=np.add)
    nl.store(out[0, ix, iy], value=e)
    nl.store(out[1, ix, iy], value=s)
    nl.store(out[2, ix, iy], value=acc)
    return out


@pytest.mark.parametrize("backend", ["numpy", "batched"])
def test_nisa_calls_with_or_masks_match_numpy(backend):
    x = rand((P, F))
    got = nki.jit(k_isa, backend=backend)(x)
    np.testing.assert_allclose(
        got[0], np.where(np.logical_or(IX < 32, IY > 50), np.exp(x), 0), rtol=1e-6
    )
    np.testing.assert_array_equal(got[1], np.where(np.logical_or(IY < 3, IX >= 120), x * x, 0))
    np.testing.assert_array_equal(got[2], np.where(np.logical_or(IX < 4, IY == 7), 2 * x, 0))


def test_the_ir_holds_conjunction_masks_only_one_instruction_per_disjoint_piece():
    k = nki.jit(_masked_add(FORMS["a or b or c"][0]))
    k(rand((P, F)), rand((P, F)))
    masked = [n.mask for n, _ in k.last_ir.walk() if isinstance(n, Instr) and n.mask is not None]
    assert len(masked) == 3  # i < 16 | j < 8 & i >= 16 | i >= 100 & j >= 8
    assert all(type(m).__name__ == "Mask" for m in masked)


def k_oob_second_disjunct(x):
    out = nl.ndarray((100, F), dtype=x.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(P)[:, None]
    iy = nl.arange(F)[None, :]
    t = nl.load(x[ix, iy])
    nl.store(out[ix, iy], value=t, mask=(ix < 100 or iy < 4))  # ERR
    return out


def k_in_bounds_or(x):
    out = nl.ndarray((100, F), dtype=x.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(P)[:, None]
    iy = nl.arange(F)[None, :]
    t = nl.load(x[ix, iy])
    nl.store(out[ix, iy], value=t, mask=(ix < 50 or ix < 100 and iy >= 0))
    return out


def test_out_of_bounds_reached_only_by_the_second_disjunct_is_reported_at_the_kernel_line():
    x = rand((P, F))
    expect(k_oob_second_disjunct, x, code="err_tensor_access_out_of_bound", values=["out"])
    np.testing.assert_array_equal(nki.jit(k_in_bounds_or)(x), x[:100])


def k_race(x):
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.program_id(0)
    ix = nl.arange(P)[:, None]
    iy = nl.arange(F)[None, :]
    nl.store(out[ix, iy], value=nl.load(x[ix, iy]), mask=(ix < 64 or iy < 4))  # ERR
    return out


def k_no_race(x):
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    ix = nl.arange(P)[:, None]
    iy = nl.arange(F)[None, :]
    m = (ix < 64 and i < 1) or (ix >= 64 and i >= 1)  # each instance writes its own half
    nl.store(out[ix, iy], value=nl.load(x[ix, iy]), mask=m)
    return out


def test_races_between_instances_are_seen_on_the_pieces():
    x = rand((P, F))
    expect(k_race, x, grid=2, cls=NKIDependencyError, code="err_spmd_write_race")
    np.testing.assert_array_equal(nki.jit(k_no_race)[2](x), x)


def k_uninit(x):
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(P)[:, None]
    iy = nl.arange(F)[None, :]
    t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    t[ix, iy] = nl.load(x[ix, iy], mask=(ix < 64 or iy < 32))
    nl.store(out[ix, iy], value=nl.zeros((P, F), dtype=x.dtype))
    nl.store(out[ix, iy], value=t, mask=(ix < 64 or iy < 32))  # only written lanes: fine
    nl.store(out[ix, iy], value=t, mask=(ix < 64 or iy < 33))  # ERR
    return out


@pytest.mark.parametrize("backend", ["numpy", "batched"])
def test_uninitialised_reads_under_full_checks_see_the_pieces(backend):
    expect(
        k_uninit,
        rand((P, F)),
        checks="full",
        backend=backend,
        cls=NKIRuntimeError,
        code="err_uninitialized_read",
    )


# ---- what stays an error -------------------------------------------------------------------


def k_sum(x):
    out = nl.ndarray((P, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(P)[:, None]
    iy = nl.arange(F)[None, :]
    t = nl.load(x[ix, iy])
    s = nl.sum(t, axis=1, keepdims=True, mask=(ix < 64 or iy < 8))  # ERR
    nl.store(out, value=s)
    return out


def k_dropout(x):
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(P)[:, None]
    iy = nl.arange(F)[None, :]
    t = nl.load(x[ix, iy])
    nl.store(out[ix, iy], value=nl.dropout(t, 0.5, mask=(ix < 64 or iy < 8)))  # ERR
    return out


def k_tensor_reduce(x):
    out = nl.ndarray((P, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:P, 0:F]
    t = nl.load(x)
    s = nisa.tensor_reduce(np.add, t[ix, iy], axis=(1,), mask=(ix < 64 or iy < 8))  # ERR
    nl.store(out, value=s)
    return out


def k_max8(x):
    out = nl.ndarray((P, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:P, 0:F]
    t = nl.load(x)
    nl.store(out, value=nisa.max8(src=t[ix, iy], mask=(ix < 64 or iy < 8)))  # ERR
    return out


def k_match_replace8(x):
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:P, 0:F]
    t = nl.load(x)
    top = nisa.max8(src=t)
    r = nisa.nc_match_replace8(data=t[ix, iy], vals=top, imm=0.0, mask=(ix < 64 or iy < 8))  # ERR
    nl.store(out, value=r)
    return out


def k_partition_reduce(x):
    out = nl.ndarray((1, F), dtype=x.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:P, 0:F]
    t = nl.load(x)
    r = nisa.tensor_partition_reduce(np.add, t[ix, iy], mask=(ix < 10 or ix >= 100))  # ERR
    nl.store(out, value=r)
    return out


@pytest.mark.parametrize(
    ("kern", "why"),
    [(k_sum, "reduce"), (k_tensor_reduce, "reduce"), (k_dropout, "random"), (k_max8, "search"),
     (k_match_replace8, "search"), (k_partition_reduce, "reduces across")],
)  # fmt: skip
def test_calls_a_disjoint_split_would_change_refuse_or(kern, why):
    expect(kern, rand((P, F)), code="err_unsupported_expression_in_mask", values=[why, "'or'"])


def k_reductions_of_whole_rows(x):
    """Per-partition reductions and searches under an ``or`` of partition conditions: each
    piece is whole rows, so the pieces split nothing a partition reduces."""
    out = nl.ndarray((P, 2), dtype=x.dtype, buffer=nl.shared_hbm)
    rep = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:P, 0:F]
    t = nl.load(x)
    keep = ix < 10 or ix >= 100
    r = nl.full((P, 2), 3.0, dtype=x.dtype)
    r[:, 0:1] = nisa.tensor_reduce(np.add, t[ix, iy], axis=(1,), keepdims=True, mask=keep)
    r[:, 1:2] = nl.max(t[ix, iy], axis=1, keepdims=True, mask=keep)
    m = nl.full((P, F), 3.0, dtype=x.dtype)
    m[ix, iy] = nisa.nc_match_replace8(data=t[ix, iy], vals=nisa.max8(src=t), imm=0.0, mask=keep)
    nl.store(out, value=r)
    nl.store(rep, value=m)
    return out, rep


@pytest.mark.parametrize("backend", BACKENDS)
def test_reductions_under_an_or_of_partition_conditions_match_numpy(backend):
    x = np.random.default_rng(4).permutation(P * F).reshape(P, F).astype(np.float32)
    k = nki.jit(k_reductions_of_whole_rows, api="classic").configure(backend=backend)
    got, rep = k(x)
    keep = (np.arange(P) < 10) | (np.arange(P) >= 100)
    want = np.full((P, 2), 3.0, dtype=np.float32)
    want[keep, 0] = x[keep].sum(axis=1)
    want[keep, 1] = x[keep].max(axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    want_rep = np.full((P, F), 3.0, dtype=np.float32)
    top8 = np.sort(x, axis=1)[:, -8:]
    want_rep[keep] = np.where(np.isin(x, top8), 0.0, x)[keep]  # (distinct values: found once)
    np.testing.assert_array_equal(rep, want_rep)


def k_if_or(x):
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(P)[:, None]
    iy = nl.arange(F)[None, :]
    if ix < 64 or iy < 3:  # ERR
        nl.store(out[ix, iy], value=nl.load(x[ix, iy]))
    return out


def k_if_or_variable(x):
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(P)[:, None]
    iy = nl.arange(F)[None, :]
    m = ix < 64 or iy < 3
    if m:  # ERR
        nl.store(out[ix, iy], value=nl.load(x[ix, iy]))
    return out


@pytest.mark.parametrize("kern", [k_if_or, k_if_or_variable])
def test_or_in_an_if_statement_stays_a_control_flow_error(kern):
    expect(
        kern,
        rand((P, F)),
        cls=NKIControlFlowError,
        code="err_control_flow_condition_depending_on_arange",
    )


def k_python_last(x):
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(P)[:, None]
    n = 3
    nl.store(out, value=nl.load(x), mask=(ix < 64 or n > 5))  # ERR
    return out


def k_invert_last(x):
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(P)[:, None]
    iy = nl.arange(F)[None, :]
    nl.store(out[ix, iy], value=nl.load(x[ix, iy]), mask=(ix < 64 or ~(iy < 3)))  # ERR
    return out


@pytest.mark.parametrize("kern", [k_python_last, k_invert_last])
def test_a_last_operand_that_is_not_a_traced_comparison_is_a_located_error(kern):
    expect(kern, rand((P, F)), code="err_unsupported_expression_in_mask", values=["last operand"])


def k_too_many(x):
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    i = nl.arange(P)[:, None]
    j = nl.arange(F)[None, :]
    m = (
        (i + j < 50) & (i - j > 3) & (2 * i + j != 7)
        or (i + 3 * j < 90) & (3 * i - j > 5) & (i + 2 * j != 11)
        or (2 * i - 3 * j < 9) & (i - 4 * j > -100) & (3 * i + 2 * j != 13)
        or (i + 5 * j < 70) & (5 * i - j > 1) & (4 * i + j != 17)
        or j == 63
    )  # 1 + 1 + 3 + 9 + 27 disjoint pieces
    nl.store(out[i, j], value=nl.load(x[i, j]), mask=m)  # ERR
    return out


def test_an_expression_with_too_many_disjoint_pieces_is_a_located_error():
    e = expect(k_too_many, rand((P, F)), code="err_unsupported_expression_in_mask")
    assert "more than 16" in str(e)


def test_error_lines_are_the_kernel_lines():
    # the refusal is raised when the trace ends, but names the call that carried the mask
    with pytest.raises(NKIError) as ei:
        nki.jit(k_sum)(rand((P, F)))
    assert ei.value.loc.line == line_of(k_sum)


# ---- random mask expressions against NumPy ---------------------------------------------------

ATOMS = ["i < {c}", "j >= {c}", "i + j < {c}", "i - 2 * j > {c}", "j == {c}", "i != {c}"]


@st.composite
def mask_exprs(draw, depth=3):
    """(Python source of a mask over i, j with and / or / & / ~, NumPy source of the same)."""

    def atom():
        text = draw(st.sampled_from(ATOMS)).format(c=draw(st.integers(-4, 140)))
        return text, text

    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return atom()
    kind = draw(st.sampled_from(["or", "and", "&", "~"]))
    left_py, left_np = draw(mask_exprs(depth=depth - 1))
    if kind == "~":
        return f"~({left_py})", f"~({left_np})"
    if kind == "&":
        right_py, right_np = draw(mask_exprs(depth=depth - 1))
        return f"({left_py}) & ({right_py})", f"({left_np}) & ({right_np})"
    right_py, right_np = atom()  # the last operand of `and` / `or` is a comparison
    op = "|" if kind == "or" else "&"
    return f"({left_py}) {kind} {right_py}", f"({left_np}) {op} ({right_np})"


@settings(deadline=None)
@given(mask_exprs(), st.sampled_from(["numpy", "batched"]))
def test_random_mask_expressions_match_numpy(expr, backend):
    py, ref = expr
    # the kernel evaluates the `and` / `or` itself (a file name of its own: "<string>" is internal)
    mask_of = eval(compile(f"lambda i, j: {py}", "<mask expression>", "eval"))
    x, y = rand((P, F), seed=3), rand((P, F), seed=4)
    try:
        got = nki.jit(_masked_add(mask_of), backend=backend)(x, y)
    except NKIError as e:  # a condition past the piece limit is refused, nothing else
        assert "more than 16" in str(e), (py, str(e))
        return
    want = np.where(eval(ref, {"i": IX, "j": IY}), x + y, 0)
    np.testing.assert_array_equal(got, want, err_msg=py)
