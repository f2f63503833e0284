"""The two calling forms of ``nki.isa`` and how a destination-first call is carried out.

Every ``nisa`` function is defined once, in its family's module (``nki/isa/<family>.py``, the
spec row's ``family``), and decorated with :func:`instruction`, which reads its spec row
(``nki/isa_spec.py``): a classic-only instruction gets the classic form's keyword checks, a
current-only one the destination-first signature's, and one with both forms is wrapped by
:func:`both_forms`.

The destination-first form (the current API, nki 0.3-0.7): ``nisa.op(dst, ...)`` writes its
result into ``dst`` in place (result dtype = ``dst.dtype``) and returns an :class:`Instruction`
handle. It is carried out by the classic function (same checks, same IR instruction) whose result
is then written into ``dst``: the recorded instruction's destination becomes ``dst``'s access, so
no temporary tile or copy is left in the IR. Parameters named alike in both forms pass through;
an instruction whose current form differs more (``iota``'s pattern, ``nc_matmul``'s
``accumulate``) gives :func:`instruction` an adapter, defined beside it in its family module.

Which form a call is: the one its arguments fit (a tile never fills an attribute, an op or an
engine; a scalar never fills a tile operand); when both fit, the kernel's generation decides
(until decided, its default: current, classic in classic mode). A call that fits one form
only decides the kernel's generation; see ``nki.tracer.note_generation``."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from enum import Enum
from typing import Any

from .. import isa_spec as spec
from ..errors import (
    NKIError,
    NKIShapeError,
    NKITypeError,
    NKIUnsupportedError,
    arguments_checked,
    user_loc,
)
from ..ir import Alloc, Instr, tensor_label
from ..isa_spec import CLASSIC, CURRENT
from ..tracer import (
    NkiTensor,
    TileOps,
    _Assigned,
    assign,
    check_broadcast_into,
    current,
    generation,
    note_generation,
    operand,
)
from ..tracer.api_checks import broken
from ..tracer.state import effective_generation
from .common import Instruction
from .enums import engine as _engine
from .rules import rules, target

_TILE_ROLES = ("dst", "in", "out")
_STATIC_ROLES = ("attr", "op", "engine", "dtype", "mask", "name")
EXTRA_SRC = "+src"  # an adapter's extra: one more source of the instruction
# An adapter turns the bound arguments ``a`` of a destination-first call into the classic
# function's (in place) and returns the destination to write, the accumulation ("add" or None)
# and extra attributes for the recorded instruction (``EXTRA_SRC``: one more source).
Adapter = Callable[[str, Any, dict[str, Any]], tuple[Any, "str | None", dict[str, Any]]]


def instruction(fn: Callable[..., Any] | None = None, *, current: Adapter | None = None) -> Any:
    """Decorator of every ``nisa`` function, driven by its spec row: both forms
    (:func:`both_forms`, ``current`` adapting the destination-first call), the classic form
    only (``isa_spec.checked``) or the current form only (:func:`current_only`)."""

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        row = spec.get(f.__name__)
        if row.classic is None and not row.ir_op:
            # registers and core synchronisation record no isa instruction: a call that does
            # not bind is the plain located binding error
            return handled(arguments_checked(row.api)(f))
        if row.classic is None:
            return handled(current_only(f))
        checked = spec.checked(f)
        return checked if row.current is None else both_forms(handled(checked), current)

    return deco(fn) if fn is not None else deco


def handled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, returning the handle of the instruction it recorded (``NkiInstruction``, for
    ``depends_on``) where it returned nothing in a kernel of the current API: there an in-place
    call (also one of both APIs' form: ``dma_copy``) returns a handle; the classic API's
    returns None."""
    name = fn.__name__

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        st = current()
        before = len(st.bodies[-1]) if st is not None else 0
        out = fn(*args, **kwargs)
        if out is not None or st is None or effective_generation(st) == CLASSIC:
            return _named(out, kwargs.get("name")) if isinstance(out, Instruction) else out
        handle = Instruction(name, _last_instr() if len(st.bodies[-1]) > before else None)
        return _named(handle, kwargs.get("name"))

    return call


def current_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """An instruction of the current API only: the call must fit the spec row's
    destination-first signature; an unknown keyword (named with the closest valid one) or a
    wrong argument count is a located error instead of a Python TypeError."""
    name = fn.__name__

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        spec.bind(name, args, kwargs, CURRENT)
        return fn(*args, **kwargs)

    return call


def _is_tile(v: object) -> bool:
    return isinstance(v, (TileOps, _Assigned))


