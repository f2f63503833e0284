"""A pytest plugin that runs AWS's NKI library tests (aws-neuron/nki-library) on nki-sim.

``benchmarks/nki_library.py`` copies a fetched snapshot of the library, puts this file in
place of its ``test/conftest.py`` and runs its ``fast`` tests. The library's own harness
compiles each kernel and runs it on a Trainium host; here the ``test_manager`` fixture runs the
kernel on the simulator instead (``kernel[lnc](**inputs)``, the launch AWS's CPU-simulator
mode makes) and compares every output with the test's torch reference by the library's own
comparator (``maxAllClose``, the test's rtol / atol), or by the test's own validator; a test
that turns output validation off (no golden generator) passes when the kernel runs, as in AWS's
harness. What the harness needs and this machine
lacks (AWS's ``neuron_dtypes``, S3 and SSH clients, metric emitters) is stubbed; coverage
parametrisation keeps the valid "singles" cases only (no boundary or negative cases)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.dtypes
import nki.language as nl
import nki.typing

_NARROW_FLOATS = (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)
_FP8 = tuple(np.dtype(d) for d in _NARROW_FLOATS)


def _module(name: str, **attrs: Any) -> types.ModuleType:
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


def _static_cast(x: Any, dtype: Any) -> np.ndarray:
    """AWS's ``static_cast``: a packed MX array is unpacked ([..., F] -> [..., 4F] values) and
    values cast to a packed MX dtype are packed four to an element."""
    a, to = np.asarray(x), np.dtype(dtype)
    if nki.dtypes.packed_name(a.dtype):
        a = nki.dtypes.unpack_x4(a).reshape(*a.shape[:-1], a.shape[-1] * 4)
    packed = nki.dtypes.packed_name(to)
    if packed:
        return nki.dtypes.pack_x4(a.reshape(*a.shape[:-1], -1, 4), packed)
    return a.astype(to)


# AWS's dtype package: what the tests use of it
_module(
    "neuron_dtypes",
    static_cast=_static_cast,
    is_float_type=lambda d: np.dtype(d).kind == "f" or np.dtype(d) in _FP8,
    sizeinbytes=lambda d: np.dtype(d).itemsize,
    finfo=ml_dtypes.finfo,
    bfloat16=ml_dtypes.bfloat16,
    float8_e4m3=ml_dtypes.float8_e4m3fn,
    float8_e5m2=ml_dtypes.float8_e5m2,
    float8_e4m3fn_x4=np.dtype(nl.float8_e4m3fn_x4),
    float8_e5m2_x4=np.dtype(nl.float8_e5m2_x4),
    float4_e2m1fn_x4=np.dtype(nl.float4_e2m1fn_x4),
)
_module("neuronxcc")
_module("neuronxcc.nki", typing=nki.typing)
sys.modules["neuronxcc.nki.typing"] = nki.typing

# infrastructure clients the harness imports but a simulator run never calls
_INFRA = ("fabric2", "boto3", "botocore", "plotext", "pytest_html", "aws_embedded_metrics",
          "invoke", "paramiko")  # fmt: skip


class _Anything:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return _Anything()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _Anything()


def _infra_attr(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return Exception if name.endswith(("Error", "Exception")) else _Anything


class _InfraStubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name.split(".")[0] in _INFRA:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        m = types.ModuleType(spec.name)
        m.__path__ = []
        m.__getattr__ = _infra_attr  # type: ignore[method-assign]
        return m

    def exec_module(self, module: types.ModuleType) -> None:
        pass


sys.meta_path.insert(0, _InfraStubs())

from test.integration.nkilib.utils.comparators import maxAllClose  # noqa: E402
from test.utils.coverage_parametrized_tests import (  # noqa: E402
    extract_parametrize_args,
    generate_parametrized_test_case,
)


class SimulatorOrchestrator:
    """The ``test_manager`` of the library's tests, running kernels on nki-sim."""

    def execute(self, args: Any) -> None:
        inputs = args.kernel_input or {}
        if not hasattr(inputs, "items"):
            pytest.skip("per-rank inputs of a multi-rank collective test")
        inputs = {k.removesuffix(".must_alias_input"): v for k, v in inputs.items()}
        lnc = args.compiler_input.logical_nc_config
        os.environ["NKI_SIM_TARGET"] = args.compiler_input.platform_target.get_nc_gen()
        kernel = args.kernel_func
        kernel = kernel if hasattr(kernel, "__getitem__") else nki.jit(kernel)
        got = kernel[lnc](**inputs) if lnc != 1 else kernel(**inputs)
        got = [] if got is None else list(got) if isinstance(got, (list, tuple)) else [got]
        golden = args.validation_args.golden_output
        want = golden.golden if hasattr(golden, "golden") else golden
        if want is None:
            return  # (the test turns output validation off: running is all it checks)
        if not isinstance(want, dict):
            pytest.skip(f"golden outputs of an unknown kind ({type(want).__name__})")
        # the kernel's outputs in order are the placeholders' names; the golden may check some
        names = list(getattr(golden, "output_ndarray", None) or want)
        assert len(got) == len(names), f"{len(got)} outputs, the test names {names}"
        outs = dict(zip(names, got))
        rtol = args.validation_args.relative_accuracy
        atol = args.validation_args.absolute_accuracy
        bad = []
        for name, ref in want.items():
            out = outs[name]
            if hasattr(ref, "validator"):  # the test's own validator, as AWS's harness calls it
                if not ref.validator(None).validate(np.asarray(out)):
                    bad.append(name)
                continue
            actual, ref = (_static_cast(a, np.float32) for a in (out, ref))  # (MX: values)
            if not maxAllClose(actual, ref, rtol, atol, verbose=1):
                bad.append(name)
        assert not bad, f"outputs {bad} differ from the torch reference"


