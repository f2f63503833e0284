"""The nki.isa instruction spec (nki/isa_spec.py) agrees with the code it describes: the classic
functions' signatures, the simulator's executors, Numba lowering and poison rules, the targets'
availability rules, the test strategies' limits, the test suite and the site's reference table."""

from __future__ import annotations

import inspect
import pkgutil
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.isa_spec as spec
import nki.language as nl
import simulator.isa
from nki.errors import NKIError
from nki.ir import Access, Const, Instr
from nki.targets import TARGETS, isa_rules
from simulator import interpreter  # noqa: F401 - registers every executor
from simulator.compiled.codegen import generate
from simulator.config import SimConfig
from simulator.executors import EXECUTORS, LOWERINGS
from simulator.poison import rule_of

from helpers import expect, expect_error
from snippets import site_table

ROOT = Path(__file__).resolve().parents[2]
CLASSIC = spec.names(spec.CLASSIC)
# every instruction nki-sim runs: the classic ones and the current-only ones with an IR op
SIMULATED = tuple(i.name for i in spec.INSTRUCTIONS if i.ir_op)


def _isa_executors() -> dict[str, Any]:
    """IR op -> the interpreter's executor of ``isa.<op>``."""
    return {op: fn for (kind, op), fn in EXECUTORS.items() if kind == "isa"}


# ---- calling forms -------------------------------------------------------------------------


def _shape(sig: inspect.Signature) -> list[tuple[str, Any, Any]]:
    return [
        (p.name, p.kind, p.default)
        for p in sig.parameters.values()
        if p.kind is not inspect.Parameter.VAR_KEYWORD  # today's **_kw catch-all
    ]


@pytest.mark.parametrize("name", CLASSIC)
def test_classic_form_is_the_functions_signature(name):
    real = inspect.signature(getattr(nisa, name))
    assert _shape(spec.signature(name, spec.CLASSIC, resolve=True)) == _shape(real)


def test_spec_lists_every_nisa_instruction_function():
    queries = {"get_nc_version", "get_nc_sub_version"}  # (of the target, not instructions)
    functions = {n for n in nisa.__all__ if inspect.isfunction(getattr(nisa, n))} - queries
    assert set(CLASSIC) <= functions <= set(spec.names())
    # a function of an instruction that exists only in the current API has its current form
    for n in functions - set(CLASSIC):
        got = [
            (p.name, p.kind, p.default)
            for p in inspect.signature(getattr(nisa, n)).parameters.values()
        ]
        want = [
            (p.name, p.kind, p.default)
            for p in spec.signature(n, spec.CURRENT, resolve=True).parameters.values()
        ]
        assert got == want, n


def test_current_forms_put_the_destination_first_with_the_stub_orders():
    for i in spec.INSTRUCTIONS:
        if i.current is None or not i.takes_dst(spec.CURRENT):
            continue
        first = i.params(spec.CURRENT)[0].name
        want = {"sendrecv": "src", "topk": "val_dst"}.get(i.name, "dst")
        assert first == want, i.name
    assert list(spec.signature("nc_stream_shuffle", spec.CURRENT).parameters)[:3] == [
        "dst",
        "src",
        "shuffle_mask",
    ]
    # SDK 2.32's stub: offset comes after cmp_op and may be passed by position
    params = list(spec.signature("affine_select", spec.CURRENT).parameters.values())
    assert [p.name for p in params[5:7]] == ["cmp_op", "offset"]
    assert params[6].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    # no current form takes the classic dtype= / mask=; every non-register one takes name=
    for n in spec.names(spec.CURRENT):
        params = spec.signature(n, spec.CURRENT).parameters
        assert "dtype" not in params and "mask" not in params, n
        assert ("name" in params) == (spec.get(n).family != "registers"), n


def test_every_parameter_has_a_role_and_type():
    roles = {"dst", "in", "out", "operand", "op", "attr", "engine", "mask", "dtype", "name"}
    for i in spec.INSTRUCTIONS:
        for form in spec.FORMS:
            if i.form(form) is None:
                continue
            for p in i.params(form):
                assert p.role in roles | {"register"} and p.type, (i.name, p.name)


def test_ignored_keywords_are_classic_parameters():
    for i in spec.INSTRUCTIONS:
        names = {p.name for p in i.params(spec.CLASSIC)} if i.classic else set()
        assert set(i.ignored) <= names, i.name


# ---- executors, Numba lowering, poison rules ---------------------------------------------------


