"""The ``nki.isa`` instruction spec: one row per instruction, pure data.

Each row states what the instruction is (family module, engines, one-line doc), how it is called
in both generations of the API (the classic form: inputs in, a new tile out; the current form:
destination first, written in place), the IR instruction it records, how its result's shape
and dtype are decided, how uninitialised ("poisoned") input elements reach its result, the
targets that have it and the size limits the test strategies draw within.

Calling forms are written as Python parameter lists (``"dst, src, *, mask=None"``) so the table
reads like the API documentation; ``signature(name, form)`` turns one into an
``inspect.Signature``. Defaults that name an enum or op (``reduce_cmd.idle``, ``nl.maximum``)
stay symbolic (``Ref``) until ``signature(..., resolve=True)`` looks them up.

Sources: the classic form is the signature of the ``nki/isa/<family>.py`` function (a test
keeps them equal); the current form follows the NKI 0.3-0.7 stubs (``nki-current-api.md``
section 3, checked against the public ``nki.isa`` API pages), each taking ``name=None`` except
the register and scalar-register operations. Rows without a classic form are instructions of
the current API only.

The rows drive the code: ``nki/isa/forms.py`` gives each function the calling forms its row
has, ``nki/isa/common.Call`` reads its API name, result dtype rule, engine and IR attribute keys
from it, and the cost model takes its engine column. Adding an instruction: its row here, its
function in ``nki/isa/<family>.py`` (decorated ``@instruction``), its executor in
``simulator/isa/<family>.py`` and its tests; ``tests/isa/test_spec.py`` names whatever is
missing. This module imports nothing from the tracer or the simulator, so every layer may read
it."""

from __future__ import annotations

import ast
import difflib
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import NKITypeError, user_loc

CLASSIC, CURRENT = "classic", "current"
FORMS = (CLASSIC, CURRENT)
TARGETS = ("trn1", "trn2", "trn3")
_V3 = ("trn2", "trn3")
_V4 = ("trn3",)

# uninitialised-value rules (simulator ``_poison_rule``): a poisoned input element poisons
# "element": the same result position; "row": the whole result row of its partition; "matmul":
# the result rows / columns of its operand column; "transpose": the mirrored element;
# "report": nothing is propagated, the read itself is reported (checks="full").
POISON_RULES = ("element", "row", "matmul", "transpose", "report")
# classic result dtype: "arg|X" = the dtype= argument, else X ("data": the first tile operand's
# dtype; "widest": classic promotion over the tile operands; a dtype name); "arg": dtype=
# required; "dst": no result, the instruction writes its dst operand (in dst's dtype)
RESULT_DTYPE_RULES = ("arg|data", "arg|widest", "arg|float32", "arg|uint32", "arg", "dst")


@dataclass(frozen=True)
class Ref:
    """A symbolic default such as ``reduce_cmd.idle``: resolved on request, printed as written."""

    text: str

    def __repr__(self) -> str:
        return self.text


# ---- parameter vocabulary: name -> (role, type, IR attr key) ---------------------------------
# roles: dst (destination tile, written) | in (tile read) | out (secondary tile written) |
# operand (compile-time scalar or (P, 1) tile) | op (ALU / activation function) | attr
# (compile-time attribute) | engine | mask | dtype | name | register
@dataclass(frozen=True)
class Param:
    """One parameter of one calling form."""

    name: str
    role: str
    type: str
    default: Any = inspect.Parameter.empty
    kw_only: bool = False
    attr: str | None = None  # the IR attribute it is recorded as (classic executors read it)

    @property
    def required(self) -> bool:
        return self.default is inspect.Parameter.empty


