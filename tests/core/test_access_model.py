"""The access model of the IR (``Instr.uses`` / ``reads`` / ``writes``, ``KernelIR.symbol_ranges``).

Each operand kind against hand-computed expectations (direct, indirect and their index tiles,
attribute operands, atomic and accumulating updates, masks); the reference interpreter as the
oracle of what every instruction of a broad corpus of kernels (``tests/access_corpus.py``)
really reads and writes; and the consumers (the static checks, the batched planner, the cost
model's scheduler) seeing, on that corpus, the reads and writes the model gives."""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys

import access_corpus as corpus
import numpy as np
import pytest

import nki
import nki.isa_spec as isa_spec
import nki.language as nl
import nki.typing as nt
from nki.ir import (
    Access,
    Affine,
    Const,
    IndexExpr,
    Instr,
    KernelIR,
    Loop,
    PidSym,
    SymRange,
)
from simulator.batched import hbm as batched_hbm
from simulator.batched import plan as batched_plan
from simulator.checks import capacity, coverage, races, unwritten
from simulator.cost import scheduler
from simulator.cost.table import table_for

from helpers import ROOT


def _instrs(kernel) -> list[Instr]:
    return [i for i, _ in kernel.last_ir.instructions()]


def _one(kernel, api: str) -> Instr:
    (instr,) = [i for i in _instrs(kernel) if i.api == api]
    return instr


def _roles(instr: Instr) -> list[tuple[str, str, bool, bool]]:
    return [(u.role, u.access.tensor, u.read, u.write) for u in instr.uses()]


# ---- each operand kind ---------------------------------------------------------------------


def test_direct_operands_are_read_and_the_destination_written():
    k = corpus.launch("direct")
    add = _one(k, "nl.add")
    x, y = add.srcs
    assert _roles(add) == [
        ("src", x.tensor, True, False),
        ("src", y.tensor, True, False),
        ("dst", add.dst.tensor, False, True),
    ]
    assert add.reads() == (x, y) and add.writes() == (add.dst,)
    load = _instrs(k)[0]
    assert load.reads() == (load.srcs[0],) and load.srcs[0].tensor == "a"
    assert load.writes() == (load.dst,)


def test_indirect_accesses_read_their_index_tiles():
    k = corpus.launch("indirect")
    gather, scatter = (i for i in _instrs(k) if any(u.access.indirect for u in i.uses()))
    (src,) = gather.srcs
    ((dim, index),) = src.indirect
    assert dim == 0 and index.shape == (8, 1)
    assert _roles(gather) == [
        ("src", "table", True, False),
        ("index", index.tensor, True, False),
        ("dst", gather.dst.tensor, False, True),
    ]
    assert gather.reads() == (src, index)
    # a scatter writes its destination (it does not read it) and reads its index tile
    ((_, sindex),) = scatter.dst.indirect
    assert sindex == index
    assert scatter.reads() == (scatter.srcs[0], sindex)
    assert scatter.writes() == (scatter.dst,)


def test_atomic_and_accumulating_updates_read_and_write_the_destination():
    atomic = _one(corpus.launch("atomic"), "nl.atomic_rmw")
    assert atomic.accumulate is None and atomic.accumulates  # (the op is the instruction's)
    ((_, index),) = atomic.dst.indirect
    assert atomic.reads() == (atomic.srcs[0], atomic.dst, index)
    assert atomic.writes() == (atomic.dst,)
    k = corpus.launch("accumulate")
    rmw = _one(k, "nisa.dma_copy")
    assert rmw.attr("rmw") == "add" and rmw.accumulate is None and rmw.accumulates
    assert rmw.reads() == (rmw.srcs[0], rmw.dst) and rmw.writes() == (rmw.dst,)
    matmul = _one(k, "nl.matmul")
    assert matmul.accumulate == "add"
    assert matmul.reads() == (*matmul.srcs, matmul.dst) and matmul.writes() == (matmul.dst,)
    plain = _instrs(corpus.launch("direct"))[0]
    assert not plain.accumulates and plain.dst not in plain.reads()


