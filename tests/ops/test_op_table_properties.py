"""Every row of the op table, property-tested with nki.testing against an independent NumPy
(float64) reference over drawn tile shapes (1-128 partitions, 1-2 free axes, (P, 1) column
broadcasts) and drawn dtypes: the float formats for every op, the integer types where the row
defines integer semantics (exact and saturating, bit patterns for bit-vector ops). Reducer rows
are also tested in their reduction form (nisa.tensor_reduce over the free axis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st

import nki
import nki.isa as nisa
import nki.language as nl
from nki import dtypes as ndt
from nki.optable import BINARY, OPS, UNARY
from nki.testing import arrays, check_kernel, dtypes, tile_shapes
from nki.testing.reference import NUMPY_OPS

FLOATS = dtypes(include=["float32", "bfloat16", "float16", "float8_e4m3", "float8_e5m2"])
INTS = dtypes(kinds=("int", "uint"))
_BITVEC = ("bitwise_and", "bitwise_or", "bitwise_xor", "invert")
UNARY_REF = {n: NUMPY_OPS[n] for n in UNARY if n not in _BITVEC} | {"copy": NUMPY_OPS["copy"]}
BINARY_REF = {n: NUMPY_OPS[n] for n in BINARY if n in NUMPY_OPS and n not in _BITVEC}
BITVEC_REF = {n: NUMPY_OPS[n] for n in _BITVEC}
SHIFTS = ("left_shift", "right_shift")
# integer semantics defined by the row: exact (saturating) integer math, or fp32 then rint
INT_OK = {n for n, op in OPS.items() if op.exact_int and not op.bitvec} | {"divide"}
# value ranges inside each op's well-conditioned domain (floats); divisors avoid zero
UNARY_RANGE = {"log": (0.1, 4.0), "sqrt": (0.0, 4.0), "rsqrt": (0.1, 4.0),
               "tan": (-1.2, 1.2), "arctan": (-1.5, 1.5), "sin": (-3.0, 3.0)}  # fmt: skip
NONZERO = {"reciprocal"}
DIVISOR = {"divide", "fmod", "mod"}


def _examples() -> int:
    return max(4, settings().max_examples // 5)  # ci: 5 per row; thorough: 60


def _apply_int(r, like: np.dtype):
    """A float64 / int64 reference result rounded and saturated into the integer type."""
    info = np.iinfo(like)
    return np.clip(np.rint(np.asarray(r, dtype=np.float64)), info.min, info.max).astype(like)


def _reference(name: str):
    fn = UNARY_REF.get(name) or BINARY_REF.get(name)

    def ref(*xs):
        kinds = {x.dtype.kind for x in xs}
        with np.errstate(all="ignore"):
            r = fn(*(x.astype(np.float64) for x in xs))
        if OPS[name].result == "bool":
            return np.asarray(r).astype(np.bool_)
        if kinds <= set("iu"):
            return _apply_int(r, xs[0].dtype)
        return r

    ref.__name__ = f"numpy_{name}"
    return ref


def _nonzero(strategy, one):
    return strategy.map(lambda a: np.where(np.abs(a.astype(np.float32)) < 0.25, one, a))


def _values(name: str, nargs: int):
    """Per-input value strategies (shape, dtype) -> arrays for the op's domain."""

    def make(k: int):
        def values(shape, dt):
            dt = str(ndt.dtype(dt))
            if ndt.is_int(dt):
                if name in DIVISOR and k == 1:
                    base = arrays(dt, shape, min_value=1, max_value=100)
                    return (
                        base
                        if dt.startswith("u")
                        else _nonzero(
                            arrays(dt, shape, min_value=-100, max_value=100),
                            ndt.storage(dt).type(7),
                        )
                    )
                return arrays(dt, shape)
            one = ndt.storage(dt).type(1.0)
            if name == "power":
                lo, hi = ((0.5, 2.0), (-2.0, 2.0))[k]
                return arrays(dt, shape, min_value=lo, max_value=hi)
            if name in NONZERO or (name in DIVISOR and k == 1):
                return _nonzero(arrays(dt, shape), one)
            lo, hi = UNARY_RANGE.get(name, (-4.0, 4.0))
            return arrays(dt, shape, min_value=lo, max_value=hi)

        return values

    return [make(k) for k in range(nargs)]


