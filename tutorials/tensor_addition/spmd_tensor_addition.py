"""SPMD tensor addition: a 2-D launch grid where each instance adds one [128, 512] tile.

Run: python tutorials/tensor_addition/spmd_tensor_addition.py
Prints, for fp32 and bfloat16 inputs of shapes (256, 1024) and (512, 2048), whether the NKI
kernel matches NumPy (bit-exact for fp32; bfloat16 is compared with NumPy's fp32 sum rounded
to bfloat16, which is exactly what the engines do)."""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np

import nki
import nki.language as nl

TILE_P, TILE_F = 128, 512


@nki.jit
def tensor_add_tile(a, b):
    """c = a + b; instance (i, j) of the grid handles the tile at rows i*128, columns j*512."""
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    row = nl.program_id(0) * TILE_P
    col = nl.program_id(1) * TILE_F
    i_p = row + nl.arange(TILE_P)[:, None]
    i_f = col + nl.arange(TILE_F)[None, :]
    a_tile = nl.load(a[i_p, i_f])
    b_tile = nl.load(b[i_p, i_f])
    nl.store(c[i_p, i_f], value=nl.add(a_tile, b_tile))
    return c


def tensor_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Launch one instance per tile."""
    grid = (a.shape[0] // TILE_P, a.shape[1] // TILE_F)
    return tensor_add_tile[grid](a, b)


def expected(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float32) + b.astype(np.float32)).astype(a.dtype)


def main() -> int:
    rng = np.random.default_rng(0)
    ok = True
    for dtype in (np.float32, ml_dtypes.bfloat16):
        for shape in ((256, 1024), (512, 2048)):
            a = rng.standard_normal(shape).astype(dtype)
            b = rng.standard_normal(shape).astype(dtype)
            out = tensor_add(a, b)
            match = out.dtype == a.dtype and np.array_equal(out, expected(a, b))
            ok &= match
            name = np.dtype(dtype).name
            print(
                f"{name:9s} {str(shape):12s} grid={tensor_add_tile.last_run.grid}: "
                f"NKI and NumPy {'match' if match else 'DIFFER'}"
            )
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
