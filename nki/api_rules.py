"""Rules AWS's NKI documentation states, one row each, with the API generations they hold in.

Each row is a rule a kernel can break at one call or construct (``subject``): the rule as the
documentation states it (paraphrased; the error message quotes it), where it is stated, the
generations of the API it holds in (``classic``, ``current``) and how a kernel that breaks it
is told (an ``NKIError`` of ``cls`` with ``code``, or a warning of class ``cls``, as AWS's own
simulator warns). A rule of one generation only is checked when the kernel being traced is of
that generation; a kernel still undecided when it breaks one is told at the end of its trace if
it turns out to be of that generation (``nki/tracer/api_checks.py``).

Rows with ``checked=False`` are rules nki-sim does not check yet: a kernel that breaks one runs
anyway. The README's lists of both are generated from this table (:func:`markdown`).

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
        "nc_matmul.accumulate_unwritten", "nisa.nc_matmul(accumulate=True)",
        "accumulate=True adds into dst, and PSUM that nothing wrote holds garbage on hardware "
        "(undefined behaviour)", "NKI 0.5 release notes: the CPU simulator warns", (CURRENT,),
        cls="AccumulateUninitializedWarning",
        note="a trace-time check: a PSUM tensor with no earlier write at all",
    ),
)  # fmt: skip

BY_KEY: dict[str, ApiRule] = {r.key: r for r in RULES}


def get(key: str) -> ApiRule:
    return BY_KEY[key]


def markdown(checked: bool = True) -> str:
    """The README's table of the rules checked (or, ``checked=False``, not checked yet)."""
    rows = ["| construct | documented rule | API | nki-sim | source |", "|---|---|---|---|---|"]
    for r in RULES:
        if r.checked != checked:
            continue
        gens = "both" if r.generations == BOTH else r.generations[0]
        told = (f"warning `{r.cls}`" if r.warning else f"`{r.code}`") if r.checked else "accepted"
        rows.append(f"| `{r.subject}` | {r.rule} | {gens} | {told} | {r.source} |")
    return "\n".join(rows)