@pytest.mark.parametrize(
    "name, api, attr",
    [
        ("reduce_res", "nisa.activation_reduce", "reduce_res"),
        ("select_reduce", "nisa.select_reduce", "reduce_res"),
        ("match_replace", "nisa.nc_match_replace8", "dst_idx"),
        ("topk", "nisa.topk", "idx_dst"),
        ("quantize_mx", "nisa.quantize_mx", "dst_scale"),
    ],
)
def test_outputs_held_in_attributes_are_written_not_read(name, api, attr):
    instr = _one(corpus.launch(name), api)
    acc = instr.attr(attr)
    assert isinstance(acc, Access)
    assert (attr, acc.tensor, False, True) in _roles(instr)
    assert instr.writes() == (acc, instr.dst)
    assert acc not in instr.reads()


def test_every_spec_parameter_writing_an_attribute_is_an_output():
    # the instruction spec's roles decide: secondary outputs and second destinations recorded as
    # IR attributes are written, every other attribute holding an access is read
    written = {
        p.attr
        for i in isa_spec.INSTRUCTIONS
        for form in isa_spec.FORMS
        if i.form(form) is not None
        for p in i.params(form)
        if p.role in ("out", "dst") and p.attr is not None
    }
    assert (
        written == set(isa_spec.OUTPUT_ATTRS) == {"reduce_res", "dst_idx", "idx_dst", "dst_scale"}
    )


def _acc(name: str, *indirect: tuple[int, Access]) -> Access:
    return Access(name, (4, 2), (IndexExpr(Affine(), (1, 0), (4, 2)),) * 2, indirect)


def test_attribute_operands_read_or_written_by_their_key():
    idx = _acc("idx")
    bias, scales, res = _acc("bias"), (_acc("s0"), _acc("s1")), _acc("res", (0, idx))
    instr = Instr(
        "isa", "example", _acc("out"), (_acc("x"), Const(1.0)),
        (("bias", bias), ("scales", scales), ("reduce_res", res), ("engine", "vector")),
    )  # fmt: skip
    assert _roles(instr) == [
        ("src", "x", True, False),
        ("bias", "bias", True, False),
        ("scales", "s0", True, False),
        ("scales", "s1", True, False),
        ("reduce_res", "res", False, True),
        ("index", "idx", True, False),
        ("dst", "out", False, True),
    ]
    assert [u.operand for u in instr.uses()] == [True, False, False, False, False, False, True]
    assert [a.tensor for a in instr.reads()] == ["x", "bias", "s0", "s1", "idx"]
    assert [a.tensor for a in instr.writes()] == ["res", "out"]


def test_a_mask_reads_nothing_and_a_masked_write_does_not_read_its_destination():
    k = corpus.launch("masked")
    for instr in _instrs(k):
        assert instr.mask is not None
        assert instr.dst not in instr.reads()
        assert [u.role for u in instr.uses()] == ["src"] * len(
            [s for s in instr.srcs if isinstance(s, Access)]
        ) + ["dst"]
        unmasked = dataclasses.replace(instr, mask=None)
        assert unmasked.uses() == instr.uses()


def test_the_model_is_cached_outside_equality_and_hashing():
    instr = _instrs(corpus.launch("direct"))[2]
    same = dataclasses.replace(instr)
    first = instr.uses()
    assert instr.uses() is first and instr.reads() is instr.reads()
    assert same == instr and hash(same) == hash(instr)
    assert pickle.loads(pickle.dumps(instr)) == instr
    assert "_model" not in vars(same)  # (a copy computes its own)
    assert same.uses() == first


# ---- symbol ranges -----------------------------------------------------------------------------


def test_symbol_ranges_of_program_ids_and_loops():
    k = corpus.launch("loops")
    ir: KernelIR = k.last_ir
    (load, loops), _ = ir.instructions()
    outer, inner = loops
    ranges = ir.symbol_ranges(loops)
    assert dict(ranges) == {
        PidSym(0): SymRange(0, 2),
        outer.sym: SymRange(0, 2, 1),
        inner.sym: SymRange(1, 4, 2),
    }
    assert list(ranges) == [PidSym(0), outer.sym, inner.sym]
    assert ranges[inner.sym].values == range(1, 4, 2) and ranges[inner.sym].bounds == (1, 3)
    assert ranges[inner.sym].trips == 2 and not ranges[inner.sym].runtime
    assert ir.symbol_ranges(loops) is ranges  # computed once per loop nest
    assert dict(ir.symbol_ranges()) == {PidSym(0): SymRange(0, 2)}
    assert SymRange(3, 3).bounds == (0, -1) and SymRange(3, 3).trips == 0


