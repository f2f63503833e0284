"""Shared test setup. The hypothesis profiles (``ci`` / ``dev`` / ``thorough``, chosen by
NKI_HYPOTHESIS_PROFILE) and the ``nki_target`` fixture come from the nki.testing pytest plugin,
which pip installs as the ``nki_testing`` pytest11 entry point. If the package was installed
without it (or plugin autoloading is off), register it here.

Test files import the shared helpers as ``helpers`` (tests/helpers.py) and the differential
harness over every backend as ``backends`` (tests/backends.py): this directory goes on
``sys.path`` whatever pytest's import mode."""

import importlib
import sys
from pathlib import Path

TESTS_DIR = str(Path(__file__).resolve().parent)
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)


def pytest_configure(config):
    if not config.pluginmanager.has_plugin("nki_testing"):
        plugin = importlib.import_module("nki.testing.pytest_plugin")
        if not config.pluginmanager.is_registered(plugin):
            config.pluginmanager.register(plugin, "nki_testing")
