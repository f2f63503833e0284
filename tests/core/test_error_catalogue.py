"""The error-code catalogue: every code the sources raise is listed with a meaning and a fix, and
the site's error-code page is the catalogue's table."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

import nki
import nki.language as nl
from nki import error_codes
from nki.errors import NKIError

from snippets import site_table

ROOT = pathlib.Path(__file__).resolve().parents[2]
# a code passed by keyword (code="err_x"), as a class default, or positionally to a checker
_CODE = re.compile(r"""(?:\bcode\s*=\s*|default_code\s*=\s*|["'])((?:err|warn)_[a-z0-9_]+)["']""")


def _codes_in_sources() -> dict[str, str]:
    found: dict[str, str] = {}
    for pkg in ("nki", "simulator", "frontends"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path.name == "error_codes.py":
                continue
            for lineno, line in enumerate(path.read_text().splitlines(), 1):
                for code in _CODE.findall(line):
                    found.setdefault(code, f"{path.relative_to(ROOT)}:{lineno}")
    return found


def test_every_raised_code_is_in_the_catalogue():
    found = _codes_in_sources()
    assert len(found) > 50  # the scan sees the sources
    missing = {c: where for c, where in found.items() if c not in error_codes.ERROR_CODES}
    assert not missing, f"codes missing from nki/error_codes.py: {missing}"


def test_catalogue_lists_only_codes_in_use_with_a_meaning():
    found = _codes_in_sources()
    unused = sorted(set(error_codes.ERROR_CODES) - set(found))
    assert not unused, f"catalogue codes no source raises: {unused}"
    for code, text in error_codes.ERROR_CODES.items():
        assert re.fullmatch(r"err_[a-z0-9_]+", code)
        assert text and "\n" not in text and not text.endswith("."), code


def test_every_code_has_a_fix():
    assert set(error_codes.FIXES) == set(error_codes.ERROR_CODES), (
        f"codes without a fix: {sorted(set(error_codes.ERROR_CODES) - set(error_codes.FIXES))}; "
        f"fixes of codes not in the catalogue: "
        f"{sorted(set(error_codes.FIXES) - set(error_codes.ERROR_CODES))}"
    )
    for code, text in error_codes.FIXES.items():
        assert text and "\n" not in text and "|" not in text and not text.endswith("."), code
        assert text != error_codes.ERROR_CODES[code], code


def test_the_site_catalogue_shows_meaning_and_fix_of_every_code():
    rows = error_codes.catalogue_markdown().splitlines()[2:]
    assert len(rows) == len(error_codes.ERROR_CODES)
    for row, (code, text) in zip(rows, error_codes.ERROR_CODES.items()):
        assert row == f'| <span id="{code}"></span>`{code}` | {text} | {error_codes.FIXES[code]} |'


def test_the_error_code_page_is_generated_from_the_catalogue():
    assert site_table("reference/error-codes.md", "error-catalogue") == (
        error_codes.catalogue_markdown().strip()
    )


def test_a_raised_error_carries_its_catalogued_meaning():
    @nki.jit
    def too_many_partitions(a):
        t = nl.ndarray((256, 4), dtype=nl.float32, buffer=nl.sbuf)
        return t

    with pytest.raises(NKIError) as info:
        too_many_partitions(np.zeros((4, 4), np.float32))
    assert info.value.code == "err_num_partition_exceed_arch_limit"
    assert info.value.meaning == error_codes.ERROR_CODES["err_num_partition_exceed_arch_limit"]
    assert info.value.fix == error_codes.FIXES["err_num_partition_exceed_arch_limit"]
    assert "128" in info.value.fix
