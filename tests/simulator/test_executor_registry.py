"""The executor registry: every executed instruction chooses its uninitialised-value rule
explicitly, every nki.isa instruction the language exports has an executor, and each backend's
entries (executor and the instructions it declines) sit in the same registry."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.ir import Instr
from simulator import (
    interpreter,  # noqa: F401 - registers the executors
    launch,  # noqa: F401 - loads every backend
)
from simulator.backends import BACKENDS, REFERENCE
from simulator.executors import ANY, EXECUTORS, declined, entries, entry_of, executes, executor_of
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


# ---- one registry for every backend ------------------------------------------------------------


@nki.jit
def xor_then_gather(a, b, idx):
    """A bit-vector op, a plain add, an indirect load (a gather), an nki.isa instruction and
    an indirect store (a scatter)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.add(nl.bitwise_xor(x, nl.load(b)), x)
    rows = nl.load(idx)
    i_p, i_f = nl.arange(128)[:, None], nl.arange(a.shape[1])[None, :]
    z = nl.load(a[rows[i_p, 0], i_f])
    nl.store(out, value=nisa.tensor_tensor(y, z, op=nl.add))
    nl.store(out[rows[i_p, 0], i_f], value=z)
    return out


def _instructions():
    a = np.arange(128 * 8, dtype=np.int32).reshape(128, 8)
    k = xor_then_gather.configure(backend="numpy")
    k(a, a, np.zeros((128, 1), np.int32))
    return {i.api or f"{i.kind}.{i.op}": i for i, _ in k.last_ir.instructions()}


def test_each_backend_has_its_entries_and_declines_with_a_reason():
    got = _instructions()
    for name, why in [
        ("nl.bitwise_xor", "'nl.bitwise_xor' is a bit-vector op"),
        ("nl.store", "'nl.store' uses an indirect (data-dependent) access"),
    ]:
        assert declined(got[name], "batched") == why
    assert declined(got["nl.add"], "batched") is None
    assert declined(got["nl.load"], "batched") is None  # (the gather: ``batched/gather.py``)
    assert declined(got["nisa.tensor_tensor"], "batched") is None
    assert declined(Instr("isa", "no_such_op", None, ()), "batched") == (
        "'isa.no_such_op' has no batched executor"
    )
    # the interpreter has an executor of every instruction: one it never declines
    for instr in got.values():
        assert entry_of(instr).declines is None and declined(instr, REFERENCE) is None
    # the batched executor of an nki.isa instruction runs the engines' destination rules first
    batched = entry_of(got["nisa.tensor_tensor"], "batched").run
    assert executor_of(got["nisa.tensor_tensor"], "batched") is not batched
    assert executor_of(got["nl.add"], "batched") is entry_of(got["nl.add"], "batched").run


def test_every_executor_of_another_backend_can_fall_back_to_the_interpreter():
    for b in BACKENDS:
        for kind, op in entries(b.name):
            assert (kind, op) in EXECUTORS or (kind, ANY) in EXECUTORS, (b.name, kind, op)


def test_registering_for_an_unknown_backend_fails():
    with pytest.raises(KeyError):
        executes("ew", backend="no_such_backend")
