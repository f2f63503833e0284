"""Instruction handles and scheduling dependencies (``NkiInstruction.depends_on``, nki 0.7):
every in-place ``nisa`` call returns a handle; an edge is checked when it is made, recorded in
the traced IR and honoured by the cost model's schedule; execution (program order) is
unchanged."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import nki.typing as nt
from nki.errors import NKIError
from nki.ir import Instr

from backends import run_backends


def _sb(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


def _instrs(ir):
    out = []

    def walk(nodes):
        for n in nodes:
            if isinstance(n, Instr):
                out.append(n)
            elif hasattr(n, "body"):
                walk(n.body)

    walk(ir.body)
    return out


handles: list = []


def _doubled(a):
    """(out, x, v, the load of ``a`` into x, the multiply v = 2 x): how the kernels start."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = _sb(a.shape)
    load = nisa.dma_copy(dst=x, src=a)
    v = _sb(a.shape)
    mul = nisa.tensor_scalar(dst=v, data=x, op0=nl.multiply, operand0=2.0)
    return out, x, v, load, mul


@nki.jit
def scaled_exp(a):
    out, x, v, load, mul = _doubled(a)
    e = _sb(a.shape)
    act = nisa.activation(dst=e, op=nl.exp, data=v)
    chained = act.depends_on(mul, load).depends_on(load)
    store = nisa.dma_copy(dst=out, src=e)
    store.depends_on(act)
    handles[:] = [load, mul, act, chained, store]
    return out


def test_in_place_calls_return_handles_and_edges_reach_the_ir():
    a = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
    got = scaled_exp(a)
    np.testing.assert_allclose(got, np.exp(2.0 * a), rtol=1e-6)
    load, mul, act, chained, store = handles
    assert all(isinstance(h, nisa.NkiInstruction) for h in handles)
    assert chained is act  # (depends_on returns its consumer)
    assert repr(load) == "<nisa.dma_copy instruction>"
    by_op = {i.op: i for i in _instrs(scaled_exp.last_ir) if i.op != "dma_copy"}
    copies = [i for i in _instrs(scaled_exp.last_ir) if i.op == "dma_copy"]
    label = {i.attr("dep_label"): i for i in _instrs(scaled_exp.last_ir)}
    # activation waits for the multiply and the load (once each); the store for activation
    assert {label[k].op for k in by_op["activation"].attr("after")} == {"tensor_scalar", "dma_copy"}
    assert len(by_op["activation"].attr("after")) == 2
    assert label[copies[1].attr("after")[0]] is by_op["activation"]
    assert copies[0].attr("after") is None and by_op["tensor_scalar"].attr("after") is None


def test_every_backend_runs_a_kernel_with_edges_to_the_same_bits():
    a = np.random.default_rng(3).standard_normal((128, 64)).astype(np.float32)
    got, want, info = run_backends(scaled_exp, None, a).against("batched")
    assert info.backend == "batched"
    np.testing.assert_allclose(want, np.exp(2.0 * a), rtol=1e-6)


def _two_engines(edge: bool, kind=None):
    @nki.jit
    def kernel(a):
        out = nl.ndarray((2, *a.shape), dtype=a.dtype, buffer=nl.shared_hbm)
        x = _sb(a.shape)
        nisa.dma_copy(dst=x, src=a)
        v = _sb(a.shape)
        mul = nisa.tensor_scalar(dst=v, data=x, op0=nl.multiply, operand0=2.0)  # Vector
        e = _sb(a.shape)
        act = nisa.activation(dst=e, op=nl.exp, data=x)  # Scalar, independent of mul
        if edge:
            act.depends_on(mul, kind=kind)
        nisa.dma_copy(dst=out[0], src=v)
        nisa.dma_copy(dst=out[1], src=e)
        return out

    return kernel


def test_the_schedule_starts_a_consumer_after_its_producer():
    spans = {}
    for edge in (False, True):
        rep = nki.estimate(_two_engines(edge), target="trn2")(nt.tensor[[128, 2048], nl.float32])
        ev = {e.name: e for e in rep.schedule.events}
        mul, act = ev["nisa.tensor_scalar"], ev["nisa.activation"]
        spans[edge] = (mul.start, mul.start + mul.dur, act.start)
    mul_start, mul_end, act_start = spans[False]
    assert act_start < mul_end  # (no edge: the two engines overlap)
    mul_start, mul_end, act_start = spans[True]
    assert act_start >= mul_end
    # the results are the same either way (program order satisfies the edge)
    a = np.random.default_rng(1).standard_normal((128, 256)).astype(np.float32)
    np.testing.assert_array_equal(_two_engines(True)(a), _two_engines(False)(a))


