"""Rules AWS's NKI documentation states, one row each, with the API generations they hold in.

Each row is a rule a kernel can break at one call or construct (``subject``): the rule as the
documentation states it (paraphrased; the error message quotes it), where it is stated, the
generations of the API it holds in (``classic``, ``current``) and how a kernel that breaks it
is told (an ``NKIError`` of ``cls`` with ``code``, or a warning of class ``cls``, as AWS's own
simulator warns). A rule of one generation only is checked when the kernel being traced is of
that generation; a kernel still undecided when it breaks one is told at the end of its trace if
it turns out to be of that generation (``nki/tracer/api_checks.py``).

Rows with ``checked=False`` are rules nki-sim does not check yet: a kernel that breaks one runs
anyway. The porting guide's lists of both (``docs/guides/porting.md``) are generated from
this table (:func:`markdown`).

Sources: the ``nki.isa`` / ``nki.language`` API reference of NKI 0.3-0.7 (the stubs'
docstrings), the NKI release notes 0.3-0.6 and the NKI simulator guide
(``nki/guides/nki_simulator.rst``) in ``aws-neuron/aws-neuron-sdk``; the classic rules from
the classic (``neuronxcc.nki``, SDK 2.26) API reference."""

from __future__ import annotations

from dataclasses import dataclass

from . import errors

CLASSIC, CURRENT = "classic", "current"
BOTH = (CLASSIC, CURRENT)


@dataclass(frozen=True)
class ApiRule:
    """One documented rule (see the module docstring for each column)."""

    key: str
    subject: str  # the call or construct it governs, as the kernel writes it
    rule: str  # the documentation's rule, quoted by the message
    source: str  # where AWS documents it
    generations: tuple[str, ...]  # API generations the rule holds in
    code: str = ""  # error code (errors only)
    cls: str = "NKIError"  # an NKIError subclass, or an NKIWarning subclass for a warning
    checked: bool = True  # False: nki-sim accepts kernels that break it (yet)
    note: str = ""  # why the generations are what they are, what is not covered

    @property
    def warning(self) -> bool:
        return issubclass(self.category, Warning)

    @property
    def category(self) -> type:
        return getattr(errors, self.cls)

    def message(self, detail: str) -> str:
        """``detail`` (what the kernel did, with its values) followed by the rule."""
        gens = "" if self.generations == BOTH else f" in the {self.generations[0]} API"
        return f"{detail}: {self.rule}{gens} ({self.source})"


_ISA = "nki.isa API reference"
_NOTES_03 = "NKI 0.3 release notes (SDK 2.29), breaking changes"

