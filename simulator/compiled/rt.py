"""Run-time helpers for the code the Numba backend generates (imported by every generated
module, so they must live in an importable module for numba's on-disk cache).

* ``f32_bits`` / ``bits_f32``: reinterpret a float32 as its uint32 pattern and back.
* ``to_bf16`` / ``from_bf16``: fp32 -> bfloat16 bits, round-to-nearest-even, bit-identical to
  ``ml_dtypes`` (NaN keeps its sign and becomes the quiet NaN ``0x7FC0``); bfloat16 bits ->
  fp32 (exact).
* ``fmax`` / ``fmin``: ``np.maximum`` / ``np.minimum`` on fp32 (NaN propagates).
* ``CALLBACK``: the ctypes type of the call back into Python that compiled code uses for
  hosted instructions and for the op-table rows whose NumPy results numba's libm does not
  reproduce bit for bit.
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir as llir
from numba import njit, types
from numba.extending import intrinsic


@intrinsic
def f32_bits(typingctx, x):  # type: ignore[no-untyped-def]
    """The uint32 bit pattern of a float32."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], llir.IntType(32))

    return types.uint32(types.float32), codegen


@intrinsic
def bits_f32(typingctx, u):  # type: ignore[no-untyped-def]
    """The float32 whose bit pattern is the uint32 ``u``."""
    if u != types.uint32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], llir.FloatType())

    return types.float32(types.uint32), codegen


@njit(cache=True)
def to_bf16(v: float) -> int:
    u = f32_bits(np.float32(v))
    if (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        return np.uint16(((u >> np.uint32(16)) & np.uint32(0x8000)) | np.uint32(0x7FC0))
    lsb = (u >> np.uint32(16)) & np.uint32(1)
    return np.uint16((u + np.uint32(0x7FFF) + lsb) >> np.uint32(16))


@njit(cache=True)
def from_bf16(b: int) -> float:
    return bits_f32(np.uint32(np.uint32(b) << np.uint32(16)))


@njit(cache=True)
def fmax(a: float, b: float) -> float:
    return a if (a > b or a != a) else b


@njit(cache=True)
def fmin(a: float, b: float) -> float:
    return a if (a < b or a != a) else b


@njit(cache=True)
def fsign(a: float) -> float:
    """``np.sign`` on fp32: -1, 0 (also for -0.0) or 1; NaN stays NaN."""
    if a > 0:
        return np.float32(1.0)
    if a < 0:
        return np.float32(-1.0)
    if a != a:
        return a
    return np.float32(0.0)


# the compiled kernel's call back into Python: (kind, instruction index) -> status
CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)


# ---- parameter blocks of the library kernels (see ``numba_kernels``) --------------------------
# A mask block at P[mp]: count, then per condition (op code, 4 coefficients); its bases (the
# symbol-dependent part) are D[md + c]. Op codes follow MASK_OPS in ``numba_kernels``.


@njit(cache=True)
def mask_ok(P, mp, D, md, i0, i1, i2, i3):  # type: ignore[no-untyped-def]
    """Every condition of the mask block holds at tile point (i0, i1, i2, i3)."""
    for c in range(P[mp]):
        q = mp + 1 + 5 * c
        v = D[md + c] + P[q + 1] * i0 + P[q + 2] * i1 + P[q + 3] * i2 + P[q + 4] * i3
        op = P[q]
        if op == 0:
            ok = v < 0
        elif op == 1:
            ok = v <= 0
        elif op == 2:
            ok = v > 0
        elif op == 3:
            ok = v >= 0
        elif op == 4:
            ok = v == 0
        else:
            ok = v != 0
        if not ok:
            return False
    return True


@njit(cache=True)
def checks_fail(P, cp, D, cd, i0, i1, i2, i3):  # type: ignore[no-untyped-def]
    """Some index of the check block at P[cp] (count, then per check: extent, 4 coefficients;
    bases D[cd + c]) leaves [0, extent) at tile point (i0, i1, i2, i3)."""
    for c in range(P[cp]):
        q = cp + 1 + 5 * c
        v = D[cd + c] + P[q + 1] * i0 + P[q + 2] * i1 + P[q + 3] * i2 + P[q + 4] * i3
        if v < 0 or v >= P[q]:
            return True
    return False


@njit(cache=True)
def mask_ranges(P, mp, D, md, n0, n1, n2, n3):  # type: ignore[no-untyped-def]
    """The mask block as per-axis index ranges: (lo0..lo3, hi0..hi3, residual). A condition on
    one tile axis (the ragged-tile idiom) narrows that axis' range exactly; ``residual`` is True
    when some condition involves several axes (or is ``!=``) and must be tested per element."""
    r = np.empty(8, np.int64)  # lo0..lo3, hi0..hi3
    r[0] = r[1] = r[2] = r[3] = 0
    r[4], r[5], r[6], r[7] = n0, n1, n2, n3
    residual = False
    for c in range(P[mp]):
        q = mp + 1 + 5 * c
        op = P[q]
        axis = -1
        nz = 0
        for k in range(4):
            if P[q + 1 + k] != 0:
                axis = k
                nz += 1
        if nz > 1 or op == 5:
            residual = True
            continue
        b = D[md + c]
        coef = P[q + 1 + axis] if axis >= 0 else 0
        for form in range(2):  # each condition as one or two "bb + cc * i < 0"
            if op == 0:  # <
                bb, cc = b, coef
            elif op == 1 or (op == 4 and form == 0):  # <= : b + c i < 1
                bb, cc = b - 1, coef
            elif op == 2:  # > : -b - c i < 0
                bb, cc = -b, -coef
            else:  # >= (and the other half of ==): -b - c i < 1
                bb, cc = -b - 1, -coef
            if cc == 0:
                if bb >= 0:  # never true: an empty mask
                    r[4] = 0
            elif cc > 0:
                r[4 + axis] = min(r[4 + axis], -(bb // cc))
            else:
                r[axis] = max(r[axis], bb // (-cc) + 1)
            if op != 4:
                break
    return r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], residual


@njit(cache=True)
def checks_box_fail(P, cp, D, cd, l0, l1, l2, l3, h0, h1, h2, h3):  # type: ignore[no-untyped-def]
    """``checks_fail`` at some point of the box [l, h) (every point of which is masked in): the
    extremes of each affine index over the box, O(1) per check instead of per element."""
    if h0 <= l0 or h1 <= l1 or h2 <= l2 or h3 <= l3:
        return False  # nothing is masked in
    for c in range(P[cp]):
        q = cp + 1 + 5 * c
        lo = hi = D[cd + c]
        c0, c1, c2, c3 = P[q + 1], P[q + 2], P[q + 3], P[q + 4]
        lo += min(c0 * l0, c0 * (h0 - 1)) + min(c1 * l1, c1 * (h1 - 1))
        lo += min(c2 * l2, c2 * (h2 - 1)) + min(c3 * l3, c3 * (h3 - 1))
        hi += max(c0 * l0, c0 * (h0 - 1)) + max(c1 * l1, c1 * (h1 - 1))
        hi += max(c2 * l2, c2 * (h2 - 1)) + max(c3 * l3, c3 * (h3 - 1))
        if lo < 0 or hi >= P[q]:
            return True
    return False
