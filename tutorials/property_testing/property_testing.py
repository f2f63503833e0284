"""Property-based testing of NKI kernels with nki.testing.

A kernel author states *what* must hold -- "this kernel equals NumPy for every legal shape and
dtype", "the result does not depend on the order instances run in" -- and hypothesis searches
for a counter-example, then shrinks it to the smallest one it can find.

1. A tiled tensor add that handles ragged shapes with a mask: checked against NumPy over drawn
   HBM shapes (multiples of the tile or not) and float dtypes.
2. The same kernel with an off-by-one mask: caught, with a shrunk example.
3. A blockwise cumulative sum where instance i reads the result instance i - 1 wrote to HBM:
   correct in the simulator's default order (so a plain comparison passes), but a race between
   instances. Running every example in shuffled orders catches it, with a shrunk example; and
   ``assert_order_independent`` names the seeds and the first differing element.
4. The fixed cumulative sum passes both checks.

Run: python tutorials/property_testing/property_testing.py
"""

from __future__ import annotations

import os
import sys

import numpy as np
from hypothesis import strategies as st

import nki
import nki.language as nl
from nki.testing import (
    KernelCheckError,
    OrderDependenceError,
    assert_order_independent,
    check_kernel,
    dtypes,
    grids,
    hbm_shapes,
    load_profile,
)

TILE_P, MAX_F = 128, 64


# --- 1. a correct kernel -----------------------------------------------------------------------
@nki.jit
def tensor_add(a, b):
    n, m = a.shape
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:TILE_P, 0:m]
    for t in nl.affine_range((n + TILE_P - 1) // TILE_P):
        rows = t * TILE_P + i_p
        x = nl.load(a[rows, i_f], mask=(rows < n))
        y = nl.load(b[rows, i_f], mask=(rows < n))
        nl.store(out[rows, i_f], nl.add(x, y), mask=(rows < n))  # ragged last tile
    return out


# --- 2. an off-by-one mask ---------------------------------------------------------------------
@nki.jit
def tensor_add_off_by_one(a, b):
    n, m = a.shape
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:TILE_P, 0:m]
    for t in nl.affine_range((n + TILE_P - 1) // TILE_P):
        rows = t * TILE_P + i_p
        x = nl.load(a[rows, i_f], mask=(rows < n))
        y = nl.load(b[rows, i_f], mask=(rows < n))
        nl.store(out[rows, i_f], nl.add(x, y), mask=(rows < n - 1))  # BUG: drops the last row
    return out


# --- 3. a race between instances ---------------------------------------------------------------
@nki.jit
def block_cumsum_racy(x):
    """Row block i of the result is x[0] + ... + x[i] (blocks of 128 rows). Instance i adds its
    block to the running sum instance i - 1 stored in HBM -- but nothing makes instance i run
    after instance i - 1."""
    m = x.shape[1]
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    i_p, i_f = nl.mgrid[0:TILE_P, 0:m]
    mine = nl.load(x[i * TILE_P + i_p, i_f])
    nl.store(out[i * TILE_P + i_p, i_f], mine)  # block 0 is x[0]
    prev = nl.load(out[(i - 1) * TILE_P + i_p, i_f], mask=(i > 0))  # instance i - 1's result
    total = nl.add(mine, prev, mask=(i > 0))
    nl.store(out[i * TILE_P + i_p, i_f], total, mask=(i > 0))
    return out


# --- 4. the fix: keep the dependent chain inside one instance, in a sequential loop ------------
@nki.jit
def block_cumsum(x):
    n, m = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:TILE_P, 0:m]
    acc = nl.zeros((TILE_P, m), dtype=nl.float32, buffer=nl.sbuf)
    for blk in nl.sequential_range(n // TILE_P):
        acc += nl.load(x[blk * TILE_P + i_p, i_f])
        nl.store(out[blk * TILE_P + i_p, i_f], acc)
    return out


def cumsum_reference(x):
    blocks = x.reshape(-1, TILE_P, x.shape[1])
    return np.cumsum(blocks, axis=0).reshape(x.shape)


def main() -> int:
    load_profile()  # NKI_HYPOTHESIS_PROFILE (ci / dev / thorough); dev by default
    os.environ.pop("NKI_SIM_SHUFFLE_SEED", None)  # this tutorial picks its own orders
    ok = True

    # 1. A few lines: the property is "tensor_add == NumPy" for every drawn case.
    shape = st.shared(hbm_shapes((TILE_P, MAX_F), max_tiles=(3, 1), multiple=None), key="ab")
    floats = dtypes(float_only=True, fp8=False)
    n = check_kernel(tensor_add, np.add, shapes=[shape, shape], dtypes=floats, max_examples=15)
    print(f"tensor_add: agrees with NumPy on {n} drawn examples (ragged shapes, float dtypes)")

    # 2. The off-by-one mask is caught and shrunk to a minimal example.
    try:
        check_kernel(tensor_add_off_by_one, np.add, shapes=[shape, shape], dtypes=floats)
        print("unexpected: the off-by-one mask was not detected")
        ok = False
    except KernelCheckError as e:
        print("\ncaught the off-by-one mask:")
        print(e)

    # 3a. Compared in the default order only, the racy kernel looks right ...
    def one_block_per_instance(grid):
        return [st.tuples(st.just(TILE_P * grid[0]), st.integers(1, 8))]

    launch = dict(shapes=one_block_per_instance, grid=grids(max_ndim=1, max_instances=4))
    n = check_kernel(block_cumsum_racy, cumsum_reference, max_examples=10, **launch)
    print(f"\nblock_cumsum_racy: agrees with NumPy on {n} examples in the default order ...")

    # 3b. ... but running every example in shuffled orders as well exposes the race.
    try:
        check_kernel(block_cumsum_racy, cumsum_reference, shuffle_seeds=range(4), **launch)
        print("unexpected: the race was not detected")
        ok = False
    except KernelCheckError as e:
        print("... and caught the race between instances once run in shuffled orders:")
        print(e)

    # 3c. The same property on one input, naming the seeds that disagree.
    x = np.random.default_rng(0).uniform(-1, 1, (4 * TILE_P, 8)).astype(np.float32)
    try:
        assert_order_independent(block_cumsum_racy, x, grid=(4,))
        print("unexpected: assert_order_independent missed the race")
        ok = False
    except OrderDependenceError as e:
        print("\nassert_order_independent caught it too:")
        print(e)

    # 4. The fixed kernel passes both properties.
    n = check_kernel(
        block_cumsum,
        cumsum_reference,
        shapes=[hbm_shapes((TILE_P, 8), max_tiles=(4, 1))],
        shuffle_seeds=range(4),
        max_examples=10,
    )
    assert_order_independent(block_cumsum, x)
    print(f"\nblock_cumsum (fixed): agrees with NumPy on {n} examples, in every order")

    print("PASS" if ok else "property testing tutorial: a bug went undetected")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
