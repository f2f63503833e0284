"""Rules shared by every nisa instruction: compile-time arguments, mask= limits, the start
partition, which engines may touch PSUM or HBM."""

import numpy as np
import pytest

import nki.isa as nisa
import nki.language as nl
from nki.errors import (
    NKIError,
    NKIMemoryError,
    NKIShapeError,
    NKITypeError,
    NKIWarning,
)

from helpers import BF16, close, expect_error, f32, rand, run
from helpers import hbm_out as _out

# --------------------------------------------------------------------------------------------
# bad compile-time arguments: located NKIErrors, not bare Python exceptions
# --------------------------------------------------------------------------------------------


def k_bad_arg(x, which):
    out = _out((8, 8))
    t = nl.load(x)
    lt = np.less
    if which == "memset_shape":
        r = nisa.memset((8, "8"), 0.0, nl.float32)  # E_memset_shape
    elif which == "memset_dtype":
        r = nisa.memset((8, 8), 0.0, "float31")  # E_memset_dtype
    elif which == "iota_dtype":
        r = nisa.iota(nl.arange(8)[:, None] + nl.arange(8)[None, :], "int33")  # E_iota_dtype
    elif which == "range_start":
        r = nisa.range_select(  # E_range_start
            on_true_tile=t, comp_op0=lt, comp_op1=lt, bound0=1.0, bound1=2.0, range_start="3"
        )
    elif which == "imm":
        r = nisa.nc_match_replace8(data=t, vals=t, imm="-inf")  # E_imm
    else:
        r = nisa.dma_transpose(t, axes="ab")  # E_axes
    nl.store(out, r)
    return out


def test_bad_compile_time_arguments_are_located():
    x = rand((8, 8))
    for which, cls, code, frags in (
        ("memset_shape", NKITypeError, "err_invalid_argument", ["'shape'", "nisa.memset", "'8'"]),
        ("memset_dtype", NKITypeError, "err_unsupported_dtype", ["'float31'"]),
        ("iota_dtype", NKITypeError, "err_unsupported_dtype", ["'int33'"]),
        ("range_start", NKITypeError, "err_invalid_argument", ["'range_start'", "'3'"]),
        ("imm", NKITypeError, "err_unsupported_operand", ["'imm'", "nc_match_replace8", "-inf"]),
        ("axes", NKIError, "err_unsupported_transpose_axes", ["axes='ab'"]),
    ):
        expect_error(
            k_bad_arg, x, which, cls=cls, code=code, fragments=frags, marker=f"# E_{which}"
        )


def k_masked(x, y):
    out = _out(x.shape, x.dtype)
    i_p = nl.arange(x.shape[0])[:, None]
    i_f = nl.arange(x.shape[1])[None, :]
    r = nisa.tensor_tensor(nl.load(x[i_p, i_f]), nl.load(y), op=np.add, mask=(i_p < 48))
    nl.store(out, r)
    return out


@pytest.mark.parametrize("dt", [np.float32, BF16])
def test_mask_limits_computed_partitions(dt):
    x, y = rand((64, 16), dt), rand((64, 16), dt)
    with pytest.warns(NKIWarning, match=r"SBUF tile 'r' \[64, 16\].*\[48:64, 0:16\]"):
        got = f32(run(k_masked, x, y, jit_opts={"checks": "static"}))  # stores unwritten rows
    close(got[:48], f32(x)[:48] + f32(y)[:48], dt)
    assert np.isnan(got[48:]).all()  # never computed: the fresh tile's NaN fill shows through


def k_start(x):
    out = _out((32, x.shape[1]), x.dtype)
    t = nl.load(x)
    nl.store(out, nisa.tensor_scalar(t[16:48, :], np.add, 1.0))  # ERR
    return out


def k_start_ok(x):
    out = _out((32, x.shape[1]), x.dtype)
    t = nl.load(x)
    nl.store(out, nisa.tensor_scalar(t[64:96, :], np.add, 1.0))
    return out


def test_start_partition_rule():
    x = rand((128, 8))
    expect_error(
        k_start,
        x,
        cls=NKIShapeError,
        code="err_unsupported_start_partition",
        fragments=["32 partitions", "partition 16", "[0, 32, 64, 96]"],
    )
    close(run(k_start_ok, x), x[64:96] + 1)


def k_gpsimd_into_psum(x):
    out = _out(x.shape, x.dtype)
    ps = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum)
    i_p, i_f = nl.mgrid[0 : x.shape[0], 0 : x.shape[1]]
    ps[...] = nisa.affine_select(i_p >= i_f, nl.load(x), 0.0)  # ERR
    nl.store(out, ps)
    return out


def k_gpsimd_psum(x):
    out = _out(x.shape, x.dtype)
    ps = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum)
    ps[...] = nl.load(x)
    nl.store(out, nisa.tensor_copy(ps, engine=nisa.gpsimd_engine))  # ERR
    return out


def test_gpsimd_cannot_touch_psum():
    x = rand((16, 16))
    expect_error(
        k_gpsimd_psum,
        x,
        cls=NKIMemoryError,
        code="err_unsupported_memory",
        fragments=["GpSimd", "PSUM", "'src'", "nisa.tensor_copy"],
    )
    expect_error(
        k_gpsimd_into_psum,
        x,
        cls=NKIMemoryError,
        code="err_unsupported_memory",
        fragments=["GpSimd", "PSUM", "nisa.affine_select"],
    )


def k_isa_into_hbm(x):
    out = _out(x.shape, x.dtype)
    out[...] = nisa.tensor_copy(nl.load(x))  # ERR
    return out


def test_compute_engine_cannot_write_hbm():
    expect_error(
        k_isa_into_hbm,
        rand((8, 8)),
        cls=NKIMemoryError,
        code="err_unsupported_memory",
        fragments=["HBM", "nl.store"],
    )
