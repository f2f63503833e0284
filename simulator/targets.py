"""Per-target hardware facts: one table, one row per NeuronCore generation.

Sources: the NKI architecture guides for NeuronCore-v2/v3/v4 and the direct-allocation guide
(see ../shared/reference/hardware-and-testing.md and nki-api.md section 3)."""

from __future__ import annotations

from dataclasses import dataclass

from nki.errors import NKIError


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

    @property
    def nc_version(self) -> str:
        return f"gen{self.gen}"


TARGETS: dict[str, Target] = {
    "trn1": Target("trn1", 2, 128, 192 * 1024, 180224, 16 * 1024, 8, 2048, 128, 512, 1),
    "trn2": Target("trn2", 3, 128, 224 * 1024, 212984, 16 * 1024, 8, 2048, 128, 512, 2),
    "trn3": Target("trn3", 4, 128, 256 * 1024, 245752, 16 * 1024, 8, 2048, 128, 512, 2),
}
_ALIASES = {"gen2": "trn1", "inf2": "trn1", "gen3": "trn2", "gen4": "trn3"}
DEFAULT_TARGET = "trn2"


def target_name(name: str) -> str:
    """Canonical target name for ``trn1|inf2|gen2``, ``trn2|gen3``, ``trn3|gen4``."""
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in TARGETS:
        raise NKIError(
            f"unknown platform target {name!r}: expected one of trn1|gen2|inf2, trn2|gen3, "
            "trn3|gen4",
            code="err_invalid_platform_target",
        )
    return key


def get_target(name: str) -> Target:
    return TARGETS[target_name(name)]