def _fits(name: str, form: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the call binds to ``form`` with plausible values in every parameter."""
    info = spec.get(name)
    if info.form(form) is None:
        return False
    if form == CLASSIC and isinstance(kwargs.get("name"), str):
        # (a label: the classic form took it through **kwargs, so it never decides the form)
        kwargs = {k: v for k, v in kwargs.items() if k != "name"}
    arguments = spec.plain_bind(name, form, args, kwargs, defaults=False)
    if arguments is None:  # (the signature's own bind would raise a TypeError)
        return False
    roles = spec.by_name(name, form)
    for k, v in arguments.items():
        p = roles[k]
        if p.role in _STATIC_ROLES and _is_tile(v):
            return False
        if p.role in _TILE_ROLES and "list" not in p.type and v is not None and not _is_tile(v):
            return False
    return True


def choose_form(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The calling form of one ``nisa.<name>`` call (see the module docstring)."""
    info = spec.get(name)
    classic = _fits(name, CLASSIC, args, kwargs)
    cur = _fits(name, CURRENT, args, kwargs)
    gen = generation()
    if classic and cur:  # (an undecided kernel takes its default when the forms differ)
        return generation(sensitive=True) if _distinct(info) else gen or CLASSIC  # type: ignore
    if classic or cur:
        form = CLASSIC if classic else CURRENT
        if form == CURRENT:
            what = f"the destination-first call nisa.{name}(dst, ...)"
        elif _distinct(info):
            what = f"the classic call nisa.{name}(...) returning a tile"
        else:
            what = f"the classic call nisa.{name}(...)"
        note_generation(form, what)
        return form
    # neither fits: report against the kernel's generation (or the form the keywords name)
    if info.current is None:
        return CLASSIC
    if info.classic is None or gen == CURRENT:
        return CURRENT
    if gen is None and "dst" in kwargs and not info.takes_dst(CLASSIC):
        return CURRENT
    return CLASSIC


def _distinct(info: spec.Instruction) -> bool:
    """The two forms mean different things (classic returns a tile, current writes dst)."""
    return info.classic is not None and info.current is not None and not info.takes_dst(CLASSIC)


def both_forms(fn: Callable[..., Any], adapter: Adapter | None = None) -> Callable[..., Any]:
    """Wrap a classic ``nisa`` function so that it also takes the destination-first form."""
    name = fn.__name__

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if choose_form(name, args, kwargs) == CLASSIC:
            return fn(*args, **kwargs)
        return call_current(name, fn, adapter or generic_current, args, kwargs)

    call.__doc__ = (fn.__doc__ or "") + (
        f"\n\nCurrent API (destination first): ``nisa.{name}{spec.signature(name, CURRENT)}`` "
        "writes ``dst`` in place (dtype ``dst.dtype``) and returns an instruction handle."
    )
    return call


# ---- carrying out the current form ------------------------------------------------------------
def dst_view(dst: Any) -> Any:
    """The tile (or view) a destination argument names."""
    return dst.view if isinstance(dst, _Assigned) else dst


def dst_dtype(dst: Any) -> str:
    return str(dst_view(dst).dtype)


def require_dst_dtype(name: str, dst: Any, src: Any, role: str) -> None:
    """The destination-first ``nisa.<name>`` copies ``src`` (its ``role``) without conversion:
    ``dst`` must have its dtype."""
    if src is not None and str(getattr(src, "dtype", "")) != dst_dtype(dst):
        raise NKITypeError(
            f"'nisa.{name}' copies without conversion: {role} is {src.dtype}, dst "
            f"{dst_dtype(dst)} ({role}.dtype == dst.dtype)",
            code="err_unsupported_dtype",
            loc=user_loc(),
        )


def call_current(
    name: str,
    fn: Callable[..., Any],
    adapter: Adapter,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Instruction:
    """Carry out a destination-first call of ``nisa.<name>`` with its classic function."""
    bound = spec.bind(name, args, kwargs, CURRENT)
    spec.check_kinds(name, CURRENT, bound.arguments)
    a = dict(bound.arguments)
    prio = a.get("priority")
    if prio is not None and (  # (an enum member is not a priority: oob_mode passed third)
        not isinstance(prio, int) or isinstance(prio, (bool, Enum)) or not 0 <= prio <= 3
    ):
        raise NKITypeError(
            f"priority= of nisa.{name} must be None or an int from 0 to 3, got {prio!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    eng = a.get("engine")
    if eng is not None and not isinstance(eng, _engine) and not isinstance(eng, spec.Ref):
        raise NKITypeError(
            f"engine= of nisa.{name} must be a nisa.engine value, got {eng!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    if prio is not None and not rules().dma_priority:
        t = target()
        broken("dma_copy.priority", f"nisa.{name} got priority={prio} on {t.name} "
               f"(NeuronCore-v{t.gen})")  # fmt: skip
    label = a.pop("name", None)
    a.pop("priority", None)
    info = spec.get(name)
    if info.takes_dst(CLASSIC):  # dma_copy, nc_stream_shuffle, ...: the same call, by keyword
        if adapter is not None:  # checks of the current form's own parameters
            adapter(name, a.get("dst"), a)
        classic = {p.name for p in info.params(CLASSIC)}
        out = fn(**{k: v for k, v in a.items() if k in classic})
        # (``fn`` is ``handled``: its handle, made where the trace is not classic)
        return _named(
            out if isinstance(out, Instruction) else Instruction(name, _last_instr()), label
        )
    dst = a.pop("dst")
    if not _is_tile(dst):
        raise NKITypeError(
            f"dst of nisa.{name} must be a tile (an nl.ndarray or a view of one); got {dst!r}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    dst, accumulate, extra = adapter(name, dst, a)
    result = fn(**a)
    return _named(Instruction(name, _into(name, dst, result, accumulate, extra)), label)


def _named(handle: Instruction, label: Any) -> Instruction:
    """``handle``, its instruction's ``name=`` kept in the trace (``Kernel.with_schedule``'s
    edges name instructions by it)."""
    if isinstance(label, str) and handle.instr is not None:  # (most calls name nothing)
        st = current()
        if st is not None:
            st.instr_names[id(handle.instr)] = (handle.instr, label)
    return handle


def generic_current(
    name: str, dst: Any, a: dict[str, Any]
) -> tuple[Any, str | None, dict[str, Any]]:
    """Parameters named alike in both forms pass through; the result dtype is dst's."""
    classic = {p.name for p in spec.get(name).params(CLASSIC)}
    defaults = signature_of(name).parameters
    for k in list(a):
        if k not in classic and _same(a[k], defaults[k].default):
            del a[k]  # a current-only parameter left at its default: the classic behaviour
        elif k not in classic:
            raise NKIUnsupportedError(
                f"parameter '{k}' of the destination-first nisa.{name} is not simulated yet",
                code="err_unsupported_attribute",
                loc=user_loc(),
            )
    if "dtype" in classic:
        a["dtype"] = dst_dtype(dst)
    return dst, None, {}


def _same(v: Any, default: Any) -> bool:
    try:
        return bool(v is default or v == default)
    except Exception:  # e.g. a tile compared with a default
        return False


def _last_instr() -> Instr | None:
    st = current()
    body = st.bodies[-1] if st is not None else []
    return body[-1] if body and isinstance(body[-1], Instr) else None


def _into(
    name: str, dst: Any, result: Any, accumulate: str | None, extra: dict[str, Any]
) -> Instr | None:
    """Make the instruction that produced ``result`` write ``dst`` instead (same shape and
    dtype), or copy ``result`` into ``dst`` (the copy casts, as a dtype= result would). The
    producer takes the adapter's ``extra`` attributes (and source)."""
    st = current()
    assert st is not None
    dacc, dt = operand(dst_view(dst), "destination", "dst")
    if isinstance(result, NkiTensor) and _same_elements_other_shape(result.shape, dacc.shape):
        result = result.reshape(tuple(dacc.shape))  # dst is written in its own free-dim order
    if isinstance(result, NkiTensor) and tuple(result.shape) != tuple(dacc.shape):
        # (the engines write the result's partitions and elements per partition: a smaller
        # result is not broadcast into dst, across partitions or along them)
        raise NKIShapeError(
            f"nisa.{name}: the result has shape {list(result.shape)} and dst "
            f"{tensor_label(dt.decl)} the shape {list(dacc.shape)}; an instruction writes as "
            "many partitions and elements per partition as its result has (no broadcast)",
            code="err_store_dst_shape_smaller_than_other_shape",
            loc=user_loc(),
        )
    body = st.bodies[-1]
    extra = dict(extra)
    more = (extra.pop(EXTRA_SRC),) if EXTRA_SRC in extra else ()
    if isinstance(result, NkiTensor) and result.temp and len(body) >= 2:
        last, alloc = body[-1], body[-2]
        if (
            isinstance(last, Instr)
            and isinstance(alloc, Alloc)
            and alloc.tensor == result.name
            and last.dst is not None
            and last.dst.tensor == result.name
        ):
            same_dtype = st.tensors[result.name].dtype == dt.decl.dtype
            attrs = dict(last.attrs)
            attrs.update(extra)
            if same_dtype and last.dst.shape == dacc.shape:
                instr = Instr(
                    last.kind, last.op, dacc, last.srcs + more, tuple(attrs.items()), last.mask,
                    last.loc, accumulate, last.api,
                )  # fmt: skip
                body[-2:] = [instr]
                del st.tensors[result.name]
                st.written.pop(result.name, None)
                st.written.setdefault(dacc.tensor, instr.loc)
                return instr
            # the producer stays, writing the temporary the copy below reads into dst
            body[-1] = Instr(
                last.kind, last.op, last.dst, last.srcs + more, tuple(attrs.items()), last.mask,
                last.loc, last.accumulate, last.api,
            )  # fmt: skip
    assign(dacc, result, accumulate=accumulate, api="destination")
    return _last_instr()


def _same_elements_other_shape(result: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """A destination of another shape with the result's partitions and elements per partition
    (``[128, 1, 128]`` for a ``[128, 128]`` result), into which the result does not broadcast:
    the instruction writes it element by element in the destination's free-dim order."""
    result, dst = tuple(result), tuple(dst)
    if result == dst or not result or not dst or result[0] != dst[0]:
        return False
    if math.prod(result[1:]) != math.prod(dst[1:]):
        return False
    try:
        check_broadcast_into(result, dst, "destination")
    except NKIError:
        return True
    return False


def signature_of(name: str) -> inspect.Signature:
    """The destination-first signature of ``nisa.<name>``."""
    return spec.signature(name, CURRENT, resolve=True)
