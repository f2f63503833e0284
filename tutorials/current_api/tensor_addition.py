"""Tensor addition in the current NKI API (``import nki``): destination-first ``nisa`` calls,
launched on one core (``kernel(a, b)``) and on the two cores of an LNC=2 NeuronCore
(``kernel[2](a, b)``), each checked against NumPy.

Run: ``python tutorials/current_api/tensor_addition.py``"""

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def tensor_add(a_input, b_input):
    """c = a + b for [N, F] inputs, N a multiple of 128 * (number of cores). Each core takes
    its share of the rows: nl.num_programs(0) is 1 for kernel(...) and 2 for kernel[2](...)."""
    out = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    rows = a_input.shape[0] // nl.num_programs(0)
    first = nl.program_id(0) * rows
    free = a_input.shape[1]
    for t in nl.affine_range(rows // 128):
        lo = first + t * 128
        a_tile = nl.ndarray((128, free), dtype=a_input.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray((128, free), dtype=b_input.dtype, buffer=nl.sbuf)
        c_tile = nl.ndarray((128, free), dtype=a_input.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_tile, src=a_input[lo : lo + 128, :])
        nisa.dma_copy(dst=b_tile, src=b_input[lo : lo + 128, :])
        nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)
        nisa.dma_copy(dst=out[lo : lo + 128, :], src=c_tile)
    return out


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    a = rng.random((1024, 512), dtype=np.float32)
    b = rng.random((1024, 512), dtype=np.float32)
    ok = True
    for name, run in (("LNC=1", tensor_add), ("LNC=2", tensor_add[2])):
        c = nki.simulate(run)(a, b)
        same = np.array_equal(c, a + b)
        ok &= same
        print(f"{name}: {'matches' if same else 'DIFFERS FROM'} NumPy")
    print("PASS" if ok else "FAIL")
