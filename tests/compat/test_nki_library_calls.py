"""Calls that AWS's NKI library (nki-library, current API) makes and the documentation allows,
in small kernels of our own checked against NumPy: the documented ``nisa.dge_mode`` values
(``dge_mode=3`` is ``none``), positional ``buffer`` arguments, ``on_false_value`` written as a
decimal literal, ``nl.no_reorder()`` and ``nisa.get_nc_sub_version()``."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.collectives as ncc
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError, NKITypeError, RawEnumWarning

from helpers import expect_error, line_of, rand, run


def test_dge_mode_values_are_the_documented_ones():
    assert [(m.name, int(m)) for m in nisa.dge_mode] == [
        ("unknown", 0), ("swdge", 1), ("hwdge", 2), ("none", 3),
    ]  # fmt: skip
    assert int(nisa.engine.dma) == 4


def k_dma_raw(x, mode):
    t = nl.ndarray(x.shape, nl.bfloat16, nl.sbuf)  # (buffer given positionally)
    nisa.dma_copy(dst=t, src=x, dge_mode=mode)  # ERR
    out = nl.ndarray(x.shape, nl.bfloat16, nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_raw_dge_mode_none_casts_and_warns():
    # nki-library passes dge_mode=3 (none): not hwdge, so the DMA may cast
    x = rand((64, 48))
    with pytest.warns(RawEnumWarning, match="got 3; write nisa.dge_mode.none") as rec:
        got = run(k_dma_raw, x, 3)
    np.testing.assert_array_equal(got, x.astype(ml_dtypes.bfloat16))
    (w,) = [r for r in rec if r.category is RawEnumWarning]
    assert (w.filename, w.lineno) == (__file__, line_of(k_dma_raw, "# ERR"))


def test_raw_dge_mode_2_is_hwdge():
    # hwdge needs equal dtypes in the current API: 2 is hwdge, not swdge
    expect_error(
        k_dma_raw, rand((64, 48)), 2, cls=NKITypeError, code="err_dtype_mismatch",
        fragments=["dge_mode=hwdge"],
    )  # fmt: skip


def k_range_literal(x, lo, hi):
    out = nl.ndarray(x.shape, nl.float32, nl.shared_hbm)
    t = nl.ndarray(x.shape, nl.float32, nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    b0 = nl.ndarray(lo.shape, nl.float32, nl.sbuf)
    b1 = nl.ndarray(hi.shape, nl.float32, nl.sbuf)
    nisa.dma_copy(dst=b0, src=lo)
    nisa.dma_copy(dst=b1, src=hi)
    r = nl.ndarray(x.shape, nl.float32, nl.sbuf)
    nisa.range_select(
        dst=r, on_true_tile=t, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=b0,
        bound1=b1, on_false_value=-3.4028235e38,
    )  # fmt: skip
    nisa.dma_copy(dst=out, src=r)
    return out


def test_range_select_fill_written_as_a_decimal_literal():
    # -3.4028235e38 rounds to the float32 minimum: the value the hardware fills with
    x = rand((16, 40))
    lo = np.arange(16, dtype=np.float32)[:, None]
    hi = lo + 7
    got = run(k_range_literal, x, lo, hi, target="trn2")
    j = np.arange(40)[None, :]
    want = np.where((j >= lo) & (j < hi), x, np.finfo(np.float32).min)
    np.testing.assert_array_equal(got, want)


def k_no_reorder(x):
    out = nl.ndarray(x.shape, x.dtype, nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, nl.sbuf)
    with nl.no_reorder():
        nisa.dma_copy(dst=t, src=x)
        for _ in nl.sequential_range(2):
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=3.0)
        nisa.dma_copy(dst=out, src=t)
    return out


def k_no_reorder_device_loop(x, n):
    out = nl.ndarray(x.shape, x.dtype, nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    reg = nisa.register_alloc(n)
    with nl.no_reorder():
        nl.fori_loop(0, reg, lambda i: None)  # ERR
    nisa.dma_copy(dst=out, src=t)
    return out


def test_no_reorder_keeps_program_order_and_refuses_device_loops():
    x = rand((32, 16))
    np.testing.assert_allclose(run(k_no_reorder, x), x * 9.0, rtol=1e-6)
    expect_error(
        k_no_reorder_device_loop, x, 2, cls=NKIError, code="err_device_loop_in_no_reorder",
        fragments=["nl.fori_loop", "nl.no_reorder()"],
    )  # fmt: skip


def test_nc_sub_version_is_the_first_revision():
    seen = []

    @nki.jit
    def k(x):
        seen.append(nisa.get_nc_sub_version())
        out = nl.ndarray(x.shape, x.dtype, nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        return out

    x = rand((8, 8))
    np.testing.assert_array_equal(k(x), x)
    assert seen == [0]


def k_constant_file(x, path):
    c = nl.shared_constant(path)  # ERR
    t = nl.ndarray(x.shape, x.dtype, nl.sbuf)
    nisa.dma_copy(dst=t, src=c)
    out = nl.ndarray(x.shape, x.dtype, nl.shared_hbm)
    nisa.tensor_tensor(dst=t, data1=t, data2=t, op=nl.add)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_shared_constant_from_a_npy_file(tmp_path):
    # nki-library writes its rotation matrices to .npy files and passes the path
    x = rand((16, 24))
    path = tmp_path / "rot.npy"
    np.save(path, x)
    np.testing.assert_array_equal(run(k_constant_file, x, str(path)), x + x)
    expect_error(
        k_constant_file, x, str(tmp_path / "missing.npy"), cls=NKIError,
        code="err_invalid_argument", fragments=["could not read the .npy file", "missing.npy"],
    )  # fmt: skip


def k_dma_transpose_mode(x, mode):
    t = nl.ndarray((x.shape[1], x.shape[0]), x.dtype, nl.sbuf)
    nisa.dma_transpose(dst=t, src=x, dge_mode=mode)
    out = nl.ndarray(t.shape, x.dtype, nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.mark.parametrize("mode", [nisa.dge_mode.unknown, nisa.dge_mode.hwdge, nisa.dge_mode.none])
def test_dma_transpose_takes_a_dge_mode(mode):
    # (a direct transpose takes these; the library passes none to one, swdge to indirect ones)
    x = rand((16, 32), ml_dtypes.bfloat16)
    np.testing.assert_array_equal(run(k_dma_transpose_mode, x, mode), x.T)


def k_pid_none(x, shard=None):
    pid = nl.program_id(0)
    out = nl.ndarray(x.shape, x.dtype, nl.shared_hbm)
    rows = x.shape[0] // 2
    assert pid != None  # noqa: E711  (AWS's library compares with None this way)
    if shard == None and not pid == None:  # noqa: E711
        nl.store(
            out[pid * rows : pid * rows + rows, :], nl.load(x[pid * rows : pid * rows + rows, :])
        )
    return out


@pytest.mark.parametrize("api", ["classic", "current"])
def test_a_program_id_compared_with_none_is_not_none(api):
    # classic: a symbolic program id; current: an int per core
    x = rand((32, 8))
    np.testing.assert_array_equal(nki.jit(k_pid_none, api=api)[2](x), x)


@nki.jit
def k_rank_slice(x):
    n, h, w = x.shape
    out = nl.ndarray((n * h, w), x.dtype, nl.shared_hbm)
    rank = ncc.rank_id()  # (a register on the device, known per core while tracing)
    t = nl.ndarray((h, w), x.dtype, nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap(pattern=[[w, h], [1, w]], scalar_offset=rank, indirect_dim=0))
    nisa.dma_copy(dst=out[rank * h : (rank + 1) * h, :], src=t)
    return out


def test_scalar_offset_from_the_rank_id():
    # nki-library's collectives tests index their input by ncc.rank_id() through scalar_offset
    x = rand((2, 16, 8))
    np.testing.assert_array_equal(k_rank_slice[2](x), x.reshape(32, 8))
    np.testing.assert_array_equal(k_rank_slice(x[:1]), x[0])