def _spans(kernel):
    rep = nki.estimate(kernel, target="trn2")(nt.tensor[[128, 2048], nl.float32])
    ev = {e.name: e for e in rep.schedule.events}
    mul, act = ev["nisa.tensor_scalar"], ev["nisa.activation"]
    return mul.start, mul.start + mul.dur, act.start


def test_edge_kinds_wait_for_the_end_or_only_for_the_start():
    # runtime (the default): a semaphore wait for the producer's end; schedule: issue order
    # only, so the consumer may run on its engine while the producer runs on its own
    for kind in (None, nisa.dependency.runtime):
        mul_start, mul_end, act_start = _spans(_two_engines(True, kind))
        assert act_start >= mul_end
    mul_start, mul_end, act_start = _spans(_two_engines(True, nisa.dependency.schedule))
    assert mul_start <= act_start < mul_end
    a = np.random.default_rng(3).standard_normal((128, 64)).astype(np.float32)
    got = _two_engines(True, nisa.dependency.schedule)(a)
    np.testing.assert_allclose(got[0], 2.0 * a)
    np.testing.assert_allclose(got[1], np.exp(a), rtol=1e-6)


def test_the_edge_kind_enum_is_in_nisa_and_its_constants():
    from nki.isa.constants import dependency

    assert dependency is nisa.dependency
    assert [k.name for k in dependency] == ["runtime", "schedule"]


def _bad(case: str):
    @nki.jit
    def kernel(a):
        out, x, v, load, mul = _doubled(a)
        if case == "tile":
            mul.depends_on(x)  # EDGE
        elif case == "self":
            mul.depends_on(mul)  # EDGE
        elif case == "backwards":
            load.depends_on(mul)  # EDGE
        elif case == "kind":
            mul.depends_on(load, kind="runtime")  # EDGE
        elif case in ("out of a loop", "into a loop", "scheduled out of a loop"):
            inside = []

            def body(i):
                t = _sb(a.shape)
                h = nisa.tensor_scalar(dst=t, data=x, op0=nl.add, operand0=1.0)
                if case == "into a loop":
                    h.depends_on(mul)  # (allowed: the producer is in an enclosing scope)
                inside.append(h)

            nl.fori_loop(0, nisa.register_alloc(2), body)  # (a device loop: register bound)
            w = _sb(a.shape)
            after = nisa.tensor_copy(dst=w, src=v)
            if case == "out of a loop":
                after.depends_on(inside[0])  # EDGE
            elif case == "scheduled out of a loop":  # (no semaphore: allowed)
                after.depends_on(inside[0], kind=nisa.dependency.schedule)
        elif case == "escaped":
            handles[:] = [mul]
        nisa.dma_copy(dst=out, src=v)
        return out

    return kernel


@pytest.mark.parametrize(
    ("case", "code", "words"),
    [
        ("tile", "err_unsupported_operand", "takes instruction handles"),
        ("self", "err_invalid_dependency", "cannot depend on itself"),
        ("backwards", "err_invalid_dependency", "was traced after its consumer"),
        ("out of a loop", "err_dependency_crosses_device_loop", "an edge cannot leave a device"),
        ("kind", "err_invalid_dependency", "kind must be nisa.dependency.runtime or"),
    ],
)
def test_a_bad_edge_is_reported_at_its_line(case, code, words):
    kernel = _bad(case)
    a = np.ones((128, 32), np.float32)
    with pytest.raises(NKIError, match=words) as e:
        kernel(a)
    assert e.value.code == code
    assert e.value.loc.file == __file__
    src = open(__file__).read().splitlines()
    assert "# EDGE" in src[e.value.loc.line - 1]


def test_an_edge_into_a_device_loop_is_allowed():
    a = np.random.default_rng(2).standard_normal((128, 32)).astype(np.float32)
    np.testing.assert_allclose(_bad("into a loop")(a), 2.0 * a)


def test_a_schedule_edge_may_leave_a_device_loop():
    a = np.random.default_rng(4).standard_normal((128, 32)).astype(np.float32)
    np.testing.assert_allclose(_bad("scheduled out of a loop")(a), 2.0 * a)


def test_a_handle_outside_its_trace_is_reported():
    a = np.ones((128, 32), np.float32)
    _bad("escaped")(a)
    (mul,) = handles
    with pytest.raises(NKIError, match="must be called while its kernel is traced") as e:
        mul.depends_on()
    assert e.value.code == "err_outside_kernel"


