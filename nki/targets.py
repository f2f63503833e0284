"""Per-target hardware facts: one table, one row per NeuronCore generation.

Sources: the NKI architecture guides for NeuronCore-v2/v3/v4 and the direct-allocation guide
(Trainium / Trainium2 / Trainium3 architecture pages of the NKI documentation)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from nki.errors import NKIError, user_loc


@dataclass(frozen=True)
class Target:
    name: str  # trn1 | trn2 | trn3
    gen: int  # NeuronCore version: 2, 3, 4
    pmax: int  # partitions
    sbuf_bytes_per_partition: int
    sbuf_usable_per_partition: int  # minus the compiler's reserve
    psum_bytes_per_partition: int
    psum_banks: int
    psum_bank_bytes: int
    gemm_stationary_fmax: int
    gemm_moving_fmax: int
    max_lnc: int  # logical NeuronCore size: physical cores one kernel launch may span
    bn_stats_fmax: int = 512
    hbm_bytes: int = 32 << 30  # device HBM of one chip (shared by its cores)

    @property
    def nc_version(self) -> str:
        return f"gen{self.gen}"


TARGETS: dict[str, Target] = {
    "trn1": Target("trn1", 2, 128, 192 * 1024, 180224, 16 * 1024, 8, 2048, 128, 512, 1),
    "trn2": Target(
        "trn2", 3, 128, 224 * 1024, 212984, 16 * 1024, 8, 2048, 128, 512, 2, hbm_bytes=96 << 30
    ),
    "trn3": Target(
        "trn3", 4, 128, 256 * 1024, 245752, 16 * 1024, 8, 2048, 128, 512, 2, hbm_bytes=144 << 30
    ),
}
_ALIASES = {"gen2": "trn1", "inf2": "trn1", "gen3": "trn2", "gen4": "trn3"}
# with no target set, AWS's simulator uses the local Neuron chip, otherwise trn3 (the NKI
# simulator guide, "Target Platform"); nki-sim runs on machines without one
DEFAULT_TARGET = "trn3"


def target_name(name: str) -> str:
    """Canonical target name for ``trn1|inf2|gen2``, ``trn2|gen3``, ``trn3|gen4``."""
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in TARGETS:
        raise NKIError(
            f"unknown platform target {name!r}: expected one of trn1|gen2|inf2, trn2|gen3, "
            "trn3|gen4",
            code="err_invalid_platform_target",
            loc=user_loc(),
        )
    return key


def get_target(name: str) -> Target:
    return TARGETS[target_name(name)]


# environment variables that select the target outside a kernel call, first match wins
TARGET_ENV_VARS = ("NEURON_PLATFORM_TARGET_OVERRIDE", "NKI_SIM_TARGET")


def env_target(env: Mapping[str, str] | None = None) -> Target:
    """The target the environment selects (``TARGET_ENV_VARS``), else ``DEFAULT_TARGET``."""
    env = os.environ if env is None else env
    names = [env.get(v) for v in TARGET_ENV_VARS]
    return get_target(next((n for n in names if n), DEFAULT_TARGET))


# --------------------------------------------------------------------------------------------
# Per-target nki.isa rules (engine / ALU op / dtype acceptance, Tensor-engine limits)
# --------------------------------------------------------------------------------------------

MATMUL_IN_DTYPES = (
    "float8_e4m3",
    "float8_e4m3fn",
    "float8_e5m2",
    "bfloat16",
    "float16",
    "tfloat32",
    "float32",
)
FP8_DTYPES = ("float8_e4m3", "float8_e4m3fn", "float8_e5m2")


@dataclass(frozen=True)
class IsaRules:
    """What one NeuronCore generation's engines accept (per the NKI ISA reference and the
    architecture guide of each generation).

    Each field is consulted by exactly one check in ``nki/isa/rules.py``."""

    matmul_moving_fmax: int  # moving free size (PSUM columns) per nc_matmul
    matmul_out_dtypes: tuple[str, ...]  # PSUM result dtypes nc_matmul may write
    matmul_tile_sizes: tuple[int, ...]  # legal PE-array tile_size entries
    matmul_transpose_mode: bool  # nc_matmul(is_transpose=True): bit-exact PE transpose
    matmul_perf_modes: tuple[str, ...]  # accepted nc_matmul perf_mode values
    pe_transpose_bit_exact: bool  # Tensor-engine nc_transpose keeps NaN / Inf exactly
    tensor_transpose_max: tuple[int, int]  # nc_transpose on the Tensor engine (P, F)
    vector_transpose_max: tuple[int, int]  # nc_transpose on the Vector engine (P, F)
    scalar_alu_pairs: tuple[tuple[str, str | None], ...]  # tensor_scalar on the Scalar engine
    activation_reduce_ops: tuple[str, ...]  # activation(reduce_op=...) accumulator ops
    scalar_copy_exact: bool  # Scalar-engine tensor_copy is bit-exact (else via fp32)
    hwdge: bool  # dma_copy(dge_mode=hwdge) available
    dma_priority: bool = False  # dma_copy / dma_transpose(priority=...): DMA quality of service
    activation_no_bias: tuple[str, ...] = ()  # activation functions that cannot take a bias
    activation_scalar_bias: bool = True  # activation(bias=<scalar>) (v2: (P, 1) vectors only)
    matmul_ocp_fp8: bool = False  # nc_matmul operands in float8_e4m3fn (OCP FP8, NeuronCore-v4)


_PERF = ("double_row_gen3", "double_row")
ISA_RULES: dict[str, IsaRules] = {
    "trn1": IsaRules(
        matmul_moving_fmax=512,
        matmul_out_dtypes=("float32",),
        matmul_tile_sizes=(64, 128),
        matmul_transpose_mode=False,
        matmul_perf_modes=(),
        pe_transpose_bit_exact=False,
        tensor_transpose_max=(128, 128),
        vector_transpose_max=(32, 32),
        scalar_alu_pairs=(),
        activation_reduce_ops=("add",),
        scalar_copy_exact=False,
        hwdge=False,
        activation_no_bias=("reciprocal",),
        activation_scalar_bias=False,
    ),
    "trn2": IsaRules(
        matmul_moving_fmax=512,
        matmul_out_dtypes=("float32",),
        matmul_tile_sizes=(32, 64, 128),
        matmul_transpose_mode=True,
        matmul_perf_modes=_PERF,
        pe_transpose_bit_exact=True,
        tensor_transpose_max=(128, 128),
        vector_transpose_max=(32, 32),
        scalar_alu_pairs=(("multiply", "add"), ("multiply", None), ("add", None)),
        activation_reduce_ops=("add", "maximum", "minimum"),
        scalar_copy_exact=True,
        hwdge=True,
    ),
    "trn3": IsaRules(
        matmul_ocp_fp8=True,
        matmul_moving_fmax=4096,
        matmul_out_dtypes=("float32", "bfloat16"),
        matmul_tile_sizes=(32, 64, 128),
        matmul_transpose_mode=True,
        matmul_perf_modes=_PERF,
        pe_transpose_bit_exact=True,
        tensor_transpose_max=(128, 128),
        vector_transpose_max=(32, 32),
        scalar_alu_pairs=(("multiply", "add"), ("multiply", None), ("add", None)),
        activation_reduce_ops=("add", "maximum", "minimum"),
        scalar_copy_exact=True,
        hwdge=True,
        dma_priority=True,
    ),
}


def isa_rules(name: str) -> IsaRules:
    """The nki.isa rule row of a target (``trn1|gen2``, ``trn2|gen3``, ``trn3|gen4``)."""
    return ISA_RULES[target_name(name)]
