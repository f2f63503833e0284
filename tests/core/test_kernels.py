"""Entry points, output conventions (including a returned SBUF tile), loops, Python
operators on tiles, IR caching and listing, control-flow errors."""

from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIControlFlowError, NKIError

RNG = np.random.default_rng(5)


def _rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def add_body(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
    return out


def test_entry_points_agree():
    a, b = _rand((128, 64), 1), _rand((128, 64), 2)
    expect = a + b
    forms = [
        nki.jit(add_body),
        nki.jit()(add_body),
        nki.jit(mode="simulation")(add_body),
        nki.jit(add_body, mode="simulation", platform_target="trn2", api="classic"),
        nki.baremetal(add_body),
        nki.baremetal(save_neff_name="x.neff")(add_body),
    ]
    for k in forms:
        np.testing.assert_array_equal(k(a, b), expect)
    np.testing.assert_array_equal(nki.simulate_kernel(nki.jit(add_body), a, b), expect)
    np.testing.assert_array_equal(nki.simulate_kernel(add_body, a, b), expect)
    np.testing.assert_array_equal(nki.simulate(nki.jit(add_body))(a, b), expect)


def test_simulate_kernel_with_grid_launch():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i, j = nl.program_id(0), nl.program_id(1)
        t = nl.load(a[i * 128 : (i + 1) * 128, j * 32 : (j + 1) * 32])
        nl.store(out[i * 128 : (i + 1) * 128, j * 32 : (j + 1) * 32], value=nl.exp(t))
        return out

    a = _rand((256, 64))
    got = nki.simulate_kernel(k[2, 2], a)
    np.testing.assert_allclose(got, np.exp(a), rtol=2e-6)
    assert len(k.last_run.order) == 4


def test_unknown_mode_rejected():
    with pytest.raises(NKIError, match="mode"):
        nki.jit(add_body, mode="turbo")


def test_legacy_output_argument_convention():
    @nki.jit
    def k(a, b, c):
        nl.store(c, value=nl.subtract(nl.load(a), nl.load(b)))

    a, b = _rand((64, 32), 1), _rand((64, 32), 2)
    c = np.zeros_like(a)
    assert k(a, b, c) is None
    np.testing.assert_array_equal(c, a - b)


def test_tuple_of_outputs():
    @nki.jit
    def k(a, b):
        s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        d = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x, y = nl.load(a), nl.load(b)
        nl.store(s, value=x + y)
        nl.store(d, value=x - y)
        return s, d

    a, b = _rand((32, 16), 1), _rand((32, 16), 2)
    s, d = k(a, b)
    np.testing.assert_array_equal(s, a + b)
    np.testing.assert_array_equal(d, a - b)


def test_python_operators_on_tiles():
    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x, y = nl.load(a), nl.load(b)
        z = (x + y) * x - y / 2.0
        z = -z
        nl.store(out, value=z)
        return out

    a, b = _rand((32, 16), 1), _rand((32, 16), 2)
    np.testing.assert_allclose(k(a, b), -((a + b) * a - b / 2.0), rtol=1e-6)


def _accumulate_kernel(loop):
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 64), dtype=nl.float32)
        for i in loop(a.shape[0] // 128):
            acc += nl.load(a[i * 128 : (i + 1) * 128, :])
        nl.store(out, value=acc)
        return out

    return k


@pytest.mark.parametrize("loop", [nl.affine_range, nl.sequential_range, nl.static_range, range])
def test_loop_kinds_accumulate(loop):
    a = _rand((512, 64))
    k = _accumulate_kernel(loop)
    got = k(a)
    ref = a[0:128] + a[128:256] + a[256:384] + a[384:512]
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    listing = str(k.last_ir)
    symbolic = loop in (nl.affine_range, nl.sequential_range)
    # symbolic loops stay loops in the IR; static_range and range unroll at trace time
    assert ("affine_range" in listing or "sequential_range" in listing) == symbolic
    n_add = sum(1 for ins, _ in k.last_ir.instructions() if ins.kind in ("ew", "copy", "dma"))
    assert (n_add < 8) == symbolic


def test_ir_is_cached_per_signature():
    k = nki.jit(add_body)
    a, b = _rand((128, 64), 1), _rand((128, 64), 2)
    k(a, b)
    k(a + 1, b)
    assert k.trace_count == 1
    k(_rand((64, 64)), _rand((64, 64)))
    assert k.trace_count == 2
    k(a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16))
    assert k.trace_count == 3
    # a grid is part of the signature (every instance writes all of out: an SPMD race, which
    # the static checks report, so they are off here)
    k[2].run_numpy(a, b, _config=k.config(checks="none"))
    assert k.trace_count == 4
    k(a, b)
    assert k.trace_count == 4


def test_ir_listing_names_tensors_loops_and_source_lines():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            t = nl.load(a[i * 64 : (i + 1) * 64, :])
            nl.store(out[i * 64 : (i + 1) * 64, :], value=nl.exp(t))
        return out

    k(_rand((128, 32)))
    text = str(k.last_ir)
    line = inspect.getsourcelines(k.fn)[1]
    assert "a" in text and "out" in text and "float32[128, 32]" in text
    assert "affine_range" in text
    assert "exp" in text and "dma" in text
    assert f"# line {line + 4}" in text  # the load's source line is shown