def test_a_device_loop_is_marked_runtime():
    ir = corpus.launch("device_loop").last_ir
    (loop,) = [n for n, _ in ir.walk() if isinstance(n, Loop)]
    assert loop.is_runtime
    got = ir.symbol_ranges((loop,))[loop.sym]
    assert got.runtime and got == SymRange(loop.start, loop.stop, loop.step, True)


# ---- consumers whose own copy was wrong ----------------------------------------------------------


@pytest.mark.parametrize("name, grid", [("atomic_direct", 4), ("atomic_loop", None)])
def test_atomic_updates_of_one_element_by_every_instance_or_iteration_are_not_races(name, grid):
    # an atomic read-modify-write accumulates whatever the order: neither an SPMD race nor a
    # loop-carried dependency (the checks used to take nl.atomic_rmw for a plain store)
    a, out = corpus.arguments(name)
    kernel = corpus.launch(name)
    got = (kernel if grid is None else kernel[grid])(a, out)
    np.testing.assert_allclose(got, 4 * a, rtol=1e-6)


def _estimate(fn, *args):
    return nki.estimate(fn, target="trn2")(*args)


def test_masked_stores_to_disjoint_tiles_overlap_like_unmasked_ones():
    # a masked store writes only its lanes; it does not read the tensor, so stores of other
    # iterations to other tiles need not wait for it (the scheduler used to serialise them)
    def stores(a, masked):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(512)[None, :]
        for i in nl.affine_range(a.shape[0] // 128):
            t = nl.load(a[i * 128 + i_p, i_f])
            if masked:
                nl.store(out[i * 128 + i_p, i_f], value=t, mask=(i * 128 + i_p < a.shape[0]))
            else:
                nl.store(out[i * 128 + i_p, i_f], value=t)
        return out

    a = np.zeros((1024, 512), np.float32)
    plain = _estimate(lambda a: stores(a, False), a)
    masked = _estimate(lambda a: stores(a, True), a)
    assert masked.latency_ns == pytest.approx(plain.latency_ns)


def test_an_indirect_store_waits_for_its_index_tile():
    # the scatter reads its index tile: it starts after the instruction computing the indices
    # ends, not as soon as its values are loaded (the scheduler used to ignore the index tile
    # of an indirect destination)
    def scatter(table: nt.mutable_tensor, idx, vals):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(64)[None, :]
        v = nl.load(vals)
        ix = nl.add(nl.load(idx[i_p, 0]), 0)  # the indices, computed on an engine
        nl.store(table[ix, i_f], value=v)
        return table

    report = _estimate(
        scatter, np.zeros((256, 64), np.float32), np.zeros((128, 1), np.int32),
        np.zeros((128, 64), np.float32),
    )  # fmt: skip
    events = report.schedule.events
    (add,) = [e for e in events if e.name == "nl.add"]
    (store,) = [e for e in events if e.name == "nl.store"]
    assert events[store.pred] is add  # (the event its start waited for: the critical path)
    latency = table_for("trn2").dma_fixed_latency_ns
    assert store.start == pytest.approx(add.start + add.dur + latency)


# ---- the corpus: the interpreter as oracle, the consumers in agreement ----------------------


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    path = tmp_path_factory.mktemp("access") / "corpus.pkl"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "access_corpus.py"), str(path)],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(path, "rb") as f:
        return pickle.load(f)


def _root(ir: KernelIR, name: str) -> str:
    for one in (ir, *ir.cores):
        try:
            return one.storage_of(name)
        except KeyError:
            continue
    raise KeyError(name)


def test_the_corpus_covers_every_operand_kind_and_classic_instruction(kernels):
    roles, ops, flags = set(), set(), set()
    for _, ir, _ in kernels:
        for instr, loops in ir.instructions():
            roles |= {u.role for u in instr.uses()}
            ops.add((instr.kind, instr.op))
            flags |= {f for f, on in (("atomic", instr.kind == "atomic_rmw"),
                                      ("accumulate", instr.accumulate is not None),
                                      ("rmw", bool(instr.attr("rmw"))),
                                      ("mask", instr.mask is not None),
                                      ("device loop", any(lp.is_runtime for lp in loops)),
                                      ("lnc", bool(ir.cores))) if on}  # fmt: skip
    assert {"src", "dst", "index", "reduce_res", "idx_dst", "dst_scale", "dst_idx"} <= roles
    assert flags == {"atomic", "accumulate", "rmw", "mask", "device loop", "lnc"}
    classic = {isa_spec.get(n).ir_op for n in isa_spec.names(isa_spec.CLASSIC)}
    assert classic - {op for kind, op in ops if kind == "isa"} == set()
    assert len(kernels) > 150 and len(ops) > 50


