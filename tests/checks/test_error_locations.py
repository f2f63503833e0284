"""Every NKIError names the kernel author's file and line (issue 13 item 12): a trace-time
mistake the kernel's own statement, a kernel's wrong return value its ``return`` line, a launch
or setting error the line that launches or configures, and an ``err_runtime`` keeps its cause.
One representative of each kind of raise site, with its real message."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import simulator.interpreter as interpreter
from nki import dtypes
from nki.errors import NKIError

X = np.ones((128, 8), np.float32)
HERE = __file__


def _line(fn, marker: str = "# ERR") -> int:
    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, s in enumerate(src) if marker in s)


# ---- trace-time mistakes: the kernel's statement ---------------------------------------------
def _dtype_argument(x):
    nl.ndarray((128, 8), dtype="float99", buffer=nl.sbuf)  # ERR
    return x


def _positional_count(x):
    t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_tensor(t, t, t, nl.add, nisa.engine.vector, "n", 1)  # ERR
    return x


def _keyword_only_positional(x):
    t = nl.load(x)
    nisa.max8(t, nl.float32)  # ERR
    return x


def _view_method_arguments(x):
    x.slice()  # ERR
    return x


def _register_keyword(x):
    nisa.register_alloc(names=3)  # ERR
    return x


def _loop_body_arity(x):
    nl.fori_loop(0, 2, lambda i, j: None)  # ERR
    return x


def _dst_not_a_tile(x):
    t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_copy(dst=3, src=t)  # ERR
    return x


def _iota_pattern(x):
    t = nl.ndarray((128, 8), dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(dst=t, pattern=3)  # ERR
    return x


def _flag_not_a_bool(x):
    t = nl.load(x)
    nisa.tensor_tensor_scan(t, t, 0.0, nl.multiply, nl.add, reverse0="yes")  # ERR
    return x


def _engine_not_an_engine(x):
    t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x, engine=nl.add)  # ERR
    return x


def _priority_out_of_range(x):
    t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x, priority=7)  # ERR
    return x


def _ap_pattern_not_pairs(x):
    t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap(3))  # ERR
    return x


def _nl_keyword_only_by_position(x):
    i_p, i_f = nl.mgrid[0 : x.shape[0], 0 : x.shape[1]]  # (nl.mgrid: a classic kernel)
    t = nl.load(x[i_p, i_f])
    nl.add(t, t, nl.float32)  # ERR
    return x


def _ignored_dtype_is_still_a_dtype(x):
    t = nl.load(x[0:32, :])
    u = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.nc_stream_shuffle(t, u, list(range(32)), dtype="float99")  # ERR
    return x


def _tile_index_past_the_end(x):
    t = nl.load(x)
    col = t[:, 20]  # ERR
    nl.exp(col)
    return x


def _numpy_on_a_tile(x):
    t = nl.load(x)
    np.exp(t)  # ERR
    return x


TRACE_CASES = [
    (_dtype_argument, "err_unsupported_dtype", "unsupported data type 'float99'"),
    (_tile_index_past_the_end, "err_tensor_access_out_of_bound", "index 20 is outside"),
    (_numpy_on_a_tile, "err_unsupported_operand", "np.exp on an NKI tile"),
    (
        _positional_count,
        "err_invalid_argument",
        "tensor_tensor() takes 3 positional arguments but 7 were given (signature: "
        "nisa.tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=None); "
        "destination-first: nisa.tensor_tensor(dst, data1, data2, op,",
    ),
    (_keyword_only_positional, "err_invalid_argument", "'nisa.max8': max8() takes 0 positional"),
    (_view_method_arguments, "err_invalid_argument", ".slice() missing 3 required positional"),
    (_register_keyword, "err_invalid_argument", "unexpected keyword argument 'names'"),
    (_loop_body_arity, "err_invalid_argument", "body_fun must take one argument"),
    (_dst_not_a_tile, "err_unsupported_operand", "dst of nisa.tensor_copy must be a tile"),
    (_iota_pattern, "err_invalid_argument", "list of [step, num] int pairs; got 3"),
    (_flag_not_a_bool, "err_invalid_argument", "'reverse0' of 'nisa.tensor_tensor_scan' must be"),
    (_engine_not_an_engine, "err_invalid_argument", "engine= of nisa.dma_copy must be a nisa.e"),
    (_priority_out_of_range, "err_invalid_argument", "an int from 0 to 3, got 7"),
    (_ap_pattern_not_pairs, "err_invalid_view", "[stride, count] int pairs, got 3"),
    (_ignored_dtype_is_still_a_dtype, "err_unsupported_dtype", "unsupported data type 'float99'"),
    (
        _nl_keyword_only_by_position,
        "err_invalid_argument",
        "'nl.add' got dtype by position: dtype, keepdims, compute_dtype, transpose_x, buffer "
        "and name are keyword-only parameters of the nki.language calls in the classic API",
    ),
]


@pytest.mark.parametrize("fn,code,text", TRACE_CASES, ids=[c[0].__name__ for c in TRACE_CASES])
def test_trace_time_mistake_names_the_kernel_line(fn, code, text):
    with pytest.raises(NKIError) as e:
        nki.jit(fn)(X)
    assert e.value.code == code
    assert text in e.value.message, e.value.message
    assert (e.value.loc.file, e.value.loc.line) == (HERE, _line(fn))


def test_unlocated_error_from_inside_the_package_gets_the_kernel_line(monkeypatch):
    # a check deep in the package that cannot see the kernel's frame raises without a location
    monkeypatch.setattr(nl, "exp", dtypes.scalar_dtype)

    def kern(x):
        y = nl.add(1, nl.exp("x"))  # ERR
        return y

    with pytest.raises(NKIError) as e:
        nki.jit(kern)(X)
    assert "expected a number, got str" in e.value.message
    assert (e.value.loc.file, e.value.loc.line) == (HERE, _line(kern))
    # the column of the call that raised, not of the statement
    text = inspect.getsource(kern).splitlines()[1]  # (as indented in this file)
    assert e.value.loc.col == text.index("nl.exp")


# ---- a wrong return value: the return statement ------------------------------------------------
def test_returning_a_non_hbm_value_names_the_return_line():
    def kern(x):
        t = nl.load(x)
        nl.exp(t)
        return 5  # ERR

    with pytest.raises(NKIError) as e:
        nki.jit(kern)(X)
    assert e.value.code == "err_kernel_output_must_be_hbm"
    assert "got int" in e.value.message
    assert (e.value.loc.file, e.value.loc.line) == (HERE, _line(kern))
    assert "return 5" in str(e.value)


def test_the_return_reached_is_named_when_a_kernel_has_several():
    def kern(x, flag):
        t = nl.load(x)
        if flag == 0:
            return x
        if flag == 1:
            return "not a tensor"  # ERR
        return t

    k = nki.jit(kern)
    assert np.array_equal(k(X, 0), X)
    with pytest.raises(NKIError) as e:
        k(X, 1)
    assert e.value.code == "err_kernel_output_must_be_hbm" and "got str" in e.value.message
    assert e.value.loc.line == _line(kern)


# ---- launching and configuring: the line that does it ----------------------------------------
def _copy(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(x))
    return out


def test_invalid_check_level_names_the_call_line():
    k = nki.jit(_copy, checks="paranoid")
    with pytest.raises(NKIError) as e:
        k(X)  # CALL
    assert e.value.code == "err_invalid_config"
    assert "SimConfig.checks must be one of ('none', 'static', 'full'), got 'paranoid'" in str(
        e.value
    )
    assert (e.value.loc.file, e.value.loc.line) == (
        HERE,
        _line(test_invalid_check_level_names_the_call_line, "# CALL"),
    )


def test_non_bool_precise_fp_names_the_configure_line():
    with pytest.raises(NKIError) as e:
        nki.jit(_copy).configure(precise_fp="maybe")  # CALL
    assert e.value.code == "err_invalid_config"
    assert "SimConfig.precise_fp must be True or False, got 'maybe'" in e.value.message
    assert (e.value.loc.file, e.value.loc.line) == (
        HERE,
        _line(test_non_bool_precise_fp_names_the_configure_line, "# CALL"),
    )


def test_unknown_setting_names_the_configure_line():
    with pytest.raises(NKIError) as e:
        nki.jit(_copy).configure(chekcs="full")  # CALL
    assert e.value.code == "err_invalid_config"
    assert "unknown simulator setting(s) ['chekcs']" in e.value.message
    assert (e.value.loc.file, e.value.loc.line) == (
        HERE,
        _line(test_unknown_setting_names_the_configure_line, "# CALL"),
    )


def test_a_configure_whose_result_is_dropped_is_a_located_warning():
    # kernel.configure(...) returns the configured kernel: as a statement of its own it does
    # nothing, which a NaN that checks="full" would have explained hides
    import warnings

    from nki.errors import DiscardedResultWarning

    k = nki.jit(_copy)
    with pytest.warns(DiscardedResultWarning, match="returns the configured kernel") as w:
        k.configure(checks="full")  # CALL
    assert (w[0].filename, w[0].lineno) == (
        HERE,
        _line(test_a_configure_whose_result_is_dropped_is_a_located_warning, "# CALL"),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", DiscardedResultWarning)
        full = k.configure(checks="full")
        np.testing.assert_array_equal(full(X), X)
        np.testing.assert_array_equal(k.configure(checks="full")(X), X)


def test_unknown_target_names_the_call_line():
    k = nki.jit(_copy, platform_target="trn9")
    with pytest.raises(NKIError) as e:
        k(X)  # CALL
    assert e.value.code == "err_invalid_platform_target"
    assert "unknown platform target 'trn9'" in e.value.message
    assert (e.value.loc.file, e.value.loc.line) == (
        HERE,
        _line(test_unknown_target_names_the_call_line, "# CALL"),
    )


@pytest.mark.parametrize("key,hint", [("chekcs", "checks"), ("target", "platform_target")])
def test_misspelt_jit_setting_names_the_jit_line(key, hint):
    with pytest.raises(NKIError) as e:
        nki.jit(_copy, **{key: "full"})  # CALL
    assert e.value.code == "err_invalid_config"
    assert f"unknown nki.jit option '{key}'; did you mean '{hint}'?" in e.value.message
    line = _line(test_misspelt_jit_setting_names_the_jit_line, "# CALL")
    assert (e.value.loc.file, e.value.loc.line) == (HERE, line)


def test_compile_options_are_still_accepted():
    k = nki.jit(_copy, save_neff_name="k.neff", artifacts_dir="/tmp/x")
    np.testing.assert_array_equal(k(X), X)


def test_unknown_api_names_the_jit_line():
    with pytest.raises(NKIError) as e:
        nki.jit(_copy, api="newest")  # CALL
    assert e.value.code == "err_invalid_argument" and "unknown nki.jit api" in e.value.message
    assert (e.value.loc.file, e.value.loc.line) == (
        HERE,
        _line(test_unknown_api_names_the_jit_line, "# CALL"),
    )


@pytest.mark.parametrize(
    "grid,code,text",
    [
        (0, "err_invalid_grid", "each grid dimension must be a positive int"),
        ("x", "err_invalid_grid", "got 'x'"),
    ],
)
def test_invalid_grid_names_the_launch_line(grid, code, text):
    with pytest.raises(NKIError) as e:
        nki.jit(_copy)[grid](X)  # CALL
    assert e.value.code == code and text in e.value.message
    assert (e.value.loc.file, e.value.loc.line) == (
        HERE,
        _line(test_invalid_grid_names_the_launch_line, "# CALL"),
    )


def test_wrong_argument_count_names_the_call_line():
    with pytest.raises(NKIError) as e:
        nki.jit(_copy)(X, X)  # CALL
    assert "bad arguments for kernel '_copy': too many positional arguments" in e.value.message
    assert (e.value.loc.file, e.value.loc.line) == (
        HERE,
        _line(test_wrong_argument_count_names_the_call_line, "# CALL"),
    )


def test_unsupported_input_dtype_names_the_kernel_definition():
    with pytest.raises(NKIError) as e:
        nki.jit(_copy)(X.astype(np.float64))
    assert e.value.code == "err_unsupported_dtype"
    assert "argument 'x' of kernel '_copy' has dtype float64" in e.value.message
    assert (e.value.loc.file, e.value.loc.line) == (HERE, _line(_copy, "def _copy"))


def _shape_of_argument(x, n):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)  # ERR
    return out


@pytest.mark.parametrize("given", [[1.0, 2.0], (3, 4), {"a": 1}])
def test_container_argument_used_as_a_tensor_names_the_kernel_line(given):
    with pytest.raises(NKIError) as e:
        nki.jit(_shape_of_argument)(given, 2)
    assert e.value.code == "err_invalid_argument"
    kind = type(given).__name__
    assert f"argument 'x' of the kernel is a Python {kind} ({given!r}), used here as a " in (
        e.value.message
    )
    assert "(.shape)" in e.value.message and "np.asarray(x)" in e.value.message
    assert isinstance(e.value.__cause__, AttributeError)
    assert (e.value.loc.file, e.value.loc.line) == (HERE, _line(_shape_of_argument))


def test_attribute_error_on_other_values_stays_python_s():
    def kern(x, n):
        return n.shape  # (an int argument: any other 2 of the program could be this object)

    with pytest.raises(AttributeError, match="'int' object has no attribute 'shape'"):
        nki.jit(kern)(X, 2)


# ---- err_runtime keeps the real cause ----------------------------------------------------------
def test_err_runtime_keeps_the_cause_chained_and_in_the_message(monkeypatch):
    def broken(instr, ctx):
        raise ValueError("boom in an executor")

    monkeypatch.setattr(interpreter, "executor_of", lambda instr: broken)

    def kern(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)  # ERR
        nl.store(out, t)
        return out

    with pytest.raises(NKIError) as e:
        nki.jit(kern, backend="numpy")(X)
    assert e.value.code == "err_runtime"
    assert "ValueError: boom in an executor" in e.value.message
    assert isinstance(e.value.__cause__, ValueError)
    assert (e.value.loc.file, e.value.loc.line) == (HERE, _line(kern))


# ---- every public call: an unknown keyword is a located error, never a plain TypeError -------
def _public_calls() -> list[tuple[str, object]]:
    import nki.collectives as collectives

    out = []
    for prefix, mod in (("nisa", nisa), ("nl", nl), ("nki.collectives", collectives)):
        for name in sorted(dir(mod)):
            f = getattr(mod, name)
            if name.startswith("_") or inspect.isclass(f) or inspect.ismodule(f):
                continue
            if callable(f):
                out.append((f"{prefix}.{name}", f))
    return out


@pytest.mark.filterwarnings("ignore::nki.errors.NKIWarning")
@pytest.mark.parametrize("api, fn", _public_calls(), ids=lambda v: v if isinstance(v, str) else "")
def test_an_unknown_keyword_of_any_public_call_is_a_located_error(api, fn):
    def bogus_keyword(x):
        fn(zzz_not_a_parameter=1)  # ERR
        return x

    with pytest.raises(NKIError) as ei:
        nki.jit(bogus_keyword)(X)
    assert ei.value.loc is not None and ei.value.loc.file == HERE, (api, ei.value)
    assert ei.value.loc.line == _line(bogus_keyword), (api, ei.value)