def test_every_simulated_instruction_has_an_executor():
    executors = _isa_executors()
    missing = [n for n in SIMULATED if spec.get(n).ir_op not in executors]
    assert not missing
    # and every executor belongs to an instruction of the spec
    assert set(executors) <= {spec.get(n).ir_op for n in SIMULATED}
    # a current-only instruction is simulated exactly when nki.isa has its function
    current_only = {i.name for i in spec.INSTRUCTIONS if i.current_only and i.ir_op}
    assert current_only <= set(nisa.__all__)


# modules of each tree that hold no instruction: what the families share
_SHARED = {
    "nki.isa": {"common", "constants", "enums", "forms", "rules"},
    "simulator.isa": {"accumulators", "common", "formulas"},
}
# IR kinds whose one executor runs the instructions of a family that records no isa.<op>
_KIND_FAMILIES = {"lnc": "collectives", "nkiscalar": "registers"}


def test_every_function_and_executor_lives_in_its_spec_familys_module():
    executors = _isa_executors()
    for i in spec.INSTRUCTIONS:
        assert getattr(nisa, i.name).__module__ == f"nki.isa.{i.family}", i.name
        if i.ir_op:
            assert executors[i.ir_op].__module__ == f"simulator.isa.{i.family}", i.name
    for kind, family in _KIND_FAMILIES.items():
        assert EXECUTORS[(kind, "*")].__module__ == f"simulator.isa.{family}", kind


def test_both_trees_have_one_module_per_family():
    families = {i.family for i in spec.INSTRUCTIONS}
    for package in (nisa, simulator.isa):
        modules = {m.name for m in pkgutil.iter_modules(package.__path__)}
        assert modules - _SHARED[package.__name__] == families, package.__name__
        assert not any(m.startswith("current") for m in modules), package.__name__


def test_every_simulated_instruction_is_lowered_or_hosted_by_numba():
    for n in SIMULATED:
        lowered = ("isa", spec.get(n).ir_op) in LOWERINGS or ("isa", "*") in LOWERINGS
        assert spec.get(n).numba == ("native" if lowered else "hosted"), n
    # and the generator really hands an isa instruction back to the interpreter
    k = nki.jit(k_tensor_tensor)
    k(np.ones((8, 8), np.float32))
    plan = generate(k.last_ir, SimConfig.from_env())
    assert ("isa.tensor_tensor" in plan.hosted_ops) == (spec.get("tensor_tensor").numba == "hosted")


def k_tensor_tensor(x):
    t = nl.load(x)
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nisa.tensor_tensor(t, t, op=nl.add))
    return out


def test_executors_read_only_declared_attributes():
    executors = _isa_executors()
    for n in SIMULATED:
        i = spec.get(n)
        src = inspect.getsource(executors[i.ir_op])
        read = set(re.findall(r'instr\.attr\("(\w+)"', src))
        assert read <= set(i.ir_attrs), (n, read - set(i.ir_attrs))


def _acc(name: str) -> Access:
    return Access(name, (128, 64), ())  # (the rule looks at attributes, not indices)


@pytest.mark.parametrize("name", SIMULATED)
def test_the_simulator_reads_poison_rules_from_the_spec(name):
    i = spec.get(name)
    # the attributes any rule may depend on, each way (plus the spec's own overrides)
    cases: list[dict[str, Any]] = [{}, {"transpose": True}, {"transpose": False}]
    cases += [{k: v} for k, v, _ in i.poison_if]
    for attrs in cases:
        ins = Instr("isa", i.ir_op, _acc("t_out"), (_acc("t_in"), Const(1.0)), tuple(attrs.items()))
        assert rule_of(ins) == i.poison_rule(attrs), (name, attrs)


def test_every_instruction_has_an_explicit_poison_rule():
    for i in spec.INSTRUCTIONS:
        assert i.poison in spec.POISON_RULES, i.name
        assert all(r in spec.POISON_RULES for _, _, r in i.poison_if), i.name


# ---- targets, limits, tests, the reference table -----------------------------------------------


@pytest.mark.parametrize("name", SIMULATED)
def test_an_instruction_exists_from_its_first_target_on(name):
    # a later NeuronCore generation keeps every instruction of the earlier ones
    have = spec.get(name).targets
    first = min(TARGETS[t].gen for t in have)
    assert have == tuple(t for t in TARGETS if TARGETS[t].gen >= first)


