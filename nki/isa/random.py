"""Random-number instructions: dropout and, of the current API only, ``rng``, ``rand2``,
``set_rng_seed``, ``rand_set_state`` and ``rand_get_state``.

Each engine lane (partition) runs its own XORWOW generator (Marsaglia's xorshift with a Weyl
counter): 6 uint32 state words per lane on the GpSimd engine (x0..x4 and the counter), 24 on the
Vector engine (read here as 4 such generators used in turn for consecutive elements of a row).
The algorithm is the documented one, but the hardware's state layout, its seeding of the state
from ``set_rng_seed``, and the state of an engine never seeded are not documented: nki-sim's
streams are deterministic per seed (and per instance), not bit-identical to hardware's."""

from __future__ import annotations

from typing import Any

from .. import dtypes
from ..errors import NKIError, NKIShapeError, NKITypeError, NKIUnsupportedError, user_loc
from ..ir import Const
from ..tracer import NkiTensor
from ..tracer.api_checks import broken
from .common import Call, Instruction, dt, dtype_in, free_size, is_tile, scalar_or_vector
from .enums import engine as _engine
from .forms import instruction
from .rules import target

STATE_WORDS = {"gpsimd": 6, "vector": 24}  # uint32 XORWOW state words per lane


def _needs_gen(eng: str, gen: int, api: str) -> None:
    t = target()
    if t.gen < gen:
        raise NKIUnsupportedError(
            f"'{api}' on the {eng} engine needs NeuronCore-v{gen} or newer; target is {t.name} "
            f"(NeuronCore-v{t.gen})",
            code="err_unsupported_engine_for_op",
            loc=user_loc(),
        )


def _buffers(eng: str) -> tuple[str, ...]:
    return ("sbuf",) if eng == "gpsimd" else ("sbuf", "psum")


@instruction
def rng(dst: Any, engine: Any = _engine.vector, name: Any = None) -> Instruction:
    """Fill the integer tile ``dst`` with 32 random bits per element (the low bits for
    narrower dtypes) from each partition's lane generator. ``engine``: Vector (default; SBUF or
    PSUM) or GpSimd (NeuronCore-v3+, SBUF only).

    Example: ``nisa.rng(bits)`` with ``bits`` a uint32 tile.
    """
    c = Call("rng")
    api = c.api
    eng = c.choose_engine(engine)
    if eng == "gpsimd":
        _needs_gen(eng, 3, api)
    dacc, dtile = c.tile(dst, "dst", _buffers(eng))
    if not dtypes.is_int(dt(dtile)):
        raise NKIError(
            f"'dst' of '{api}' must have an integer dtype (random bits), got {dt(dtile)}",
            code="err_unsupported_dtype",
            loc=user_loc(),
        )
    return c.emit(dacc, ())


