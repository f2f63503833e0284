"""Tensor addition over two NeuronCores: the grid's first dimension is split with
``nl.spmd_dim(grid_x, nl.nc(2))`` so instances alternate between physical cores 0 and 1
(interleaved), while ``nl.spmd_dim(nl.nc(2), grid_x)`` gives each core a contiguous block.
Both cores share HBM; each has its own SBUF and PSUM.

Run: python tutorials/tensor_addition/spmd_multiple_nc_tensor_addition.py"""

from __future__ import annotations

import os
import sys

import ml_dtypes
import numpy as np

import nki.language as nl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spmd_tensor_addition import TILE_F, TILE_P, expected, tensor_add_tile  # noqa: E402


def tensor_add_2nc(a: np.ndarray, b: np.ndarray, interleaved: bool = True) -> np.ndarray:
    grid_x = a.shape[0] // (2 * TILE_P)
    dim0 = nl.spmd_dim(grid_x, nl.nc(2)) if interleaved else nl.spmd_dim(nl.nc(2), grid_x)
    return tensor_add_tile[dim0, a.shape[1] // TILE_F](a, b)


def main() -> int:
    rng = np.random.default_rng(1)
    ok = True
    for dtype in (np.float32, ml_dtypes.bfloat16):
        for shape in ((256, 1024), (512, 2048)):
            a = rng.standard_normal(shape).astype(dtype)
            b = rng.standard_normal(shape).astype(dtype)
            for interleaved in (True, False):
                out = tensor_add_2nc(a, b, interleaved)
                run = tensor_add_tile.last_run
                match = np.array_equal(out, expected(a, b))
                rows = {c: sorted({i[0] for i in run.instances_on(c)}) for c in range(2)}
                ok &= match and run.num_cores == 2
                layout = "spmd_dim(g, nc(2))" if interleaved else "spmd_dim(nc(2), g)"
                print(
                    f"{np.dtype(dtype).name:9s} {str(shape):12s} {layout}: "
                    f"NKI and NumPy {'match' if match else 'DIFFER'}; grid rows on core 0: "
                    f"{rows[0]}, on core 1: {rows[1]}"
                )
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
