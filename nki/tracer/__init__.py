"""Tracing: a kernel body runs once per input signature with symbolic program ids and loop
iterators, and every ``nl.*`` / ``nisa.*`` call checks its operands and records one IR
instruction.

Modules, by what they model:

* ``state``: the state of one trace, the per-thread trace stack, the kernel's API generation
  and Python control flow on loop iterators;
* ``loops``: symbolic loops, unrolled where Python needs their iterators' ints
  (``python_state`` reads what a loop body carries from the kernel's bytecode);
* ``handles``: tensor handles (``NkiTensor``, ``View``) and their Python operators;
* ``subscripts``: ``t[key]`` turned into affine index expressions;
* ``operands``: tile arguments as accesses, buffer / partition rules, ``mask=`` predicates;
* ``emission``: tensor declarations, IR instructions and assignment into tiles;
* ``tensors``: indexing, assignment, in-place updates and reshape on handles;
* ``views``, ``layouts``: the current API's view and layout methods on handles.

Each module imports only the ones above it in this list (``state`` uses ``bool_masks``,
``loops`` ``python_state`` and ``loop_exits``, which import no tracer module); the handle classes
come first because everything else checks or creates them, and the methods that index or
assign (which need subscripts and emission) are attached to them by ``tensors``, ``views`` and
``layouts`` when this package is imported."""

from __future__ import annotations

from .emission import (
    assign,
    check_broadcast_into,
    const_operand,
    emit,
    new_tensor,
    onchip_return,
    result_tile,
    stage_psum_operand,
    trailing_units,
)
from .handles import TILE_OPERATORS, DynOffset, NkiTensor, TileOps, View, _Assigned, is_register
from .held_output import held_output, release
from .layouts import install as _install_layouts
from .loops import escaped_loops, kernel_body, loop, symbolic_loop
from .operands import (
    as_2d,
    check_partitions,
    check_scope,
    check_start_partition,
    operand,
    require_buffer,
    to_mask,
)
from .state import (
    NeedsPerCore,
    NeedsUnroll,
    TraceState,
    classic_mode,
    concrete_value,
    current,
    decide_condition,
    generation,
    new_trace,
    note_generation,
    request_per_core,
    set_classic_mode,
    state,
    trace_with_unrolling,
    tracing,
    unroll_for_division,
    unrolling,
)
from .subscripts import compose, parse_subscript, prod
from .tensors import install as _install_tensors
from .tensors import reshape_tile
from .views import install as _install_views

_install_tensors()  # indexing, assignment and in-place updates on tensor handles
_install_views()  # the current API's view methods on tensor handles
_install_layouts()

__all__ = [
    "TILE_OPERATORS",
    "DynOffset",
    "NeedsPerCore",
    "NeedsUnroll",
    "NkiTensor",
    "TileOps",
    "is_register",
    "TraceState",
    "View",
    "_Assigned",
    "as_2d",
    "assign",
    "check_broadcast_into",
    "trailing_units",
    "check_partitions",
    "check_scope",
    "check_start_partition",
    "classic_mode",
    "compose",
    "concrete_value",
    "const_operand",
    "current",
    "decide_condition",
    "generation",
    "held_output",
    "note_generation",
    "request_per_core",
    "emit",
    "escaped_loops",
    "kernel_body",
    "loop",
    "new_tensor",
    "new_trace",
    "onchip_return",
    "operand",
    "parse_subscript",
    "prod",
    "require_buffer",
    "release",
    "reshape_tile",
    "result_tile",
    "set_classic_mode",
    "stage_psum_operand",
    "state",
    "symbolic_loop",
    "to_mask",
    "trace_with_unrolling",
    "tracing",
    "unroll_for_division",
    "unrolling",
]
