"""Row softmax in the current NKI API, checked against NumPy.

Each tile of 128 rows goes through four destination-first ``nisa`` calls:

1. ``tensor_reduce`` with ``negate=True`` gives ``-max`` of every row (one value per partition);
2. ``activation(op=nl.exp, bias=-max)`` computes ``exp(x - max)`` and, in the same instruction,
   sums each row into the Scalar engine's accumulator registers: ``reduce_cmd=reset_reduce``
   clears them first (the default, ``idle``, would leave them untouched) and ``reduce_res``
   reads them out;
3. ``reciprocal`` of the row sums;
4. ``tensor_scalar`` multiplies every row by its own ``1 / sum`` (a ``(128, 1)`` operand).

The last tile may be partial (``min()``-bounded slices: the current API has no masks).

Run: ``python tutorials/current_api/softmax.py``"""

import ml_dtypes
import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

P = nl.tile_size.pmax  # 128 partitions


@nki.jit
def softmax(x):
    """softmax over the last axis of x [N, D] (D <= 512), computed in float32."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    for r0 in range(0, n, P):
        rows = min(P, n - r0)
        t = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:rows], src=x[r0 : r0 + rows, :])  # converts to float32

        neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max[0:rows], op=nl.maximum, data=t[0:rows], axis=1, negate=True)

        e = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
        row_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(
            dst=e[0:rows],
            op=nl.exp,
            data=t[0:rows],
            bias=neg_max[0:rows],
            reduce_op=nl.add,
            reduce_res=row_sum[0:rows],
            reduce_cmd=nisa.reduce_cmd.reset_reduce,
        )

        inv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv[0:rows], data=row_sum[0:rows])
        y = nl.ndarray((P, d), dtype=x.dtype, buffer=nl.sbuf)  # rounds to x's dtype
        nisa.tensor_scalar(dst=y[0:rows], data=e[0:rows], op0=nl.multiply, operand0=inv[0:rows])
        nisa.dma_copy(dst=out[r0 : r0 + rows, :], src=y[0:rows])
    return out


def softmax_np(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    ok = True
    # (float32: the engine adds a row's 256 exponentials one after another, so the row sum is
    # off by some ulp of its size, and each output by as many of its own)
    for dtype, tol in ((np.float32, 5e-6), (ml_dtypes.bfloat16, 8e-3)):
        x = (rng.standard_normal((300, 256)) * 4).astype(dtype)
        got = np.asarray(nki.simulate(softmax)(x), np.float64)
        err = float(np.max(np.abs(got - softmax_np(x))))
        ok &= err <= tol
        print(f"{np.dtype(dtype).name}: max |error| vs NumPy {err:.2e} (tolerance {tol:.0e})")
    print("PASS" if ok else "FAIL")
