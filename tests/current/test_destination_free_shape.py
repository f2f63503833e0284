"""A destination-first instruction writes a ``dst`` whose free dims are shaped differently from
its result when the partitions and the elements per partition agree (``[128, 1, 128]`` for a
``[128, 128]`` transpose, a strided ``.ap`` view into PSUM): elements land in the destination's
own free-dim order. Broadcasting into a larger dst still works; a dst with other element counts
is still a located error."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIShapeError

RNG = np.random.default_rng(7)


@nki.jit
def transpose_into_3d(x):
    out = nl.ndarray((128, 1, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    ps = nl.ndarray((128, 1, 64), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_transpose(dst=ps, data=t)
    sb = nl.ndarray((128, 1, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=sb, src=ps)
    nisa.dma_copy(dst=out, src=sb)
    return out


@nki.jit
def copy_into_strided_view(x):
    # dst: a [32, 4, 8] walk with stride 16 over the outer free dim of a [32, 64] tile
    out = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((32, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    big = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=big, value=0.0)
    nisa.tensor_scalar(
        dst=big.ap([[64, 32], [16, 4], [1, 8]]), data=t, op0=nl.multiply, operand0=2.0
    )
    nisa.dma_copy(dst=out, src=big)
    return out


def test_transpose_into_a_destination_with_a_unit_free_dim():
    x = RNG.standard_normal((64, 128)).astype(np.float32)
    got = nki.simulate(transpose_into_3d)(x)
    np.testing.assert_array_equal(got, x.T.reshape(128, 1, 64))


def test_result_lands_in_the_destination_views_free_dim_order():
    x = RNG.standard_normal((32, 32)).astype(np.float32)
    want = np.zeros((32, 64), np.float32)
    want.reshape(32, 4, 16)[:, :, :8] = 2 * x.reshape(32, 4, 8)
    np.testing.assert_array_equal(nki.simulate(copy_into_strided_view)(x), want)


def test_broadcast_into_a_wider_destination_still_works():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        col = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=col, src=x)
        wide = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=wide, src=col)
        nisa.dma_copy(dst=out, src=wide)
        return out

    x = RNG.standard_normal((128, 1)).astype(np.float32)
    np.testing.assert_array_equal(nki.simulate(k)(x), np.broadcast_to(x, (128, 16)))


def test_destination_with_other_elements_per_partition_is_an_error():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        small = nl.ndarray((128, 2, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=small, src=t)  # ERR
        nisa.dma_copy(dst=out[:, 0:32], src=small)
        return out

    with pytest.raises(NKIShapeError) as ei:
        nki.simulate(k)(RNG.standard_normal((128, 64)).astype(np.float32))
    src, first = inspect.getsourcelines(k.fn)
    line = first + next(i for i, s in enumerate(src) if "# ERR" in s)
    assert ei.value.loc.line == line and "[128, 2, 16]" in str(ei.value)