def test_the_interpreter_reads_and_writes_what_the_model_says(kernels):
    checked = 0
    for source, ir, seen in kernels:
        for (instr, _), got in zip(ir.instructions(), seen):
            if got is None:
                continue  # (did not run: a loop of no trips, a collective's own walk)
            read, written, touched = got
            reads = {_root(ir, a.tensor) for a in instr.reads()}
            writes = {_root(ir, a.tensor) for a in instr.writes()}
            where = f"{source}: {instr}"
            assert read <= reads, (where, read - reads)
            assert written <= writes, (where, written - writes)
            assert touched <= reads | writes, (where, touched - reads - writes)
            checked += 1
    assert checked > 1000


def _traces(kernels):
    for source, ir, _ in kernels:
        for one in ir.cores or (ir,):
            yield source, one


def test_the_checks_see_the_models_reads_and_writes(kernels):
    for source, ir in _traces(kernels):
        instrs = [i for i, _ in ir.instructions()]
        # loop-carried dependencies and SPMD races: the writes
        assert [(id(i), a) for i, a, _ in races._writes(ir.body, ())] == [
            (id(i), a) for i in instrs for a in i.writes()
        ], source
        # on-chip tiles seen across loop iterations: the tensors each instruction reads, then
        # those it only writes
        timeline = races._Timeline.of(ir)
        seen: dict[int, tuple[set, set]] = {}
        for tensor, touches in timeline.touches.items():
            for _, reads, instr in touches:
                seen.setdefault(id(instr), (set(), set()))[0 if reads else 1].add(tensor)
        for i in instrs:
            reads = {ir.storage_of(a.tensor) for a in i.reads()}
            only_written = {ir.storage_of(a.tensor) for a in i.writes()} - reads
            assert seen.get(id(i), (set(), set())) == (reads, only_written), (source, str(i))
        # capacity: every tensor an instruction uses keeps its tile live
        for i in instrs:
            assert capacity._uses(i) == {u.access.tensor for u in i.uses()}, (source, str(i))
        # unwritten outputs: every write, the destination under the instruction's mask
        writes = unwritten._writes(ir)
        assert sum(len(w) for w in writes.values()) == sum(len(i.writes()) for i in instrs)
        for base, ws in writes.items():
            for instr, _, acc, mask in ws:
                assert acc in instr.writes() and ir.storage_of(acc.tensor) == base
                assert mask is (instr.mask if acc is instr.dst else None)
        # no uninitialised-memory fill is skipped for a tensor some instruction reads
        read = {a.tensor for i in instrs for a in i.reads()}
        assert not coverage.unfilled_outputs(ir) & read, source


def test_the_batched_planner_sees_the_models_reads_and_writes(kernels):
    for source, ir in _traces(kernels):
        instrs = [i for i, _ in ir.instructions()]
        per_position = {
            ir.storage_of(w.tensor)
            for i in instrs
            for w in i.writes()
            if batched_plan._per_position(ir.tensor(w.tensor))
        }
        assert batched_plan._written_on_chip(ir.body, ir) == per_position, source
        reread, why = batched_hbm.check_positions(ir, set(), set())
        if why is None:
            shared = {d.name for d in ir.tensors if d.buffer == "shared_hbm"}
            written = {ir.storage_of(a.tensor) for i in instrs for a in i.writes()} & shared
            read = {ir.storage_of(a.tensor) for i in instrs for a in i.reads()} & shared
            assert reread == written & read, source


def test_the_cost_model_sees_the_models_reads_and_writes(kernels):
    for source, ir in _traces(kernels):
        table = table_for(ir.target)
        st = scheduler._State(ir, table)
        st.nodes(ir.body, {PidSym(a): 0 for a in range(len(ir.grid.dims))}, ())
        ran = [i for i, _ in ir.instructions() if id(i) in st.sites]
        ran = [i for i in ran if st.costs[id(i)].engine != "none"]
        # (the dependency tables: memory key (storage tensor, buffer) -> block -> last access)
        for got, accesses in ((st.reads, Instr.reads), (st.writes, Instr.writes)):
            want = {ir.storage_of(a.tensor) for i in ran for a in accesses(i)}
            assert {base for (base, _), blocks in got.items() if blocks} == want, source
