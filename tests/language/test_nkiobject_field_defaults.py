"""The initializer NKI generates for a (dataclass) ``nl.NKIObject`` subclass gives every field a
default, None for a field declared without one, so configuration objects built without some
fields (as AWS's kernel library builds its MLP constants) work; a user-written ``__init__``
and explicit defaults are left alone."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


@dataclass
class Dims(nl.NKIObject):
    rows: int
    cols: int
    unused: int
    scale: float = 2.0
    tags: list = field(default_factory=list)


class Handwritten(nl.NKIObject):
    def __init__(self, rows):
        self.rows = rows


def test_fields_left_out_are_none_and_defaults_stay():
    d = Dims(128, cols=32)
    assert (d.rows, d.cols, d.unused, d.scale, d.tags) == (128, 32, None, 2.0, [])
    assert Dims(1, 2, 3).unused == 3
    with pytest.raises(TypeError):
        Handwritten()  # the user's own __init__ keeps Python's rules


@nki.jit
def scaled(x):
    d = Dims(rows=x.shape[0], cols=x.shape[1])  # 'unused' left out, as the library does
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((d.rows, d.cols), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=d.scale)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_config_built_inside_a_kernel_without_every_field():
    x = np.random.default_rng(3).standard_normal((128, 32)).astype(np.float32)
    np.testing.assert_array_equal(nki.simulate(scaled)(x), 2 * x)
