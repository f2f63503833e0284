"""The checks table (simulator/checks/table.py): every check module has its rows, a module's
error codes are its rows' codes and in the catalogue, the static rows run in the table's order
(per trace first, then per launch) at the levels they list."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import nki
import nki.language as nl
from nki.error_codes import ERROR_CODES
from nki.errors import NKIError
from simulator.checks.table import CHECKS, RUN, START, STATIC, due

CHECKS_DIR = Path(__file__).resolve().parents[2] / "simulator" / "checks"
# modules of the room that are not checks: the analysis the checks share, the current API's
# loop kinds (which use the race analysis at trace time), the table, its runner
NOT_CHECKS = {"__init__", "coverage", "program_order", "table", "static"}


def _codes_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("err_")
    }


def test_every_check_module_has_rows_and_its_codes_are_its_rows_codes():
    modules = {p.stem for p in CHECKS_DIR.glob("*.py")} - NOT_CHECKS
    rows_of = {
        m: [c for c in CHECKS if c.run.__module__ == f"simulator.checks.{m}"] for m in modules
    }
    assert all(rows_of.values()), [m for m, rows in rows_of.items() if not rows]
    for m, rows in rows_of.items():
        assert {code for c in rows for code in c.codes} == _codes_in(CHECKS_DIR / f"{m}.py"), m


def test_every_code_is_in_the_catalogue_and_every_row_is_well_formed():
    names = [c.name for c in CHECKS]
    assert len(set(names)) == len(names)
    for c in CHECKS:
        assert set(c.codes) <= set(ERROR_CODES), c.name
        assert c.when in (STATIC, START, RUN) and c.levels and c.per, c.name


def test_the_levels_select_the_rows():
    assert [c.name for c in due(STATIC, "none")] == ["HBM capacity"]
    static = [c.name for c in due(STATIC, "static")]
    assert static[:3] == ["bounds", "capacity", "loop-carried writes"]
    assert "unwritten outputs" in static
    assert "unwritten outputs" not in [c.name for c in due(STATIC, "full")]
    assert [c.name for c in due(START, "none")] == ["host memory"]


def k_race_and_out_of_bounds(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    # every instance writes all of out (a race), instance 1 reads rows 128..255 of a
    nl.store(out, nl.load(a[i * 128 : i * 128 + 128, :]))
    return out


@pytest.mark.parametrize("checks", ["static", "full"])
def test_the_first_failing_row_is_reported(checks):
    """A kernel breaking two rows: bounds (per trace, over the whole grid: the index range of
    every instance) comes before SPMD races (per launch)."""
    # (classic: kernel[2] is a grid of two instances; a current-API kernel runs on two cores)
    kernel = nki.jit(k_race_and_out_of_bounds, checks=checks, api="classic")
    with pytest.raises(NKIError) as e:
        kernel[2](np.ones((200, 8), np.float32))
    assert e.value.code == "err_tensor_access_out_of_bound"
    assert "index range [0, 255]" in str(e.value) and e.value.instance is None
    with pytest.raises(NKIError) as e:
        kernel[2](np.ones((256, 8), np.float32))
    assert e.value.code == "err_spmd_write_race"
