"""The Numba backend's lowerings of the current API's everyday ``nki.isa`` instructions
(``dma_copy``, ``tensor_copy``, ``memset``, ``tensor_tensor``, ``tensor_scalar``,
``scalar_tensor_tensor``, ``reciprocal``, ``tensor_reduce``, ``activation``) onto the library
kernels of ``lowering.py``, so a current-API kernel compiles like its classic twin.

Each lowering takes only the forms whose interpreter executor (``simulator/isa``) computes
exactly what the library kernel does: fp32 / bfloat16 tiles, no mask, the engine's ALU ops in
fp32 (``formulas.alu``: one ``NATIVE`` expression per step, each rounded to fp32), results
rounded on write. Anything else raises :class:`Unsupported` and is hosted (the interpreter's
executor runs it, destination rules included)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from nki import dtypes
from nki.errors import NKIError
from nki.ir import Access, Const, Instr
from nki.optable import ACTIVATION_ONLY, NATIVE, OPS

from .. import numerics
from ..executors import lowers
from ..isa.common import check_dst
from .access import Emitter, Unsupported, broadcastable
from .kernels import Spec
from .lowering import elementwise, lower_memset, lower_reduce, numpy_ew, raw_copy

# tensor_reduce's op -> the classic reduction the ``reduce`` lowering compiles (the same NumPy
# reduction: ``OPS[op].reduce``)
_REDUCTIONS = {"add": "sum", "maximum": "max", "minimum": "min"}


def _plain(g: Emitter, ins: Instr) -> Access:
    """The destination of an instruction every lowering here accepts: unmasked, every tile
    fp32 / bfloat16, and the engine's destination rules hold (else the interpreter raises)."""
    dst = ins.dst
    if dst is None or ins.mask is not None:
        raise Unsupported(f"masked nisa.{ins.op}")
    for u in ins.uses():
        if u.access.indirect or not dtypes.is_float(g.ir.tensor(u.access.tensor).dtype):
            raise Unsupported(f"nisa.{ins.op} on an indirect or non-float tile")
    try:
        check_dst(ins, SimpleNamespace(decl=g.ir.tensor))  # type: ignore[arg-type]
    except NKIError as e:
        raise Unsupported(f"nisa.{ins.op} breaks a destination rule") from e
    return dst


def _step(op: str, a: str, b: str, reverse: bool = False) -> str:
    """One ALU step of ``formulas.alu`` as a NATIVE expression over fp32 values."""
    o = OPS[op]
    if op not in NATIVE or o.bitvec:
        raise Unsupported(f"ALU op '{op}'")
    if o.arity == 1:
        return NATIVE[op].format(a=a)
    x, y = (b, a) if reverse else (a, b)
    return NATIVE[op].format(a=x, b=y)


def _scalar(g: Emitter, s: object, p: int) -> object:
    """A scalar operand: an immediate, or a (P, 1) tile broadcast over the free axis."""
    if isinstance(s, Const):
        return s
    if isinstance(s, Access) and tuple(s.shape) == (p, 1):
        return s
    raise Unsupported(f"scalar operand {s!s}")


def _ew(g: Emitter, ins: Instr, expr: str, srcs: tuple) -> None:
    """``elementwise`` on operands of the destination's shape or broadcast to it."""
    dst = ins.dst
    assert dst is not None
    if any(isinstance(s, Access) and not broadcastable(s.shape, dst.shape) for s in srcs):
        raise Unsupported("operand shape does not broadcast to the destination")
    elementwise(g, ins, expr, srcs)


@lowers("isa", "dma_copy")
def lower_dma_copy(g: Emitter, ins: Instr) -> None:
    """A copy between tiles of one dtype moves bits; else fp32 values rounded on write."""
    dst = _plain(g, ins)
    src = ins.srcs[0]
    if ins.accumulates or not isinstance(src, Access) or src.shape != dst.shape:
        raise Unsupported("accumulating or reshaping dma_copy")
    sdt, ddt = g.ir.tensor(src.tensor).dtype, g.ir.tensor(dst.tensor).dtype
    if numerics.dma_copies_bits(sdt, ddt):
        raise Unsupported("bit-copying dma_copy")
    if sdt != ddt or not raw_copy(g, ins, src):
        elementwise(g, ins, "{v0}", (src,))


@lowers("isa", "tensor_copy")
def lower_tensor_copy(g: Emitter, ins: Instr) -> None:
    """``exact`` between tiles of one dtype moves bits; else fp32 values rounded on write."""
    dst = _plain(g, ins)
    src = ins.srcs[0]
    if ins.accumulate is not None or not isinstance(src, Access) or src.shape != dst.shape:
        raise Unsupported("accumulating or reshaping tensor_copy")
    same = g.ir.tensor(src.tensor).dtype == g.ir.tensor(dst.tensor).dtype
    if not (ins.attr("exact") and same and raw_copy(g, ins, src)):
        elementwise(g, ins, "{v0}", (src,))


@lowers("isa", "memset")
def lower_isa_memset(g: Emitter, ins: Instr) -> None:
    _plain(g, ins)
    lower_memset(g, dataclasses.replace(ins, attrs=()))


@lowers("isa", "tensor_tensor")
def lower_tensor_tensor(g: Emitter, ins: Instr) -> None:
    dst = _plain(g, ins)
    a, b = ins.srcs
    if not (isinstance(a, Access) and isinstance(b, Access) and a.shape == b.shape == dst.shape):
        raise Unsupported("tensor_tensor operands of another shape")
    _ew(g, ins, _step(ins.attr("op"), "{v0}", "{v1}"), (a, b))


