"""What every nki.isa function shares: its opening (:class:`Call`, read from the instruction's
spec row) and the operand helpers: tiles, scalar-or-vector operands, immediates, dtypes, ALU ops
and accumulator results. Each nki.isa function is a signature over these helpers and the rule
checks in ``rules.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes
from .. import isa_spec as spec
from ..errors import NKIError, NKIMemoryError, NKIShapeError, NKITypeError, user_loc
from ..ir import Access, Const, Instr, Mask, tensor_label
from ..language.tokens import OpToken
from ..optable import REDUCERS, Op, lookup
from ..tracer import (
    NkiTensor,
    TileOps,
    _Assigned,
    check_partitions,
    check_start_partition,
    const_operand,
    emit,
    generation,
    note_generation,
    operand,
    require_buffer,
    result_tile,
    state,
    to_mask,
)
from ..tracer.api_checks import broken, op_on_target
from ..tracer.dependencies import Handle, depend
from .enums import engine_name, enum_value, reduce_cmd
from .rules import check_available, check_dtype_in

ON_CHIP = ("sbuf", "psum")
SBUF = ("sbuf",)
# engines in the order the errors name them ("the Vector, Scalar or GpSimd engine")
_ENGINE_TITLES = {"tensor": "Tensor", "vector": "Vector", "scalar": "Scalar", "gpsimd": "GpSimd"}


# ---- the opening of every nki.isa function -------------------------------------------------
class Instruction:
    """``nisa.NkiInstruction``: what a destination-first ``nisa`` call returns, a handle on the
    instruction it recorded (the current API returns an instruction handle, not a tile)."""

    __slots__ = ("name", "instr", "handle")

    def __init__(self, name: str, instr: Instr | None) -> None:
        self.name = name
        self.instr = instr
        self.handle = Handle()

    def depends_on(self, *producers: Instruction, kind: Any = None) -> Instruction:
        """This instruction runs after every one of ``producers``; returns itself, so
        ``c.depends_on(b, a)`` and ``c.depends_on(b).depends_on(a)`` are the same. ``kind``
        is a ``nisa.dependency`` member: ``runtime`` (left out: the earlier releases' edge)
        waits until each producer finishes; ``schedule`` only keeps the consumer from being
        issued before them. Producers are handles of the same kernel, traced before this one;
        a runtime edge's producer sits at its device-loop nesting or in an enclosing scope
        (not inside an ``nl.fori_loop`` / ``while_loop`` that does not hold it); see
        ``nki/tracer/dependencies.py``."""
        depend(self, producers, kind)
        return self

    def __repr__(self) -> str:
        return f"<nisa.{self.name} instruction>"


class Call:
    """One ``nki.isa`` call being traced, read from its spec row (``nki/isa_spec.py``): the name
    errors quote (``api``), the tiles' roles, the result dtype rule, the engine and the IR
    attribute each parameter is recorded as. Opening a call of an instruction of the current API
    only decides an undecided kernel's generation (a classic kernel may call it: it has no
    classic form) and needs the target to have it.
    ``emit`` records the one IR instruction."""

    def __init__(self, name: str, dtype: object = None) -> None:
        self.row = spec.get(name)
        self.api = self.row.api
        self.dtype = dtype
        self.engine = self.row.default_engine
        self._tiles: list[NkiTensor] = []
        if self.row.current_only:
            # (no classic form to confuse it with: a classic kernel may call it too, as AWS's
            # neuronxcc.nki examples of the newer instructions do)
            if generation() != spec.CLASSIC:
                note_generation(
                    spec.CURRENT, f"{self.api}(...) (an instruction of the current API only)"
                )
            check_available(name, self.api)

    def tile(
        self, x: object, role: str, buffers: tuple[str, ...] = ON_CHIP, *, compute: bool = True
    ) -> tuple[Access, NkiTensor]:
        """The tile operand ``role`` (see :func:`tile`); it counts for the result dtype rule."""
        acc, t = tile(x, self.api, role, buffers, compute=compute)
        self._tiles.append(t)
        return acc, t

    def choose_engine(self, engine: object, default: str | None = None) -> str:
        """The engine of an ``engine=`` argument: ``default`` (else the row's first engine)
        when it is left unknown, and one of the row's engines."""
        eng = engine_name(engine)
        eng = (default or self.row.default_engine) if eng == "unknown" else eng
        if eng not in self.row.engines:
            names = [t for e, t in _ENGINE_TITLES.items() if e in self.row.engines]
            listed = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
            raise NKIError(
                f"'{self.api}' runs on the {listed} engine, not {eng}",
                code="err_unsupported_engine_for_op",
                loc=user_loc(),
            )
        self.engine = eng
        return eng

    def result_dtype(self) -> str:
        """The classic result dtype: ``dtype=`` if given, else the row's rule over the tiles
        opened so far (``data``: the first one's dtype; ``widest``: classic promotion)."""
        rule = self.row.result_dtype
        if self.dtype is not None or rule == "arg":
            return dtype_name(self.dtype)
        fallback = rule.partition("|")[2]
        if fallback == "data":
            return dt(self._tiles[0])
        if fallback == "widest":
            return widest([dt(t) for t in self._tiles])
        return fallback

    def result(
        self, shape: tuple[int, ...], buffer: str = "sbuf", dtype: str | None = None
    ) -> NkiTensor:
        """A new result tile (dtype: ``result_dtype()`` unless given)."""
        return out_tile(shape, dtype or self.result_dtype(), self.api, buffer)

    def emit(
        self,
        dst: Access | None,
        srcs: tuple[Any, ...],
        *,
        mask: object = None,
        mask_shape: tuple[int, ...] | None = None,
        accumulate: str | None = None,
        **params: Any,
    ) -> Instruction:
        """Record the instruction: ``params`` (parameter names, or attributes the spec row
        lists that no parameter sets) become its attributes under the keys the row gives them,
        after the engine; a tile given for an output parameter (``reduce_res``, ``dst_idx``)
        is registered as written."""
        attrs: dict[str, Any] = {"engine": self.engine}
        outputs = []
        for k, v in params.items():
            p = self.row.param(k)
            attrs[p.attr if p is not None and p.attr else k] = _readable(v)
            if isinstance(v, Access) and p is not None and p.role in ("out", "dst"):
                outputs.append(v)
        shape = mask_shape if mask_shape is not None else (dst.shape if dst is not None else ())
        m = to_mask(mask, shape, self.api)
        instr = emit(
            "isa", self.row.ir_op, dst, tuple(srcs), attrs=tuple(attrs.items()), mask=m,
            accumulate=accumulate, api=self.api,
        )  # fmt: skip
        st = state(self.api)
        for acc in outputs:
            st.written.setdefault(acc.tensor, instr.loc)  # type: ignore[arg-type]
        return Instruction(self.row.name, instr)

    def new(
        self,
        shape: tuple[int, ...],
        srcs: tuple[Any, ...],
        *,
        buffer: str = "sbuf",
        dtype: str | None = None,
        **kw: Any,
    ) -> NkiTensor:
        """A new result tile written by the instruction (classic form): ``result`` + ``emit``."""
        out = self.result(shape, buffer, dtype)
        self.emit(out.access_(), srcs, **kw)
        return out


@dataclass(frozen=True, repr=False)
class AttrAccess(Access):
    """An access stored in an instruction's attrs (a secondary output such as ``reduce_res``);
    prints like an access in IR listings."""

    def __repr__(self) -> str:
        return str(self)


@dataclass(frozen=True, repr=False)
class AttrMask(Mask):
    """A predicate stored in attrs (affine_select); prints like a mask in IR listings."""

    def __repr__(self) -> str:
        return str(self)


def _readable(v: Any) -> Any:
    if isinstance(v, Access) and not isinstance(v, AttrAccess):
        return AttrAccess(v.tensor, v.shape, v.index, v.indirect)
    if isinstance(v, Mask) and not isinstance(v, AttrMask):
        return AttrMask(v.conds)
    return v


# ---- shapes and tiles ----------------------------------------------------------------------
def prod(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def free_size(shape: tuple[int, ...]) -> int:
    """Elements per partition of a tile shape."""
    return prod(shape[1:])


def is_tile(x: object) -> bool:
    return isinstance(x, (TileOps, _Assigned))


def tile(
    x: object, api: str, role: str, buffers: tuple[str, ...] = ON_CHIP, *, compute: bool = True
) -> tuple[Access, NkiTensor]:
    """A tile operand: in one of ``buffers``, at most 128 partitions; for compute engines
    (``compute``) a compile-time start partition must follow the quadrant rule."""
    acc, t = operand(x, api, role)
    require_buffer(t, buffers, api, role)
    if t.decl.on_chip:
        check_partitions(acc.shape, api, role)
    if t.decl.on_chip and len(acc.shape) < 2:
        raise NKIShapeError(
            f"operand '{role}' of '{api}' is a {len(acc.shape)}-D access {list(acc.shape)}; "
            "on-chip tiles need a partition and a free dimension",
            code="err_insufficient_rank",
            loc=user_loc(),
        )
    if compute and t.decl.on_chip:
        check_start_partition(acc, t, api, role)
    return acc, t


def never_written(t: NkiTensor) -> bool:
    """Whether no instruction traced so far writes tensor ``t`` (or a view sharing its
    storage)."""
    st = state("never_written")
    base = t.decl.alias_of or t.name
    for name in st.written:
        d = st.tensors.get(name)
        if name == base or (d is not None and d.alias_of == base):
            return False
    return True


def accumulate_unwritten(t: NkiTensor, api: str) -> None:
    """``accumulate=True`` into the PSUM tile ``t``: a warning when nothing wrote it before."""
    if never_written(t):
        broken(
            "nc_matmul.accumulate_unwritten",
            f"'{api}' accumulates into {tensor_label(t.decl)}, which nothing wrote before",
        )


def out_tile(shape: tuple[int, ...], dtype: str, api: str, buffer: str = "sbuf") -> NkiTensor:
    check_partitions(tuple(shape), api, "result")
    return result_tile(tuple(shape), dtype, buffer, api)


def res_vector(x: Any, parts: int, api: str, role: str = "reduce_res") -> tuple[Access, Any]:
    """A (P, 1) result tile of an accumulator read-out."""
    acc, t = tile(x, api, role)
    if acc.shape[0] != parts or free_size(acc.shape) != 1:
        raise NKIShapeError(
            f"'{role}' of '{api}' must have shape ({parts}, 1); got {list(acc.shape)}",
            code="err_reduce_res_shape",
            loc=user_loc(),
        )
    return acc, t


def rank_at_most(shape: tuple[int, ...], rank: int, api: str, role: str) -> None:
    if len(shape) > rank:
        raise NKIShapeError(
            f"operand '{role}' of '{api}' has rank {len(shape)} {list(shape)}; at most {rank} "
            f"(the partition dimension and {rank - 1} free dimensions)",
            code="err_exceed_max_supported_dimension",
            loc=user_loc(),
        )


def same_partitions(a: tuple[int, ...], b: tuple[int, ...], api: str, ra: str, rb: str) -> None:
    if a[0] != b[0]:
        raise NKIShapeError(
            f"number of partitions mismatch in parameters ({ra}{list(a)}, {rb}{list(b)}) of "
            f"'{api}': {a[0]} vs {b[0]}",
            code="err_num_partition_mismatch",
            loc=user_loc(),
        )


def same_elements(a: tuple[int, ...], b: tuple[int, ...], api: str, ra: str, rb: str) -> None:
    """Same partition count and the same number of elements per partition."""
    same_partitions(a, b, api, ra, rb)
    same_free(a, b, api, ra, rb)


def same_free(a: tuple[int, ...], b: tuple[int, ...], api: str, ra: str, rb: str) -> None:
    """The same number of elements per partition."""
    if free_size(a) != free_size(b):
        raise NKIShapeError(
            f"'{api}' needs the same number of elements per partition in '{ra}' {list(a)} "
            f"({free_size(a)}) and '{rb}' {list(b)} ({free_size(b)})",
            code="err_free_size_mismatch",
            loc=user_loc(),
        )


def not_both_psum(ta: NkiTensor, tb: NkiTensor, api: str, ra: str, rb: str) -> None:
    if ta.buffer == "psum" and tb.buffer == "psum":
        raise NKIMemoryError(
            f"'{ra}' and '{rb}' of '{api}' cannot both be in PSUM ({ta.label}, {tb.label}): "
            "the engine reads at most one operand from PSUM",
            code="err_unsupported_memory",
            loc=user_loc(),
        )


# ---- dtypes --------------------------------------------------------------------------------
def dt(t: NkiTensor) -> str:
    return t.decl.dtype


def out_dtype(dtype: object, default: str) -> str:
    return dtype_name(dtype) if dtype is not None else default


def dtype_name(dtype: object) -> str:
    """``dtypes.name_of`` with the kernel's line on the error for an unsupported dtype."""
    try:
        return dtypes.name_of(dtype)
    except NKIError as e:
        raise NKITypeError(e.message, code=e.code, loc=user_loc()) from None


def dtype_in(t: Any, allowed: tuple[str, ...], api: str, role: str) -> None:
    check_dtype_in(dt(t), allowed, api, role)


def same_dtype(ta: NkiTensor, tb: NkiTensor, api: str, ra: str, rb: str, why: str = "") -> None:
    if dt(ta) != dt(tb):
        raise NKITypeError(
            f"'{ra}' ({dt(ta)}) and '{rb}' ({dt(tb)}) of '{api}' must have the same dtype{why}",
            code="err_dtype_mismatch",
            loc=user_loc(),
        )


def widest(names: list[str]) -> str:
    """'Whichever input has the highest precision': classic promotion over the inputs."""
    out = names[0]
    for n in names[1:]:
        out = dtypes.promote(out, n)
    return out


def check_bitvec_dtypes(op: Op, names: list[str], api: str, role: str) -> None:
    if not op.bitvec:
        return
    for d in names:
        if not (dtypes.is_int(d) or dtypes.is_bool(d)):
            raise NKITypeError(
                f"'{role}'={op.name} of '{api}' is a bit-vector operator and needs integer "
                f"input/output dtypes, got {d}",
                code="err_bitvec_op_requires_integer_dtype",
                loc=user_loc(),
            )


# ---- scalars and immediates ----------------------------------------------------------------
def static_int(x: object, api: str, role: str) -> int:
    """A compile-time integer argument (Python or NumPy int)."""
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise NKITypeError(
            f"'{role}' of '{api}' must be a compile-time integer, got {x!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    return int(x)


def scalar_or_vector(
    x: object, parts: int, api: str, role: str, *, fp32_only: bool = False
) -> tuple[Access | Const, str]:
    """A compile-time scalar, or a (P, 1) tile with the data's partition count."""
    if is_tile(x):
        acc, t = tile(x, api, role)
        if acc.shape[0] != parts or free_size(acc.shape) != 1:
            raise NKIShapeError(
                f"'{role}' of '{api}' must be a scalar or a vector of shape ({parts}, 1) (one "
                f"element per partition of the data); got a tile of shape {list(acc.shape)}",
                code="err_scalar_or_vector_operand_shape",
                loc=user_loc(),
            )
        if fp32_only and dt(t) != "float32":
            raise NKITypeError(
                f"'{role}' of '{api}' must be a float32 vector, got {dt(t)}",
                code="err_invalid_operand_dtype",
                loc=user_loc(),
            )
        return acc, dt(t)
    if isinstance(x, (bool, int, float)) or (hasattr(x, "dtype") and getattr(x, "shape", 0) == ()):
        return const_operand(x), dtypes.scalar_dtype(x)
    raise NKITypeError(
        f"'{role}' of '{api}' must be a compile-time scalar or a ({parts}, 1) tile, got "
        f"{type(x).__name__}",
        code="err_unsupported_operand",
        loc=user_loc(),
    )


def imm(x: Any, parts: int, api: str, role: str, fp32: bool = False) -> Any:
    """An fp32 immediate: a Python / NumPy scalar or a (P, 1) tile (float32 with ``fp32``)."""
    if x is None:
        raise NKITypeError(
            f"'{role}' of '{api}' must be a scalar or a ({parts}, 1) tile, got None",
            code="err_missing_operand",
            loc=user_loc(),
        )
    if isinstance(x, bool):
        return Const(float(x))
    return scalar_or_vector(x, parts, api, role, fp32_only=fp32)[0]


def command(x: Any, api: str, allowed: tuple[str, ...] = ()) -> str:
    """A ``reduce_cmd`` argument's name, one of ``allowed`` where the instruction's page gives
    its list."""
    name = enum_value(x, reduce_cmd, api, "reduce_cmd").name
    if allowed and name not in allowed:
        raise NKIError(
            f"reduce_cmd={name} of '{api}' is not one it takes: "
            + ", ".join(f"reduce_cmd.{n}" for n in allowed),
            code="err_invalid_argument",
            loc=user_loc(),
        )
    return name


# ---- ALU ops -------------------------------------------------------------------------------
def alu_op(op: object, api: str, role: str) -> Op:
    """Resolve an ``op=`` argument (nl.add, np.add, nl.max, ...) through the op table."""
    try:
        row = lookup(op)
    except NKIError as e:
        raise NKITypeError(
            f"'{role}' of '{api}': {e.message}", code=e.code, loc=user_loc()
        ) from None
    op_on_target(row, api)
    return row


def binary_op(op: Any, api: str, role: str) -> Op:
    fn = alu_op(op, api, role)
    if fn.arity != 2:
        raise NKIError(
            f"'{role}'={fn.name} of '{api}' must be a binary ALU operator",
            code="err_unsupported_op",
            loc=user_loc(),
        )
    return fn


def first_op(op: Any, operand: Any, api: str) -> tuple[Op, Any]:
    """``op0`` of tensor_scalar / tensor_scalar_reduce and its operand: a binary ALU op, or a
    unary one (``nl.abs``, ``nl.rsqrt``, ...) applied to the data alone, whose ``operand0``
    must then be None or 0 (the operand slot is unused)."""
    fn = alu_op(op, api, "op0")
    if fn.arity != 1:
        return binary_op(op, api, "op0"), operand
    if operand is not None and not (isinstance(operand, (int, float)) and operand == 0):
        raise NKIError(
            f"'op0'={fn.name} of '{api}' is a unary operator: 'operand0' must be None or 0, "
            f"got {operand!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    return fn, 0.0


TILE_REDUCERS = (*REDUCERS, "subtract")


def reducer(op: Any, api: str, role: str, allowed: tuple[str, ...] = TILE_REDUCERS) -> Op:
    fn = alu_op(op, api, role)
    if fn.name not in allowed:
        raise NKIError(
            f"'{role}'={fn.name} of '{api}' is not a supported reduction operator; supported: "
            f"{', '.join(allowed)}",
            code="err_unsupported_reduce_op",
            loc=user_loc(),
        )
    return fn


def op_name(op: Any, api: str, role: str, allowed: tuple[str, ...]) -> str:
    """The name of an ``op=`` argument (an nl / NumPy op or a token of
    ``nki/language/tokens.py``), which must be one of ``allowed``; ``None`` is read as
    ``nl.bypass`` where bypass is allowed."""
    if isinstance(op, OpToken):
        op = op.nki_token
    if op is None and "bypass" in allowed:
        return "bypass"
    name = getattr(op, "__nki_op__", None)
    if name is None and isinstance(op, str):
        name = op
    if name is None:
        name = alu_op(op, api, role).name
    if name not in allowed:
        raise NKIError(
            f"'{role}'={name} of '{api}' is not supported; supported: "
            f"{', '.join('nl.' + a for a in allowed)}",
            code="err_unsupported_op",
            loc=user_loc(),
        )
    return name