@st.composite
def _shapes(draw, nargs: int):
    s = draw(tile_shapes(max_free=48, free_dims=draw(st.integers(1, 2))))
    if nargs == 1:
        return [s]
    col = len(s) == 2 and draw(st.booleans())
    return [s, (s[0], 1) if col else s]


def _elementwise_kernel(name: str, nargs: int):
    fn = getattr(nl, name)

    def kernel(a, b=None):
        x = nl.load(a)
        z = fn(x) if b is None else fn(x, nl.load(b))
        out = nl.ndarray(z.shape, dtype=z.dtype, buffer=nl.shared_hbm)
        nl.store(out, z)
        return out

    kernel.__name__ = f"nl_{name}"
    return nki.jit(kernel)


ELEMENTWISE = sorted(n for n in OPS if n not in BITVEC_REF and n not in SHIFTS)


def test_every_row_is_covered():
    covered = set(UNARY_REF) | set(BINARY_REF) | set(BITVEC_REF) | set(SHIFTS)
    assert covered == set(OPS)


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_op_matches_numpy_on_drawn_shapes_and_dtypes(name):
    op = OPS[name]
    dts = FLOATS if name not in INT_OK else st.one_of(FLOATS, INTS)
    check_kernel(
        _elementwise_kernel(name, op.arity),
        _reference(name),
        shapes=_shapes(op.arity),
        dtypes=dts,
        values=_values(name, op.arity),
        max_examples=_examples(),
    )


def _bitvec_reference(name: str):
    def ref(a, b=None):
        dt = a.dtype
        if name in SHIFTS:
            bits = dt.itemsize * 8
            u = np.dtype(f"u{dt.itemsize}")
            pat = a.view(u).astype(np.uint64)
            sh = np.broadcast_to(b, a.shape).astype(np.uint64)
            r = (pat << sh) if name == "left_shift" else (pat >> sh)
            r = np.where(sh >= bits, 0, r & np.uint64(2**bits - 1))
            return r.astype(u).view(dt)
        return BITVEC_REF[name](a) if b is None else BITVEC_REF[name](a, b)

    ref.__name__ = f"numpy_{name}"
    return ref


@pytest.mark.parametrize("name", sorted(BITVEC_REF) + list(SHIFTS))
def test_bitvec_op_matches_numpy_on_bit_patterns(name):
    op = OPS[name]

    def amounts(shape, dt):
        bits = ndt.storage(str(ndt.dtype(dt))).itemsize * 8
        return arrays(dt, shape, min_value=0, max_value=bits + 2)  # includes shifts >= width

    values = [lambda s, d: arrays(d, s, min_value=-(2**31), max_value=2**32)]
    if op.arity == 2:
        values.append(amounts if name in SHIFTS else values[0])
    check_kernel(
        _elementwise_kernel(name, op.arity),
        _bitvec_reference(name),
        shapes=_shapes(op.arity),
        dtypes=INTS,
        values=values,
        max_examples=_examples(),
    )


REDUCERS = sorted(n for n, op in OPS.items() if op.reduce is not None)


def _reduce_reference(name: str):
    def ref(a):
        with np.errstate(all="ignore"):
            if name in ("logical_and", "logical_or", "logical_xor"):
                r = OPS[name].reduce(a != 0, axis=1, keepdims=True)
                return np.asarray(r).astype(np.bool_)
            if OPS[name].bitvec:
                return OPS[name].reduce(a, axis=1, keepdims=True)
            r = OPS[name].reduce(a.astype(np.float64), axis=1, keepdims=True)
            return _apply_int(r, a.dtype) if a.dtype.kind in "iu" else r

    ref.__name__ = f"numpy_reduce_{name}"
    return ref


@pytest.mark.parametrize("name", REDUCERS)
def test_reducer_row_matches_numpy(name):
    op = OPS[name]

    def kernel(a):
        r = nisa.tensor_reduce(getattr(nl, name), nl.load(a), axis=1, keepdims=True)
        out = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nl.store(out, r)
        return out

    kernel.__name__ = f"reduce_{name}"
    if op.bitvec:
        dts = INTS
    elif op.exact_int:
        dts = st.one_of(FLOATS, INTS)
    else:
        dts = FLOATS
    lo, hi = (0.8, 1.25) if name == "multiply" else (-4.0, 4.0)  # keep products in range
    check_kernel(
        nki.jit(kernel),
        _reduce_reference(name),
        shapes=[tile_shapes(max_free=16)],
        dtypes=dts,
        min_value=lo,
        max_value=hi,
        max_examples=_examples(),
    )
