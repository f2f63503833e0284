"""The op table: every elementwise and reduction op is one row.

The front end (``nki.language`` functions, ``op=`` values accepted by ``nki.isa``), the
executors, the op list of the ``nki.language`` reference page and the per-op tests are all
generated from these rows.

Each row gives the op's name, arity, the engines that can run it, the NumPy implementation on
fp32 (or exact int64) values, its result-dtype rule and a one-line description."""

from __future__ import annotations

import contextlib
import contextvars
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .dtypes import INFO, promote, storage
from .errors import NKITypeError, user_loc
from .parsing import PARSE_LOCK

F32 = np.float32


def _f(x):
    return np.asarray(x, dtype=np.float32)


# whether NumPy's floating-point errors are ignored for the whole of the running launch (in this
# thread or task): the op functions then call NumPy without entering ``np.errstate`` again
_IGNORED: contextvars.ContextVar[bool] = contextvars.ContextVar("nki_errors_ignored", default=False)
_NO_CONTEXT = contextlib.nullcontext()


class errors_ignored:  # noqa: N801 (a context: ``with errors_ignored(): ...``)
    """``np.errstate(all="ignore")`` for a whole launch, known to ``quiet`` (entered once per
    launch instead of once per op call: about a microsecond each)."""

    def __enter__(self) -> None:
        self._token = _IGNORED.set(True)
        self._state = np.errstate(all="ignore")
        self._state.__enter__()

    def __exit__(self, *exc: object) -> None:
        try:
            self._state.__exit__(*exc)
        finally:
            _IGNORED.reset(self._token)


def quiet() -> Any:
    """A context that ignores NumPy's floating-point errors: none inside ``errors_ignored``."""
    return _NO_CONTEXT if _IGNORED.get() else np.errstate(all="ignore")


# --- erf and erfc in float64 (NumPy has none), rounded once to fp32 by their callers ------------
# Two Chebyshev fits made at import from ``math.erf`` / ``math.erfc``: erf(x) / x as a function of
# x * x below 1, and erfcx(a) = exp(a * a) * erfc(a) of t = (a - 3) / (a + 3) for a in [1, 10.5].
# Relative errors about 1e-15 and 5e-14: each fp32 result is the float64 function's, rounded.
# From 10.5 on erfc is below 1e-49, which no fp32 result built from it (erf, x * Phi(x)) keeps.
_ERF_SPLIT, _ERFC_ZERO, _ERFCX_K = 1.0, 10.5, 3.0


def _erf_over_x(u: np.ndarray) -> np.ndarray:
    x = np.sqrt(u)
    return np.array([math.erf(v) / v if v > 0 else 2.0 / math.sqrt(math.pi) for v in x])


def _erfcx_of_t(t: np.ndarray) -> np.ndarray:
    a = _ERFCX_K * (1.0 + t) / (1.0 - t)
    return np.array([math.erfc(v) * math.exp(v * v) for v in a])


def _t_of(a: float | np.ndarray) -> Any:
    return (a - _ERFCX_K) / (a + _ERFCX_K)


def _monomials(f: Callable[[np.ndarray], np.ndarray], deg: int, lo: float, hi: float) -> list:
    """The Chebyshev interpolant of ``f`` on [lo, hi] as plain power-series coefficients of
    its own variable (highest first, for Horner's rule: fewer passes than Clenshaw's)."""
    cheb = np.polynomial.Chebyshev.interpolate(f, deg, domain=[lo, hi])
    plain = cheb.convert(kind=np.polynomial.Polynomial, domain=[lo, hi], window=[lo, hi])
    return [float(c) for c in plain.coef[::-1]]


def _horner(coef: list, x: np.ndarray) -> np.ndarray:
    y = np.full_like(x, coef[0])
    for c in coef[1:]:
        y *= x
        y += c
    return y


_ERF_SMALL = _monomials(_erf_over_x, 10, 0.0, _ERF_SPLIT**2)
_ERFCX_T = (_t_of(_ERF_SPLIT), _t_of(_ERFC_ZERO))
_ERFCX = _monomials(_erfcx_of_t, 14, *_ERFCX_T)


