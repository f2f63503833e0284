"""Random-number instructions of the current API only: ``rng``, ``rand2``, ``set_rng_seed``,
``rand_set_state`` and ``rand_get_state``.

Each engine lane (partition) runs its own XORWOW generator (Marsaglia's xorshift with a Weyl
counter): 6 uint32 state words per lane on the GpSimd engine (x0..x4 and the counter), 24 on the
Vector engine (read here as 4 such generators used in turn for consecutive elements of a row).
The algorithm is the documented one, but the hardware's state layout, its seeding of the state
from ``set_rng_seed``, and the state of an engine never seeded are not documented: nki-sim's
streams are deterministic per seed (and per instance), not bit-identical to hardware's."""

from __future__ import annotations

from typing import Any

from .. import dtypes
from ..errors import NKIError, NKIShapeError, NKIUnsupportedError, user_loc
from ..ir import Const
from .common import dt, emit_isa, free_size, target, tile
from .current import Instruction
from .current_common import begin, current_only, dtype_in, handle
from .enums import engine as _engine
from .enums import engine_name

STATE_WORDS = {"gpsimd": 6, "vector": 24}  # uint32 XORWOW state words per lane


def _engine_of(x: Any, api: str, default: str) -> str:
    """``engine=`` of a random instruction: GpSimd (NeuronCore-v3+) or Vector."""
    eng = engine_name(x)
    eng = default if eng == "unknown" else eng
    if eng not in STATE_WORDS:
        raise NKIError(
            f"'{api}' runs on the Vector or GpSimd engine, not {eng}",
            code="err_unsupported_engine_for_op",
            loc=user_loc(),
        )
    return eng


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


@current_only
def rng(dst: Any, engine: Any = _engine.vector, name: Any = None) -> Instruction:
    """Fill the integer tile ``dst`` with 32 random bits per element (the low bits for
    narrower dtypes) from each partition's lane generator. ``engine``: Vector (default; SBUF or
    PSUM) or GpSimd (NeuronCore-v3+, SBUF only).

    Example: ``nisa.rng(bits)`` with ``bits`` a uint32 tile.
    """
    api = begin("rng")
    eng = _engine_of(engine, api, "vector")
    if eng == "gpsimd":
        _needs_gen(eng, 3, api)
    dacc, dtile = tile(dst, api, "dst", _buffers(eng))
    if not dtypes.is_int(dt(dtile)):
        raise NKIError(
            f"'dst' of '{api}' must have an integer dtype (random bits), got {dt(dtile)}",
            code="err_unsupported_dtype",
            loc=user_loc(),
        )
    emit_isa("rng", dacc, (), {"engine": eng}, api=api)
    return handle("rng")


@current_only
def rand2(dst: Any, min: Any, max: Any, name: Any = None) -> Instruction:  # noqa: A002
    """Uniform random values in [min, max] on the Vector engine (NeuronCore-v4): per element
    ``min + u * (max - min)`` in fp32 with ``u = bits * 2**-32`` from the lane's XORWOW
    generator (an assumption: the hardware's bits-to-float mapping is not documented), cast to
    ``dst``'s dtype. ``min`` <= ``max`` are compile-time floats.

    Example: ``nisa.rand2(u, 0.0, 1.0)``.
    """
    api = begin("rand2")
    dacc, _ = tile(dst, api, "dst", ("sbuf", "psum"))
    lo, hi = (_float(v, api, role) for v, role in ((min, "min"), (max, "max")))
    if lo > hi:
        raise NKIError(
            f"'min'={lo} of '{api}' is larger than 'max'={hi}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    emit_isa("rand2", dacc, (Const(lo), Const(hi)), {"engine": "vector"}, api=api)
    return handle("rand2")


def _float(v: Any, api: str, role: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
        raise NKIError(
            f"'{role}' of '{api}' must be a compile-time float, got {v!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    return float(v)


@current_only
def set_rng_seed(src_seeds: Any, name: Any = None) -> Instruction:
    """Seed every lane generator of the Vector and GpSimd engines from the 32-bit integer in a
    [1, 1] tile (each lane's state is a fixed function of the seed, the engine and the lane).

    Example: ``nisa.set_rng_seed(seed_tile)``.
    """
    api = begin("set_rng_seed")
    sacc, stile = tile(src_seeds, api, "src_seeds", ("sbuf", "psum"))
    if tuple(sacc.shape) != (1, 1):
        raise NKIShapeError(
            f"'src_seeds' of '{api}' must be a [1, 1] tile, got {list(sacc.shape)}",
            code="err_invalid_shape",
            loc=user_loc(),
        )
    dtype_in(stile, ("int32", "uint32"), api, "src_seeds")
    emit_isa("set_rng_seed", None, (sacc,), {"engine": "vector"}, api=api)
    return handle("set_rng_seed")


def _state_tile(x: Any, eng: str, api: str, role: str):
    acc, t = tile(x, api, role, _buffers(eng))
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


@current_only
def rand_set_state(src_seeds: Any, engine: Any = _engine.gpsimd, name: Any = None) -> Instruction:
    """Load the XORWOW state of lanes 0..P-1 of ``engine`` from ``src_seeds`` (P, 6) (GpSimd,
    SBUF) or (P, 24) (Vector, NeuronCore-v4, SBUF or PSUM), uint32 (NeuronCore-v3+).

    Example: ``nisa.rand_set_state(state)``.
    """
    api = begin("rand_set_state")
    eng = _engine_of(engine, api, "gpsimd")
    if eng == "vector":
        _needs_gen(eng, 4, api)
    sacc = _state_tile(src_seeds, eng, api, "src_seeds")
    emit_isa("rand_set_state", None, (sacc,), {"engine": eng}, api=api)
    return handle("rand_set_state")


@current_only
def rand_get_state(dst: Any, engine: Any = _engine.gpsimd, name: Any = None) -> Instruction:
    """Store the XORWOW state of lanes 0..P-1 of ``engine`` into ``dst`` (P, 6) (GpSimd, SBUF)
    or (P, 24) (Vector, NeuronCore-v4), uint32 (NeuronCore-v3+).

    Example: ``nisa.rand_get_state(state)``.
    """
    api = begin("rand_get_state")
    eng = _engine_of(engine, api, "gpsimd")
    if eng == "vector":
        _needs_gen(eng, 4, api)
    dacc = _state_tile(dst, eng, api, "dst")
    emit_isa("rand_get_state", dacc, (), {"engine": eng}, api=api)
    return handle("rand_get_state")


__all__ = ["rand2", "rand_get_state", "rand_set_state", "rng", "set_rng_seed"]
