"""Property test: for random dtype pairs, shapes and ops, the result dtype follows the classic
promotion table and the values equal the float64 result rounded once into that dtype."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import nki
import nki.language as nl
from nki.dtypes import promote, storage

DTYPES = ["float32", "bfloat16", "float16", "float8_e4m3", "float8_e5m2", "int8", "int16",
          "int32", "uint8", "uint16", "uint32"]  # fmt: skip
OPS = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
       "maximum": np.maximum, "minimum": np.minimum}  # fmt: skip


def _round_into(x: np.ndarray, name: str) -> np.ndarray:
    """Independent reference rounding: ml_dtypes / NumPy RNE for floats, rint + clip for ints."""
    sd = storage(name)
    if sd.kind in "iu":
        info = np.iinfo(sd)
        return np.clip(np.rint(x), info.min, info.max).astype(sd)
    return x.astype(np.float32).astype(sd)


_KERNELS: dict[str, object] = {}


def _kernel(op: str):
    if op not in _KERNELS:

        @nki.jit
        def kernel(a, b):
            z = getattr(nl, op)(nl.load(a), nl.load(b))
            out = nl.ndarray(z.shape, z.dtype, buffer=nl.shared_hbm)
            nl.store(out, z)
            return out

        _KERNELS[op] = kernel
    return _KERNELS[op]


@given(
    da=st.sampled_from(DTYPES),
    db=st.sampled_from(DTYPES),
    op=st.sampled_from(sorted(OPS)),
    p=st.integers(1, 128),
    f=st.integers(1, 40),
    column=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_binary_promotion_and_rounding(da, db, op, p, f, column, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 7, (p, f)).astype(storage(da))
    b = rng.integers(0, 7, (p, 1) if column else (p, f)).astype(storage(db))
    got = _kernel(op)(a, b)
    want_dt = promote(da, db)
    assert got.dtype == storage(want_dt)
    ref = OPS[op](a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_array_equal(got, _round_into(ref, want_dt))
