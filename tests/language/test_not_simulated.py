"""Calls the newest NKI pages name that nki-sim does not simulate are located
``err_not_simulated`` errors with their real signatures (not Python's AttributeError)."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.language as nl
from nki.errors import NKIError


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("tiles", lambda src: nl.tiles(src, tile_shape=(128, 256))),  # GRID
        ("blocks", lambda src: nl.blocks(src, tile_shape=(128, 256), block_shape=(2, 2))),  # GRID
        ("alloc_tiles", lambda src: nl.alloc_tiles(  # GRID
            tile_shape=(128, 256), element_shape=(256, 512), buffer=nl.sbuf, dtype=nl.float32)),
        ("alloc_blocks", lambda src: nl.alloc_blocks(  # GRID
            tile_shape=(128, 256), block_shape=(2, 1), element_shape=(256, 512),
            buffer=nl.sbuf, dtype=nl.float32)),
    ],
)  # fmt: skip
def test_tile_and_block_grids_are_located_not_simulated_errors(name, call):
    @nki.jit
    def kernel(src):
        call(src)
        return src

    with pytest.raises(NKIError, match=f"nl.{name} .* is not simulated") as e:
        kernel(np.ones((256, 512), np.float32))
    assert e.value.code == "err_not_simulated"
    assert e.value.loc.file == __file__
    assert "# GRID" in open(__file__).read().splitlines()[e.value.loc.line - 1]


def test_a_misspelt_keyword_of_a_grid_call_is_reported_as_such():
    @nki.jit
    def kernel(src):
        nl.tiles(src, tile_size=(128, 256))
        return src

    with pytest.raises(NKIError) as e:
        kernel(np.ones((256, 512), np.float32))
    assert e.value.code == "err_unexpected_keyword_argument"
