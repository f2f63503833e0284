"""The executor registry: every executed instruction chooses its uninitialised-value rule
explicitly, and every nki.isa instruction the language exports has an executor."""

import pytest

import nki.isa as nisa
from nki.ir import Instr
from simulator import interpreter  # noqa: F401 - registers the executors
from simulator.executors import ANY, EXECUTORS, executor_of
from simulator.poison import RULES, rule_of


@pytest.mark.parametrize("kind, op", sorted(EXECUTORS))
def test_every_executor_has_a_poison_rule(kind, op):
    assert (kind, op) in RULES or (kind, ANY) in RULES


def test_missing_poison_rule_is_an_error():
    instr = Instr("no_such_kind", "x", None, ())
    with pytest.raises(Exception, match="no uninitialised-value rule"):
        rule_of(instr)


def test_isa_executors_are_registered_per_instruction():
    ops = {op for kind, op in EXECUTORS if kind == "isa"}
    for name in ("tensor_tensor", "nc_matmul", "dma_copy", "iota", "max8", "activation"):
        assert name in ops and hasattr(nisa, name)
    assert executor_of(Instr("isa", "no_such_op", None, ())) is None