def test_limits_are_the_strategies_limits():
    from nki.testing import strategies

    keyed = {lim.key: lim for i in spec.INSTRUCTIONS for lim in i.limits if lim.key}
    assert set(keyed) == set(strategies._FREE_LIMITS) - {"psum_bank_fp32"}
    for key, lim in keyed.items():
        for t in TARGETS:
            assert lim.value(TARGETS[t], isa_rules(t)) == strategies.free_limit(key, t), (key, t)


def test_every_simulated_instruction_is_exercised_by_a_test():
    text = "\n".join(
        p.read_text() for p in (ROOT / "tests").rglob("*.py") if p.name != "test_spec.py"
    )
    untested = [n for n in SIMULATED if not re.search(rf"\bn?isa\.{n}\(", text)]
    assert not untested


def test_the_isa_reference_table_is_generated_from_the_spec():
    assert site_table("reference/isa.md", "isa-spec") == spec.markdown().strip()


def test_markdown_has_one_row_per_instruction():
    rows = [r for r in spec.markdown().splitlines()[2:]]
    assert [r.split("`")[1] for r in rows] == [i.name for i in spec.INSTRUCTIONS]


# ---- binding a call ----------------------------------------------------------------------------


def test_bind_applies_spec_defaults_in_both_forms():
    b = spec.bind("activation", ("exp", "x"), {"bias": "b"}, spec.CLASSIC)
    assert b.arguments["scale"] == 1.0 and b.arguments["reduce_cmd"] == nisa.reduce_cmd.idle
    b = spec.bind("nc_stream_shuffle", ("d", "s", list(range(32))), {}, spec.CURRENT)
    assert (b.arguments["dst"], b.arguments["src"]) == ("d", "s")


def test_bind_names_the_closest_keyword_at_the_callers_line():
    with pytest.raises(NKIError) as e:
        spec.bind("activation", ("exp", "x"), {"bais": 1.0}, spec.CLASSIC)  # the call
    assert "did you mean 'bias'?" in e.value.message
    assert e.value.loc.file == __file__
    assert "the call" in e.value.loc.source_line()


def test_dtype_of_a_destination_first_call_says_it_was_removed():
    for key, says in (("dtype", "the result takes dst's dtype"), ("mask", "a view of dst")):
        with pytest.raises(NKIError) as e:
            spec.bind("tensor_copy", ("d", "s"), {key: None}, spec.CURRENT)
        assert f"take no {key}= (removed in NKI 0.2)" in e.value.message and says in e.value.message
        assert e.value.code == "err_unexpected_keyword_argument"


def test_get_suggests_the_closest_instruction():
    with pytest.raises(KeyError, match="did you mean 'tensor_tensor'"):
        spec.get("tensor_tenser")


# ---- unknown keywords in kernels -------------------------------------------------------------


def k_misspelled_bias(x):
    t = nl.load(x)
    b = nl.load(x[:, 0:1])
    y = nisa.activation(nl.exp, t, bais=b)  # ERR
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    nl.store(out, y)
    return out


def k_current_form_dst(x):
    t = nl.load(x)
    y = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=y, data1=t, data2=t, op=nl.add)  # ERR
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    nl.store(out, y)
    return out


def test_misspelled_keyword_names_the_closest_one_at_the_kernel_line():
    expect_error(
        k_misspelled_bias,
        np.ones((8, 16), np.float32),
        cls=NKIError,
        code="err_unexpected_keyword_argument",
        fragments=["'nisa.activation'", "'bais'", "did you mean 'bias'?"],
    )


def test_dst_call_in_a_kernel_forced_classic_names_the_generation():
    expect(
        k_current_form_dst,
        np.ones((8, 16), np.float32),
        code="err_mixed_api_generations",
        values=["destination-first", "nisa.tensor_tensor(dst", "nki.jit(api='classic')"],
        api="classic",
    )


def test_dst_call_runs_as_the_current_api_form():
    x = np.random.default_rng(0).random((8, 16), dtype=np.float32)
    np.testing.assert_array_equal(nki.jit(k_current_form_dst)(x), x + x)


# ---- engines -------------------------------------------------------------------------------

_ENGINE_CALLS = {
    "tensor_copy": lambda t, e: nisa.tensor_copy(t, engine=e),
    "memset": lambda t, e: nisa.memset((32, 32), 1.0, nl.float32, engine=e),
    "reciprocal": lambda t, e: nisa.reciprocal(t, engine=e),
    "nc_transpose": lambda t, e: nisa.nc_transpose(t, engine=e),
    "tensor_tensor": lambda t, e: nisa.tensor_tensor(t, t, op=nl.add, engine=e),
    "tensor_scalar": lambda t, e: nisa.tensor_scalar(t, nl.multiply, 2.0, engine=e),
}


