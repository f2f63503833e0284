"""Engine rules of the nki.isa instruction set, driven by the per-target table
``nki.targets.ISA_RULES`` and the op table's engine column.

Every violation raises an NKIError naming the instruction, the operand, the limit / values and
(through ``user_loc``) the kernel's line."""

from __future__ import annotations

from .. import isa_spec as spec
from ..errors import NKIError, NKIMemoryError, NKITypeError, NKIUnsupportedError, user_loc
from ..optable import Op
from ..targets import TARGETS
from ..tracer import NkiTensor
from .common import rules, target


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
                f"tile '{t.name}'; use the Vector or Scalar engine",
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
