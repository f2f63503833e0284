"""The destination-first calling form of ``nki.isa`` (the current API, nki 0.3-0.7).

``nisa.op(dst, ...)`` writes its result into ``dst`` in place (result dtype = ``dst.dtype``) and
returns an :class:`Instruction` handle. Each public ``nisa`` function is the classic function
wrapped by :func:`both_forms`: a call is matched against the two calling forms of its spec row
(``nki/isa_spec.py``), and the current form is carried out by the classic function (same checks,
same IR instruction) whose result is then written into ``dst``: the recorded instruction's
destination becomes ``dst``'s access, so no temporary tile or copy is left in the IR.

Which form a call is: the one its arguments fit (a tile never fills an attribute, an op or an
engine; a scalar never fills a tile operand); when both fit, the kernel's generation decides
(classic until decided). A call that fits one form only decides the kernel's generation; see
``nki.tracer.note_generation``."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import isa_spec as spec
from .. import language as nl
from ..errors import NKIError, NKITypeError, NKIUnsupportedError, user_loc
from ..ir import Alloc, Instr
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
from .common import scalar_or_vector
from .enums import engine as _engine
from .enums import enum_value, reduce_cmd

_TILE_ROLES = ("dst", "in", "out")
_STATIC_ROLES = ("attr", "op", "engine", "dtype", "mask", "name")


@dataclass(frozen=True)
class Instruction:
    """What a destination-first ``nisa`` call returns: a handle on the recorded instruction
    (the current API returns an instruction handle, not a tile)."""

    name: str
    instr: Instr | None

    def __repr__(self) -> str:
        return f"<nisa.{self.name} instruction>"


def _is_tile(v: object) -> bool:
    return isinstance(v, (TileOps, _Assigned))


def _fits(name: str, form: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the call binds to ``form`` with plausible values in every parameter."""
    info = spec.get(name)
    if info.form(form) is None:
        return False
    try:
        bound = spec.signature(name, form).bind(*args, **kwargs)
    except TypeError:
        return False
    roles = {p.name: p for p in info.params(form)}
    for k, v in bound.arguments.items():
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
    if classic and cur:
        return gen or CLASSIC
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