def _engine_kernel(name, engine):
    def kernel(x):
        y = _ENGINE_CALLS[name](nl.load(x), engine)
        out = nl.ndarray(y.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nisa.tensor_copy(y, dtype=nl.float32))
        return out

    return nki.jit(kernel, platform_target="trn2")


def test_every_instruction_with_an_engine_argument_is_in_the_engine_check():
    with_engine = {n for n in CLASSIC if "engine" in spec.signature(n, spec.CLASSIC).parameters} - {
        "tensor_copy_dynamic_src",
        "tensor_copy_dynamic_dst",
    }  # (tensor_copy's engines)
    assert with_engine == set(_ENGINE_CALLS)


@pytest.mark.parametrize("name", sorted(_ENGINE_CALLS))
def test_engines_are_the_ones_the_instruction_accepts(name):
    x = np.full((32, 32), 2.0, np.float32)
    accepted = set()
    for e in ("tensor", "vector", "scalar", "gpsimd"):
        try:
            _engine_kernel(name, getattr(nisa, f"{e}_engine"))(x)
        except NKIError as err:
            assert err.code == "err_unsupported_engine_for_op", (name, e, err)
            assert err.loc is not None and err.loc.file == __file__, err  # the user's call
        else:
            accepted.add(e)
    assert accepted == set(spec.get(name).engines)
    k = _engine_kernel(name, None)
    k(x)
    ins = next(i for i, _ in k.last_ir.instructions() if i.kind == "isa")
    assert ins.attr("engine") == spec.get(name).default_engine


# ---- classic result dtypes -------------------------------------------------------------------
# one call per classic instruction on a bfloat16 tile `a`, a float32 tile `b` and a float32
# (P, 1) tile `r`, without dtype= (the rule's fallback), plus a dtype for "arg" rules


def _arange():
    return nl.arange(32)[:, None], nl.arange(32)[None, :]


def _max8(a):
    return nisa.max8(src=a)


_RESULT_CALLS = {
    "dma_copy": lambda a, b, r: nisa.dma_copy(dst=b, src=a),
    "dma_transpose": lambda a, b, r: nisa.dma_transpose(a),
    "iota": lambda a, b, r: nisa.iota(_arange()[0] + _arange()[1], nl.int16),
    "memset": lambda a, b, r: nisa.memset((32, 32), 1, nl.int16),
    "affine_select": lambda a, b, r: nisa.affine_select(_arange()[0] >= _arange()[1], a, -1.0),
    "tensor_partition_reduce": lambda a, b, r: nisa.tensor_partition_reduce(nl.add, a),
    "local_gather": lambda a, b, r: nisa.local_gather(a, nisa.memset((32, 4), 0, nl.uint16)),
    "sequence_bounds": lambda a, b, r: nisa.sequence_bounds(
        segment_ids=nisa.memset((1, 32), 1, nl.int32)
    ),
    "activation": lambda a, b, r: nisa.activation(nl.exp, a),
    "activation_reduce": lambda a, b, r: nisa.activation_reduce(
        nl.exp, a, reduce_op=nl.add, reduce_res=r
    ),
    "nc_matmul": lambda a, b, r: nisa.nc_matmul(a, a),
    "nc_transpose": lambda a, b, r: nisa.nc_transpose(a),
    "tensor_tensor": lambda a, b, r: nisa.tensor_tensor(a, b, nl.add),
    "tensor_scalar": lambda a, b, r: nisa.tensor_scalar(a, nl.multiply, 2.0),
    "scalar_tensor_tensor": lambda a, b, r: nisa.scalar_tensor_tensor(
        data=a, op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=b
    ),
    "tensor_scalar_reduce": lambda a, b, r: nisa.tensor_scalar_reduce(
        data=a, op0=nl.multiply, operand0=2.0, reduce_op=nl.add, reduce_res=r
    ),
    "tensor_reduce": lambda a, b, r: nisa.tensor_reduce(nl.add, a, axis=1),
    "tensor_tensor_scan": lambda a, b, r: nisa.tensor_tensor_scan(a, b, 0.0, nl.multiply, nl.add),
    "bn_stats": lambda a, b, r: nisa.bn_stats(a),
    "bn_aggr": lambda a, b, r: nisa.bn_aggr(nisa.tensor_copy(nisa.bn_stats(a), dtype=nl.bfloat16)),
    "max8": lambda a, b, r: _max8(a),
    "nc_find_index8": lambda a, b, r: nisa.nc_find_index8(data=a, vals=_max8(a)),
    "nc_match_replace8": lambda a, b, r: nisa.nc_match_replace8(data=a, vals=_max8(a), imm=0.0),
    "tensor_copy": lambda a, b, r: nisa.tensor_copy(a),
    "tensor_copy_dynamic_src": lambda a, b, r: nisa.tensor_copy_dynamic_src(a),
    "tensor_copy_dynamic_dst": lambda a, b, r: nisa.tensor_copy_dynamic_dst(dst=b, src=a),
    "tensor_copy_predicated": lambda a, b, r: nisa.tensor_copy_predicated(
        src=b, dst=b, predicate=nisa.memset((32, 32), 1, nl.uint8)
    ),
    "select_reduce": lambda a, b, r: nisa.select_reduce(
        dst=b, predicate=nisa.memset((32, 32), 1, nl.uint8), on_true=a, on_false=0.0
    ),
    "range_select": lambda a, b, r: nisa.range_select(
        on_true_tile=a, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=0.0, bound1=8.0
    ),
    "nc_stream_shuffle": lambda a, b, r: nisa.nc_stream_shuffle(b, b, list(range(32))),
    "reciprocal": lambda a, b, r: nisa.reciprocal(a),
    "dropout": lambda a, b, r: nisa.dropout(a, 0.5),
}


