"""Sequential fp32 row sums, compiled with Numba: the engines add a row's elements one after
another, which NumPy does only through ``np.add.accumulate`` (about 20x slower than its pairwise
``np.sum``). Imported on the first large sum (``optable._sequential_sum``), under the parse lock:
the signature is compiled (or loaded from Numba's cache) at import."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit("float32[::1](float32[:, ::1])", cache=True, nogil=True)
def rows_sum(x: np.ndarray) -> np.ndarray:
    """Each row of ``x`` summed left to right in fp32, from its first element; eight rows at a
    time, so that their eight dependency chains overlap."""
    rows, n = x.shape
    out = np.empty(rows, np.float32)
    r = 0
    while r + 8 <= rows:
        a0, a1, a2, a3 = x[r, 0], x[r + 1, 0], x[r + 2, 0], x[r + 3, 0]
        a4, a5, a6, a7 = x[r + 4, 0], x[r + 5, 0], x[r + 6, 0], x[r + 7, 0]
        for k in range(1, n):
            a0 += x[r, k]
            a1 += x[r + 1, k]
            a2 += x[r + 2, k]
            a3 += x[r + 3, k]
            a4 += x[r + 4, k]
            a5 += x[r + 5, k]
            a6 += x[r + 6, k]
            a7 += x[r + 7, k]
        out[r], out[r + 1], out[r + 2], out[r + 3] = a0, a1, a2, a3
        out[r + 4], out[r + 5], out[r + 6], out[r + 7] = a4, a5, a6, a7
        r += 8
    while r < rows:
        a = x[r, 0]
        for k in range(1, n):
            a += x[r, k]
        out[r] = a
        r += 1
    return out
