"""Multi-core SPMD tensor addition from JAX (nki_call under jax.jit): grid_x row tiles are split
over two NeuronCores with nl.spmd_dim(grid_x, nl.nc(2)); prints whether NKI and JAX match.

Run: python tutorials/tensor_addition/spmd_tensor_addition_jax.py"""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

import nki.language as nl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spmd_tensor_addition import TILE_F, TILE_P, tensor_add_tile  # noqa: E402

from frontends.jax import nki_call  # noqa: E402


@jax.jit
def tensor_add(a, b):
    grid_x = a.shape[0] // (2 * TILE_P)
    grid = (nl.spmd_dim(grid_x, nl.nc(2)), a.shape[1] // TILE_F)
    return nki_call(
        tensor_add_tile, a, b, grid=grid, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype)
    )


def main() -> int:
    ok = True
    for dtype in (jnp.float32, jnp.bfloat16):
        rng = np.random.default_rng(0)
        a = jnp.asarray(rng.standard_normal((512, 2048)), dtype)
        b = jnp.asarray(rng.standard_normal((512, 2048)), dtype)
        out = tensor_add(a, b)
        match = out.dtype == a.dtype and np.array_equal(out, a + b)
        ok &= match and tensor_add_tile.last_run.num_cores == 2
        print(
            f"{jnp.dtype(dtype).name:9s} {a.shape} on 2 cores: NKI and JAX "
            f"{'match' if match else 'DIFFER'}"
        )
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