@instruction
def rand2(dst: Any, min: Any, max: Any, name: Any = None) -> Instruction:  # noqa: A002
    """Uniform random values in [min, max] on the Vector engine (NeuronCore-v4): per element
    ``min + u * (max - min)`` in fp32 with ``u = bits * 2**-32`` from the lane's XORWOW
    generator (an assumption: the hardware's bits-to-float mapping is not documented), cast to
    ``dst``'s dtype. ``min`` <= ``max`` are compile-time floats.

    Example: ``nisa.rand2(u, 0.0, 1.0)``.
    """
    c = Call("rand2")
    api = c.api
    dacc, _ = c.tile(dst, "dst")
    lo, hi = (_float(v, api, role) for v, role in ((min, "min"), (max, "max")))
    if lo > hi:
        raise NKIError(
            f"'min'={lo} of '{api}' is larger than 'max'={hi}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    return c.emit(dacc, (Const(lo), Const(hi)))


def _float(v: Any, api: str, role: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
        raise NKIError(
            f"'{role}' of '{api}' must be a compile-time float, got {v!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    return float(v)


@instruction
def set_rng_seed(src_seeds: Any, name: Any = None) -> Instruction:
    """Seed every lane generator of the Vector and GpSimd engines from the 32-bit integer in a
    [1, 1] tile (each lane's state is a fixed function of the seed, the engine and the lane).

    Example: ``nisa.set_rng_seed(seed_tile)``.
    """
    c = Call("set_rng_seed")
    api = c.api
    sacc, stile = c.tile(src_seeds, "src_seeds")
    if tuple(sacc.shape) != (1, 1):
        raise NKIShapeError(
            f"'src_seeds' of '{api}' must be a [1, 1] tile, got {list(sacc.shape)}",
            code="err_invalid_shape",
            loc=user_loc(),
        )
    dtype_in(stile, ("int32", "uint32"), api, "src_seeds")
    return c.emit(None, (sacc,))


def _state_tile(c: Call, x: Any, eng: str, role: str):
    api = c.api
    acc, t = c.tile(x, role, _buffers(eng))
    dtype_in(t, ("uint32",), api, role)
    words = STATE_WORDS[eng]
    if len(acc.shape) != 2 or free_size(acc.shape) != words:
        raise NKIShapeError(
            f"'{role}' of '{api}' on the {eng} engine must be a 2-D (lanes, {words}) uint32 tile "
            f"(XORWOW state words per lane); got {list(acc.shape)}",
            code="err_invalid_shape",
            loc=user_loc(),
        )
    return acc


@instruction
def rand_set_state(src_seeds: Any, engine: Any = _engine.gpsimd, name: Any = None) -> Instruction:
    """Load the XORWOW state of lanes 0..P-1 of ``engine`` from ``src_seeds`` (P, 6) (GpSimd,
    SBUF) or (P, 24) (Vector, NeuronCore-v4, SBUF or PSUM), uint32 (NeuronCore-v3+).

    Example: ``nisa.rand_set_state(state)``.
    """
    c = Call("rand_set_state")
    eng = c.choose_engine(engine)
    if eng == "vector":
        _needs_gen(eng, 4, c.api)
    return c.emit(None, (_state_tile(c, src_seeds, eng, "src_seeds"),))


@instruction
def rand_get_state(dst: Any, engine: Any = _engine.gpsimd, name: Any = None) -> Instruction:
    """Store the XORWOW state of lanes 0..P-1 of ``engine`` into ``dst`` (P, 6) (GpSimd, SBUF)
    or (P, 24) (Vector, NeuronCore-v4), uint32 (NeuronCore-v3+).

    Example: ``nisa.rand_get_state(state)``.
    """
    c = Call("rand_get_state")
    eng = c.choose_engine(engine)
    if eng == "vector":
        _needs_gen(eng, 4, c.api)
    return c.emit(_state_tile(c, dst, eng, "dst"), ())


@instruction
def dropout(data: Any, prob: Any, *, mask: Any = None, dtype: Any = None) -> NkiTensor:
    """Zero each element with probability ``prob`` (a scalar or a (P, 1) tile per partition);
    kept elements are unchanged (no rescaling). Integer data needs a float32 ``prob`` and keeps
    its dtype. The random stream is per instance, seeded from SimConfig.shuffle_seed (or 0).

    Example: ``y = nisa.dropout(x, prob=0.1)``.
    """
    c = Call("dropout", dtype)
    api = c.api
    acc, t = c.tile(data, "data")
    pop, pdt = scalar_or_vector(prob, acc.shape[0], api, "prob")
    odt = c.result_dtype()
    if dtypes.is_int(dt(t)):
        if is_tile(prob) and pdt != "float32":
            raise NKITypeError(
                f"'prob' of '{api}' must be float32 for integer data ({dt(t)}); got {pdt}",
                code="err_invalid_operand_dtype",
                loc=user_loc(),
            )
        if odt != dt(t):
            raise NKITypeError(
                f"output dtype {odt} of '{api}' must equal the integer data dtype {dt(t)}",
                code="err_dtype_mismatch",
                loc=user_loc(),
            )
    elif is_tile(prob) and not dtypes.is_float(pdt):
        raise NKITypeError(
            f"'prob' of '{api}' must be a float tile, got {pdt}",
            code="err_invalid_operand_dtype",
            loc=user_loc(),
        )
    elif odt != dt(t):
        broken("dropout.dst_dtype", f"'{api}' got data {dt(t)} and dst {odt}")
    return c.new(acc.shape, (acc, pop), dtype=odt, mask=mask)