_module("test.utils.test_orchestrator", Orchestrator=SimulatorOrchestrator)


@pytest.fixture
def test_manager() -> SimulatorOrchestrator:
    return SimulatorOrchestrator()


@pytest.fixture
def platform_target(request: pytest.FixtureRequest) -> Any:
    """trn2, or trn3 for a test whose ``platforms`` mark excludes trn2 (the library's own run
    deselects a test its target excludes; here each test runs on a target it supports)."""
    from test.utils.common_dataclasses import Platforms

    mark = request.node.get_closest_marker("platforms")
    excluded = set(mark.kwargs.get("exclude") or []) if mark else set()
    return next((p for p in (Platforms.TRN2, Platforms.TRN3) if p not in excluded), Platforms.TRN2)


@pytest.fixture
def collector() -> None:
    return None


def _range_tests(metafunc: Any) -> None:
    """The cases of a ``@range_test_config`` test (the library's older parametrisation), as its
    own conftest makes them."""
    from test.utils import ranged_test_harness as rt

    config = getattr(metafunc.function, rt.RANGE_TEST_CONFIG_ATTR_KEY)
    extra = {}
    if hasattr(metafunc.function, rt.RANGE_TEST_LIMIT_NUM_TESTS_ATTR_KEY):
        extra[rt.RANGE_TEST_LIMIT_NUM_TESTS_ATTR_KEY] = getattr(
            metafunc.function, rt.RANGE_TEST_LIMIT_NUM_TESTS_ATTR_KEY
        )
    ids, cases = rt.RangeTestHarness(config, **extra).get_unique_test_cases()
    metafunc.parametrize(rt.RANGE_TEST_FIXTURE_NAME, cases, ids=ids)


def pytest_generate_tests(metafunc: Any) -> None:
    from test.utils.ranged_test_harness import RANGE_TEST_FIXTURE_NAME

    if RANGE_TEST_FIXTURE_NAME in metafunc.fixturenames:
        _range_tests(metafunc)
        return
    marker = metafunc.definition.get_closest_marker("coverage_parametrize")
    if not marker:
        return
    params = dict(marker.kwargs)
    filt = params.pop("filter", None)
    for k in ("coverage", "enable_automatic_boundary_tests", "enable_invalid_combination_tests",
              "n_tests_per_boundary_value", "max_invalid_tests"):  # fmt: skip
        params.pop(k, None)
    cases = generate_parametrized_test_case(
        params=params, coverage="singles", filter_func=filt,
        enable_automatic_boundary_tests=False, enable_invalid_combination_tests=False,
    )  # fmt: skip
    names, values, ids = extract_parametrize_args(params, [c for c in cases if not c.is_negative])
    metafunc.parametrize(names, values, ids=ids)
