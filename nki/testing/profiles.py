"""Hypothesis profiles for kernel tests, selected by ``NKI_HYPOTHESIS_PROFILE``.

* ``ci``: deterministic (``derandomize=True``, no example database), no deadline, prints the
  ``@reproduce_failure`` blob of a failure; 25 examples. The project's CI uses it.
* ``dev``: fast local runs, 10 examples, no deadline (the default outside CI).
* ``thorough``: 300 examples, no deadline, for a long hunt before a release.

Without ``NKI_HYPOTHESIS_PROFILE`` the profile is ``ci`` when ``CI`` is set, else ``dev``."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILES = ("ci", "dev", "thorough")
ENV_VAR = "NKI_HYPOTHESIS_PROFILE"
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]


def register_profiles() -> None:
    """Register the ``ci``, ``dev`` and ``thorough`` profiles (idempotent)."""
    settings.register_profile(
        "ci",
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        max_examples=25,
        suppress_health_check=_SLOW_OK,
    )
    settings.register_profile("dev", max_examples=10, deadline=None, suppress_health_check=_SLOW_OK)
    settings.register_profile(
        "thorough", max_examples=300, deadline=None, suppress_health_check=_SLOW_OK
    )


def profile_name(env: dict[str, str] | None = None) -> str:
    """The profile chosen by the environment: ``NKI_HYPOTHESIS_PROFILE``, else ``ci`` when
    ``CI`` is set, else ``dev``."""
    env = dict(os.environ) if env is None else env
    default = "ci" if env.get("CI") else "dev"
    return env.get(ENV_VAR, "").strip() or default


def load_profile(name: str | None = None) -> str:
    """Register the profiles and load ``name`` (default: ``profile_name()``); returns the name.
    An unknown name is an error listing the registered ones."""
    register_profiles()
    name = profile_name() if name is None else name
    try:
        settings.load_profile(name)
    except Exception:
        raise ValueError(
            f"unknown hypothesis profile {name!r} (from {ENV_VAR}); nki.testing registers "
            f"{', '.join(PROFILES)}"
        ) from None
    return name