_VOCAB: dict[str, tuple[str, str, str | None]] = {
    "dst": ("dst", "tile", None),
    "src": ("in", "tile", None),
    "data": ("in", "tile", None),
    "data0": ("in", "tile", None),
    "data1": ("in", "tile", None),
    "data2": ("in", "tile", None),
    "stationary": ("in", "tile", None),
    "moving": ("in", "tile", None),
    "on_true_tile": ("in", "tile", None),
    "on_true": ("in", "tile", None),
    "predicate": ("in", "tile", None),
    "vals": ("in", "tile", None),
    "src_buffer": ("in", "tile", None),
    "index": ("in", "tile", None),
    "indices": ("in", "tile", None),
    "segment_ids": ("in", "tile", None),
    "srcs": ("in", "list of tiles", None),
    "stationary_scale": ("in", "tile", None),
    "moving_scale": ("in", "tile", None),
    "src_seeds": ("in", "tile", None),
    "reduce_res": ("out", "(P, 1) tile", "reduce_res"),
    "dst_idx": ("out", "(P, 8) tile", "dst_idx"),
    "dst_scale": ("out", "tile", "dst_scale"),
    "val_dst": ("dst", "tile", None),
    "idx_dst": ("dst", "tile", "idx_dst"),
    "operand0": ("operand", "scalar | (P, 1) tile", None),
    "operand1": ("operand", "scalar | (P, 1) tile", None),
    "bias": ("operand", "scalar | (P, 1) tile", None),
    "scale": ("operand", "float32 scalar | (P, 1) tile", None),
    "initial": ("operand", "scalar | (P, 1) tile", None),
    "prob": ("operand", "scalar | (P, 1) tile", None),
    "on_false": ("operand", "float32 scalar | (P, 1) tile", None),
    "bound0": ("operand", "float32 scalar | (P, 1) tile", None),
    "bound1": ("operand", "float32 scalar | (P, 1) tile", None),
    "imm0": ("operand", "scalar | (P, 1) tile", None),
    "imm1": ("operand", "scalar | (P, 1) tile", None),
    "max_value": ("operand", "float32 scalar | (P, 1) tile", None),
    "reduce_init": ("operand", "scalar | (P, 1) tile", None),
    "relu_param": ("operand", "scalar | (P, 1) tile", None),
    "on_false_value": ("attr", "float32 scalar", None),
    "imm": ("operand", "float scalar", None),
    "value": ("operand", "scalar", None),
    "min": ("operand", "float32 scalar", None),
    "max": ("operand", "float32 scalar", None),
    "op": ("op", "ALU op", "op"),
    "op0": ("op", "ALU op", "op0"),
    "op1": ("op", "ALU op", "op1"),
    "reduce_op": ("op", "ALU op (reduction)", "reduce_op"),
    "comp_op0": ("op", "comparison op", "comp_op0"),
    "comp_op1": ("op", "comparison op", "comp_op1"),
    "cmp_op": ("op", "comparison op", None),
    "dst_rmw_op": ("op", "ALU op (nl.add only)", "rmw"),
    "reverse0": ("attr", "bool", "reverse0"),
    "reverse1": ("attr", "bool", "reverse1"),
    "reverse_pred": ("attr", "bool", "reverse_pred"),
    "negate": ("attr", "bool", "negate"),
    "keepdims": ("attr", "bool", None),
    "axis": ("attr", "int | tuple of int", "axes"),
    "axes": ("attr", "tuple of int", "axes"),
    "reduce_cmd": ("attr", "reduce_cmd", "reduce_cmd"),
    "oob_mode": ("attr", "oob_mode", "oob"),
    "dge_mode": ("attr", "dge_mode", "dge"),
    "perf_mode": ("attr", "matmul_perf_mode", "perf_mode"),
    "is_transpose": ("attr", "bool", "transpose"),
    "is_stationary_onezero": ("attr", "bool (hint)", None),
    "is_moving_onezero": ("attr", "bool (hint)", None),
    "tile_position": ("attr", "(row, column) ints or affine", "tile_position"),
    "tile_size": ("attr", "(rows, columns) ints", "tile_size"),
    "accumulate": ("attr", "bool | None", None),
    "shuffle_mask": ("attr", "32 ints", "shuffle"),
    "num_elem_per_idx": ("attr", "int", "n_elem"),
    "num_valid_indices": ("attr", "int | None", "n_valid"),
    "range_start": ("attr", "int", "range_start"),
    "pred": ("attr", "affine predicate", "pred"),
    "expr": ("attr", "affine index expression", None),
    "pattern": ("attr", "[[step, num], ...]", None),
    "offset": ("attr", "int | register", None),
    "channel_multiplier": ("attr", "int", None),
    "shape": ("attr", "tuple of int", None),
    "priority": ("attr", "int 0-3 | None", None),
    "scales": ("attr", "list of float | None", None),
    "unique_indices": ("attr", "bool", "unique"),
    "reduce_res_negate": ("attr", "bool", None),
    "index_offset": ("attr", "int", None),
    "padding_val": ("attr", "int", None),
    "n": ("attr", "int", None),
    "cores": ("attr", "tuple of int", None),
    "send_to_rank": ("attr", "int", None),
    "recv_from_rank": ("attr", "int", None),
    "pipe_id": ("attr", "int", None),
    "dma_engine": ("attr", "dma_engine", None),
    "engine": ("engine", "engine", "engine"),
    "mask": ("mask", "affine predicate", None),
    "dtype": ("dtype", "dtype", None),
    "name": ("name", "str", None),
    "x": ("register", "int | None", None),
}
# IR attributes holding a tile the instruction writes, not reads: a secondary output
# (``reduce_res``...) or a second destination (``idx_dst``)
OUTPUT_ATTRS = frozenset(
    attr for role, _, attr in _VOCAB.values() if role in ("out", "dst") and attr
)
# parameters whose role depends on the instruction
_OVERRIDES: dict[tuple[str, str], tuple[str, str, str | None]] = {
    ("tensor_copy_predicated", "src"): ("operand", "tile | scalar", None),
    ("tensor_copy_dynamic_dst", "dst"): ("dst", "tile (dynamic offset)", None),
    ("tensor_copy_dynamic_src", "src"): ("in", "tile (dynamic offset)", None),
    ("nc_stream_shuffle", "dtype"): ("dtype", "dtype (accepted, ignored)", None),
    # (which engine generates the descriptors: the same transpose, nothing recorded)
    ("dma_transpose", "dge_mode"): ("attr", "dge_mode", None),
    ("memset", "value"): ("attr", "compile-time scalar", None),
    ("register_move", "dst"): ("register", "register", None),
    ("register_move", "src"): ("register", "int | register", None),
    ("register_load", "dst"): ("register", "register", None),
    ("register_store", "src"): ("register", "register", None),
    ("scalar_store", "value"): ("register", "NkiScalar", None),
    ("core_barrier", "data"): ("in", "shared HBM tensor", None),
    ("dma_compute", "reduce_op"): ("op", "ALU op (nl.add only)", None),
}


@dataclass(frozen=True)
class Limit:
    """A size limit: ``source`` is ``target.<field>``, ``rules.<field>[i]`` or an int. ``key`` names
    it in ``nki.testing.strategies.free_limit`` when the strategies draw within it."""

    what: str
    source: str | int
    key: str = ""
    dim: str = "free"  # "free": elements per partition; "partition": partitions

    def value(self, target: Any, rules: Any) -> int:
        if isinstance(self.source, int):
            return self.source
        obj, _, rest = self.source.partition(".")
        base = {"target": target, "rules": rules}[obj]
        attr, _, idx = rest.partition("[")
        v = getattr(base, attr)
        return int(v[int(idx.rstrip("]"))] if idx else v)