def _erf_erfc64(z: np.ndarray, want_erf: bool) -> np.ndarray:
    """erf(z) or erfc(z) of a float64 array, each from the branch that does not cancel (a branch
    some element takes is computed for every element: cheaper than gathering its elements)."""
    shape = np.shape(z)
    z = np.reshape(z, -1)  # (a 0-d array's ufunc results are scalars: no in-place steps)
    a = np.abs(z)
    small = a < _ERF_SPLIT
    sq = z * z
    near = tail = sq  # (the branches no element takes are not computed)
    if small.any():  # erf(z) for |z| < 1
        near = z * _horner(_ERF_SMALL, np.minimum(sq, _ERF_SPLIT**2))
    if not small.all():  # erfc(|z|) for 1 <= |z| < 10.5, 0 beyond
        t = np.clip(_t_of(a), _ERFCX_T[0], _ERFCX_T[1])
        np.negative(sq, out=sq)
        tail = np.exp(sq, out=sq)
        tail *= _horner(_ERFCX, t)
        tail[a >= _ERFC_ZERO] = 0.0
    if want_erf:
        out = np.where(small, near, np.copysign(1.0 - tail, z))
    else:
        out = np.where(small, 1.0 - near, np.where(z > 0, tail, 2.0 - tail))
    return out.reshape(shape)


def _erf(x):
    return _erf_erfc64(np.asarray(x, dtype=np.float64), True).astype(np.float32)


_SQRT_2_PI = math.sqrt(2.0 / math.pi)


def _normal_cdf64(x: np.ndarray) -> np.ndarray:
    """Phi(x) = erfc(-x / sqrt 2) / 2 of fp32 values, in float64 (no cancellation for x < 0)."""
    return 0.5 * _erf_erfc64(np.asarray(x, dtype=np.float64) / -math.sqrt(2.0), False)


def _gelu(x):
    x = _f(x)
    return _f(x * _normal_cdf64(x))


def _gelu_dx(x):
    x = _f(x)
    x64 = x.astype(np.float64)
    pdf = np.exp(-0.5 * x64 * x64) / math.sqrt(2.0 * math.pi)
    return _f(_normal_cdf64(x) + x64 * pdf)


def _sin_unreduced(x):
    """The Scalar engine's sine (``nisa.activation(op=nl.sin)``): no argument range reduction,
    so outside [-pi, pi] it is the cubic of sin about +-pi, extrapolated (sin(9.0) ~ 27.65, as
    the shared API page says the hardware and AWS's simulator give). ``nl.sin`` reduces its
    argument first and stays exact (the ``sin`` row)."""
    x = _f(x)
    with np.errstate(all="ignore"):
        x64 = x.astype(np.float64)
        d = x64 - np.copysign(math.pi, x64)
        cubic = d * d * d / 6.0 - d
        return _f(np.where(np.abs(x) > np.float32(math.pi), cubic, np.sin(x)))


def _gelu_sigmoid_dx(x):
    s = _sigmoid(np.float32(1.702) * _f(x))
    return _f(s + np.float32(1.702) * _f(x) * s * (1.0 - s))


def _gelu_tanh(x):
    x = _f(x)
    return _f(0.5 * x * (1.0 + np.tanh(np.float32(_SQRT_2_PI) * (x + 0.044715 * x**3))))


def _sigmoid(x):
    x = _f(x)
    with np.errstate(over="ignore"):
        return _f(1.0 / (1.0 + np.exp(-x)))


def _silu_dx(x):
    s = _sigmoid(x)
    return _f(s * (1.0 + _f(x) * (1.0 - s)))


def _softplus(x):
    x = _f(x)
    return _f(np.logaddexp(np.float32(0.0), x))


def _mish(x):
    return _f(_f(x) * np.tanh(_softplus(x)))


def _erf_dx(x):
    x = _f(x)
    return _f(2.0 / math.sqrt(math.pi) * np.exp(-x * x))


