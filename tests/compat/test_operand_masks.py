"""Classic operand masking: a matmul operand indexed by a predicate (``lhs_T[i_f < 64]``)
restricts the result rows (stationary free axis) or columns (moving free axes) the instruction
computes; the other result elements are left as they were."""

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKITypeError

from helpers import expect, randn

A = randn((128, 128), seed=1)
B = randn((128, 512), seed=2)


def k_nl_matmul(lhs_t, rhs):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    i_lhs_f = nl.arange(128)[None, :]
    i_rhs_f = nl.arange(512)[None, :]  # the same range as i_lhs_f's: mask= could not tell them
    a, b = nl.load(lhs_t), nl.load(rhs)
    acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
    acc += nl.matmul(a[i_lhs_f < 64], b[i_rhs_f < 256], transpose_x=True)
    nl.store(out, nl.copy(acc))
    return out


def test_nl_matmul_operand_masks_bound_rows_and_columns():
    want = np.zeros((128, 512), np.float32)
    want[:64, :256] = (A.T @ B)[:64, :256]
    np.testing.assert_allclose(nki.jit(k_nl_matmul)(A, B), want, rtol=1e-5, atol=1e-4)


def k_nc_matmul_blocks(lhs_t, rhs, n_valid: int, k_tiles: int):
    # a 3-D moving operand (K, 4, 128): the mask on its last axis bounds the result's last
    # axis, a chained loop-only predicate skips the tiles past k_tiles
    out = nl.ndarray((64, 4, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_a, i_b = nl.mgrid[0:128, 0:4, 0:128]
    i_m = nl.arange(64)[None, :]
    acc = nl.zeros((64, 4, 128), dtype=nl.float32, buffer=nl.psum)
    for kt in nl.affine_range(3):
        a = nl.load(lhs_t[kt * 128 + nl.arange(128)[:, None], i_m])
        b = nl.load(rhs[kt * 128 + i_p, i_a, i_b])
        acc += nisa.nc_matmul(a, b[i_b < n_valid][kt < k_tiles])
    nl.store(out, nl.copy(acc))
    return out


def test_nc_matmul_operand_masks_on_a_blocked_moving_operand():
    lhs = randn((384, 64), seed=3)
    rhs = randn((384, 4, 128), seed=4)
    got = nki.jit(k_nc_matmul_blocks)(lhs, rhs, 100, 2)
    full = np.einsum("km,kab->mab", lhs[:256], rhs[:256])
    want = np.zeros((64, 4, 128), np.float32)
    want[..., :100] = full[..., :100]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def k_with_mask_arg(lhs_t, rhs):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    i_out_p = nl.arange(128)[:, None]
    i_rhs_f = nl.arange(512)[None, :]
    a, b = nl.load(lhs_t), nl.load(rhs)
    acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
    acc += nl.matmul(a, b[i_rhs_f >= 128], transpose_x=True, mask=(i_out_p < 96))
    nl.store(out, nl.copy(acc))
    return out


def test_operand_mask_joins_mask_argument():
    want = np.zeros((128, 512), np.float32)
    want[:96, 128:] = (A.T @ B)[:96, 128:]
    np.testing.assert_allclose(nki.jit(k_with_mask_arg)(A, B), want, rtol=1e-5, atol=1e-4)


def k_contraction_mask(lhs_t, rhs):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    i_k = nl.arange(128)[:, None]
    a, b = nl.load(lhs_t), nl.load(rhs)
    nl.store(out, nl.copy(nl.matmul(a[i_k < 64], b, transpose_x=True)))  # ERR
    return out


def test_contraction_axis_operand_mask_is_refused():
    expect(
        k_contraction_mask,
        A,
        B,
        code="err_unsupported_expression_in_mask",
        values=["contraction (partition) axis", "'nl.matmul'"],
    )


def k_masked_exp(x):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    i_f = nl.arange(512)[None, :]
    t = nl.load(x)
    nl.store(out, nl.exp(t[i_f < 100]))  # ERR
    return out


def test_masked_operand_outside_a_matmul_is_refused():
    expect(
        k_masked_exp,
        B,
        cls=NKITypeError,
        code="err_unsupported_operand",
        values=["masked operand (tile[pred])", "only the matmul calls", "mask="],
    )