@dataclass(frozen=True)
class Instruction:
    """One ``nki.isa`` instruction (see the module docstring for each column's meaning)."""

    name: str
    family: str  # the module of its function and executor: nki/isa/ and simulator/isa/<family>.py
    engines: tuple[str, ...]  # allowed engines; the first is the default
    doc: str
    classic: str | None  # parameter list of the classic form (None: current API only)
    current: str | None  # parameter list of the destination-first form (None: classic only)
    ir_op: str = ""  # the IR ``isa.<op>`` the classic form records ("" when not today)
    ir_attrs: tuple[str, ...] = ("engine",)  # IR attribute keys the executor may read
    result: str = "new tile, data's shape; dtype arg or data's dtype"  # classic result rule
    result_dtype: str = "arg|data"  # classic result dtype rule, one of RESULT_DTYPE_RULES
    result_current: str = "writes dst in place; dtype dst.dtype"
    poison: str = "report"
    poison_if: tuple[tuple[str, Any, str], ...] = ()  # (IR attr, value, rule) overrides
    targets: tuple[str, ...] = TARGETS
    current_targets: tuple[str, ...] | None = None  # when the current API differs
    limits: tuple[Limit, ...] = ()
    ignored: tuple[str, ...] = ()  # classic keywords accepted on purpose without effect
    numba: str = "hosted"  # "hosted": Numba code calls the interpreter's executor back
    note: str = ""

    @property
    def api(self) -> str:
        """The user-facing name errors quote, e.g. ``nisa.tensor_tensor``."""
        return f"nisa.{self.name}"

    @property
    def current_only(self) -> bool:
        return self.classic is None

    @property
    def default_engine(self) -> str:
        return self.engines[0]

    def form(self, form: str) -> str | None:
        if form not in FORMS:
            raise ValueError(f"unknown calling form {form!r}; expected one of {FORMS}")
        return self.classic if form == CLASSIC else self.current

    def params(self, form: str) -> tuple[Param, ...]:
        """The parameters of one calling form, with roles, types and defaults."""
        text = self.form(form)
        if text is None:
            raise KeyError(f"nisa.{self.name} has no {form} calling form")
        return _parse(self.name, text)

    def takes_dst(self, form: str) -> bool:
        text = self.form(form)
        return text is not None and any(p.role == "dst" for p in self.params(form))

    def param(self, name: str) -> Param | None:
        """The parameter ``name`` of the classic form, else of the current form (None: neither)."""
        for form in FORMS:
            if self.form(form) is not None:
                for p in self.params(form):
                    if p.name == name:
                        return p
        return None

    def attr_key(self, param: str) -> str:
        """The IR attribute a parameter is recorded as (its vocabulary key; the classic form's
        parameter where both forms have it)."""
        p = self.param(param)
        if p is None or p.attr is None:
            raise KeyError(f"parameter {param!r} of nisa.{self.name} is not an IR attribute")
        return p.attr

    def poison_rule(self, attrs: dict[str, Any] | None = None) -> str:
        """The uninitialised-value rule for an IR instruction with these attributes."""
        for key, val, rule in self.poison_if:
            if attrs is not None and attrs.get(key) == val:
                return rule
        return self.poison

    def target_list(self, form: str = CLASSIC) -> tuple[str, ...]:
        if form == CURRENT and self.current_targets is not None:
            return self.current_targets
        return self.targets


@functools.cache
def _parse(name: str, text: str) -> tuple[Param, ...]:
    fn = ast.parse(f"def f({text}): pass").body[0]
    assert isinstance(fn, ast.FunctionDef)
    a = fn.args
    pos_defaults = [None] * (len(a.args) - len(a.defaults)) + list(a.defaults)
    items = [(arg, d, False) for arg, d in zip(a.args, pos_defaults)]
    items += [(arg, d, True) for arg, d in zip(a.kwonlyargs, a.kw_defaults)]
    out = []
    for arg, d, kw in items:
        role, typ, attr = _OVERRIDES.get((name, arg.arg)) or _VOCAB[arg.arg]
        default = inspect.Parameter.empty if d is None else _default(d)
        out.append(Param(arg.arg, role, typ, default, kw, attr))
    return tuple(out)


