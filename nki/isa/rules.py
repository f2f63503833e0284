"""Engine rules of the nki.isa instruction set, driven by the per-target table
``nki.targets.ISA_RULES`` and the op table's engine column.

Every violation raises an NKIError naming the instruction, the operand, the limit / values and
(through ``user_loc``) the kernel's line."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import isa_spec as spec
from ..errors import (
    NKIError,
    NKIMemoryError,
    NKIShapeError,
    NKITypeError,
    NKIUnsupportedError,
    user_loc,
)
from ..ir import Affine
from ..optable import Op
from ..symbolic import Scalar
from ..targets import TARGETS, IsaRules, Target, isa_rules
from ..tracer import NkiTensor, state


def target() -> Target:
    """The ``nki.targets.Target`` being traced."""
    return state("nki.isa").target


def rules() -> IsaRules:
    """The ``IsaRules`` row of the target being traced."""
    return isa_rules(target().name)


def _tgt() -> str:
    t = target()
    return f"{t.name} (NeuronCore-v{t.gen})"


def check_engine_op(op: Op, engine: str, api: str, role: str) -> None:
    """The engine must implement the ALU op; bit-vector ops run on the Vector engine only."""
    if op.bitvec and engine != "vector":
        raise NKIError(
            f"'{role}'={op.name} of '{api}' is a bit-vector operator, which only the Vector "
            f"engine executes; got engine={engine}",
            code="err_unsupported_engine_for_op",
            loc=user_loc(),
        )
    if engine not in op.engines:
        raise NKIError(
            f"'{role}'={op.name} of '{api}' is not supported on the {engine} engine (engines "
            f"that run it: {', '.join(op.engines)})",
            code="err_unsupported_engine_for_op",
            loc=user_loc(),
        )


def check_gpsimd_memory(engine: str, tensors: dict[str, NkiTensor], api: str) -> None:
    """GpSimd has no path to PSUM."""
    if engine != "gpsimd":
        return
    for role, t in tensors.items():
        if t is not None and t.buffer == "psum":
            raise NKIMemoryError(
                f"the GpSimd engine cannot access PSUM: operand '{role}' of '{api}' is the PSUM "
                f"tile {t.label}; use the Vector or Scalar engine",
                code="err_unsupported_memory",
                loc=user_loc(),
            )


def check_scalar_pair(op0: Op, op1: Op | None, api: str) -> None:
    """Scalar-engine ``tensor_scalar`` supports only a few op pairs, and only from v3."""
    pairs = rules().scalar_alu_pairs
    key = (op0.name, op1.name if op1 is not None else None)
    if not pairs:
        raise NKIUnsupportedError(
            f"'{api}' on the Scalar engine is not available on {_tgt()}: Scalar-engine ALU "
            "ops need NeuronCore-v3 (trn2) or newer; use engine=nisa.vector_engine",
            code="err_unsupported_engine_for_op",
            loc=user_loc(),
        )
    if key not in pairs:
        allowed = ", ".join(f"(op0={a}, op1={b})" for a, b in pairs)
        raise NKIError(
            f"'{api}' on the Scalar engine supports only the op pairs {allowed} on {_tgt()}; "
            f"got (op0={key[0]}, op1={key[1]})",
            code="err_unsupported_engine_for_op",
            loc=user_loc(),
        )


def check_activation_reduce_op(op: Op, api: str) -> None:
    ok = rules().activation_reduce_ops
    if op.name not in ok:
        raise NKIError(
            f"'reduce_op'={op.name} of '{api}' is not supported by the Scalar-engine "
            f"accumulators on {_tgt()}; supported: {', '.join(ok)}",
            code="err_unsupported_reduce_op",
            loc=user_loc(),
        )


def check_available(instruction: str, api: str) -> None:
    """Instructions introduced with a later NeuronCore generation (the spec's ``targets``)."""
    have = spec.get(instruction).targets
    if target().name not in have:
        first = min(have, key=lambda n: TARGETS[n].gen)
        raise NKIUnsupportedError(
            f"'{api}' is not available on {_tgt()}; it needs {first} "
            f"(NeuronCore-v{TARGETS[first].gen}) or newer",
            code="err_unsupported_instruction_for_target",
            loc=user_loc(),
        )


def check_dtype_in(
    name: str, allowed: tuple[str, ...], api: str, role: str, code: str = "err_unsupported_dtype"
) -> None:
    if name not in allowed:
        raise NKITypeError(
            f"operand '{role}' of '{api}' has dtype {name}; supported: {', '.join(allowed)}",
            code=code,
            loc=user_loc(),
        )


def check_pe_tiling(
    position: Any, size: Any, k: int, m: int, perf: str, api: str
) -> tuple[Affine, Affine] | None:
    """PE-array tiling of a matmul: sizes from the target's list, positions aligned to the sizes
    and inside the 128x128 array, and the operands must fit the tile (row = contraction, column
    = stationary free). Positions may be affine in loop iterators / program ids (as in the AWS
    ``nc_matmul`` example): those are checked over the loop ranges here and exactly, per
    iteration, when the instruction runs (the returned affine (row, column) positions)."""
    if not position and not size:
        return None
    if len(tuple(position)) != 2 or len(tuple(size)) != 2:
        raise NKIError(
            f"tile_position and tile_size of '{api}' must both be (row, column) pairs; got "
            f"tile_position={position!r}, tile_size={size!r}",
            code="err_invalid_tile_position",
            loc=user_loc(),
        )
    ok = rules().matmul_tile_sizes
    pos: list[Affine] = []
    for what, s, p, need in (("row", size[0], position[0], k), ("column", size[1], position[1], m)):
        if isinstance(s, Scalar) or s not in ok:
            raise NKIError(
                f"tile_size {what} {s} of '{api}' is not supported on {target().name}; "
                f"supported sizes: {list(ok)} (compile-time integers)",
                code="err_invalid_tile_position",
                loc=user_loc(),
            )
        aff = p.aff if isinstance(p, Scalar) else Affine.constant(_static_position(p, what, api))
        lo, hi = _position_bounds(aff)
        if (aff.is_const and aff.const % s) or lo < 0 or hi + s > 128:
            shown = aff.const if aff.is_const else f"{aff} (in [{lo}, {hi}])"
            raise NKIError(
                f"tile_position {what} {shown} of '{api}' must be a multiple of the tile size {s} "
                f"within the 128x128 PE array (position + size <= 128)",
                code="err_invalid_tile_position",
                loc=user_loc(),
            )
        if need > s:
            raise NKIShapeError(
                f"'{api}' operand {what} extent {need} does not fit tile_size {what} {s}",
                code="err_invalid_tile_position",
                loc=user_loc(),
            )
        pos.append(aff)
    if perf != "none" and size[1] != 128:
        raise NKIError(
            f"perf_mode={perf!r} of '{api}' cannot be combined with PE column tiling "
            f"(tile_size column {size[1]}); use a column size of 128",
            code="err_invalid_tile_position",
            loc=user_loc(),
        )
    return (pos[0], pos[1])


def _static_position(p: Any, what: str, api: str) -> int:
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)):
        raise NKIError(
            f"tile_position {what} of '{api}' must be an integer or an affine expression of loop "
            f"iterators / program ids; got {p!r}",
            code="err_invalid_tile_position",
            loc=user_loc(),
        )
    return int(p)


def _position_bounds(aff: Affine) -> tuple[int, int]:
    """(min, max) of a position over the enclosing loops' ranges (program ids unbounded here:
    their values are checked when the instruction runs)."""
    ranges = state("nisa.nc_matmul").loop_ranges
    if any(s not in ranges for s in aff.symbols()):
        return aff.const, aff.const
    return aff.bounds(ranges)