def _result_of(name):
    seen = {}

    def kernel(x):
        a = nl.load(x, dtype=nl.bfloat16)
        b = nl.load(x)
        r = nl.ndarray((32, 1), nl.float32, buffer=nl.sbuf)
        y = _RESULT_CALLS[name](a, b, r)
        seen["dtype"] = None if y is None else str(y.dtype)
        seen["shape"] = None if y is None else tuple(y.shape)
        out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, b)
        return out

    k = nki.jit(kernel, api="classic", platform_target="trn2")
    k(np.ones((32, 32), np.float32))
    seen["ir"] = k.last_ir
    return seen


def test_every_classic_instruction_has_a_result_call():
    assert set(_RESULT_CALLS) == set(CLASSIC)


@pytest.mark.parametrize("name", CLASSIC)
def test_classic_result_dtype_follows_the_spec_rule(name):
    rule = spec.get(name).result_dtype
    assert rule in spec.RESULT_DTYPE_RULES
    got = _result_of(name)["dtype"]
    want = {
        "dst": None,
        "arg": "int16",  # the dtype each "arg" call passes
        # a is the first tile operand, but for sequence_bounds (float32 / int32 ids only)
        "arg|data": "int32" if name == "sequence_bounds" else "bfloat16",
        "arg|widest": "float32",  # bfloat16 with float32
        "arg|float32": "float32",
        "arg|uint32": "uint32",
    }[rule]
    assert got == want
    # the rule is "no return value" exactly when the classic form takes a dst
    assert (rule == "dst") == spec.get(name).takes_dst(spec.CLASSIC)


@pytest.mark.parametrize("name", CLASSIC)
def test_recorded_ir_uses_the_spec_op_and_attributes(name):
    i = spec.get(name)
    ops = [ins for ins, _ in _result_of(name)["ir"].instructions() if ins.kind == "isa"]
    mine = [ins for ins in ops if ins.op == i.ir_op]
    assert mine, (name, [ins.op for ins in ops])
    for ins in mine:
        assert {k for k, _ in ins.attrs} <= set(i.ir_attrs), (name, ins.attrs)
    # each classic parameter recorded as an attribute names one of them
    for p in i.params(spec.CLASSIC):
        assert p.attr is None or p.attr in i.ir_attrs, (name, p.name, p.attr)


# ---- the destination-first form binds the calls current kernels make ---------------------------


