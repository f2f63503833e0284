"""The README stays true: its op list is the op table, its first two lines are the CI commands."""

import re
from pathlib import Path

from nki import optable

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_op_list_is_generated_from_the_op_table():
    text = README.read_text()
    m = re.search(r"<!-- optable:begin[^>]*-->\n(.*?)\n<!-- optable:end -->", text, re.S)
    assert m, "README lost its optable markers"
    assert m.group(1).strip() == optable.markdown().strip()


def test_readme_opens_with_the_demo_and_test_commands():
    lines = README.read_text().splitlines()
    assert lines[0] == "```"
    demo = "python tutorials/tensor_addition/spmd_tensor_addition.py"
    assert lines[1] == f"pip install -e . && {demo}"
    assert lines[2] == 'pip install -e ".[all]" && python -m pytest'
    ci = (README.parent / ".ci" / "run").read_text()
    assert "grep -m1 -E '^pip install .*pytest' README.md" in ci
