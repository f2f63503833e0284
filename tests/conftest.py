"""Shared test setup: hypothesis profiles (deterministic 'ci' profile under CI)."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    max_examples=25,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=10, deadline=None)
settings.register_profile("thorough", max_examples=300, deadline=None)
_default = "ci" if os.environ.get("CI") else "dev"
settings.load_profile(os.environ.get("NKI_HYPOTHESIS_PROFILE", _default))
