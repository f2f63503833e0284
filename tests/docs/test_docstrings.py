"""Every public name of nki, nki.language and nki.isa is documented: a function, class or
module has its own docstring, and any other value (a dtype, a buffer, an engine) is an instance
of a documented project class. The API reference pages are generated from these docstrings.
The typed packages ship their py.typed marker."""

from __future__ import annotations

import inspect
import types
from pathlib import Path

import pytest

import nki
import nki.isa as nisa
import nki.language as nl

MODULES = (nki, nl, nisa)
PROJECT = ("nki", "simulator", "frontends")


def undocumented(module: types.ModuleType) -> list[str]:
    """The names of ``module.__all__`` without a docstring, with what is missing."""
    missing = []
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.ismodule(obj) or inspect.isroutine(obj) or inspect.isclass(obj):
            if not (obj.__doc__ or "").strip():
                missing.append(f"{module.__name__}.{name}: no docstring")
            continue
        kind = type(obj)
        if kind.__module__.split(".")[0] not in PROJECT:
            missing.append(f"{module.__name__}.{name}: a {kind.__name__} has no docstring")
        elif not (kind.__doc__ or "").strip():
            missing.append(f"{module.__name__}.{name}: its class {kind.__qualname__} has none")
    return missing


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_every_public_name_has_a_docstring(module):
    assert len(module.__all__) >= 10
    assert not undocumented(module)


def test_a_name_without_a_docstring_is_reported():
    fake = types.ModuleType("fake")

    def bare(x):
        return x

    class Plain:
        pass

    def documented(x):
        """Return ``x`` (any value)."""
        return x

    fake.bare, fake.Plain, fake.documented, fake.value, fake.limit = (
        bare, Plain, documented, Plain(), 128,
    )  # fmt: skip
    fake.__all__ = ["bare", "Plain", "documented", "value", "limit"]
    assert undocumented(fake) == [
        "fake.bare: no docstring",
        "fake.Plain: no docstring",
        "fake.value: a Plain has no docstring",
        "fake.limit: a int has no docstring",
    ]


def test_the_typed_packages_ship_py_typed():
    """PEP 561: nki and simulator carry a py.typed marker, installed as package data."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11")
    root = Path(__file__).resolve().parents[2]
    config = tomllib.loads((root / "pyproject.toml").read_text())
    package_data = config["tool"]["setuptools"]["package-data"]
    for package in ("nki", "simulator"):
        assert (root / package / "py.typed").is_file(), package
        assert "py.typed" in package_data[package], package