def test_register_and_validation_error_names():
    seen = []

    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        r = nisa.register_alloc(3)
        seen.append((isinstance(r, nisa.VirtualRegister), isinstance(a, nisa.VirtualRegister)))
        x = _sb(a.shape)
        nisa.dma_copy(dst=x, src=a)
        y = _sb((a.shape[1], a.shape[1]))
        nisa.nc_matmul(dst=y, stationary=x, moving=x)  # the Tensor engine writes PSUM only
        return out

    with pytest.raises(nisa.NkiValidationError, match="writes PSUM only"):
        kernel(np.ones((128, 32), np.float32))
    assert seen == [(True, False)]


@nki.jit
def named_pair(t):
    x = _sb(t.shape)
    nisa.dma_copy(dst=x, src=t)
    a, b, c = _sb(t.shape), _sb(t.shape), _sb(t.shape)
    nisa.reciprocal(dst=a, data=x, name="recip")
    nisa.tensor_scalar(dst=b, data=x, op0=nl.add, operand0=1.0, name="plus1")
    nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.add, name="sum")
    out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=c)
    return out


def _by_name(ir):
    """The instructions named in ``named_pair``, found by what they are."""
    ops = {"reciprocal": "recip", "tensor_scalar": "plus1", "tensor_tensor": "sum"}
    return {ops[n.op]: n for n in _instrs(ir) if n.op in ops}


def test_with_schedule_orders_named_instructions_and_keeps_the_results():
    t = np.random.default_rng(5).uniform(1.0, 2.0, (128, 64)).astype(np.float32)
    want = 1.0 / t + (t + 1.0)
    scheduled = named_pair.with_schedule([("plus1", "recip")])
    runtime = named_pair.with_schedule([("sum", ["recip", "plus1"])], kind=nisa.dependency.runtime)
    for k in (named_pair, scheduled, runtime):
        np.testing.assert_allclose(k(t), want, rtol=1e-6)
    plain, sched, rt = (_by_name(k.last_ir) for k in (named_pair, scheduled, runtime))
    assert all(n.attr("issued_after") is None and n.attr("after") is None for n in plain.values())
    assert sched["plus1"].attr("issued_after") == (sched["recip"].attr("dep_label"),)
    labels = {rt["recip"].attr("dep_label"), rt["plus1"].attr("dep_label")}
    assert set(rt["sum"].attr("after")) == labels and None not in labels
    rep = nki.estimate(scheduled, target="trn2")(nt.tensor[[128, 512], nl.float32])
    ev = {e.name: e for e in rep.schedule.events}
    assert ev["nisa.tensor_scalar"].start >= ev["nisa.reciprocal"].start


@pytest.mark.parametrize(
    ("edges", "code", "words"),
    [
        ([("plus1", "recip"), ("sum", "recp")], "err_invalid_dependency", "named 'recp'"),
        ([("recip", "sum")], "err_invalid_dependency", "is traced after 'recip'"),
        ([("plus1",)], "err_invalid_argument", "takes a list of pairs"),
        ("plus1", "err_invalid_argument", "takes a list of pairs"),
        ([("plus1", ["recip", 3])], "err_invalid_argument", "producer names must be strings"),
    ],
)
def test_a_bad_schedule_is_reported_at_its_call(edges, code, words):
    t = np.ones((128, 8), np.float32)
    with pytest.raises(NKIError, match=words) as e:
        named_pair.with_schedule(edges)(t)  # SCHEDULE
    assert e.value.code == code
    assert e.value.loc.file == __file__
    assert "# SCHEDULE" in open(__file__).read().splitlines()[e.value.loc.line - 1]
    if "recp" in str(e.value):
        assert "named here: plus1, recip, sum" in str(e.value)


def test_with_schedule_finds_current_only_instructions_by_name():
    # (nisa.exponential has no classic form: its name= is kept on another path)
    @nki.jit
    def kernel(t):
        x, y, z = _sb(t.shape), _sb(t.shape), _sb(t.shape)
        nisa.dma_copy(dst=x, src=t, name="load")
        nisa.exponential(dst=y, src=x, name="ex")
        nisa.tensor_scalar(dst=z, data=x, op0=nl.multiply, operand0=3.0, name="triple")
        out = nl.ndarray((2, *t.shape), t.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[0], src=y)
        nisa.dma_copy(dst=out[1], src=z)
        return out

    t = np.random.default_rng(6).standard_normal((128, 16)).astype(np.float32)
    scheduled = kernel.with_schedule([("triple", "ex")])
    got = scheduled(t)
    np.testing.assert_allclose(got[0], np.exp(t), rtol=1e-6)
    np.testing.assert_allclose(got[1], 3.0 * t, rtol=1e-6)
    ops = {n.op: n for n in _instrs(scheduled.last_ir)}
    assert ops["tensor_scalar"].attr("issued_after") == (ops["exponential"].attr("dep_label"),)
