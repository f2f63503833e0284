"""Multi-core SPMD tensor addition launched from PyTorch: grid_x row tiles are split over two
NeuronCores with nl.spmd_dim(grid_x, nl.nc(2)); prints whether NKI and PyTorch match.

Run: python tutorials/tensor_addition/spmd_tensor_addition_torch.py"""

import os
import sys

import torch

import nki.language as nl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spmd_tensor_addition import TILE_F, TILE_P, tensor_add_tile  # noqa: E402


def main() -> int:
    ok = True
    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(0)
        a = torch.randn(512, 2048, dtype=dtype)
        b = torch.randn(512, 2048, dtype=dtype)
        grid_x = a.shape[0] // (2 * TILE_P)
        out = tensor_add_tile[nl.spmd_dim(grid_x, nl.nc(2)), a.shape[1] // TILE_F](a, b)
        match = isinstance(out, torch.Tensor) and torch.equal(out, a + b)
        ok &= match and tensor_add_tile.last_run.num_cores == 2
        print(
            f"{str(dtype):15s} {tuple(a.shape)} on 2 cores: NKI and PyTorch "
            f"{'match' if match else 'DIFFER'}"
        )
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
