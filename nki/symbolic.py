"""Symbolic values seen while tracing: scalars (program ids, loop iterators), index arrays
(``nl.arange`` / ``nl.mgrid``) and mask predicates. All are affine (``//`` / ``%`` by an int
dividing every coefficient stay so); anything else (``if``, other division, floats, ``int()``)
needs a scalar's value: the trace restarts where it has one (per core, or the loop unrolled in
the current API), or it is a clear error at the user's line, as in the real NKI compiler."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator
from typing import Any

from .affine import LoopSym
from .errors import NKIControlFlowError, NKIError, NKIIndexError, is_internal_frame, user_loc
from .ir import Affine, Cond, IndexExpr

# Set by the tracer (a layer above) when it is imported: ``decide_condition(pred)`` decides a
# Python ``if`` on a predicate, ``unroll_for_division(op, a, b)`` returns the error (or classic
# unrolling request) for ``//`` / ``%`` on a loop iterator, or None.
TRACE_HOOKS: dict[str, Callable[..., Any]] = {}

_CMP_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    n = max(len(a), len(b))
    a2, b2 = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a2, b2):
        if x != y and x != 1 and y != 1:
            raise NKIIndexError(
                f"index shapes {tuple(a)} and {tuple(b)} cannot be broadcast together",
                code="err_index_shape_mismatch",
                loc=user_loc(),
            )
        out.append(y if x == 1 else x)
    return tuple(out)


def expand_expr(e: IndexExpr, shape: tuple[int, ...]) -> IndexExpr:
    """Right-align ``e`` to ``shape`` (NumPy broadcasting); extent-1 axes carry no coefficient."""
    pad = len(shape) - len(e.shape)
    coeffs = (0,) * pad + tuple(e.coeffs)
    coeffs = tuple(c if n > 1 else 0 for c, n in zip(coeffs, shape))
    return IndexExpr(e.base, coeffs, tuple(shape))


class _Traced:
    """Base of traced values: using them in Python control flow is an error."""

    __slots__ = ()
    _what = "a traced value"

    def __bool__(self) -> bool:
        _per_core(self)
        raise NKIControlFlowError(
            f"Python control flow (if / while / and / or / not) cannot depend on {self._what}; "
            "kernel control flow is fixed at trace time. Use mask= for partial tiles and "
            "nl.affine_range / nl.sequential_range for loops",
            loc=user_loc(),
        )

    def __index__(self) -> int:
        _per_core(self)
        _need_value(self, "int() / a list index / a range() bound")
        raise NKIControlFlowError(
            f"{self._what} has no concrete integer value at trace time (it is symbolic), so it "
            "cannot drive Python control flow or be converted with int() / used as a list "
            "index / range() bound; use it in affine index expressions and masks instead",
            code="err_dynamic_control_flow_not_supported",
            loc=user_loc(),
        )

    __int__ = __index__

    def __hash__(self) -> int:
        return id(self)


def _per_core(x: object) -> None:
    """A current-API LNC=2 program id needs a concrete value: the trace asks to be retraced
    once per physical core (the ``per_core`` hook raises; absent outside a trace)."""
    hook = TRACE_HOOKS.get("per_core")
    if hook is not None:
        hook(x)


def _need_value(x: object, what: str) -> None:
    """``what`` needs the integer of ``x``: the ``concrete_value`` hook may restart the trace."""
    hook = TRACE_HOOKS.get("concrete_value")
    if hook is not None and isinstance(x, Scalar):
        hook(x, what)


def _non_affine(op: str, a: object, b: object) -> NKIError:
    for x in (a, b):  # current API: a program id / loop iterator is an int (per core, unrolled)
        _per_core(x)
        _need_value(x, f"'{op}'")
    unroll = TRACE_HOOKS["unroll_for_division"](op, a, b) if op in ("//", "%") else None
    if unroll is not None:
        return unroll
    hint = ""
    if op in ("//", "%") and isinstance(a, Scalar):
        if any(isinstance(s, LoopSym) for s in a.aff.symbols()):
            hint = "; to divide a loop iterator, loop with nl.static_range (or NKI_CLASSIC=1)"
        else:  # (a symbolic program id: one trace serves every instance of the grid)
            hint = "; give the quotient and remainder of nl.program_id grid axes of their own"
    return NKIIndexError(
        f"index expression '{_desc(a)} {op} {_desc(b)}' is not affine; NKI index expressions "
        f"must be of the form start + stride * index with integer strides{hint}",
        code="err_unsupported_index_expression",
        loc=user_loc(),
    )


def _desc(x: object) -> str:
    return type(x).__name__ if isinstance(x, _Traced) else repr(x)


def _as_expr(x: object) -> IndexExpr | None:
    if isinstance(x, Index):
        return x.expr
    if isinstance(x, Scalar):
        return IndexExpr(x.aff, (), ())
    if isinstance(x, bool):
        return None
    if isinstance(x, int) or (hasattr(x, "__index__") and type(x).__module__ == "numpy"):
        return IndexExpr(Affine.constant(int(x)), (), ())  # type: ignore[arg-type]
    return None


def _lin(a: IndexExpr, ca: int, b: IndexExpr, cb: int) -> IndexExpr:
    """ca * a + cb * b with broadcasting."""
    shape = broadcast_shapes(a.shape, b.shape)
    ea, eb = expand_expr(a, shape), expand_expr(b, shape)
    coeffs = tuple(ca * x + cb * y for x, y in zip(ea.coeffs, eb.coeffs))
    base = a.base.scale(ca) + b.base.scale(cb)
    return IndexExpr(base, coeffs, shape)


def _wrap(e: IndexExpr) -> Scalar | Index:
    if not e.shape:
        return Scalar(e.base)
    return Index(e)


class _Affine(_Traced):
    """Shared arithmetic of Scalar and Index."""

    __slots__ = ()

    def _expr(self) -> IndexExpr:
        raise NotImplementedError

    def _number(self, other: object, op: str) -> Any:
        """Arithmetic with a non-int: a number (float, bool) needs the scalar's value."""
        if not isinstance(other, numbers.Number):
            return NotImplemented
        _per_core(self)
        _need_value(self, f"'{op}' with a {type(other).__name__}")
        raise NKIIndexError(
            f"'{_desc(self)} {op} {other!r}': arithmetic of {self._what} with a "
            f"{type(other).__name__} is not affine; index expressions are start + stride * "
            "index with integer strides",
            code="err_unsupported_index_expression",
            loc=user_loc(),
        )

    def __add__(self, other: object):
        o = _as_expr(other)
        if o is None:
            return self._number(other, "+")
        return _wrap(_lin(self._expr(), 1, o, 1))

    __radd__ = __add__

    def __sub__(self, other: object):
        o = _as_expr(other)
        if o is None:
            return self._number(other, "-")
        return _wrap(_lin(self._expr(), 1, o, -1))

    def __rsub__(self, other: object):
        o = _as_expr(other)
        if o is None:
            return self._number(other, "-")
        return _wrap(_lin(o, 1, self._expr(), -1))

    def __neg__(self):
        e = self._expr()
        return _wrap(_lin(e, -1, IndexExpr(Affine(), (), ()), 0))

    def __mul__(self, other: object):
        o = _as_expr(other)
        if o is None:
            return self._number(other, "*")
        if not o.shape and o.base.is_const:
            return _wrap(_lin(self._expr(), o.base.const, o, 0))
        e = self._expr()
        if not e.shape and e.base.is_const:
            return _wrap(_lin(o, e.base.const, e, 0))
        raise _non_affine("*", self, other)

    __rmul__ = __mul__

    def _divmod(self, d: object) -> tuple[Scalar, Scalar] | None:
        """``(self // d, self % d)`` when affine: ``d`` divides every coefficient."""
        if not isinstance(self, Scalar) or isinstance(d, bool) or not isinstance(d, int):
            return None
        if d <= 0 or any(c % d for _, c in self.aff.terms):
            return None
        terms = tuple((s, c // d) for s, c in self.aff.terms)
        c = self.aff.const
        return Scalar(Affine(terms, c // d)), Scalar(Affine.constant(c % d))

    def __floordiv__(self, other: object):
        q = self._divmod(other)
        if q is not None:
            return q[0]
        raise _non_affine("//", self, other)

    def __rfloordiv__(self, other: object):
        raise _non_affine("//", other, self)

    def __mod__(self, other: object):
        q = self._divmod(other)
        if q is not None:
            return q[1]
        raise _non_affine("%", self, other)

    def __rmod__(self, other: object):
        raise _non_affine("%", other, self)

    def __truediv__(self, other: object):
        raise _non_affine("/", self, other)

    def __rtruediv__(self, other: object):
        raise _non_affine("/", other, self)

    def _cmp(self, other: object, op: str) -> Pred:
        o = _as_expr(other)
        if o is None:
            raise NKIError(
                f"cannot compare an index expression with {type(other).__name__}",
                code="err_unsupported_expression_in_mask",
                loc=user_loc(),
            )
        pred = Pred((Cond(_lin(self._expr(), 1, o, -1), op),))
        join = TRACE_HOOKS.get("join_and")  # the right operand of `mask=(a and b)`
        return join(pred) if join is not None else pred

    def __lt__(self, other):
        return self._cmp(other, "<")

    def __le__(self, other):
        return self._cmp(other, "<=")

    def __gt__(self, other):
        return self._cmp(other, ">")

    def __ge__(self, other):
        return self._cmp(other, ">=")

    def __eq__(self, other):  # type: ignore[override]
        return False if other is None else self._cmp(other, "==")  # (never None)

    def __ne__(self, other):  # type: ignore[override]
        return True if other is None else self._cmp(other, "!=")

    __hash__ = _Traced.__hash__


class Scalar(_Affine):
    """A symbolic integer: a program id, a loop iterator, or an affine combination of them.
    Operations needing its value (``int()``, ``float()``, ``str()``...) ask ``_need_value``."""

    __slots__ = ("aff",)
    _what = "a program id or loop iterator"

    def __init__(self, aff: Affine) -> None:
        self.aff = aff

    def _expr(self) -> IndexExpr:
        return IndexExpr(self.aff, (), ())

    def __index__(self) -> int:
        if self.aff.is_const:
            return self.aff.const
        return _Traced.__index__(self)

    __int__ = __index__

    def __bool__(self) -> bool:
        _per_core(self)
        decide = TRACE_HOOKS.get("decide_scalar")  # `if i:` of a current-API loop iterator
        value = decide(self) if decide is not None else None
        if value is not None:
            return value
        return _Traced.__bool__(self)

    def _value(self, op: str) -> Any:
        self._user_value(op)
        raise NKIControlFlowError(
            f"{op} of {self._what} needs its integer value, which exists only per iteration / "
            "instance while the body is traced once for all of them; use it in affine index "
            "expressions instead (start + stride * index)",
            code="err_dynamic_control_flow_not_supported",
            loc=user_loc(),
        )

    def __divmod__(self, other: object) -> Any:
        q = self._divmod(other)
        return q if q is not None else self._value("divmod()")

    def __hash__(self) -> int:
        if not is_internal_frame():  # a dict key / set member in the kernel: its value
            self._user_value("a dict key / set member")
        return id(self)

    def __str__(self) -> str:
        if not is_internal_frame():  # print(i), f"{i}" in the kernel: its value
            self._user_value("str() / formatting")
        return repr(self)

    def __format__(self, spec: str) -> str:
        if not is_internal_frame():
            self._user_value("str() / formatting")
        return format(repr(self), spec)

    def _user_value(self, what: str) -> None:
        _per_core(self)
        _need_value(self, what)

    def __repr__(self) -> str:
        return f"<traced scalar {self.aff}>"


# Python operations on a Scalar that need its integer value (see Scalar._value)
_NEEDS_VALUE = {
    "__float__": "float()", "__complex__": "complex()", "__abs__": "abs()",
    "__pos__": "unary '+'", "__invert__": "'~'", "__round__": "round()",
    "__trunc__": "math.trunc()", "__floor__": "math.floor()", "__ceil__": "math.ceil()",
    "__pow__": "'**'", "__rpow__": "'**'", "__rdivmod__": "divmod()",
    "__and__": "'&'", "__rand__": "'&'", "__or__": "'|'", "__ror__": "'|'",
    "__xor__": "'^'", "__rxor__": "'^'", "__lshift__": "'<<'", "__rlshift__": "'<<'",
    "__rshift__": "'>>'", "__rrshift__": "'>>'",
}  # fmt: skip
for _name, _op in _NEEDS_VALUE.items():
    setattr(Scalar, _name, lambda self, *_a, _op=_op: self._value(_op))


class Index(_Affine):
    """An affine index array (from ``nl.arange`` / ``nl.mgrid``) over tile axes."""

    __slots__ = ("expr",)
    _what = "an nl.arange / nl.mgrid index"

    def __init__(self, expr: IndexExpr) -> None:
        self.expr = expr

    def _expr(self) -> IndexExpr:
        return self.expr

    @property
    def shape(self) -> tuple[int, ...]:
        return self.expr.shape

    @property
    def ndim(self) -> int:
        return len(self.expr.shape)

    def __bool__(self) -> bool:
        raise NKIControlFlowError(
            "Python control flow cannot depend on an nl.arange / nl.mgrid index "
            "(its value differs per element); use mask= instead",
            code="err_control_flow_condition_depending_on_arange",
            loc=user_loc(),
        )

    def __getitem__(self, key: object) -> Index:
        """Reshape with ``None`` / ``:`` (``nl.arange(128)[:, None]``); an int picks that
        position of an axis and drops it, as NumPy does (``i_p[:, :, 0]``)."""
        key = key if isinstance(key, tuple) else (key,)
        axes, base, dims = iter(range(self.ndim)), self.expr.base, []  # (coefficient, extent)
        for k in key:
            if k is None:
                dims.append((0, 1))
                continue
            whole, pick = isinstance(k, slice) and k == slice(None), type(k) is int
            if not (whole or pick):
                raise NKIIndexError(
                    "an nl.arange index can only be reshaped with ':' and None, or an axis "
                    f"picked with an int (e.g. nl.arange(128)[:, None]), got {k!r}",
                    code="err_unsupported_index_expression",
                    loc=user_loc(),
                )
            d = next(axes, None)
            c, n = (0, 0) if d is None else (self.expr.coeffs[d], self.expr.shape[d])
            if d is None or (pick and not -n <= k < n):
                raise NKIIndexError(
                    f"index {k!r} for an index of shape {self.shape}", loc=user_loc()
                )
            if pick:
                base = base + c * (k % n)
            else:
                dims.append((c, n))
        dims += [(self.expr.coeffs[d], self.expr.shape[d]) for d in axes]
        return Index(IndexExpr(base, tuple(c for c, _ in dims), tuple(n for _, n in dims)))

    def __setitem__(self, key: object, value: object) -> None:
        raise NKIError(
            "cannot assign to an index expression (nl.arange / nl.mgrid results are not "
            "tensors); materialise it with nisa.iota first",
            code="err_cannot_assign_to_index",
            loc=user_loc(),
        )

    def __repr__(self) -> str:
        return f"<index {self.expr} shape={self.shape}>"


class Pred(_Traced):
    """A mask: a conjunction of affine comparisons, combined with ``&``."""

    __slots__ = ("conds",)
    _what = "a mask predicate"

    def __init__(self, conds: tuple[Cond, ...]) -> None:
        self.conds = conds

    def __and__(self, other: object) -> Pred:
        if isinstance(other, Pred):
            return Pred(self.conds + other.conds)
        if other is True:
            return self
        if getattr(other, "is_disjunction", False):  # a mask built with `or` (nki/tracer)
            return NotImplemented
        raise _bad_mask("&", other)

    __rand__ = __and__

    def __or__(self, other: object) -> Pred:
        raise _bad_mask("|", other)

    __ror__ = __or__

    def __bool__(self) -> bool:
        # classic kernels write ``if i * 128 >= j * 512:`` on loop iterators (nki.classic)
        return TRACE_HOOKS["decide_condition"](self)

    def __invert__(self) -> Any:  # a Pred, or a disjunction for ~(a & b)
        flip = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
        if len(self.conds) != 1:
            negate = TRACE_HOOKS.get("negate_mask")  # ~(a & b): a disjunction (nki/tracer)
            if negate is None:
                raise _bad_mask("~", self)
            return negate(self)
        c = self.conds[0]
        return Pred((Cond(c.expr, flip[c.op]),))

    @property
    def shape(self) -> tuple[int, ...]:
        shape: tuple[int, ...] = ()
        for c in self.conds:
            shape = broadcast_shapes(shape, c.expr.shape)
        return shape

    def __repr__(self) -> str:
        return "<mask " + " & ".join(str(c) for c in self.conds) + ">"


def _bad_mask(op: str, other: object) -> NKIError:
    return NKIError(
        f"unsupported expression in mask: masks are affine comparisons combined with '&' "
        f"(operator {op!r} with {_desc(other)} is not supported)",
        code="err_unsupported_expression_in_mask",
        loc=user_loc(),
    )


# --------------------------------------------------------------------------------------------
# Constructors used by nki.language
# --------------------------------------------------------------------------------------------


def _static_int(x: object, what: str) -> int:
    if isinstance(x, _Traced):
        _per_core(x)
        _need_value(x, what)
        loop = isinstance(x, Scalar) and any(isinstance(s, LoopSym) for s in x.aff.symbols())
        hint = "; for a loop iterator, loop with nl.static_range (or NKI_CLASSIC=1)" if loop else ""
        msg = f"{what} must be a compile-time integer, got a traced value{hint}"
        raise NKIError(msg, code="err_unsupported_index_expression", loc=user_loc())
    try:
        return int(x.__index__())  # type: ignore[union-attr]
    except (AttributeError, TypeError):
        raise NKIError(
            f"{what} must be an integer, got {x!r}", code="err_invalid_argument", loc=user_loc()
        ) from None


def arange(start: int, stop: int | None = None, step: int = 1) -> Index:
    if stop is None:
        start, stop = 0, start
    start = _static_int(start, "nl.arange start")
    stop = _static_int(stop, "nl.arange stop")
    step = _static_int(step, "nl.arange step")
    if step == 0:
        raise NKIError("nl.arange step must not be 0", code="err_invalid_argument", loc=user_loc())
    n = len(range(start, stop, step))
    if n <= 0:
        raise NKIError(
            f"nl.arange({start}, {stop}, {step}) is empty", code="err_invalid_shape", loc=user_loc()
        )
    return Index(IndexExpr(Affine.constant(start), (step,), (n,)))


class MGrid:
    """The result of ``nl.mgrid[...]``: unpack it, or use ``.p`` / ``.x`` / ``.y`` / ``.z``."""

    def __init__(self, components: tuple[Index, ...]) -> None:
        self._c = components

    def __iter__(self) -> Iterator[Index]:
        return iter(self._c)

    def __len__(self) -> int:
        return len(self._c)

    def __getitem__(self, i: int) -> Index:
        return self._c[i]

    def _axis(self, i: int) -> Index:
        if i >= len(self._c):
            raise NKIError(
                f"this mgrid has only {len(self._c)} axes",
                code="err_too_many_indices",
                loc=user_loc(),
            )
        return self._c[i]

    @property
    def p(self) -> Index:
        return self._axis(0)

    @property
    def x(self) -> Index:
        return self._axis(1)

    @property
    def y(self) -> Index:
        return self._axis(2)

    @property
    def z(self) -> Index:
        return self._axis(3)


class _MGridMaker:
    def __getitem__(self, key: object) -> MGrid | Index:
        keys = key if isinstance(key, tuple) else (key,)
        ranges = []
        for k in keys:
            if not isinstance(k, slice):
                raise NKIError(
                    "nl.mgrid takes slices, e.g. nl.mgrid[0:128, 0:512]",
                    code="err_unsupported_index_expression",
                    loc=user_loc(),
                )
            start = _static_int(0 if k.start is None else k.start, "nl.mgrid start")
            stop = _static_int(k.stop, "nl.mgrid stop")
            step = _static_int(1 if k.step is None else k.step, "nl.mgrid step")
            ranges.append((start, step, len(range(start, stop, step))))
        shape = tuple(n for _, _, n in ranges)
        comps = []
        for d, (start, step, _n) in enumerate(ranges):
            coeffs = tuple(step if j == d and shape[j] > 1 else 0 for j in range(len(shape)))
            comps.append(Index(IndexExpr(Affine.constant(start), coeffs, shape)))
        if len(comps) == 1:
            return comps[0]
        return MGrid(tuple(comps))


mgrid = _MGridMaker()


class DynSlice:
    """``nl.ds(start, size)``: the slice ``start:start+size`` with a possibly symbolic start."""

    __slots__ = ("start", "size", "step")

    def __init__(self, start: object, size: object, step: int = 1) -> None:
        self.start = start
        self.size = _static_int(size, "nl.ds size")
        self.step = _static_int(step, "nl.ds step")

    def __repr__(self) -> str:
        return f"nl.ds({self.start!r}, {self.size})"