def test_ir_is_frozen():
    import dataclasses

    k = nki.jit(add_body)
    k(_rand((8, 8)), _rand((8, 8)))
    ins, _ = next(iter(k.last_ir.instructions()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        ins.op = "other"


@pytest.mark.parametrize(
    "body, line",
    [
        ("if nl.program_id(0) == 0:\n        pass", 2),
        ("for i in nl.affine_range(2):\n        if i > 0:\n            pass", 3),
        ("x = nl.load(a)\n    if x:\n        pass", 3),
        ("n = int(nl.program_id(0))", 2),
        ("for i in nl.affine_range(2):\n        x = [0, 1][i]", 3),
    ],
)
def test_python_control_flow_on_symbolic_values_is_rejected(body, line):
    src = f"def kern(a):\n    {body}\n    return a\n"
    ns = {"nl": nl}
    exec(compile(src, "<kern>", "exec"), ns)
    # classic: a program id is symbolic (in the current API, kernel[2] gives each core an int)
    k = nki.jit(ns["kern"], api="classic")
    with pytest.raises(NKIControlFlowError) as ei:
        k[2](np.zeros((4, 4), np.float32))
    assert "control flow" in str(ei.value) or "Python" in str(ei.value)
    assert ei.value.loc is not None and ei.value.loc.line == line


def test_bfloat16_add_rounds_once():
    a = _rand((128, 64), 1).astype(ml_dtypes.bfloat16)
    b = _rand((128, 64), 2).astype(ml_dtypes.bfloat16)
    got = nki.jit(add_body)(a, b)
    assert got.dtype == ml_dtypes.bfloat16
    ref = (a.astype(np.float32) + b.astype(np.float32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got.view(np.uint16), ref.view(np.uint16))


def test_tile_size_constants():
    assert nl.tile_size.pmax == 128
    assert nl.tile_size.psum_fmax == 512
    assert nl.tile_size.gemm_stationary_fmax == 128
    assert nl.tile_size.gemm_moving_fmax == 512


def test_private_hbm_output_single_instance_and_grid_error():
    @nki.jit(api="classic")  # the classic API accepts an nl.hbm output
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm)
        nl.store(out, value=nl.load(a))
        return out

    a = _rand((16, 8))
    np.testing.assert_array_equal(k(a), a)
    with pytest.raises(NKIError) as ei:
        k[2](a)
    assert ei.value.code == "err_output_tensor_must_be_shared_hbm"
    assert ei.value.loc.line == inspect.getsourcelines(k.fn)[1] + 2


def test_float64_argument_is_rejected_naming_the_parameter_and_kernel():
    from nki.errors import NKITypeError

    @nki.jit
    def copy64(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        return out

    with pytest.raises(NKITypeError) as ei:
        copy64(np.ones((4, 4), np.float64))
    e = ei.value
    assert e.code == "err_unsupported_dtype"
    assert "argument 'a' of kernel 'copy64'" in str(e) and "float64" in str(e)
    assert e.loc.file == __file__


@nki.jit
def transposed_tile(a):
    # returns an SBUF tile: its value is the kernel's result
    return nisa.dma_transpose(a)


def test_returning_an_sbuf_tile_returns_its_value():
    a = RNG.random((32, 96), dtype=np.float32)
    np.testing.assert_array_equal(transposed_tile(a), a.T)


def test_tile_plus_loop_iterator_is_arithmetic():
    """``t + i * 8`` (and ``nl.add(t, i * 8)``) inside an affine loop adds the iterator's value
    element-wise; only a one-element tile plus an index is a dynamic index."""

    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 3, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        for i in nl.affine_range(3):
            u = t + i * 8
            nl.store(out[:, i, :], nl.subtract(nl.add(u, i), i * 2))
        return out

    x = np.random.default_rng(11).standard_normal((128, 8)).astype(np.float32)
    want = np.stack([x + 8 * i + i - 2 * i for i in range(3)], axis=1)
    np.testing.assert_allclose(kernel(x), want, rtol=1e-6)


def test_operators_after_an_in_place_update():
    """``acc += ...`` rebinds ``acc``; ``acc / n``, ``acc * s``, ``-acc`` still work."""

    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 3), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 1), dtype=nl.float32, buffer=nl.psum)
        for h in nl.affine_range(2):
            acc += nl.sum(nl.load(x[:, h * 64 : (h + 1) * 64]), axis=[1], keepdims=True)
        res = nl.ndarray((128, 3), dtype=nl.float32)
        res[:, 0:1] = acc / 128
        res[:, 1:2] = acc * 2.0
        res[:, 2:3] = -acc
        nl.store(out, res)
        return out

    x = np.random.default_rng(12).standard_normal((128, 128)).astype(np.float32)
    s = x.astype(np.float64).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(kernel(x), np.hstack([s / 128, 2 * s, -s]), rtol=1e-5, atol=1e-5)
