"""pytest plugin for kernel tests (registered as the ``nki_testing`` pytest11 entry point).

* Loads the hypothesis profile named by ``NKI_HYPOTHESIS_PROFILE`` (``ci``, ``dev``,
  ``thorough``; default ``ci`` under ``CI``, else ``dev``) and shows it in the pytest header.
* ``nki_target`` fixture: runs the test once per target (``trn1``, ``trn2``, ``trn3``), yields
  the target name and sets ``NEURON_PLATFORM_TARGET_OVERRIDE`` / ``NKI_SIM_TARGET`` for the test
  so kernels without an explicit ``platform_target`` run on it.
* ``@pytest.mark.nki_targets("trn2", "trn3")``: restricts the targets of a test; on a test that
  does not ask for ``nki_target`` it still runs the test once per listed target."""

from __future__ import annotations

from typing import Any

import pytest

ALL_TARGETS = ("trn1", "trn2", "trn3")
_ENV = ("NEURON_PLATFORM_TARGET_OVERRIDE", "NKI_SIM_TARGET")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers",
        "nki_targets(*names): run the test once per NKI target (trn1, trn2, trn3); "
        "the nki_target fixture gives the current one",
    )
    try:
        from .profiles import load_profile
    except ImportError:  # pragma: no cover - hypothesis not installed
        return
    config._nki_hypothesis_profile = load_profile()


def pytest_report_header(config: Any) -> str | None:
    name = getattr(config, "_nki_hypothesis_profile", None)
    return f"nki.testing: hypothesis profile '{name}'" if name else None


def pytest_generate_tests(metafunc: Any) -> None:
    marker = metafunc.definition.get_closest_marker("nki_targets")
    if marker is None and "nki_target" not in metafunc.fixturenames:
        return
    targets = tuple(marker.args) if marker is not None and marker.args else ALL_TARGETS
    bad = [t for t in targets if t not in ALL_TARGETS]
    if bad:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: unknown NKI target(s) {bad} in "
            f"@pytest.mark.nki_targets; expected some of {list(ALL_TARGETS)}"
        )
    if "nki_target" not in metafunc.fixturenames:
        metafunc.fixturenames.append("nki_target")
    metafunc.parametrize("nki_target", targets, indirect=True, ids=list(targets))


def _param(request: Any) -> str | None:
    callspec = getattr(request.node, "callspec", None)
    return None if callspec is None else callspec.params.get("nki_target")


@pytest.fixture(autouse=True)
def _nki_target_env(request: Any, monkeypatch: Any) -> None:
    """Point the simulator's default target at the test's target (marker or fixture)."""
    name = _param(request)
    if name is not None:
        for var in _ENV:
            monkeypatch.setenv(var, name)


@pytest.fixture
def nki_target(request: Any) -> str:
    """The NKI target this test runs on (``trn1``, ``trn2`` or ``trn3``); the simulator's
    default target is set to it for the test."""
    name = _param(request)
    if name is None:
        from nki.targets import env_target

        return env_target().name
    return name