def test_current_form_binds_the_sdk_tensor_addition_and_positional_calls():
    b = spec.bind("dma_copy", (), {"dst": "a_tile", "src": "a_hbm"}, spec.CURRENT)
    assert b.arguments["oob_mode"] == nisa.oob_mode.error
    b = spec.bind("tensor_tensor", (), dict(dst="c", data1="a", data2="b", op=nl.add), spec.CURRENT)
    assert b.arguments["engine"] == nisa.engine.unknown
    # positional calls follow the stub order exactly
    b = spec.bind("nc_matmul", ("ps", "lhsT", "rhs"), {}, spec.CURRENT)
    assert (b.arguments["dst"], b.arguments["stationary"], b.arguments["moving"]) == (
        "ps",
        "lhsT",
        "rhs",
    )
    assert b.arguments["accumulate"] is None
    b = spec.bind("tensor_tensor", ("out", "a", "b", nl.add), {}, spec.CURRENT)
    assert b.arguments["op"] is nl.add
    b = spec.bind("sendrecv", ("s", "d", 1, 0, 0), {}, spec.CURRENT)
    assert (b.arguments["src"], b.arguments["dst"]) == ("s", "d")
    b = spec.bind("dma_copy", ("d", "s", 2), {}, spec.CURRENT)  # (SDK 2.31+: priority third)
    assert b.arguments["priority"] == 2 and b.arguments["oob_mode"] == nisa.oob_mode.error
    b = spec.bind("affine_select", ("d", [[1, 8]], 1, "x", 0.0, nl.equal, 3), {}, spec.CURRENT)
    assert b.arguments["offset"] == 3
    with pytest.raises(NKIError, match="too many positional arguments"):
        args = ("d", [[1, 8]], 1, "x", 0.0, nl.equal, 3, "n", 9)
        spec.bind("affine_select", args, {}, spec.CURRENT)


# ---- constant size limits --------------------------------------------------------------------

_LIMIT_CALLS = {
    "max8": lambda a, v: nisa.max8(src=a),
    "nc_find_index8": lambda a, v: nisa.nc_find_index8(data=a, vals=v),
    "nc_match_replace8": lambda a, v: nisa.nc_match_replace8(data=a, vals=v, imm=0.0),
}


def _limit_kernel(name):
    def kernel(x):
        a = nl.load(x)
        v = nl.load(x[:, 0:8])
        out = nl.ndarray((x.shape[0], 8), nl.float32, buffer=nl.shared_hbm)
        y = _LIMIT_CALLS[name](a, v)
        nl.store(out, nisa.tensor_copy(y[:, 0:8], dtype=nl.float32))
        return out

    return nki.jit(kernel, platform_target="trn2")


def test_constant_free_size_limits_are_the_instructions_limits():
    constant = {
        i.name: lim.source
        for i in spec.INSTRUCTIONS
        for lim in i.limits
        if isinstance(lim.source, int) and "free size" in lim.what
    }
    assert set(constant) == set(_LIMIT_CALLS)
    for name, n in constant.items():
        _limit_kernel(name)(np.ones((2, n), np.float32))  # at the limit: accepted
        with pytest.raises(NKIError) as e:
            _limit_kernel(name)(np.ones((2, n + 1), np.float32))
        assert e.value.code == "err_size_of_dimension_exceed_arch_limit"
        assert str(n) in e.value.message


def _calls(params: list[inspect.Parameter]) -> list[tuple[tuple, dict]]:
    """Calls of a signature that bind and calls that do not: each count of positional
    arguments, the rest by keyword, one keyword dropped, an unknown keyword, a keyword repeating
    a positional argument."""
    out = []
    names = [p.name for p in params]
    positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    for k in range(len(positional) + 2):
        args = tuple(f"arg{i}" for i in range(k))
        rest = {n: f"kw_{n}" for n in names[k:] if n not in positional[:k]}
        out.append((args, rest))
        for drop in rest:
            out.append((args, {n: v for n, v in rest.items() if n != drop}))
        out.append((args, {**rest, "no_such_parameter": 1}))
        if k and positional:
            out.append((args, {**rest, positional[0]: "again"}))
    return out


@pytest.mark.parametrize("name", sorted(spec.SPEC))
def test_plain_bind_binds_as_the_signature_does(name):
    # the tracer's fast binding of every nisa call: the same arguments (and defaults) as
    # inspect's bind where it binds, None exactly where inspect raises
    for form in spec.FORMS:
        if spec.get(name).form(form) is None:
            continue
        sig = spec.signature(name, form, resolve=True)
        for args, kwargs in _calls(list(sig.parameters.values())):
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                assert spec.plain_bind(name, form, args, kwargs, defaults=False) is None
                assert spec.plain_bind(name, form, args, kwargs, defaults=True) is None
                continue
            got = spec.plain_bind(name, form, args, kwargs, defaults=False)
            assert got == dict(bound.arguments), (name, form, args, kwargs)
            assert list(got) == list(bound.arguments)
            bound.apply_defaults()
            with_defaults = spec.plain_bind(name, form, args, kwargs, defaults=True)
            assert list(with_defaults.items()) == list(bound.arguments.items())
