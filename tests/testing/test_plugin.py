"""The pytest plugin: hypothesis profiles from NKI_HYPOTHESIS_PROFILE, the nki_target fixture
and the nki_targets marker (kernels without an explicit target run on the test's target)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import settings

import nki
import nki.language as nl
from nki.testing import load_profile, profile_name

from helpers import ROOT


def _env(**extra: str) -> dict[str, str]:
    """Environment of a fresh pytest session that autoloads entry-point plugins."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    return dict(env, PYTHONPATH=str(ROOT), **extra)


@nki.jit
def copy_kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a))
    return out


_SEEN: set[str] = set()


def test_nki_target_fixture_runs_each_target(nki_target):
    assert nki_target in ("trn1", "trn2", "trn3")
    a = np.ones((4, 4), np.float32)
    np.testing.assert_array_equal(copy_kernel(a), a)
    assert copy_kernel.last_ir.target == nki_target  # the kernel really ran on that target
    _SEEN.add(nki_target)


@pytest.mark.nki_targets("trn1", "trn3")
def test_marker_restricts_the_targets(nki_target):
    assert nki_target in ("trn1", "trn3")
    from simulator.config import SimConfig

    assert SimConfig.from_env().target == nki_target


@pytest.mark.nki_targets("trn2")
def test_marker_without_fixture_sets_the_target():
    assert os.environ["NKI_SIM_TARGET"] == "trn2"
    copy_kernel(np.ones((2, 2), np.float32))
    assert copy_kernel.last_ir.target == "trn2"


def test_profiles_are_registered_with_their_settings():
    load_profile("ci")
    try:
        ci = settings()
        assert ci.derandomize and ci.database is None and ci.deadline is None and ci.print_blob
        load_profile("thorough")
        assert settings().max_examples > ci.max_examples
        load_profile("dev")
        assert settings().max_examples < ci.max_examples and settings().deadline is None
    finally:
        load_profile()
    with pytest.raises(ValueError, match="nki.testing registers ci, dev, thorough"):
        load_profile("nightly")


def test_profile_name_from_environment():
    assert profile_name({"NKI_HYPOTHESIS_PROFILE": "thorough"}) == "thorough"
    assert profile_name({"CI": "1"}) == "ci"
    assert profile_name({}) == "dev"


def test_plugin_in_a_fresh_pytest_session(tmp_path):
    """The entry point loads the plugin in any pytest run: profile, fixture, marker."""
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            import pytest
            from hypothesis import settings

            def test_profile():
                assert settings().derandomize  # the ci profile was loaded

            def test_each(nki_target):
                print("target", nki_target)

            @pytest.mark.nki_targets("trn1", "trn2")
            def test_marked():
                pass
            """
        )
    )
    env = _env(NKI_HYPOTHESIS_PROFILE="ci")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "hypothesis profile 'ci'" in out
    for t in ("trn1", "trn2", "trn3"):
        assert f"test_each[{t}] PASSED" in out
    assert "test_marked[trn1] PASSED" in out and "test_marked[trn2] PASSED" in out
    assert "test_marked[trn3]" not in out


def test_unknown_target_in_marker_is_a_usage_error(tmp_path):
    (tmp_path / "test_bad.py").write_text(
        "import pytest\n\n@pytest.mark.nki_targets('trn9')\ndef test_x(nki_target):\n    pass\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "unknown NKI target(s) ['trn9']" in proc.stdout + proc.stderr