def both_forms(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a classic ``nisa`` function so that it also takes the destination-first form."""
    name = fn.__name__
    info = spec.get(name)
    if info.current is None:
        return fn

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if choose_form(name, args, kwargs) == CLASSIC:
            if info.classic is None:
                spec.bind(name, args, kwargs, CURRENT)  # raises the located error
            return fn(*args, **kwargs)
        return call_current(name, fn, args, kwargs)

    call.__doc__ = (fn.__doc__ or "") + (
        f"\n\nCurrent API (destination first): ``nisa.{name}{spec.signature(name, CURRENT)}`` "
        "writes ``dst`` in place (dtype ``dst.dtype``) and returns an instruction handle."
    )
    return call


# ---- carrying out the current form ------------------------------------------------------------
def _dst_dtype(dst: Any) -> str:
    t = dst.view if isinstance(dst, _Assigned) else dst
    return str(t.dtype)


def call_current(
    name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Instruction:
    bound = spec.bind(name, args, kwargs, CURRENT)
    spec.check_kinds(name, CURRENT, bound.arguments)
    a = dict(bound.arguments)
    prio = a.get("priority")
    if prio is not None and (
        not isinstance(prio, int) or isinstance(prio, bool) or not 0 <= prio <= 3
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
    a.pop("name", None)
    a.pop("priority", None)
    info = spec.get(name)
    if info.takes_dst(CLASSIC):  # dma_copy, nc_stream_shuffle, ...: the same call, by keyword
        classic = {p.name for p in info.params(CLASSIC)}
        fn(**{k: v for k, v in a.items() if k in classic})
        return Instruction(name, _last_instr())
    adapter = _ADAPTERS.get(name, _generic)
    dst = a.pop("dst")
    if not _is_tile(dst):
        raise NKITypeError(
            f"dst of nisa.{name} must be a tile (an nl.ndarray or a view of one); got {dst!r}",
            code="err_unsupported_operand",
            loc=user_loc(),
        )
    if name == "iota":  # (affine_select's on_true_tile keeps dst's own shape)
        dst = _dst_in_pattern_shape(name, dst, a["pattern"])
    accumulate, extra = adapter(name, dst, a)
    result = fn(**a)
    return Instruction(name, _into(dst, result, accumulate, extra))


def _generic(name: str, dst: Any, a: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
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
        a["dtype"] = _dst_dtype(dst)
    return None, {}


def _same(v: Any, default: Any) -> bool:
    try:
        return bool(v is default or v == default)
    except Exception:  # e.g. a tile compared with a default
        return False


def _memset(name: str, dst: Any, a: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    t = dst.view if isinstance(dst, _Assigned) else dst
    a["shape"] = tuple(t.shape)
    a["dtype"] = _dst_dtype(dst)
    return None, {}


def _matmul(name: str, dst: Any, a: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """``accumulate``: False overwrites, True adds, None (default) makes ``dst`` a PSUM
    accumulation group: per element, the first write overwrites and later writes add."""
    acc = a.pop("accumulate")
    if acc not in (None, True, False):
        raise NKITypeError(
            f"accumulate= of nisa.nc_matmul must be True, False or None; got {acc!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    _, t = operand(dst.view if isinstance(dst, _Assigned) else dst, "nisa.nc_matmul", "dst")
    if t.decl.buffer != "psum":
        raise NKIError(
            f"dst of nisa.nc_matmul must be a PSUM tile; got a tile in {t.decl.buffer}",
            code="err_unsupported_memory",
            loc=user_loc(),
        )
    if a.get("perf_mode") is not None and str(a["perf_mode"]).endswith("none"):
        a["perf_mode"] = None
    a["dtype"] = _dst_dtype(dst)
    if acc is False:
        return None, {"psum_group": False}
    return "add", {"psum_group": acc is None}


def _dst_in_pattern_shape(name: str, dst: Any, pattern: Any) -> Any:
    """``dst`` seen as ``[P, num_0, num_1, ...]`` (the pattern's pairs, outermost first) when the
    pairs cover its elements per partition in another shape: the engine walks the pattern and
    writes dst's elements in order."""
    t = dst.view if isinstance(dst, _Assigned) else dst
    try:
        nums = tuple(int(pair[1]) for pair in pattern)
    except (TypeError, IndexError, ValueError):
        return dst  # _pattern_value reports the malformed pattern
    shape = tuple(t.shape)
    if isinstance(dst, _Assigned) or nums == shape[1:] or not hasattr(t, "reshape"):
        return dst
    if math.prod(nums) != math.prod(shape[1:]):
        raise NKIUnsupportedError(
            f"pattern {pattern!r} of nisa.{name} walks {math.prod(nums)} elements per partition "
            f"but dst {list(shape)} has {math.prod(shape[1:])}: the [step, num] pairs must cover "
            "dst's elements per partition exactly",
            code="err_free_size_mismatch",
            loc=user_loc(),
        )
    return t.reshape((shape[0], *nums))


def _pattern_value(name: str, dst: Any, pattern: Any, offset: Any, cm: Any) -> Any:
    """``offset + p * channel_multiplier + sum(idx_k * step_k)`` over ``dst``'s partitions and the
    ``[[step, num], ...]`` pairs, as an affine index expression (one free dim of dst per pair)."""
    t = dst.view if isinstance(dst, _Assigned) else dst
    shape = tuple(t.shape)
    seq = isinstance(pattern, (list, tuple))
    pairs = [tuple(q) if isinstance(q, (list, tuple)) else (q,) for q in pattern] if seq else []
    if not pairs or any(
        len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
        for pair in pairs
    ):
        raise NKITypeError(
            f"pattern of nisa.{name} must be a list of [step, num] int pairs; got {pattern!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    for what, v in (("offset", offset), ("channel_multiplier", cm)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise NKITypeError(
                f"{what} of nisa.{name} must be an int; got {v!r}",
                code="err_invalid_argument",
                loc=user_loc(),
            )
    if tuple(n for _, n in pairs) != shape[1:] and not (
        len(shape) == 2 and len(pairs) == 1 and pairs[0][1] == shape[1]
    ):
        raise NKIUnsupportedError(
            f"pattern {pattern!r} of nisa.{name}: nki-sim simulates one [step, num] pair per free "
            f"dimension of dst (dst shape {list(shape)})",
            code="err_unsupported_attribute",
            loc=user_loc(),
        )
    k = len(pairs)
    expr = nl.arange(shape[0])[(slice(None), *([None] * k))] * int(cm) + int(offset)
    for i, (step, num) in enumerate(pairs):
        sel = [None] * (k + 1)
        sel[i + 1] = slice(None)
        expr = expr + nl.arange(num)[tuple(sel)] * int(step)
    return expr


def _iota(name: str, dst: Any, a: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    expr = _pattern_value(name, dst, a.pop("pattern"), a.pop("offset"), a.pop("channel_multiplier"))
    a["expr"] = expr
    a["dtype"] = _dst_dtype(dst)
    return None, {}


_COMPARE = {
    "equal": lambda v: v == 0,
    "not_equal": lambda v: v != 0,
    "greater": lambda v: v > 0,
    "greater_equal": lambda v: v >= 0,
    "less": lambda v: v < 0,
    "less_equal": lambda v: v <= 0,
}


def _affine_select(name: str, dst: Any, a: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """``dst = on_true_tile where cmp_op(value, 0) else on_false_value`` with the iota value."""
    v = _pattern_value(name, dst, a.pop("pattern"), a.pop("offset"), a.pop("channel_multiplier"))
    op = a.pop("cmp_op")
    op_name = getattr(op, "__name__", str(op))
    if op_name not in _COMPARE:
        raise NKITypeError(
            f"cmp_op of nisa.affine_select must be one of {', '.join('nl.' + c for c in _COMPARE)}"
            f"; got {op!r}",
            code="err_unsupported_op",
            loc=user_loc(),
        )
    a["pred"] = _COMPARE[op_name](v)
    a["dtype"] = _dst_dtype(dst)
    return None, {}


def _tensor_scalar_reduce(
    name: str, dst: Any, a: dict[str, Any]
) -> tuple[str | None, dict[str, Any]]:
    """The current form's accumulator controls ride on the instruction: ``reduce_cmd`` and
    ``reduce_res_negate`` as attributes, load_reduce's ``reduce_init`` (an fp32 scalar or a
    (P, 1) float32 tile) as a third source."""
    api = f"nisa.{name}"
    cmd = enum_value(a.pop("reduce_cmd"), reduce_cmd, api, "reduce_cmd").name
    init, negate = a.pop("reduce_init"), a.pop("reduce_res_negate")
    if (cmd == "load_reduce") != (init is not None):
        raise NKIError(
            f"reduce_init={init!r} of {api} with reduce_cmd={cmd}: reduce_cmd.load_reduce loads "
            "the accumulators from reduce_init (a scalar or a (P, 1) float32 tile), so it needs "
            "one, and the other commands take none",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    a["dtype"] = _dst_dtype(dst)
    extra: dict[str, Any] = {"reduce_cmd": cmd, "reduce_res_negate": bool(negate)}
    if init is not None:
        parts = operand(a["data"], api, "data")[0].shape[0]
        if isinstance(init, bool):
            init = float(init)
        extra[_EXTRA_SRC] = scalar_or_vector(init, parts, api, "reduce_init", fp32_only=True)[0]
    return None, extra


_ADAPTERS: dict[str, Callable[[str, Any, dict[str, Any]], tuple[str | None, dict[str, Any]]]] = {
    "memset": _memset,
    "tensor_scalar_reduce": _tensor_scalar_reduce,
    "iota": _iota,
    "affine_select": _affine_select,
    "nc_matmul": _matmul,
}


_EXTRA_SRC = "+src"  # an adapter's extra: one more source of the instruction


def _last_instr() -> Instr | None:
    st = current()
    body = st.bodies[-1] if st is not None else []
    return body[-1] if body and isinstance(body[-1], Instr) else None


def _into(dst: Any, result: Any, accumulate: str | None, extra: dict[str, Any]) -> Instr | None:
    """Make the instruction that produced ``result`` write ``dst`` instead (same shape and
    dtype), or copy ``result`` into ``dst`` (the copy casts, as a dtype= result would). The
    producer takes the adapter's ``extra`` attributes (and source)."""
    st = current()
    assert st is not None
    dview = dst.view if isinstance(dst, _Assigned) else dst
    dacc, dt = operand(dview, "destination", "dst")
    if isinstance(result, NkiTensor) and _same_elements_other_shape(result.shape, dacc.shape):
        result = result.reshape(tuple(dacc.shape))  # dst is written in its own free-dim order
    body = st.bodies[-1]
    extra = dict(extra)
    more = (extra.pop(_EXTRA_SRC),) if _EXTRA_SRC in extra else ()
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
            if same_dtype and last.dst.shape != dacc.shape:
                check_broadcast_into(last.dst.shape, dacc.shape, f"nisa.{last.op}")
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