RULES: tuple[ApiRule, ...] = (
    # ---- checked -----------------------------------------------------------------------------
    ApiRule(
        "tensor_tensor.equal_free", "nisa.tensor_tensor",
        "data1 and data2 must have the same number of elements per partition; to broadcast a "
        "(P, 1) operand along the free axis use nisa.tensor_scalar",
        f"{_ISA}: nki.isa.tensor_tensor", (CURRENT,), "err_free_size_mismatch", "NKIShapeError",
        note="the classic page states it too, but AWS's classic double-row matmul sample scales "
        "rows with a (P, 1) tensor_tensor operand, so classic kernels keep broadcasting it",
    ),
    ApiRule(
        "activation.reduce_add", "nisa.activation(reduce_op=...)",
        "reduce_op must be nl.add", f"{_ISA}: nki.isa.activation", (CURRENT,),
        "err_unsupported_reduce_op",
        note="classic: the target's accumulator ops (add only on NeuronCore-v2); "
        "activation_reduce keeps max / min from NeuronCore-v3 in both generations",
    ),
    ApiRule(
        "tensor_scalar.gpsimd_rsqrt", "nisa.tensor_scalar(engine=gpsimd)",
        "on the GpSimd engine tensor_scalar is only allowed for rsqrt (op0=nl.rsqrt, no op1)",
        f"{_ISA}: nki.isa.tensor_scalar, engine parameter", (CURRENT,),
        "err_unsupported_engine_for_op",
        note="the classic page says so too, but the classic ALU-operator table lists add and "
        "multiply on GpSimd, and classic kernels use it for exact int32 arithmetic: classic "
        "kernels follow the table",
    ),
    ApiRule(
        "tensor_scalar.operand_fp32", "nisa.tensor_scalar(operand0=<(P, 1) tile>)",
        "with arithmetic operators, operand0 and operand1 (if used) must be float32",
        f"{_ISA}: nki.isa.tensor_scalar, data types", (CURRENT,), "err_invalid_operand_dtype",
        "NKITypeError", note="the classic page puts no dtype rule on the operands",
    ),
    ApiRule(
        "memset.value_dtype", "nisa.memset(dst, value)",
        "value must match dst's dtype: an integer tile takes an integer value (2, not 2.0), "
        "and x4 packed dtypes only 0", _NOTES_03, (CURRENT,), "err_memset_value_dtype",
        "NKITypeError",
        note="the classic memset(shape, value, dtype) casts value to dtype",
    ),
    ApiRule(
        "output.shared_hbm", "a returned kernel output",
        "kernel outputs must be allocated with buffer=nl.shared_hbm (nl.hbm outputs fail to "
        "compile)", _NOTES_03, (CURRENT,), "err_output_tensor_must_be_shared_hbm",
        "NKIMemoryError",
        note="classic kernels may return an nl.hbm tensor from a launch of one instance",
    ),
    ApiRule(
        "buffer.object", "buffer='sbuf' (a string)",
        "buffers are objects (nl.sbuf, nl.psum, nl.shared_hbm, ...); string buffer names are "
        "not accepted", _NOTES_03, (CURRENT,), "err_unsupported_memory", "NKITypeError",
        note="classic kernels name buffers with strings",
    ),
    ApiRule(
        "dma_copy.hwdge_dtype", "nisa.dma_copy(dge_mode=hwdge)",
        "with dge_mode=hwdge, src and dst must have the same dtype (reinterpret one with "
        ".view(dtype) instead of casting)", _NOTES_03, (CURRENT,), "err_dtype_mismatch",
        "NKITypeError", note="the classic dma_copy casts in every DGE mode",
    ),
    ApiRule(
        "jit.platform_target", "nki.jit(platform_target=...)",
        "platform_target is deprecated: set NEURON_PLATFORM_TARGET_OVERRIDE (or "
        "kernel.configure(target=...)) instead", f"{_NOTES_03}, deprecated APIs", (CURRENT,),
        "err_deprecated_platform_target",
        note="the classic nki.jit takes platform_target (its documented way to pick a target)",
    ),
    ApiRule(
        "enum.named", "dge_mode=2 (a raw integer for an enum)",
        "enum arguments are named members (nisa.dge_mode.hwdge, nisa.engine.vector); raw "
        "integer enum constants are not accepted", _NOTES_03, (CURRENT,),
        cls="RawEnumWarning",
        note="a warning, not an error: AWS's NKI library (nki-library, 2026) still passes "
        "dge_mode=3 in current-API kernels; classic kernels pass raw integers (dge_mode=2)",
    ),
    ApiRule(
        "dma_copy.engine", "nisa.dma_copy(engine=...)",
        "engine= picks the sequencer of a hardware-DGE DMA: nisa.engine.sync or "
        "nisa.engine.scalar, and only with dge_mode=nisa.dge_mode.hwdge",
        f"{_ISA}: nki.isa.dma_copy, engine parameter", (CURRENT,),
        "err_unsupported_engine_for_op",
    ),
    ApiRule(
        "nl.keyword_only", "nl.exp(x, nl.bfloat16), nl.sum(x, 1, nl.float32), ...",
        "dtype, keepdims, compute_dtype, transpose_x, buffer and name are keyword-only "
        "parameters of the nki.language calls",
        "classic nki.language API reference (neuronxcc.nki, SDK 2.26)", (CLASSIC,),
        "err_invalid_argument", "NKITypeError",
        note="NKI 0.7 (SDK 2.32) declares them as ordinary parameters: current-API kernels "
        "pass them by position too",
    ),
    ApiRule(
        "alu.since_gen", "nl.abs_max / nl.abs_min (a call or an op=)",
        "available only on NeuronCore-v4 (trn3) and newer",
        "nki.language API reference (SDK 2.32): nki.language.abs_max / abs_min", BOTH,
        "err_unsupported_instruction_for_target", "NKIUnsupportedError",
        note="the operators the op table marks with a later NeuronCore generation",
    ),
    ApiRule(
        "dma_copy.priority", "nisa.dma_copy(priority=...)",
        "priority (DMA quality of service) is NeuronCore-v4+ only",
        f"{_ISA}: nki.isa.dma_copy / dma_transpose, priority parameter", (CURRENT,),
        "err_unsupported_instruction_for_target", "NKIUnsupportedError",
    ),
    ApiRule(
        "nc_matmul.fp8_mix", "nisa.nc_matmul(float8_e4m3, float8_e4m3fn)",
        "float8_e4m3 (legacy) and float8_e4m3fn cannot be mixed in the same matmul",
        f"{_ISA}: nki.isa.nc_matmul, data types", BOTH, "err_dtype_mismatch", "NKITypeError",
    ),
    ApiRule(
        "nc_matmul.fp32_pair", "nisa.nc_matmul(float32, bfloat16)",
        "if one of the input tiles is tfloat32 / float32, the other must also be tfloat32 / "
        "float32", f"{_ISA}: nki.isa.nc_matmul, data types", (CURRENT,), "err_dtype_mismatch",
        "NKITypeError", note="the classic page lists the input dtypes without this pairing rule",
    ),
    ApiRule(
        "nc_transpose.dtype", "nisa.nc_transpose(dst, data)",
        "dst must have the same dtype as data", f"{_ISA}: nki.isa.nc_transpose", (CURRENT,),
        "err_dtype_mismatch", "NKITypeError",
        note="the classic nc_transpose(data, dtype=...) inserts a cast",
    ),
    ApiRule(
        "nc_transpose.widen", "nisa.nc_transpose(dst=fp32 PSUM tile, data=bf16 tile)",
        "dst must have the same dtype as data", f"{_ISA}: nki.isa.nc_transpose", (CURRENT,),
        cls="DtypeRuleWarning",
        note="a warning, not an error: a Tensor-engine transpose is a matmul with an identity, "
        "which accumulates in fp32 and so writes the exact fp32 values, and public current-API "
        "kernels (autocomp's attention references, checked on devices) transpose bf16 tiles "
        "into fp32 PSUM tiles; a narrowing or non-float dst stays an error",
    ),
    ApiRule(
        "dma_transpose.dtype", "nisa.dma_transpose(dst, src, dge_mode=nisa.dge_mode.hwdge)",
        "a hardware-DGE DMA transpose (dge_mode=hwdge) moves 2-byte dtypes (src.dtype is 2 "
        "bytes)", f"{_ISA}: nki.isa.dma_transpose, DMA direct transpose constraints",
        (CURRENT,), "err_unsupported_dtype", "NKITypeError",
        note="the classic page states no dtype limit; with the default dge_mode the compiler "
        "picks the path, and AWS's NKI library transposes int32 that way",
    ),
    ApiRule(
        "dma_transpose.hwdge_shape", "nisa.dma_transpose(dst, src, dge_mode=nisa.dge_mode.hwdge)",
        "a hardware-DGE DMA transpose takes a 2-D src of 16 partitions (src.shape[0] == 16), or "
        "a 3-D / 4-D src whose src.shape[0] is 1, 2, 4, 8 or 16 with src.shape[0] * "
        "src.shape[-2] a multiple of 16; src.shape[-1] <= 128",
        f"{_ISA}: nki.isa.dma_transpose, DMA direct transpose constraints",
        (CURRENT,), "err_unsupported_transpose_axes", "NKIShapeError",
    ),
    ApiRule(
        "dma_transpose.direct_dge", "nisa.dma_transpose(dst, src, dge_mode=nisa.dge_mode.swdge)",
        "a direct DMA transpose (src without indirect indexing) takes dge_mode unknown or hwdge "
        "(swdge is for indirect transposes)",
        f"{_ISA}: nki.isa.dma_transpose, DMA direct and indirect transpose constraints",
        (CURRENT,), "err_invalid_argument", "NKITypeError",
        note="checked for swdge only: AWS's NKI library passes dge_mode=none to a direct "
        "transpose (its MLP token-generation kernel)",
    ),
    ApiRule(
        "dma_transpose.one_byte", "nisa.dma_transpose(dst, src) of an fp8 / int8 / uint8 tile",
        "a DMA transpose moves 2-byte elements (src.dtype is 2 bytes, on both its direct and its "
        "indirect path); 1-byte dtypes are not transposed by DMA",
        f"{_ISA}: nki.isa.dma_transpose, DMA direct and indirect transpose constraints",
        (CURRENT,), "err_unsupported_dtype", "NKITypeError",
        note="checked for 1-byte dtypes with any dge_mode (the compiler's verifier rejects 1-byte "
        "and packed MX destinations, as a public kernel quotes it); 4-byte ones stay legal with "
        "the default dge_mode, as AWS's NKI library transposes int32",
    ),
    ApiRule(
        "affine_select.on_true_sbuf", "nisa.affine_select(on_true_tile=<PSUM tile>)",
        "on_true_tile must be in SBUF", f"{_ISA}: nki.isa.affine_select, memory types",
        (CURRENT,), "err_unsupported_memory", "NKIMemoryError",
        note="AWS's classic attention tutorials select straight from a matmul's PSUM result",
    ),
    ApiRule(
        "dropout.dst_dtype", "nisa.dropout(dst, data, prob)",
        "dst.dtype must match data's dtype", f"{_ISA}: nki.isa.dropout, data types",
        (CURRENT,), "err_dtype_mismatch", "NKITypeError",
        note="the classic dropout casts float data to any dtype= (integer data keeps its dtype)",
    ),
    ApiRule(
        "scalar_tensor_tensor.arith", "nisa.scalar_tensor_tensor(op0=<bit-vector op>)",
        "op0 and op1 must be arithmetic operators; bit-vector operators are not supported",
        f"{_ISA}: nki.isa.scalar_tensor_tensor", (CURRENT,), "err_unsupported_op",
        note="the classic page states no operator class",
    ),
    ApiRule(
        "tensor_scalar_reduce.reverse0", "nisa.tensor_scalar_reduce(reverse0=True)",
        "reverse0 is not supported yet", f"{_ISA}: nki.isa.tensor_scalar_reduce (classic and "
        "current)", BOTH, "err_unsupported_attribute", "NKIUnsupportedError",
    ),
    ApiRule(
        "nc_stream_shuffle.start", "nisa.nc_stream_shuffle(dst, src, mask)",
        "with num_active_partitions = ceil(max(src partitions, dst partitions) / 32) * 32, src "
        "and dst start at partition 0 (96 or 128 active), 0 or 64 (64 active), or 0, 32, 64 or "
        "96 (32 active)", f"{_ISA}: nki.isa.nc_stream_shuffle (classic and current)", BOTH,
        "err_unsupported_start_partition", "NKIShapeError",
    ),
    ApiRule(
        "nc_matmul.accumulate_unwritten", "nisa.nc_matmul(accumulate=True)",
        "accumulate=True adds into dst, and PSUM that nothing wrote holds garbage on hardware "
        "(undefined behaviour)", "NKI 0.5 release notes: the CPU simulator warns", (CURRENT,),
        cls="AccumulateUninitializedWarning",
        note="a trace-time check: a PSUM tensor with no earlier write at all",
    ),
    # ---- not checked yet ---------------------------------------------------------------------
    ApiRule(
        "isa.dst_elements", "nisa.<instruction>(dst, ...)",
        "dst holds the result element for element: the result's partition count and number of "
        "elements per partition (no broadcast into a larger dst)",
        f"{_ISA}: the tile-size rules of each instruction (tensor_copy, tensor_reduce, ...)",
        (CURRENT,), "err_free_size_mismatch", "NKIShapeError", checked=False,
        note="nki-sim broadcasts a (P, 1) result into a wider dst (tests/isa/test_forms.py "
        "keeps that working); a dst of another free shape with the same elements is written in "
        "its own order",
    ),
    ApiRule(
        "tensor_copy.scalar_v2", "nisa.tensor_copy(engine=scalar) on trn1",
        "on NeuronCore-v2 tensor_copy is not supported on the Scalar engine (use "
        "nisa.activation(op=nl.copy))", f"{_ISA}: nki.isa.tensor_copy", (CURRENT,),
        checked=False, note="the same page also describes the v2 Scalar-engine copy (through "
        "fp32), which nki-sim simulates",
    ),
    ApiRule(
        "nc_matmul.accumulate_after_value_init", "nisa.nc_matmul onto a memset PSUM tile",
        "on NeuronCore-v2 / v3 a matmul accumulating into PSUM that a non-matmul instruction "
        "(memset, tensor_copy) initialised is not supported (undefined behaviour)",
        f"{_ISA}: nki.isa.nc_matmul, accumulate", (CURRENT,), checked=False,
        note="nki-sim adds onto the initialised values",
    ),
    ApiRule(
        "nl.binary.no_broadcast", "nl.add(a, b) with a (P, 1) b",
        "binary nl operations do not broadcast: both operands have the same shape",
        "NKI 0.3 release notes, known issues", (CURRENT,), checked=False,
        note="nki-sim broadcasts as the classic nl functions do",
    ),
    ApiRule(
        "indirect.placement", "x.indirect(index) operands placed with address=",
        "the index of every .indirect() view starts on a quadrant boundary, and an indirected "
        "operand starts on its index's partition (manually allocated operands)",
        f"{_ISA}: tensor indirection (NeuronCore-v4)", (CURRENT,), checked=False,
    ),
    ApiRule(
        "lnc.same_control_flow", "kernel[2] cores taking different branches",
        "both cores of an LNC=2 launch run the same dynamic control flow",
        "nki.jit, LNC launches", (CURRENT,), checked=False,
        note="each core's trace runs its own Python branches",
    ),
    ApiRule(
        "jit.parser_subset", "lists as kernel arguments, `*` separators, `is`, nested @nki.jit",
        "the NKI 0.3-0.6 compiler parses a Python subset: it rejects list arguments, "
        "keyword-only `*` separators, `is` / `is not` and @nki.jit on sub-kernels",
        f"{_NOTES_03}; NKI simulator guide, meta-programming support", (CURRENT,),
        checked=False, note="AWS's simulator runs kernels as plain Python too; 0.7 traces "
        "Python and lifts most of these",
    ),
)  # fmt: skip

BY_KEY: dict[str, ApiRule] = {r.key: r for r in RULES}


def get(key: str) -> ApiRule:
    return BY_KEY[key]


def markdown(checked: bool = True) -> str:
    """The porting guide's table of the rules checked (or, ``checked=False``, not checked yet)."""
    rows = [
        "| construct | documented rule | API | nki-sim | source | note |",
        "|---|---|---|---|---|---|",
    ]
    for r in RULES:
        if r.checked != checked:
            continue
        gens = "both" if r.generations == BOTH else r.generations[0]
        told = (f"warning `{r.cls}`" if r.warning else f"`{r.code}`") if r.checked else "accepted"
        rows.append(f"| `{r.subject}` | {r.rule} | {gens} | {told} | {r.source} | {r.note} |")
    return "\n".join(rows)