def _default(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return Ref(ast.unparse(node))


# ---- the table --------------------------------------------------------------------------------
_W = "new tile, data's shape; dtype arg or widest input (classic promotion)"

INSTRUCTIONS: tuple[Instruction, ...] = (
    # --- DMA ------------------------------------------------------------------------------------
    Instruction(
        "dma_copy", "dma", ("dma",),
        "Copy src to dst with a DMA engine (HBM <-> SBUF, SBUF <-> SBUF), casting through fp32.",
        classic="*, dst, src, mask=None, dst_rmw_op=None, oob_mode=oob_mode.error, "
        "dge_mode=dge_mode.unknown",
        current="dst, src, priority=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown, "
        "engine=engine.unknown, name=None",
        numba="native",
        ir_op="dma_copy", ir_attrs=("engine", "oob", "dge", "rmw"),
        result="writes dst in place (no return); same element count, dst's dtype",
        result_current="writes dst in place; dtype dst.dtype (hwdge: equal dtypes)",
        note="dst_rmw_op is gone in the current API (use dma_compute); priority (v4) is the "
        "third parameter, as the stubs of SDK 2.31+ list it (older pages had oob_mode third)",
        result_dtype="dst",
    ),
    Instruction(
        "dma_transpose", "dma", ("dma",),
        "Transpose src (HBM or SBUF) into an SBUF tile with the DMA engine.",
        classic="src, *, axes=None, mask=None, dtype=None, dge_mode=dge_mode.unknown",
        current="dst, src, axes=None, priority=None, dge_mode=dge_mode.unknown, "
        "oob_mode=oob_mode.error, name=None",
        ir_op="dma_transpose", ir_attrs=("engine", "axes"),
        result="new SBUF tile, src's shape permuted by axes; dtype arg or src's dtype",
        current_targets=_V3,
    ),
    Instruction(
        "dma_compute", "dma", ("dma",),
        "dst = sum of srcs[i] * scales[i] with the DMA engine (fp32 inside; scatter/gather-add).",
        classic=None,
        current="dst, srcs, reduce_op, scales=None, unique_indices=True, oob_mode=oob_mode.error, "
        "name=None",
        ir_op="dma_compute", ir_attrs=("engine", "oob", "unique"),
        poison="element",
    ),
    # --- GpSimd ---------------------------------------------------------------------------------
    Instruction(
        "iota", "gpsimd", ("gpsimd",),
        "Materialise an affine index expression (classic) or pattern (current) as int32 values.",
        classic="expr, dtype, *, mask=None",
        current="dst, pattern, offset=0, channel_multiplier=0, name=None",
        ir_op="iota", result="new SBUF tile, the expression's shape; dtype arg (required)",
        result_dtype="arg",
        note="offset: an int, or an affine expression of loop iterators and program ids; a "
        "register offset (NKI 0.4 notes) is not simulated (err_unsupported_attribute)",
    ),
    Instruction(
        "memset", "gpsimd", ("vector", "gpsimd"),
        "Fill a tile with a compile-time constant.",
        classic="shape, value, dtype, *, mask=None, engine=None",
        current="dst, value, engine=engine.unknown, name=None",
        numba="native",
        ir_op="memset", result="new SBUF tile of shape; dtype arg (required)",
        result_current="writes dst in place; value typed like dst.dtype",
        result_dtype="arg",
    ),
    Instruction(
        "affine_select", "gpsimd", ("gpsimd",),
        "Select on_true_tile where an affine predicate holds, else on_false_value.",
        classic="pred, on_true_tile, on_false_value, *, mask=None, dtype=None",
        current="dst, pattern, channel_multiplier, on_true_tile, on_false_value, "
        "cmp_op=nl.equal, offset=0, name=None",
        ir_op="affine_select", ir_attrs=("engine", "pred"), poison="element",
        result="new SBUF tile, on_true_tile's shape; dtype arg or on_true_tile's dtype",
        note="current docs of some releases list offset positionally after pattern; the "
        "stubs (0.3+) put it after cmp_op, where SDK 2.32's takes it positionally; offset as "
        "iota's (an int or an affine expression of loop iterators and program ids)",
    ),
    Instruction(
        "tensor_partition_reduce", "gpsimd", ("gpsimd",),
        "Reduce across partitions (add, average, max, min, bitwise or/and/xor) to one "
        "partition.",
        classic="op, data, *, mask=None, dtype=None",
        current="dst, op, data, name=None",
        ir_op="tensor_partition_reduce", ir_attrs=("engine", "op", "average"),
        result="new SBUF tile (1, *data free); dtype arg or data's dtype",
    ),
    Instruction(
        "local_gather", "gpsimd", ("gpsimd",),
        "Gather elements within each 16-partition group by uint16 offsets.",
        classic="src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, *, mask=None",
        current="dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=None",
        ir_op="local_gather", ir_attrs=("engine", "n_elem", "n_valid"),
        result="new SBUF tile (P, F, 16, n) or (P, n_valid, n); src_buffer's dtype",
    ),
    Instruction(
        "sequence_bounds", "gpsimd", ("gpsimd",),
        "Start and end (exclusive) index of each element's segment of equal ids.",
        classic="*, segment_ids, dtype=None",
        current="dst, segment_ids, name=None",
        ir_op="sequence_bounds",
        result="new SBUF tile (1, 2, n); dtype arg or segment_ids' dtype (float32 / int32)",
    ),
    Instruction(
        "nc_n_gather", "gpsimd", ("gpsimd",),
        "dst[p, j] = data[p].flatten()[indices[p, j]] (uint32 indices, all SBUF).",
        classic=None, current="dst, data, indices, name=None",
        ir_op="nc_n_gather", poison="row",
    ),
    Instruction(
        "nonzero_with_count", "gpsimd", ("gpsimd",),
        "Positions of the nonzero elements of a row plus their count.",
        classic=None, current="dst, src, index_offset=0, padding_val=-1, name=None",
        ir_op="nonzero_with_count", ir_attrs=("engine", "index_offset", "padding_val"),
        poison="row", targets=_V3,
    ),
    Instruction(
        "topk", "gpsimd", ("gpsimd",),
        "The K largest bf16 values (ascending) and their uint32 indices.",
        classic=None, current="val_dst, idx_dst, src, n, name=None",
        ir_op="topk", ir_attrs=("engine", "n", "idx_dst"),
        result_current="writes val_dst and idx_dst in place",
    ),
    # --- Scalar ---------------------------------------------------------------------------------
    Instruction(
        "activation", "scalar", ("scalar",),
        "op(data * scale + bias) in fp32, with an optional free-axis reduction into registers.",
        classic="op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, "
        "reduce_cmd=reduce_cmd.idle, *, mask=None, dtype=None",
        current="dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, "
        "reduce_cmd=reduce_cmd.idle, name=None",
        numba="native",
        ir_op="activation", ir_attrs=("engine", "op", "reduce_cmd", "reduce_op", "reduce_res"),
        poison="element",
    ),
    Instruction(
        "activation_reduce", "scalar", ("scalar",),
        "activation plus a reduction of all free axes into reduce_res (reset_reduce).",
        classic="op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None",
        current="dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None",
        numba="native",
        ir_op="activation", ir_attrs=("engine", "op", "reduce_cmd", "reduce_op", "reduce_res"),
        poison="element",
        note="records an isa.activation with reduce_cmd=reset_reduce",
    ),
    Instruction(
        "activate2", "scalar", ("scalar",),
        "op((data op0 imm0) op1 imm1) with an optional reduction (NeuronCore-v4).",
        classic=None,
        current="dst, op, data, imm0, imm1, op0, op1, relu_param=0.0, reverse0=False, "
        "reverse1=False, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle, name=None",
        ir_op="activate2",
        ir_attrs=("engine", "op", "op0", "op1", "reverse0", "reverse1", "reduce_op",
                  "reduce_cmd", "reduce_res"),
        poison="element", targets=_V4,
    ),
    # --- Tensor ---------------------------------------------------------------------------------
    Instruction(
        "nc_matmul", "tensor", ("tensor",),
        "stationary.T @ moving on the Tensor engine, accumulated in fp32 into PSUM.",
        classic="stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, "
        "is_transpose=False, tile_position=(), tile_size=(), perf_mode=None, *, mask=None, "
        "dtype=None",
        current="dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, "
        "is_transpose=False, accumulate=None, tile_position=(), tile_size=(), "
        "perf_mode=matmul_perf_mode.none, name=None",
        ir_op="nc_matmul",
        ir_attrs=("engine", "transpose", "perf_mode", "tile_position", "tile_size", "psum_group"),
        result="new PSUM tile (stationary free, moving free); dtype arg or float32 (is_transpose: "
        "stationary's dtype)",
        result_current="writes (accumulate: adds into) dst in place; dtype dst.dtype",
        poison="matmul", poison_if=(("transpose", True, "report"),),
        limits=(
            Limit("stationary free size", "target.gemm_stationary_fmax", "nc_matmul.stationary"),
            Limit("moving free size", "rules.matmul_moving_fmax", "nc_matmul.moving"),
            Limit("contraction (partitions)", 128),
        ),
        ignored=("is_stationary_onezero", "is_moving_onezero"),
        result_dtype="arg|float32",
    ),
    Instruction(
        "nc_matmul_mx", "mx", ("tensor",),
        "Microscaling (MX) matmul of x4 fp8/fp4 data with e8m0 scales (NeuronCore-v4).",
        classic=None,
        current="dst, stationary, moving, stationary_scale, moving_scale, tile_position=None, "
        "tile_size=None, accumulate=None, name=None",
        ir_op="nc_matmul_mx", ir_attrs=("engine", "psum_group", "tile_position", "tile_size"),
        poison="matmul",
        targets=_V4,
    ),
    Instruction(
        "nc_transpose", "tensor", ("tensor", "vector"),
        "Partition <-> free transpose on the Tensor (<= 128x128) or Vector (<= 32x32) engine, "
        "of any dtype.",
        classic="data, *, mask=None, dtype=None, engine=None",
        current="dst, data, engine=engine.unknown, name=None",
        numba="native",
        ir_op="nc_transpose", ir_attrs=("engine", "exact", "staged"), poison="transpose",
        result="new tile (free, partitions): PSUM on the Tensor engine, SBUF on the Vector "
        "engine; dtype arg or data's dtype",
        limits=(
            Limit("free size (Tensor engine)", "rules.tensor_transpose_max[1]",
                  "nc_transpose.tensor"),
            Limit("free size (Vector engine)", "rules.vector_transpose_max[1]",
                  "nc_transpose.vector"),
            Limit("partitions (Tensor engine)", "rules.tensor_transpose_max[0]",
                  "nc_transpose.tensor", "partition"),
            Limit("partitions (Vector engine)", "rules.vector_transpose_max[0]",
                  "nc_transpose.vector", "partition"),
        ),
        note="no engine: Tensor for SBUF data, Vector for PSUM data",
    ),
    # --- Vector: element-wise -------------------------------------------------------------------
    Instruction(
        "tensor_tensor", "vector", ("vector", "gpsimd"),
        "op(data1, data2) element-wise (a (P, 1) operand broadcasts along the free axis).",
        classic="data1, data2, op, *, dtype=None, mask=None, engine=None",
        current="dst, data1, data2, op, engine=engine.unknown, name=None",
        numba="native",
        ir_op="tensor_tensor", ir_attrs=("engine", "op"), poison="element", result=_W,
        result_dtype="arg|widest",
    ),
    Instruction(
        "tensor_scalar", "vector", ("vector", "scalar", "gpsimd"),
        "(data op0 operand0) op1 operand1 with scalar or (P, 1) operands.",
        classic="data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, "
        "*, dtype=None, mask=None, engine=None",
        current="dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, "
        "reverse1=False, engine=engine.unknown, name=None",
        numba="native",
        ir_op="tensor_scalar", ir_attrs=("engine", "op0", "op1", "reverse0", "reverse1"),
        poison="element",
    ),
    Instruction(
        "scalar_tensor_tensor", "vector", ("vector",),
        "(data op0 operand0) op1 operand1 with a scalar operand0 and a tile operand1.",
        classic="*, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, "
        "dtype=None, mask=None",
        current="dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, "
        "name=None",
        numba="native",
        ir_op="scalar_tensor_tensor", ir_attrs=("engine", "op0", "op1", "reverse0", "reverse1"),
        poison="element", result=_W,
        result_dtype="arg|widest",
    ),
    Instruction(
        "tensor_scalar_reduce", "reductions", ("vector",),
        "data op0 operand0 plus a reduction of the result's free axes into reduce_res.",
        classic="*, data, op0, operand0, reduce_op, reduce_res, reverse0=False, dtype=None, "
        "mask=None",
        current="dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False, "
        "reduce_cmd=reduce_cmd.reset_reduce, reduce_init=None, reduce_res_negate=False, "
        "name=None",
        ir_op="tensor_scalar_reduce",
        ir_attrs=("engine", "op0", "reverse0", "reduce_op", "reduce_res", "reduce_cmd",
                  "reduce_res_negate"),
        poison="row",
    ),
    Instruction(
        "tensor_scalar_cumulative", "reductions", ("vector",),
        "Per-partition running reduction reg = op1(op0(x, imm0), reg), written per element.",
        classic=None,
        current="dst, src, op0, op1, imm0, imm1=None, reduce_cmd=reduce_cmd.reset_reduce, "
        "name=None",
        ir_op="tensor_scalar_cumulative", ir_attrs=("engine", "op0", "op1", "reduce_cmd"),
        poison="row",
    ),
    Instruction(
        "exponential", "vector", ("vector",),
        "exp(src - max_value) with an optional sum into the Vector accumulators (NeuronCore-v4).",
        classic=None,
        current="dst, src, max_value=0.0, reduce_res=None, reduce_cmd=reduce_cmd.idle, "
        "reduce_init=0.0, name=None",
        ir_op="exponential", ir_attrs=("engine", "reduce_cmd", "reduce_res"),
        poison="element", targets=_V4,
    ),
    Instruction(
        "reciprocal", "vector", ("vector", "scalar"),
        "1 / data element-wise in fp32.",
        classic="data, *, dtype=None, mask=None, engine=None",
        current="dst, data, name=None",
        numba="native",
        ir_op="reciprocal", poison="element",
    ),
    Instruction(
        "dropout", "random", ("vector",),
        "Zero each element with probability prob (no rescaling).",
        classic="data, prob, *, mask=None, dtype=None",
        current="dst, data, prob, name=None",
        ir_op="dropout", poison="element",
    ),
    # --- Vector: reductions, scans, statistics --------------------------------------------------
    Instruction(
        "tensor_reduce", "reductions", ("vector",),
        "Reduce trailing contiguous free axes with op (negate: times -1).",
        classic="op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False",
        current="dst, op, data, axis, negate=False, keepdims=False, name=None",
        numba="native",
        ir_op="tensor_reduce", ir_attrs=("engine", "op", "axes", "negate"), poison="row",
        result="new tile, data's shape without the reduced axes (keepdims: size 1; at least "
        "(P, 1)); dtype arg or data's dtype",
    ),
    Instruction(
        "tensor_tensor_scan", "reductions", ("vector",),
        "Per-partition recurrence r[i] = op1(op0(data0[i], r[i-1]), data1[i]).",
        classic="data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *, "
        "dtype=None, mask=None",
        current="dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, "
        "name=None",
        ir_op="tensor_tensor_scan", ir_attrs=("engine", "op0", "op1", "reverse0", "reverse1"),
        poison="row", result=_W,
        result_dtype="arg|widest",
    ),
    Instruction(
        "bn_stats", "reductions", ("vector",),
        "(count, mean, variance * count) of the even and odd elements of each partition.",
        classic="data, *, mask=None, dtype=None",
        current="dst, data, name=None",
        ir_op="bn_stats", poison="row", result="new tile (P, 6); dtype arg or data's dtype",
        limits=(Limit("data free size", "target.bn_stats_fmax", "bn_stats"),),
    ),
    Instruction(
        "bn_aggr", "reductions", ("vector",),
        "Aggregate bn_stats triples into (mean, variance) per partition.",
        classic="data, *, mask=None, dtype=None",
        current="dst, data, name=None",
        ir_op="bn_aggr", poison="row", result="new tile (P, 2); dtype arg or data's dtype",
    ),
    Instruction(
        "max8", "search", ("vector",),
        "The 8 largest values of each partition, descending.",
        classic="*, src, mask=None, dtype=None",
        current="dst, src, name=None",
        ir_op="max8", poison="row", result="new tile (P, 8); dtype arg or src's dtype",
        limits=(Limit("src free size", 16384),),
    ),
    Instruction(
        "nc_find_index8", "search", ("vector",),
        "Index of the first occurrence of each of 8 values per partition.",
        classic="*, data, vals, mask=None, dtype=None",
        current="dst, data, vals, name=None",
        ir_op="nc_find_index8", poison="row",
        result="new tile (P, 8); dtype arg (uint32 / uint16) or uint32",
        limits=(Limit("data free size", 16384),),
        result_dtype="arg|uint32",
    ),
    Instruction(
        "nc_match_replace8", "search", ("vector",),
        "Replace the first occurrence of each of 8 values per partition by imm.",
        classic="*, data, vals, imm, dst_idx=None, mask=None, dtype=None",
        current="dst, data, vals, imm, dst_idx=None, name=None",
        ir_op="nc_match_replace8", ir_attrs=("engine", "dst_idx"), poison="row",
        limits=(Limit("data free size", 16384),),
    ),
    # --- Vector: copies and selection -----------------------------------------------------------
    Instruction(
        "tensor_copy", "selection", ("vector", "scalar", "gpsimd"),
        "Copy an on-chip tile (bit-exact for equal dtypes, else through fp32).",
        classic="src, *, mask=None, dtype=None, engine=None",
        current="dst, src, engine=engine.unknown, name=None",
        numba="native",
        ir_op="tensor_copy", ir_attrs=("engine", "exact"), poison="element",
    ),
    Instruction(
        "tensor_copy_dynamic_src", "selection", ("vector", "scalar", "gpsimd"),
        "tensor_copy whose source offset is read from an SBUF tile at run time.",
        classic="src, *, mask=None, dtype=None, engine=None",
        current=None,
        numba="native",
        ir_op="tensor_copy", ir_attrs=("engine", "exact"), poison="element",
        note="removed in the current API (0.4): use tensor_copy with src.ap(scalar_offset=...)",
    ),
    Instruction(
        "tensor_copy_dynamic_dst", "selection", ("vector", "scalar", "gpsimd"),
        "tensor_copy into a destination whose offset is read from an SBUF tile at run time.",
        classic="*, dst, src, mask=None, dtype=None, engine=None",
        current=None,
        numba="native",
        ir_op="tensor_copy", ir_attrs=("engine", "exact"), poison="element",
        result="writes dst in place (no return); dtype arg or src's dtype, cast to dst's",
        note="records an isa.tensor_copy and a copy into dst; removed in the current API (0.4)",
        result_dtype="dst",
    ),
    Instruction(
        "tensor_copy_predicated", "selection", ("vector",),
        "Copy src into dst where predicate is non-zero (zero with reverse_pred).",
        classic="*, src, dst, predicate, reverse_pred=False, mask=None, dtype=None",
        current="dst, src, predicate, reverse_pred=False, name=None",
        ir_op="tensor_copy_predicated", ir_attrs=("engine", "reverse_pred"), poison="element",
        result="writes dst in place (no return); dst's dtype",
        result_dtype="dst",
    ),
    Instruction(
        "select_reduce", "selection", ("vector",),
        "dst = where(predicate, on_true, on_false) with an optional max into the accumulators.",
        classic="*, dst, predicate, on_true, on_false, reduce_res=None, "
        "reduce_cmd=reduce_cmd.idle, reduce_op=None, reverse_pred=False, mask=None, dtype=None",
        current="dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=reduce_cmd.idle, "
        "reduce_op=nl.maximum, reverse_pred=False, name=None",
        ir_op="select_reduce",
        ir_attrs=("engine", "reverse_pred", "reduce_op", "reduce_cmd", "reduce_res"),
        poison="row", result="writes dst in place (no return); dst's dtype",
        result_dtype="dst",
    ),
    Instruction(
        "range_select", "selection", ("vector",),
        "Keep elements whose free index lies in a range, fill the rest; max into accumulators.",
        classic="*, on_true_tile, comp_op0, comp_op1, bound0, bound1, "
        "reduce_cmd=reduce_cmd.idle, reduce_res=None, reduce_op=None, range_start=0, "
        "on_false_value=None, mask=None, dtype=None",
        current="dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, "
        "reduce_cmd=reduce_cmd.reset_reduce, reduce_res=None, reduce_op=nl.maximum, "
        "range_start=0, on_false_value=FP32_MIN, name=None",
        ir_op="range_select",
        ir_attrs=("engine", "comp_op0", "comp_op1", "range_start", "reduce_op", "reduce_cmd",
                  "reduce_res"),
        poison="row", targets=_V3,
    ),
    Instruction(
        "nc_stream_shuffle", "selection", ("vector",),
        "Move partitions within each 32-partition quadrant by a 32-entry mask (255: keep).",
        classic="src, dst, shuffle_mask, *, dtype=None, mask=None",
        current="dst, src, shuffle_mask, name=None",
        ir_op="nc_stream_shuffle", ir_attrs=("engine", "shuffle"),
        result="writes dst in place (no return); dst's dtype (= src's)",
        ignored=("dtype",),
        note="the classic order is (src, dst, mask); the current one (dst, src, mask)",
        result_dtype="dst",
    ),
    # --- quantisation and random numbers (current API only) -------------------------------------
    Instruction(
        "quantize_mx", "mx", ("vector",),
        "Quantise bf16/fp16 data to x4 fp8 with per-group e8m0 scales (NeuronCore-v4).",
        classic=None, current="dst, src, dst_scale, name=None",
        ir_op="quantize_mx", ir_attrs=("engine", "dst_scale"),
        targets=_V4, result_current="writes dst and dst_scale in place",
    ),
    Instruction(
        "rng", "random", ("vector", "gpsimd"),
        "32 random bits per element (low bits kept for narrower integer dtypes).",
        classic=None, current="dst, engine=engine.vector, name=None", ir_op="rng",
    ),
    Instruction(
        "rand2", "random", ("vector",),
        "Uniform fp32 random values in [min, max] (NeuronCore-v4).",
        classic=None, current="dst, min, max, name=None", targets=_V4, ir_op="rand2",
    ),
    Instruction(
        "set_rng_seed", "random", ("vector",),
        "Seed the random generator from a [1, 1] 32-bit tile.",
        classic=None, current="src_seeds, name=None", result_current="no result",
        ir_op="set_rng_seed",
    ),
    Instruction(
        "rand_set_state", "random", ("gpsimd", "vector"),
        "Load the per-lane XORWOW random state.",
        classic=None, current="src_seeds, engine=engine.gpsimd, name=None",
        targets=_V3, result_current="no result", ir_op="rand_set_state",
    ),
    Instruction(
        "rand_get_state", "random", ("gpsimd", "vector"),
        "Store the per-lane XORWOW random state into dst.",
        classic=None, current="dst, engine=engine.gpsimd, name=None", targets=_V3,
        ir_op="rand_get_state",
    ),
    # --- registers and synchronisation (current API only) ---------------------------------------
    Instruction(
        "register_alloc", "registers", ("sync",),
        "Allocate a 32-bit virtual register of an engine sequencer (initial value x).",
        classic=None, current="x=None", result_current="returns a VirtualRegister",
    ),
    Instruction(
        "register_move", "registers", ("sync",),
        "Set a register to an integer or another register's value.",
        classic=None, current="dst, src", result_current="writes the register dst",
    ),
    Instruction(
        "register_load", "registers", ("sync",),
        "Load a register from a one-element HBM/SBUF tensor.",
        classic=None, current="dst, src", result_current="writes the register dst",
    ),
    Instruction(
        "register_store", "registers", ("sync",),
        "Store a register into a one-element HBM/SBUF tensor.",
        classic=None, current="dst, src",
    ),
    Instruction(
        "scalar_load", "registers", ("sync",),
        "Read a 1x1 int32/int64 tensor as an NkiScalar (0.7 tracer).",
        classic=None, current="src", result_current="returns an NkiScalar",
    ),
    Instruction(
        "scalar_store", "registers", ("sync",),
        "Write an NkiScalar into a 1x1 tensor of the same width (0.7 tracer).",
        classic=None, current="dst, value",
    ),
    Instruction(
        "core_barrier", "collectives", ("gpsimd",),
        "Barrier between the two cores of an LNC=2 launch on a shared-HBM tensor.",
        classic=None, current="data, cores, engine=engine.gpsimd, name=None",
        targets=_V3, result_current="no result",
    ),
    Instruction(
        "sendrecv", "collectives", ("dma",),
        "Swap SBUF tiles between the two cores of an LNC=2 launch (src first).",
        classic=None,
        current="src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=dma_engine.dma, "
        "name=None",
        targets=_V3, result_current="writes dst (received tile) in place",
    ),
)  # fmt: skip

SPEC: dict[str, Instruction] = {i.name: i for i in INSTRUCTIONS}
_BY_IR_OP: dict[str, Instruction] = {}
for _i in INSTRUCTIONS:
    if _i.ir_op:
        _BY_IR_OP.setdefault(_i.ir_op, _i)


def get(name: str) -> Instruction:
    """The spec row of ``nisa.<name>`` (KeyError naming the closest instruction otherwise)."""
    try:
        return SPEC[name]
    except KeyError:
        close = difflib.get_close_matches(name, SPEC, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise KeyError(f"no nki.isa instruction '{name}'{hint}") from None


def by_ir_op(op: str) -> Instruction:
    """The classic instruction recording IR ``isa.<op>`` (the first, where several share one op,
    e.g. ``activation_reduce`` records ``isa.activation``)."""
    hit = _BY_IR_OP.get(op)
    if hit is None:
        raise KeyError(f"no nki.isa instruction records IR op 'isa.{op}'")
    return hit


def names(form: str | None = None) -> tuple[str, ...]:
    """Instruction names, all or those that have calling form ``form``."""
    return tuple(i.name for i in INSTRUCTIONS if form is None or i.form(form) is not None)


# Values of the symbolic defaults (``reduce_cmd.idle``, ``nl.maximum``): the enums and ops live
# above this table, so ``nki.isa`` registers them here when it is imported.
NAMESPACE: dict[str, Any] = {}


def _resolve(v: Any, ns: dict[str, Any]) -> Any:
    if not isinstance(v, Ref):
        return v
    try:
        return eval(v.text, {"__builtins__": {}}, ns)  # noqa: S307 - text from this table only
    except (NameError, AttributeError):
        return v  # not in nki-sim yet (e.g. dma_engine): stays symbolic


@functools.cache
def signature(name: str, form: str = CLASSIC, *, resolve: bool = False) -> inspect.Signature:
    """``inspect.Signature`` of one calling form; ``resolve`` evaluates symbolic defaults."""
    ns = NAMESPACE if resolve else {}
    P = inspect.Parameter
    params = [
        P(
            p.name,
            P.KEYWORD_ONLY if p.kw_only else P.POSITIONAL_OR_KEYWORD,
            default=_resolve(p.default, ns) if resolve else p.default,
        )
        for p in get(name).params(form)
    ]
    return inspect.Signature(params)


@functools.cache
def _positional(name: str, form: str) -> tuple[str, ...]:
    return tuple(p.name for p in get(name).params(form) if not p.kw_only)


def plain_bind(
    name: str, form: str, args: tuple[Any, ...], kwargs: dict[str, Any], defaults: bool
) -> dict[str, Any] | None:
    """What ``signature(name, form).bind`` binds, in parameter order (with ``defaults``, the
    resolved defaults of the parameters not given, as ``apply_defaults`` adds them), for a call
    that binds: each positional argument to the next positional parameter, each keyword to a
    parameter not given by position, every parameter without a default given. None for any
    other call: the signatures have no ``*args`` / ``**kwargs``, so ``inspect``'s bind raises
    a TypeError for exactly those (and says which rule broke). Several times cheaper than it."""
    positional = _positional(name, form)
    if len(args) > len(positional):
        return None
    given = dict(zip(positional, args))
    params = signature(name, form, resolve=True).parameters
    for k, v in kwargs.items():
        if k in given or k not in params:
            return None
        given[k] = v
    out = {}
    for k, p in params.items():
        if k in given:
            out[k] = given[k]
        elif p.default is p.empty:
            return None
        elif defaults:
            out[k] = p.default
    return out


def _unknown_keyword(name: str, key: str, valid: list[str]) -> Exception:
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    if key not in valid and get(name).current is not None and key in _names(name, CURRENT):
        # a keyword of the destination-first form: the kernel mixes the two calling forms
        hint = (
            f"; '{key}' belongs to the current API's destination-first form "
            f"nisa.{name}{signature(name, CURRENT)}, while the classic form returns a new tile"
        )
    elif key in ("dtype", "mask") and "dst" in valid:
        # (AWS's samples of early 2026 still pass dtype= to destination-first calls)
        hint = f"; the destination-first nisa calls take no {key}= (removed in NKI 0.2): " + (
            "the result takes dst's dtype" if key == "dtype" else "write a view of dst instead"
        )
    return NKITypeError(
        f"'nisa.{name}' got an unexpected keyword argument '{key}'{hint} (valid: "
        f"{', '.join(valid)})",
        code="err_unexpected_keyword_argument",
        loc=user_loc(),
    )


def _names(name: str, form: str) -> list[str]:
    return [p.name for p in get(name).params(form)]


def bind(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any], form: str = CLASSIC
) -> inspect.BoundArguments:
    """Bind a call of ``nisa.<name>`` to its spec signature (defaults applied). A wrong call
    raises a located NKIError: an unknown keyword names the closest valid one."""
    sig = signature(name, form, resolve=True)
    plain = plain_bind(name, form, args, kwargs, defaults=True)
    if plain is not None:
        return inspect.BoundArguments(sig, plain)  # type: ignore[arg-type]
    for k in kwargs:
        if k not in sig.parameters:
            raise _unknown_keyword(name, k, list(sig.parameters))
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise NKITypeError(
            f"'nisa.{name}': {e} (signature: nisa.{name}{sig})",
            code="err_invalid_argument",
            loc=user_loc(),
        ) from None
    bound.apply_defaults()
    return bound


# kinds of parameter the spec can check by value alone (the functions check the rest)
_KIND_CHECKS: dict[str, Callable[[Any], bool]] = {
    "bool": lambda v: type(v).__name__ in ("bool", "bool_"),
    "str": lambda v: isinstance(v, str),
}


@functools.cache
def _kind_checked(name: str, form: str) -> tuple[tuple[Param, Callable[[Any], bool]], ...]:
    params = get(name).params(form)
    return tuple((p, _KIND_CHECKS[p.type]) for p in params if p.type in _KIND_CHECKS)


@functools.cache
def by_name(name: str, form: str) -> dict[str, Param]:
    """The parameters of one calling form by name (read only)."""
    return {p.name: p for p in get(name).params(form)}


def check_kinds(name: str, form: str, arguments: dict[str, Any]) -> None:
    """A flag given a non-bool (``reverse0="yes"``) or an instruction name given a non-str is a
    located error (they would otherwise be taken as true or dropped)."""
    for p, check in _kind_checked(name, form):
        v = arguments.get(p.name)
        if v is not None and not check(v):
            raise NKITypeError(
                f"'{p.name}' of 'nisa.{name}' must be a {p.type}, got {v!r}",
                code="err_invalid_argument",
                loc=user_loc(),
            )


def checked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator of a classic ``nki.isa`` function: its name must have a classic form in the
    spec, and a keyword outside that form is a located error naming the closest valid keyword
    (instead of being swallowed, as ``dst=`` or a misspelled ``bais=`` once were). A string
    ``name=`` (the instruction's label, which classic kernels pass through ``**kwargs``) is
    accepted and has no effect."""
    name = fn.__name__
    valid = frozenset(p.name for p in get(name).params(CLASSIC))
    drop_label = "name" not in valid

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if drop_label and isinstance(kwargs.get("name"), str):
            # classic instructions took **kwargs: name= labels the instruction for the compiler
            del kwargs["name"]
        for k in kwargs:
            if k not in valid:
                raise _unknown_keyword(name, k, _names(name, CLASSIC))
        if kwargs:
            check_kinds(name, CLASSIC, kwargs)
        try:
            return fn(*args, **kwargs)
        except TypeError as e:
            if e.__traceback__ is None or e.__traceback__.tb_next is not None:
                raise  # raised inside the function, not by binding its arguments
            forms = f"nisa.{name}{signature(name, CLASSIC)}"
            if get(name).current is not None:
                forms += f"; destination-first: nisa.{name}{signature(name, CURRENT)}"
            raise NKITypeError(
                f"'nisa.{name}': {e} (signature: {forms})",
                code="err_invalid_argument",
                loc=user_loc(),
            ) from None

    return call


# ---- the reference page's table ----------------------------------------------------------
_ENGINE_TITLES = {
    "tensor": "Tensor",
    "scalar": "Scalar",
    "vector": "Vector",
    "gpsimd": "GpSimd",
    "dma": "DMA",
    "sync": "Sync",
}


def _call(i: Instruction, form: str) -> str:
    text = i.form(form)
    if text is None:
        return "-"
    parts = []
    for p in i.params(form):
        if p.role in ("mask", "dtype", "name") and not p.required:
            continue  # common to (almost) every instruction of the form
        parts.append(p.name if p.required else f"{p.name}=")
    return f"`{i.name}({', '.join(parts)})`"


def markdown() -> str:
    """The nki.isa reference page's table: one row per instruction, both calling forms."""
    rows = [
        "| instruction | engine | classic call (returns a new tile unless it takes dst) | "
        "current call (destination first) | targets | what it does |",
        "|---|---|---|---|---|---|",
    ]
    for i in INSTRUCTIONS:
        engines = "/".join(_ENGINE_TITLES[e] for e in i.engines)
        targets = "all" if i.targets == TARGETS else ", ".join(i.targets)
        if i.current_targets is not None:
            targets += f" (current API: {', '.join(i.current_targets)})"
        rows.append(
            f"| `{i.name}` | {engines} | {_call(i, CLASSIC)} | {_call(i, CURRENT)} | {targets} "
            f"| {i.doc} |"
        )
    return "\n".join(rows)


__all__ = [
    "CLASSIC",
    "CURRENT",
    "INSTRUCTIONS",
    "Instruction",
    "Limit",
    "POISON_RULES",
    "RESULT_DTYPE_RULES",
    "Param",
    "Ref",
    "SPEC",
    "bind",
    "checked",
    "get",
    "markdown",
    "names",
    "signature",
]