@lowers("isa", "tensor_scalar")
def lower_tensor_scalar(g: Emitter, ins: Instr) -> None:
    dst = _plain(g, ins)
    data, o0, o1 = ins.srcs
    if not isinstance(data, Access) or data.shape != dst.shape or len(dst.shape) != 2:
        raise Unsupported("tensor_scalar on a tile that is not (P, F)")
    p = dst.shape[0]
    srcs: list[object] = [data, _scalar(g, o0, p)]
    expr = _step(ins.attr("op0"), "{v0}", "{v1}", bool(ins.attr("reverse0")))
    if ins.attr("op1") is not None:
        srcs.append(_scalar(g, o1, p))
        expr = _step(ins.attr("op1"), f"({expr})", "{v2}", bool(ins.attr("reverse1")))
    _ew(g, ins, expr, tuple(srcs))


@lowers("isa", "scalar_tensor_tensor")
def lower_scalar_tensor_tensor(g: Emitter, ins: Instr) -> None:
    dst = _plain(g, ins)
    data, o0, o1 = ins.srcs
    if not (isinstance(data, Access) and isinstance(o1, Access)) or len(dst.shape) != 2:
        raise Unsupported("scalar_tensor_tensor on tiles that are not (P, F)")
    if not data.shape == o1.shape == dst.shape:
        raise Unsupported("scalar_tensor_tensor operands of another shape")
    expr = _step(ins.attr("op0"), "{v0}", "{v1}", bool(ins.attr("reverse0")))
    expr = _step(ins.attr("op1"), f"({expr})", "{v2}", bool(ins.attr("reverse1")))
    _ew(g, ins, expr, (data, _scalar(g, o0, dst.shape[0]), o1))


@lowers("isa", "reciprocal")
def lower_reciprocal(g: Emitter, ins: Instr) -> None:
    dst = _plain(g, ins)
    src = ins.srcs[0]
    if not isinstance(src, Access) or src.shape != dst.shape:
        raise Unsupported("reciprocal of a constant or of another shape")
    _ew(g, ins, _step("reciprocal", "{v0}", ""), (src,))


@lowers("isa", "tensor_reduce")
def lower_tensor_reduce(g: Emitter, ins: Instr) -> None:
    """Over the trailing free axes, keeping them: the classic reduction of the same op; with
    ``negate``, the result negated in place (negation commutes with rounding)."""
    dst = _plain(g, ins)
    op = _REDUCTIONS.get(ins.attr("op"))
    if op is None:
        raise Unsupported(f"tensor_reduce with '{ins.attr('op')}'")
    if ins.mask is not None and ins.attr("negate"):
        raise Unsupported("negated tensor_reduce under a mask (over the data, not the result)")
    axes = tuple(ins.attr("axes"))
    lower_reduce(g, dataclasses.replace(ins, op=op, attrs=(("axes", axes), ("keepdims", True))))
    if ins.attr("negate"):
        elementwise(g, dataclasses.replace(ins, srcs=(dst,)), _step("negative", "{v0}", ""), (dst,))


@lowers("isa", "activation")
def lower_activation(g: Emitter, ins: Instr) -> None:
    """``op(data * scale + bias)`` in fp32: compiled whole when the op is a NATIVE row, else
    the affine part compiled and the op NumPy's (called back)."""
    dst = _plain(g, ins)
    data, scale, bias = ins.srcs
    if ins.attr("reduce_op") is not None or ins.attr("reduce_res") is not None:
        raise Unsupported("activation reducing into the accumulator registers")
    if not isinstance(data, Access) or data.shape != dst.shape or len(dst.shape) != 2:
        raise Unsupported("activation on a tile that is not (P, F)")
    p = dst.shape[0]
    srcs = (data, _scalar(g, scale, p), _scalar(g, bias, p))
    pre = "(({v0} * {v1}) + {v2})"
    op = OPS[ins.attr("op")]
    if op.name in ACTIVATION_ONLY:  # (the engine's own function, not the op row's)
        raise Unsupported(f"activation with '{op.name}' (the Scalar engine's own function)")
    if op.name in NATIVE and op.arity == 1:
        _ew(g, ins, _step(op.name, pre, ""), srcs)
    elif op.arity == 1 and not op.bitvec:
        numpy_ew(g, ins, op.name, srcs, pre)
    else:
        raise Unsupported(f"activation with '{op.name}'")


@lowers("isa", "nc_transpose")
def lower_nc_transpose(g: Emitter, ins: Instr) -> None:
    """The exact (bit-moving) transpose of a 2-D tile: a copy reading the source with its two
    strides swapped."""
    dst = _plain(g, ins)
    src = ins.srcs[0]
    if not ins.attr("exact") or ins.accumulate is not None or not isinstance(src, Access):
        raise Unsupported("identity-matmul or accumulating nc_transpose")
    if len(src.shape) != 2 or tuple(dst.shape) != (src.shape[1], src.shape[0]):
        raise Unsupported("nc_transpose of a tile that is not 2-D")
    S = tuple(dst.shape)
    base, strides = g.flat(src, 2)
    swapped = (base, [*strides[:-2], strides[-1], strides[-2]])
    blocks = [g.flat(dst, 2), swapped]
    two_phase = g.overlaps(ins)
    unit = g.unit(S, blocks)
    if g.kind(src.tensor) != g.kind(dst.tensor):
        raise Unsupported("casting nc_transpose")
    spec = Spec("copy", mask=0, two_phase=two_phase, checks=False, unit=unit)
    tmp = g.scratch(S, g.args[dst.tensor].dtype) if two_phase else g.arg(dst.tensor)
    g.call(spec, S, 2, [g.arg(dst.tensor), g.arg(src.tensor), tmp], blocks)
