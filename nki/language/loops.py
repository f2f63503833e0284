"""Runtime loops of the current NKI API: ``nl.fori_loop``, ``nl.while_loop`` and
``nl.dynamic_range``, and the model of the virtual registers they count with.

A virtual register is modelled as a one-element ``int32`` SBUF tile, so it can be used wherever
a dynamic offset is accepted (``t.ap(..., scalar_offset=reg)``, ``t.select(dim, reg)``); the
register instructions themselves (``nisa.register_alloc`` / ``register_move`` /
``register_load`` / ``register_store``) are in ``nki/isa/registers.py``. A ``fori_loop`` with
integer bounds is a sequential loop of the trace whose iteration value is
written into a fresh register each iteration; with a register bound, and for ``while_loop``,
the trace records a ``RuntimeLoop`` whose trip count the interpreter reads from the register
when the loop starts (``fori_loop``) or before every iteration (``while_loop``)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .. import isa_spec
from ..errors import NKIError, NKITypeError, RemovedFormWarning, SrcLoc, user_loc, warn_at
from ..ir import Affine, IndexExpr, LoopSym, RuntimeLoop
from ..symbolic import Scalar
from ..tracer import (
    TILE_OPERATORS,
    NkiTensor,
    TileOps,
    assign,
    emit,
    is_register,
    new_tensor,
    state,
    symbolic_loop,
)
from ..tracer.loop_exits import while_exit, while_statement

__all__ = ["dynamic_range", "fori_loop", "no_reorder", "while_loop", "while_register"]

MAX_WHILE_ITERATIONS = 1 << 20  # a while_loop running longer is reported (likely never ends)


def new_register(api: str) -> NkiTensor:
    """A fresh virtual register (a 32-bit integer)."""
    return new_tensor((1, 1), "int32", "sbuf", api=api)


def set_register(reg: TileOps, value: Affine, api: str) -> None:
    """Write an integer / loop value into a register: an iota of one element."""
    engine = isa_spec.get("iota").default_engine
    emit("isa", "iota", reg.access_(), (IndexExpr(value, (0, 0), (1, 1)),),
         attrs=(("engine", engine),), api=api)  # fmt: skip


def int_register(value: int) -> NkiTensor:
    """A register holding ``value``: what ``nisa.register_alloc(value)`` records."""
    reg = new_register(isa_spec.get("register_alloc").api)
    set_register(reg, Affine.constant(value), isa_spec.get("register_move").api)
    return reg


def require_register(x: Any, api: str, role: str, written: bool = False) -> None:
    """``x`` is a register (and, ``written``, not a device loop's read-only iterator)."""
    if not is_register(x):
        raise NKITypeError(
            f"{api}: '{role}' must be a register (nisa.register_alloc()), got {x!r}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    ref = _READ_ONLY.get(id(x))
    if written and ref is not None and ref() is x:
        raise NKITypeError(
            f"{api}: '{role}' is the induction variable of a device loop (nl.dynamic_range / "
            "nl.fori_loop), which is read-only; copy it into a register of your own first",
            code="err_invalid_argument",
            loc=user_loc(),
        )


# the device loops' induction registers (read-only), by id, each with a weak reference to it
_READ_ONLY: dict[int, weakref.ref] = {}


def _bound(x: Any, api: str, what: str) -> int | TileOps:
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    if is_register(x) and x.tensor_().decl.dtype != "int64":  # an int64 NkiScalar cannot
        return x
    raise NKITypeError(
        f"{api}: {what} must be an int, a register or an int32 NkiScalar, got {x!r}",
        code="err_unsupported_operand",
        loc=user_loc(),
    )


@contextmanager
def no_reorder() -> Iterator[None]:
    """``with nl.no_reorder():``: the instructions of the block run in program order (the
    simulator runs every kernel in program order, so the block changes no result). Device
    loops bounded by registers (``nl.fori_loop``, ``nl.while_loop``, ``nl.dynamic_range``) are
    not allowed inside it (``err_device_loop_in_no_reorder``); static loops are."""
    st = state("nl.no_reorder")
    st.no_reorder_depth += 1
    try:
        yield
    finally:
        st.no_reorder_depth -= 1


@contextmanager
def _device_loop(
    kind: str, lower: Any, upper: Any, step: int, cond: Any, loc: SrcLoc
) -> Iterator[LoopSym]:
    """The body traced inside this context becomes one RuntimeLoop node."""
    shown = "'while reg:'" if kind == "while_register" else f"nl.{kind}"
    st = state(shown)
    if st.no_reorder_depth:
        raise NKIError(
            f"{shown} with register bounds inside a 'with nl.no_reorder():' block: device "
            "loops cannot be kept in program order (static loops can)",
            code="err_device_loop_in_no_reorder",
            loc=loc,
        )
    sym = LoopSym(st._next_id, "sequential")
    st._next_id += 1
    st.loop_ranges[sym] = (0, 0)
    st.device_loops.add(sym)
    st.loop_sites[sym] = (loc.file, loc.line, loc.col)
    st.bodies.append([])
    st.loops.append(sym)
    st.loop_kinds.append("sequential")
    try:
        yield sym
    finally:
        nodes = st.bodies.pop()
        st.loops.pop()
        st.loop_kinds.pop()
    node = RuntimeLoop(
        sym, 0, 1, step, "sequential", tuple(nodes), loc,
        lower=None if isinstance(lower, int) else lower.access_(),
        upper=None if isinstance(upper, int) else upper.access_(),
        lower_const=lower if isinstance(lower, int) else 0,
        upper_const=upper if isinstance(upper, int) else 0,
        cond=None if cond is None else cond.access_(),
        max_iterations=MAX_WHILE_ITERATIONS,
    )  # fmt: skip
    st.append(node)


def _runtime_loop(kind: str, lower: Any, upper: Any, step: int, cond: Any, body: Callable) -> Any:
    """Trace ``body`` once inside a RuntimeLoop node; returns what ``body`` returned."""
    with _device_loop(kind, lower, upper, step, cond, user_loc()) as sym:
        return body(sym)


def dynamic_range(start: Any, stop: Any = None, step: int = 1) -> Iterator[NkiTensor]:
    """``for i in nl.dynamic_range(start, stop, step)`` (NKI 0.4-0.6; removed in 0.7, where
    ``nl.fori_loop`` replaces it): a loop run on the device, its body traced once. Bounds are
    ints or registers; ``step`` a compile-time positive int; ``i`` a read-only register
    usable as ``scalar_offset``."""
    api = "nl.dynamic_range"
    if stop is None:
        start, stop = 0, start
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        raise NKIError(f"{api}: step must be a compile-time positive int, got {step!r}",
                       code="err_unsupported_operand", loc=user_loc())  # fmt: skip
    lo, hi = _bound(start, api, "start"), _bound(stop, api, "stop")
    warn_at(f"{api} is an NKI 0.4-0.6 device loop; NKI 0.7 removed it: use nl.fori_loop",
            RemovedFormWarning, user_loc())  # fmt: skip
    if isinstance(lo, int) and isinstance(hi, int):
        for it in symbolic_loop("sequential", lo, hi, step, device=True):
            yield _induction(it.aff if isinstance(it, Scalar) else Affine.constant(it), api)
        return
    with _device_loop("dynamic_range", lo, hi, step, None, user_loc()) as sym:
        yield _induction(Affine.of(sym), api)


def fori_loop(lower: Any, upper: Any, body_fun: Callable[[Any], Any], step: int = 1) -> None:
    """``body_fun(i)`` for ``i`` in ``range(lower, upper, step)``, run on the device: the body is
    traced once and executed per iteration. ``lower`` / ``upper`` are ints or registers (read
    when the loop starts); ``step`` a compile-time positive int; ``i`` a read-only register
    (usable as ``scalar_offset``); the body returns None and carries state through SBUF/HBM."""
    api = "nl.fori_loop"
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        raise NKIError(f"{api}: step must be a compile-time positive int, got {step!r}",
                       code="err_unsupported_operand", loc=user_loc())  # fmt: skip
    lo, hi = _bound(lower, api, "lower"), _bound(upper, api, "upper")
    if not callable(body_fun):
        raise NKITypeError(
            f"{api}: body_fun must be callable", code="err_invalid_argument", loc=user_loc()
        )
    if isinstance(lo, int) and isinstance(hi, int):
        for it in symbolic_loop("sequential", lo, hi, step, device=True):
            aff = it.aff if isinstance(it, Scalar) else Affine.constant(it)  # unrolled (classic)
            _call_body(api, body_fun, _induction(aff, api))
        return None

    def body(sym: LoopSym) -> None:
        _call_body(api, body_fun, _induction(Affine.of(sym), api))

    _runtime_loop("fori_loop", lo, hi, step, None, body)
    return None


def _induction(value: Affine, api: str) -> NkiTensor:
    reg = new_register(api)
    set_register(reg, value, api)
    key = id(reg)
    _READ_ONLY[key] = weakref.ref(reg, lambda _r: _READ_ONLY.pop(key, None))
    return reg


def _call_body(api: str, fn: Callable, arg: Any) -> None:
    got = _call_user(api, fn, arg)
    if got is not None:
        raise NKITypeError(
            f"{api}: body_fun must return None, got {got!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )


def _call_user(api: str, fn: Callable, arg: Any) -> Any:
    """``fn(arg)``; a body that cannot take the one argument is a located error."""
    try:
        return fn(arg)
    except TypeError as e:
        if e.__traceback__ is None or e.__traceback__.tb_next is not None:
            raise  # raised inside the body
        raise NKITypeError(
            f"{api}: body_fun must take one argument (the iterator register): {e}",
            code="err_invalid_argument",
            loc=user_loc(),
        ) from None


def while_loop(init: Any, body_fun: Callable[[Any], Any]) -> None:
    """``r = init; while r != 0: r = body_fun(r)`` on the device: ``init`` is a register, the body
    (traced once) returns the register holding the next condition. Loops running more than
    ``MAX_WHILE_ITERATIONS`` times are reported as not terminating."""
    api = "nl.while_loop"
    require_register(init, api, "init")
    # the register instructions the loop is made of: a condition register, moves by value
    alloc, move = (isa_spec.get(n).api for n in ("register_alloc", "register_move"))
    cond = new_register(alloc)
    assign(cond.access_(), init, api=move)

    def body(sym: LoopSym) -> None:
        arg = new_register(alloc)
        assign(arg.access_(), cond, api=move)  # passed by value
        nxt = _call_user(api, body_fun, arg)
        if not is_register(nxt):
            raise NKITypeError(
                f"{api}: body_fun must return the next condition register, got {nxt!r}",
                code="err_unsupported_operand",
                loc=user_loc(),
            )
        assign(cond.access_(), nxt, api=move)

    _runtime_loop("while_loop", 0, 0, 1, cond, body)
    return None


def while_register(reg: TileOps) -> bool | None:
    """``while reg:`` (NKI 0.4-0.6, removed in 0.7, where ``nl.while_loop`` replaces it): a loop
    run on the device while the register is not 0, read before every trip (as ``while_loop``);
    the body is traced once, between the test that opens the loop (True) and the one after the
    body, which closes it (False). None: ``reg`` is not the test of a ``while`` statement."""
    loc = user_loc()
    node = while_statement(loc)
    if node is None:
        return None
    st = state("while")
    if st.open_whiles and st.open_whiles[-1][0] is node:
        st.open_whiles.pop()[1].__exit__(None, None, None)
        return False
    if (err := while_exit(node, loc)) is not None:
        raise err
    warn_at(
        "'while reg:' on a register is the NKI 0.4-0.6 device loop; NKI 0.7 removed it (a "
        "register in 'while' is a TypeError there): use nl.while_loop",
        RemovedFormWarning,
        loc,
    )
    loop = _device_loop("while_register", 0, 0, 1, reg, loc)
    loop.__enter__()
    st.open_whiles.append((node, loop))
    return True


TILE_OPERATORS["while_register"] = while_register
