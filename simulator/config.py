"""Simulation settings: one frozen, validated ``SimConfig``, settable per call or from the
environment.

Environment variables (read when no explicit value is given):

* ``NEURON_PLATFORM_TARGET_OVERRIDE`` / ``NKI_SIM_TARGET``: ``trn1|gen2``, ``trn2|gen3``,
  ``trn3|gen4`` (default, as AWS's simulator on a machine without a Neuron chip).
* ``NKI_PRECISE_FP``: ``1`` (default) stores bfloat16 / fp8 in their real format; ``0`` stores
  them as fp32 ("fast fp"), to tell logic bugs from rounding.
* ``NKI_SIM_CHECKS``: ``none``, ``static`` (default) or ``full``.
* ``NKI_SIM_SHUFFLE_SEED``: an integer; run SPMD instances and ``affine_range`` iterations in a
  seeded random order.
* ``NKI_SIM_BACKEND``: ``auto`` (default) or a backend's name (``backends.SETTINGS``).
* ``NKI_SIM_THREADS``: ``auto`` (default: decided per launch from its matmul work and the cores
  free, ``threads.py``) or the number of BLAS threads every launch uses.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace

from nki.environment import env_reader
from nki.errors import NKIError, user_loc
from nki.targets import DEFAULT_TARGET, target_name

from .backends import AUTO, SETTINGS

CHECK_LEVELS = ("none", "static", "full")


@dataclass(frozen=True)
class SimConfig:
    target: str = DEFAULT_TARGET
    precise_fp: bool = True
    checks: str = "static"
    shuffle_seed: int | None = None
    backend: str = AUTO
    threads: int | None = None  # BLAS threads per launch (None: decided per launch)

    def __post_init__(self) -> None:
        object.__setattr__(self, "target", target_name(self.target))
        if self.checks not in CHECK_LEVELS:
            raise NKIError(
                f"SimConfig.checks must be one of {CHECK_LEVELS}, got {self.checks!r}",
                code="err_invalid_config",
                loc=user_loc(),
            )
        if self.backend not in SETTINGS:
            raise NKIError(
                f"SimConfig.backend must be one of {SETTINGS}, got {self.backend!r}",
                code="err_invalid_config",
                loc=user_loc(),
            )
        if not isinstance(self.precise_fp, bool):
            raise NKIError(
                f"SimConfig.precise_fp must be True or False, got {self.precise_fp!r}",
                code="err_invalid_config",
                loc=user_loc(),
            )
        if self.threads is not None and (
            not isinstance(self.threads, int) or isinstance(self.threads, bool) or self.threads < 1
        ):
            raise NKIError(
                f"SimConfig.threads must be a positive int or None (auto), got {self.threads!r}",
                code="err_invalid_config",
                loc=user_loc(),
            )
        if self.shuffle_seed is not None and not isinstance(self.shuffle_seed, int):
            raise NKIError(
                f"SimConfig.shuffle_seed must be an int, got {self.shuffle_seed!r}",
                code="err_invalid_config",
                loc=user_loc(),
            )
        # (hashed once: a launch looks its kernel's records up by (IR, config) several times)
        object.__setattr__(self, "_hash", hash(self._fields()))

    def _fields(self) -> tuple:
        return (self.target, self.precise_fp, self.checks, self.shuffle_seed, self.backend,
                self.threads)  # fmt: skip

    @functools.cached_property
    def key(self) -> tuple:
        """The settings as a plain tuple, hashed in C: what the caches of a launch keyed by its
        setting look up (several times per launch)."""
        return self._fields()

    def __hash__(self) -> int:
        try:
            return self._hash  # type: ignore[attr-defined,no-any-return]
        except AttributeError:  # (unpickled from a copy made without it)
            return hash(self._fields())

    def with_(self, **changes: object) -> SimConfig:
        changes = {k: v for k, v in changes.items() if v is not None}
        if not changes:
            return self
        try:  # (made once per distinct setting: a launch asks for its config per call)
            return _changed(self, tuple(sorted(changes.items())))
        except TypeError:  # an unhashable value: invalid, reported by the validation
            return replace(self, **changes)

    @staticmethod
    def from_env(env: dict[str, str] | None = None) -> SimConfig:
        if env is None:  # (read per call: only the variables it uses, parsed once per value)
            return _from_values(_env_values())
        return _parse(env)


@functools.lru_cache(maxsize=256)
def _changed(config: SimConfig, changes: tuple[tuple[str, object], ...]) -> SimConfig:
    return replace(config, **dict(changes))


_ENV_KEYS = (
    "NEURON_PLATFORM_TARGET_OVERRIDE",
    "NKI_SIM_TARGET",
    "NKI_PRECISE_FP",
    "NKI_SIM_SHUFFLE_SEED",
    "NKI_SIM_CHECKS",
    "NKI_SIM_BACKEND",
    "NKI_SIM_THREADS",
)


_env_values = env_reader(_ENV_KEYS)


@functools.lru_cache(maxsize=64)
def _from_values(values: tuple[str | bytes | None, ...]) -> SimConfig:
    return _parse({k: os.fsdecode(v) for k, v in zip(_ENV_KEYS, values) if v is not None})


def _parse(env: dict[str, str]) -> SimConfig:
    target = env.get("NEURON_PLATFORM_TARGET_OVERRIDE") or env.get("NKI_SIM_TARGET")
    precise = env.get("NKI_PRECISE_FP", "1").strip().lower() not in ("0", "false", "no")
    seed = env.get("NKI_SIM_SHUFFLE_SEED")
    try:
        seed_val = int(seed) if seed not in (None, "") else None
    except ValueError:
        raise NKIError(
            f"NKI_SIM_SHUFFLE_SEED must be an integer, got {seed!r}",
            code="err_invalid_config",
            loc=user_loc(),
        ) from None
    threads = env.get("NKI_SIM_THREADS", "auto").strip().lower()
    try:
        n_threads = None if threads in ("", "auto") else int(threads)
    except ValueError:
        raise NKIError(
            f"NKI_SIM_THREADS must be 'auto' or a positive integer, got {threads!r}",
            code="err_invalid_config",
            loc=user_loc(),
        ) from None
    return SimConfig(
        threads=n_threads,
        target=target or DEFAULT_TARGET,
        precise_fp=precise,
        checks=env.get("NKI_SIM_CHECKS", "static").strip().lower(),
        shuffle_seed=seed_val,
        backend=env.get("NKI_SIM_BACKEND", AUTO).strip().lower(),
    )