def _sequential_sum(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """A float sum as the engines accumulate it: the elements of each reduced run (the reduced
    axes in row-major order) added one after another in the array's dtype, from the first
    (a device's ``tensor_reduce`` of fp32 rows equals this bit for bit; NumPy's own sum is
    pairwise). Other dtypes: ``np.add.reduce`` (exact integers)."""
    x = x if isinstance(x, np.ndarray) else np.asarray(x)
    nd = x.ndim
    if isinstance(axis, int):
        axes: tuple[int, ...] = (axis % max(1, nd),)
    else:
        given = range(nd) if axis is None else axis
        axes = tuple(sorted({int(a) % max(1, nd) for a in given}))
    if x.dtype.kind != "f" or x.size == 0 or not axes:
        return np.add.reduce(x, axis=axes, keepdims=keepdims)
    k = nd - len(axes)
    kept_dims = [1 if a in axes else d for a, d in enumerate(x.shape)] if keepdims else None
    if axes != tuple(range(k, nd)):  # (the reduced axes moved last, in order)
        x = np.transpose(x, [a for a in range(nd) if a not in axes] + list(axes))
    kept, n = x.shape[:k], math.prod(x.shape[k:])
    if x.dtype == np.float32 and n > 1 and _compiled(x.size):
        rows = np.ascontiguousarray(x).reshape(-1, n)
        out = _rows_sum()(rows if rows.flags.writeable else rows.copy())  # (its signature's)
    elif n <= 512 and x.size >= 16 * n:
        # (NumPy reduces a C-ordered array along its first axis one row after another, each
        # element into its column's running sum: the rows of x's transpose, from -0.0, which
        # adds nothing, not even to a leading -0.0; about twice np.add.accumulate's speed)
        cols = np.ascontiguousarray(x.reshape(-1, n).T)
        out = np.add.reduce(cols, axis=0, initial=x.dtype.type(-0.0))
    else:
        out = np.add.accumulate(x.reshape(*kept, n), axis=-1)[..., -1]
    return out.reshape(kept if kept_dims is None else kept_dims)


# The compiled sum (``nki.seqsum``) is faster at every size (17x on 128 x 128), but loading it
# (Numba) takes about a second once per process: it is loaded for one sum of _COMPILED_SUM
# elements, when the process has summed _COMPILED_AFTER elements by NumPy (about 2-4 ns each),
# or at once where Numba's compiler is already loaded (then it takes milliseconds: the
# ``numba`` backend, or the user's own Numba code, ran).
_COMPILED_SUM = 1 << 22
_COMPILED_AFTER = 1 << 23
_ACCUMULATED = [0]
_ROWS_SUM: list[Callable[[np.ndarray], np.ndarray]] = []


def _numba_loaded() -> bool:
    """Whether Numba has compiled or loaded a function in this process (its first one loads
    the implementation registries, ``numba.np.arraymath`` among them: most of the second)."""
    return "numba.np.arraymath" in sys.modules


def _compiled(size: int) -> bool:
    if _ROWS_SUM or size >= _COMPILED_SUM or _numba_loaded():
        return True
    _ACCUMULATED[0] += size
    return _ACCUMULATED[0] >= _COMPILED_AFTER


def _rows_sum() -> Callable[[np.ndarray], np.ndarray]:
    if not _ROWS_SUM:
        with PARSE_LOCK:  # (numba's compiler converts ASTs: one thread at a time)
            from .seqsum import rows_sum

            _ROWS_SUM[:] = [rows_sum]
    return _ROWS_SUM[0]


def _rsqrt(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        return _f(1.0 / np.sqrt(_f(x)))


def _recip(x):
    with quiet():
        return _f(np.float32(1.0) / _f(x))


def _div(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        if a.dtype.kind in "iu" and b.dtype.kind in "iu":
            return _f(a) / _f(b)
        return np.true_divide(a, b)


def _fmod(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.fmod(a, b)


def _mod(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.mod(a, b)


def _power(a, b):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if a.dtype.kind in "iu" and b.dtype.kind in "iu":
            return np.power(_f(a), _f(b))
        return np.power(a, b)


def _shift(fn):
    """A shift on int64 values (the bare row function; ``apply`` gives width-aware bit-pattern
    semantics). Negative / huge shift amounts are clamped to [0, 63]."""

    def run(a, b):
        a64 = np.asarray(a).astype(np.int64)
        b64 = np.clip(np.asarray(b).astype(np.int64), 0, 63)
        return fn(a64, b64)

    return run


def _rshift(a, b):
    # logical shift of the 64-bit pattern: -8 >> 1 is a large positive number, never -4
    a64 = np.asarray(a).astype(np.int64).view(np.uint64)
    b64 = np.clip(np.asarray(b).astype(np.int64), 0, 63).astype(np.uint64)
    return np.right_shift(a64, b64).view(np.int64)


@dataclass(frozen=True)
class Op:
    """One row of the op table."""

    name: str
    arity: int  # 1 unary, 2 binary
    fn: Callable[..., np.ndarray]
    engines: tuple[str, ...]  # engines able to run it as an ALU op / activation
    result: str  # "promote" | "same" | "bool" | "float" (see result_dtype)
    exact_int: bool = False  # integer inputs are computed exactly (int64), not via fp32
    bitvec: bool = False  # operates on bit patterns; integer dtypes only
    reduce: Callable[..., np.ndarray] | None = None  # reduction form, when it is a reducer
    identity: float | None = None  # reduction identity
    doc: str = ""
    activation: bool = False  # usable as a Scalar-engine activation function
    domain: tuple[float, float] | None = None  # documented valid input range
    # nl.atomic_rmw can apply it: ``fn`` is a NumPy ufunc whose ``.at`` applies repeated
    # indices one after another (a scatter-add keeps every update)
    atomic: bool = False
    # fp32 scalar expression over ``{a}`` (``{b}``) the Numba backend compiles: exact IEEE
    # arithmetic (one rounding), so it equals the NumPy result; None: not compiled natively
    native: str | None = None
    # the native expression is also exact on integral operands (0/1, integers below 2**24), so
    # rows the interpreter runs in exact int64 may be compiled too
    native_int: bool = False
    # the first NeuronCore generation whose engines have it (0: every generation)
    since_gen: int = 0


_V, _S, _G = "vector", "scalar", "gpsimd"
_ONE, _ZERO = "np.float32(1.0)", "np.float32(0.0)"


def _cmp(expr: str) -> str:
    """Native expression of a 0/1-valued op."""
    return f"({_ONE} if ({expr}) else {_ZERO})"


OPS: dict[str, Op] = {}


def _add(op: Op) -> None:
    OPS[op.name] = op


# ---- binary arithmetic -----------------------------------------------------------------------
_add(
    Op(
        "add",
        2,
        np.add,
        (_V, _G, _S),
        "promote",
        True,
        reduce=_sequential_sum,
        identity=0.0,
        doc="x + y",
        atomic=True,
        native="np.float32({a} + {b})",
        native_int=True,
    )
)
_add(
    Op(
        "subtract",
        2,
        np.subtract,
        (_V, _G),
        "promote",
        True,
        doc="x - y",
        atomic=True,
        native="np.float32({a} - {b})",
        native_int=True,
    )
)
_add(
    Op(
        "multiply",
        2,
        np.multiply,
        (_V, _G, _S),
        "promote",
        True,
        reduce=np.multiply.reduce,
        identity=1.0,
        doc="x * y",
        atomic=True,
        native="np.float32({a} * {b})",
        native_int=True,
    )
)
_add(Op("divide", 2, _div, (_V,), "promote", doc="x / y", native="np.float32({a} / {b})"))
_add(
    Op(
        "maximum",
        2,
        np.maximum,
        (_V, _G),
        "promote",
        True,
        reduce=np.maximum.reduce,
        identity=-np.inf,
        doc="element-wise maximum",
        atomic=True,
        native="fmax({a}, {b})",
        native_int=True,
    )
)
_add(
    Op(
        "minimum",
        2,
        np.minimum,
        (_V, _G),
        "promote",
        True,
        reduce=np.minimum.reduce,
        identity=np.inf,
        doc="element-wise minimum",
        atomic=True,
        native="fmin({a}, {b})",
        native_int=True,
    )
)


def _by_magnitude(larger: bool) -> Callable[..., np.ndarray]:
    """x where |x| > |y| (``larger``) or |x| < |y|, else y: the signed value, y on a tie."""

    def pick(x: Any, y: Any) -> np.ndarray:
        ax, ay = np.abs(x), np.abs(y)
        return np.where(np.greater(ax, ay) if larger else np.less(ax, ay), x, y)

    return pick


for _n, _larger, _cmp_op in (("abs_max", True, ">"), ("abs_min", False, "<")):
    _add(
        Op(
            _n,
            2,
            _by_magnitude(_larger),
            (_V,),
            "promote",
            doc=f"x if |x| {_cmp_op} |y| else y (the signed value; y on a tie)",
            native=f"({{a}} if abs({{a}}) {_cmp_op} abs({{b}}) else {{b}})",
            native_int=True,
            since_gen=4,
        )
    )
_add(Op("power", 2, _power, (_G, _V), "promote", doc="x ** y"))
_add(Op("fmod", 2, _fmod, (_V,), "promote", True, doc="remainder with the sign of x (C fmod)"))
_add(Op("mod", 2, _mod, (_V,), "promote", True, doc="remainder with the sign of y (Python %)"))
# ---- comparisons and logic (results are 0/1) ---------------------------------------------------
for _n, _fn, _d in [
    ("equal", np.equal, "{a} == {b}"),
    ("not_equal", np.not_equal, "{a} != {b}"),
    ("greater", np.greater, "{a} > {b}"),
    ("greater_equal", np.greater_equal, "{a} >= {b}"),
    ("less", np.less, "{a} < {b}"),
    ("less_equal", np.less_equal, "{a} <= {b}"),
]:
    _doc = _d.format(a="x", b="y") + " (1 or 0)"
    _add(Op(_n, 2, _fn, (_V, _G), "bool", True, doc=_doc, native=_cmp(_d), native_int=True))
_add(
    Op(
        "logical_and",
        2,
        lambda a, b: np.logical_and(a != 0, b != 0),
        (_V, _G),
        "bool",
        True,
        reduce=lambda x, axis, keepdims: np.all(x != 0, axis=axis, keepdims=keepdims),
        identity=1.0,
        doc="x and y",
        native=_cmp("({a} != 0) and ({b} != 0)"),
        native_int=True,
    )
)
_add(
    Op(
        "logical_or",
        2,
        lambda a, b: np.logical_or(a != 0, b != 0),
        (_V, _G),
        "bool",
        True,
        reduce=lambda x, axis, keepdims: np.any(x != 0, axis=axis, keepdims=keepdims),
        identity=0.0,
        doc="x or y",
        native=_cmp("({a} != 0) or ({b} != 0)"),
        native_int=True,
    )
)
_add(
    Op(
        "logical_xor",
        2,
        lambda a, b: np.logical_xor(a != 0, b != 0),
        (_V, _G),
        "bool",
        True,
        reduce=lambda x, axis, keepdims: np.sum(x != 0, axis=axis, keepdims=keepdims) % 2,
        identity=0.0,
        doc="x xor y",
        native=_cmp("({a} != 0) != ({b} != 0)"),
        native_int=True,
    )
)
# ---- bit-vector ops (integer dtypes only, Vector engine only) --------------------------------
_add(
    Op(
        "bitwise_and",
        2,
        np.bitwise_and,
        (_V,),
        "promote",
        True,
        True,
        reduce=np.bitwise_and.reduce,
        atomic=True,
        doc="x & y on bit patterns",
    )
)
_add(
    Op(
        "bitwise_or",
        2,
        np.bitwise_or,
        (_V,),
        "promote",
        True,
        True,
        reduce=np.bitwise_or.reduce,
        atomic=True,
        doc="x | y on bit patterns",
    )
)
_add(
    Op(
        "bitwise_xor",
        2,
        np.bitwise_xor,
        (_V,),
        "promote",
        True,
        True,
        reduce=np.bitwise_xor.reduce,
        atomic=True,
        doc="x ^ y on bit patterns",
    )
)
_add(Op("left_shift", 2, _shift(np.left_shift), (_V,), "promote", True, True, doc="x << y"))
_add(Op("right_shift", 2, _rshift, (_V,), "promote", True, True, doc="x >> y (logical shift)"))
_add(Op("invert", 1, np.invert, (_V,), "same", True, True, doc="~x on bit patterns"))

# ---- unary math (Scalar-engine activation functions where marked) ---------------------------
_U = [
    # name, fn, engines, activation, domain, doc
    ("exp", np.exp, (_S,), True, None, "e ** x"),
    ("log", np.log, (_S,), True, (2.0**-64, 2.0**64), "natural logarithm"),
    ("sqrt", np.sqrt, (_S,), True, (2.0**-116, 2.0**118), "square root"),
    ("rsqrt", _rsqrt, (_S, _G), True, (2.0**-87, 2.0**97), "1 / sqrt(x)"),
    ("reciprocal", _recip, (_V, _S), True, None, "1 / x"),
    ("abs", np.abs, (_V, _S), True, None, "|x|"),
    ("negative", np.negative, (_V, _S), False, None, "-x"),
    ("sign", np.sign, (_S,), True, None, "-1, 0 or 1"),
    ("ceil", np.ceil, (_S,), False, None, "round up"),
    ("floor", np.floor, (_S,), False, None, "round down"),
    ("trunc", np.trunc, (_S,), False, None, "round toward zero"),
    ("sin", np.sin, (_S,), True, (-math.pi, math.pi), "sine"),
    ("cos", np.cos, (_S,), True, None, "cosine"),
    ("tan", np.tan, (_S,), True, None, "tangent"),
    ("arctan", np.arctan, (_S,), True, (-math.pi / 2, math.pi / 2), "arc tangent"),
    ("tanh", np.tanh, (_S,), True, None, "hyperbolic tangent"),
    ("sigmoid", _sigmoid, (_S,), True, None, "1 / (1 + e ** -x)"),
    ("relu", lambda x: np.maximum(x, np.float32(0.0)), (_S,), True, None, "max(x, 0)"),
    ("gelu", _gelu, (_S,), True, None, "x * Phi(x) (exact, erf-based)"),
    ("gelu_dx", _gelu_dx, (_S,), True, None, "derivative of gelu"),
    ("gelu_apprx_tanh", _gelu_tanh, (_S,), True, None, "tanh approximation of gelu"),
    (
        "gelu_apprx_sigmoid",
        lambda x: _f(_f(x) * _sigmoid(np.float32(1.702) * _f(x))),
        (_S,),
        True,
        None,
        "x * sigmoid(1.702 x)",
    ),
    (
        "gelu_apprx_sigmoid_dx",
        _gelu_sigmoid_dx,
        (_S,),
        True,
        None,
        "derivative of gelu_apprx_sigmoid",
    ),  # fmt: skip
    ("silu", lambda x: _f(_f(x) * _sigmoid(x)), (_S,), True, None, "x * sigmoid(x)"),
    ("silu_dx", _silu_dx, (_S,), True, None, "derivative of silu"),
    ("erf", _erf, (_S,), True, None, "error function"),
    ("erf_dx", _erf_dx, (_S,), True, None, "derivative of erf"),
    ("softplus", _softplus, (_S,), True, None, "log(1 + e ** x)"),
    ("mish", _mish, (_S,), True, None, "x * tanh(softplus(x))"),
    ("square", np.square, (_S,), True, None, "x * x"),
    ("copy", lambda x: x, (_S, _V, _G), True, None, "identity"),
]
# fp32 expressions the Numba backend compiles for unary rows (the ``native`` column)
_U_NATIVE = {
    "abs": "np.float32(abs({a}))",
    "negative": "np.float32(-{a})",
    "sign": "fsign({a})",
    "ceil": "np.float32(np.ceil({a}))",
    "floor": "np.float32(np.floor({a}))",
    "trunc": "np.float32(np.trunc({a}))",
    "sqrt": "np.float32(np.sqrt({a}))",
    "rsqrt": "np.float32(np.float32(1.0) / np.float32(np.sqrt({a})))",
    "reciprocal": "np.float32(np.float32(1.0) / {a})",
    "square": "np.float32({a} * {a})",
    "relu": "fmax({a}, np.float32(0.0))",
    "copy": "{a}",
}
for _n, _fn, _eng, _act, _dom, _d in _U:
    exact = _n in ("abs", "negative", "sign", "square", "copy")

    def _wrapped(x, _fn=_fn, _exact=exact):
        if x.dtype.kind in "iu" and not _exact:
            x = x.astype(np.float32)
        with quiet():
            return _fn(x)

    _add(
        Op(
            _n,
            1,
            _wrapped,
            _eng,
            "same",
            exact,
            activation=_act,
            domain=_dom,
            doc=_d,
            native=_U_NATIVE.get(_n),
            native_int=exact,
        )
    )

_add(
    Op(
        "logical_not",
        1,
        lambda x: x == 0,
        (_V, _G),
        "bool",
        True,
        doc="not x (1 or 0)",
        native=_cmp("{a} == 0"),
        native_int=True,
    )
)

# the Scalar engine's own version of an activation function, where it differs from the op row's
ACTIVATION_ONLY: dict[str, Callable[[np.ndarray], np.ndarray]] = {"sin": _sin_unreduced}


def activation_function(name: str) -> Callable[..., Any]:
    """What ``nisa.activation(op=name)`` computes: the op row's function, or the engine's own."""
    return ACTIVATION_ONLY.get(name) or OPS[name].fn


BINARY = tuple(n for n, o in OPS.items() if o.arity == 2)
UNARY = tuple(n for n, o in OPS.items() if o.arity == 1 and n != "copy")
REDUCERS = tuple(n for n, o in OPS.items() if o.reduce is not None)
BITVEC = tuple(n for n, o in OPS.items() if o.bitvec)
# nl.atomic_rmw's ops: name -> the NumPy ufunc applied with ``ufunc.at``
ATOMIC_UFUNCS: dict[str, np.ufunc] = {n: o.fn for n, o in OPS.items() if o.atomic}  # type: ignore[misc]
# the Numba backend's natively compiled rows: name -> fp32 expression over {a} / {b}
NATIVE: dict[str, str] = {n: o.native for n, o in OPS.items() if o.native is not None}
NATIVE_INT_OK = frozenset(n for n, o in OPS.items() if o.native_int and o.native is not None)


def result_dtype(op: Op, in_dtypes: list[str]) -> str:
    """Result dtype by the row's rule: promote the inputs, keep the input's, or bool (0/1)."""
    if op.result == "bool":
        return "bool_"  # classic comparisons / logic default to dtype=bool (stored as 1 byte)
    if op.result == "same":
        return in_dtypes[0]
    out = in_dtypes[0]
    for d in in_dtypes[1:]:
        out = promote(out, d)
    return out


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def apply(op: Op, vals: list[object] | tuple[object, ...], bit_dtype: str | None = None):
    """Run a row on compute values (fp32, or int64 for exact integer math).

    Bit-vector rows (``bitwise_*``, shifts, ``invert``) act on the bit pattern of
    ``bit_dtype`` (the promoted integer type of the operands): each operand is wrapped to that
    width, the op runs on the unsigned pattern, and the result is reinterpreted as
    ``bit_dtype``. So ``right_shift`` is a logical shift (``int8 -8 >> 1 == 124``),
    ``left_shift`` / ``invert`` wrap instead of saturating, and shift amounts >= the width
    give 0. Every other row simply calls ``op.fn``."""
    if not op.bitvec or bit_dtype is None:
        return op.fn(*vals)
    info = INFO[bit_dtype]
    if info.kind not in "iub":
        return op.fn(*vals)
    st = storage(bit_dtype) if info.kind != "b" else np.dtype(np.uint8)
    ut = np.dtype(_UNSIGNED[st.itemsize])
    bits = st.itemsize * 8

    def pattern(v):
        return np.asarray(v).astype(np.int64).astype(st).view(ut)

    if op.name in ("left_shift", "right_shift"):
        a = pattern(vals[0])
        amount = np.asarray(vals[1]).astype(np.int64)
        big = (amount >= bits) | (amount < 0)
        sh = np.clip(amount, 0, bits - 1).astype(ut)
        raw = np.left_shift(a, sh) if op.name == "left_shift" else np.right_shift(a, sh)
        out = np.where(big, ut.type(0), raw).astype(ut)
    else:
        out = op.fn(*(pattern(v) for v in vals))
        out = np.asarray(out).astype(ut)
    return out.view(st).astype(np.int64)


def lookup(op: object) -> Op:
    """Resolve an ``op=`` argument: an nl function, a NumPy ufunc / function, or a name."""
    name = getattr(op, "__nki_op__", None)
    if name is None:
        try:
            name = _NUMPY_NAMES.get(op)  # type: ignore[arg-type]
        except TypeError:  # an unhashable value (a list...) is no op
            name = None
    if name is None and isinstance(op, str):
        name = op
    if name is None or name not in OPS:
        raise NKITypeError(
            f"unsupported op {getattr(op, '__name__', op)!r}: expected an nki.language op "
            f"(e.g. nl.add) or one of the NumPy equivalents",
            code="err_unsupported_op",
            loc=user_loc(),
        )
    return OPS[name]


def lookup_reducer(op: object, api: str) -> Op:
    """``lookup`` for calls that fold values with ``op`` (loop and cross-instance reductions):
    the row must have an identity (add, multiply, maximum, minimum, ...)."""
    row = lookup(op)
    if row.identity is None:
        raise NKITypeError(
            f"'{api}' needs a reduction operator (add, multiply, maximum, minimum, ...); "
            f"{row.name} has no identity",
            code="err_unsupported_op",
            loc=user_loc(),
        )
    return row


_NUMPY_NAMES: dict[object, str] = {
    np.add: "add",
    np.subtract: "subtract",
    np.multiply: "multiply",
    np.divide: "divide",
    np.true_divide: "divide",
    np.maximum: "maximum",
    np.minimum: "minimum",
    np.max: "maximum",
    np.min: "minimum",
    np.amax: "maximum",
    np.amin: "minimum",
    np.sum: "add",
    np.prod: "multiply",
    np.power: "power",
    np.fmod: "fmod",
    np.mod: "mod",
    np.equal: "equal",
    np.not_equal: "not_equal",
    np.greater: "greater",
    np.greater_equal: "greater_equal",
    np.less: "less",
    np.less_equal: "less_equal",
    np.logical_and: "logical_and",
    np.logical_or: "logical_or",
    np.logical_xor: "logical_xor",
    np.logical_not: "logical_not",
    np.bitwise_and: "bitwise_and",
    np.bitwise_or: "bitwise_or",
    np.bitwise_xor: "bitwise_xor",
    np.left_shift: "left_shift",
    np.right_shift: "right_shift",
    np.invert: "invert",
    np.exp: "exp",
    np.log: "log",
    np.sqrt: "sqrt",
    np.abs: "abs",
    np.negative: "negative",
    np.sign: "sign",
    np.ceil: "ceil",
    np.floor: "floor",
    np.trunc: "trunc",
    np.sin: "sin",
    np.cos: "cos",
    np.tan: "tan",
    np.arctan: "arctan",
    np.tanh: "tanh",
    np.square: "square",
    np.reciprocal: "reciprocal",
}


def markdown() -> str:
    """The op table as a Markdown table (name, kind, engines, integer semantics, doc): the op
    list of the ``nki.language`` reference page."""
    rows = ["| op | kind | engines | integers | meaning |", "|---|---|---|---|---|"]
    for op in OPS.values():
        if op.name == "copy":
            continue
        kind = "binary" if op.arity == 2 else "unary"
        if op.activation:
            kind += ", activation"
        if op.reduce is not None:
            kind += ", reducer"
        ints = "bit pattern" if op.bitvec else ("exact" if op.exact_int else "via fp32")
        rng = f" (valid input range {op.domain[0]:.3g}..{op.domain[1]:.3g})" if op.domain else ""
        rows.append(f"| `{op.name}` | {kind} | {', '.join(op.engines)} | {ints} | {op.doc}{rng} |")
    return "\n".join(rows)
