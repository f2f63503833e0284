"""Runtime loops and registers of the current NKI API: ``nl.fori_loop``, ``nl.while_loop`` and
the virtual registers (``register_alloc / register_move / register_load / register_store``).

A virtual register is modelled as a one-element ``int32`` SBUF tile, so it can be used wherever
a dynamic offset is accepted (``t.ap(..., scalar_offset=reg)``, ``t.select(dim, reg)``). A
``fori_loop`` with integer bounds is a sequential loop of the trace whose iteration value is
written into a fresh register each iteration; with a register bound, and for ``while_loop``,
the trace records a ``RuntimeLoop`` whose trip count the interpreter reads from the register
when the loop starts (``fori_loop``) or before every iteration (``while_loop``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import NKIError, NKITypeError, SrcLoc, arguments_checked, user_loc
from ..ir import HBM_BUFFERS, Affine, IndexExpr, LoopSym, RuntimeLoop
from ..symbolic import Scalar
from ..tracer import NkiTensor, TileOps, assign, emit, new_tensor, state, symbolic_loop

__all__ = [
    "fori_loop",
    "register_alloc",
    "register_load",
    "register_move",
    "register_store",
    "while_loop",
]

MAX_WHILE_ITERATIONS = 1 << 20  # a while_loop running longer is reported (likely never ends)


def _is_register(x: Any) -> bool:
    return isinstance(x, TileOps) and x.tensor_().buffer == "sbuf" and x.size == 1


def _set_const(reg: TileOps, value: Affine, api: str) -> None:
    # a register write of an integer / loop value: an iota of one element
    emit("isa", "iota", reg.access_(), (IndexExpr(value, (0, 0), (1, 1)),),
         attrs=(("engine", "gpsimd"),), api=api)  # fmt: skip


@arguments_checked("nisa.register_alloc")
def register_alloc(x: Any = None) -> NkiTensor:
    """A virtual register (a 32-bit integer), optionally set to the int ``x``."""
    api = "nisa.register_alloc"
    reg = new_tensor((1, 1), "int32", "sbuf", api=api)
    if x is not None:
        register_move(reg, x)
    return reg


@arguments_checked("nisa.register_move")
def register_move(dst: Any, src: Any) -> None:
    """``dst = src``: ``src`` an int or another register."""
    api = "nisa.register_move"
    _require_register(dst, api, "dst")
    if isinstance(src, int) and not isinstance(src, bool):
        _set_const(dst, Affine.constant(src), api)
    elif _is_register(src):
        assign(dst.access_(), src, api=api)
    else:
        raise NKITypeError(
            f"{api}: src must be an int or a register, got {src!r}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )


@arguments_checked("nisa.register_load")
def register_load(dst: Any, src: Any) -> None:
    """``dst = src[0]``: read a one-element SBUF or HBM tensor into a register."""
    api = "nisa.register_load"
    _require_register(dst, api, "dst")
    _require_one_element(src, api, "src")
    if src.tensor_().buffer in HBM_BUFFERS:
        emit("dma", "copy", dst.access_(), (_like(src, dst).access_(),), api=api)
    else:
        assign(dst.access_(), src, api=api)


@arguments_checked("nisa.register_store")
def register_store(dst: Any, src: Any) -> None:
    """``dst[0] = src``: write a register into a one-element SBUF or HBM tensor."""
    api = "nisa.register_store"
    _require_register(src, api, "src")
    _require_one_element(dst, api, "dst")
    if dst.tensor_().buffer in HBM_BUFFERS:
        emit("dma", "copy", _like(dst, src).access_(), (src.access_(),), api=api)
    else:
        assign(dst.access_(), src, api=api)


def _like(one: Any, reg: Any) -> Any:
    """The one-element HBM tensor ``one`` in the register's shape (a DMA copies equal shapes;
    ``[1]``, ``[1, 1]`` and ``[1, 1, 1]`` hold the same element)."""
    return one if tuple(one.shape) == tuple(reg.shape) else one.reshape(tuple(reg.shape))


def _require_register(x: Any, api: str, role: str) -> None:
    if not _is_register(x):
        raise NKITypeError(
            f"{api}: '{role}' must be a register (nisa.register_alloc()), got {x!r}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )


def _require_one_element(x: Any, api: str, role: str) -> None:
    if not isinstance(x, TileOps) or x.size != 1:
        raise NKITypeError(
            f"{api}: '{role}' must be a one-element SBUF or HBM tensor, got {x!r}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )


def _bound(x: Any, api: str, what: str) -> int | TileOps:
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    if _is_register(x) and x.tensor_().decl.dtype != "int64":  # an int64 NkiScalar cannot
        return x
    raise NKITypeError(
        f"{api}: {what} must be an int, a register or an int32 NkiScalar, got {x!r}",
        code="err_unsupported_operand",
        loc=user_loc(),
    )


@contextmanager
def _device_loop(
    kind: str, lower: Any, upper: Any, step: int, cond: Any, loc: SrcLoc
) -> Iterator[LoopSym]:
    """The body traced inside this context becomes one RuntimeLoop node."""
    st = state(f"nl.{kind}")
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
    reg = new_tensor((1, 1), "int32", "sbuf", api=api)
    _set_const(reg, value, api)
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
    _require_register(init, api, "init")
    cond = register_alloc()
    register_move(cond, init)

    def body(sym: LoopSym) -> None:
        arg = register_alloc()
        register_move(arg, cond)  # passed by value
        nxt = _call_user(api, body_fun, arg)
        if not _is_register(nxt):
            raise NKITypeError(
                f"{api}: body_fun must return the next condition register, got {nxt!r}",
                code="err_unsupported_operand",
                loc=user_loc(),
            )
        register_move(cond, nxt)

    _runtime_loop("while_loop", 0, 0, 1, cond, body)
    return None
