"""Current-API kernels (``import nki``, destination-first ``nisa``) launched as ``kernel(args)``,
``kernel[lnc](args)`` and ``nki.simulate``: results against NumPy, LNC rules per target."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError

from helpers import expect


def tensor_add(a_input, b_input):
    """The SDK tensor-addition example, written from the docs: each core adds its share of the
    rows, one 128-partition tile at a time."""
    out = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    rows = a_input.shape[0] // nl.num_programs(0)
    base = nl.program_id(0) * rows
    for t in nl.affine_range(rows // 128):
        lo = base + t * 128
        a_tile = nl.ndarray((128, a_input.shape[1]), dtype=a_input.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray((128, a_input.shape[1]), dtype=a_input.dtype, buffer=nl.sbuf)
        c_tile = nl.ndarray((128, a_input.shape[1]), dtype=a_input.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_tile, src=a_input[lo : lo + 128, :])
        nisa.dma_copy(dst=b_tile, src=b_input[lo : lo + 128, :])
        nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)
        nisa.dma_copy(dst=out[lo : lo + 128, :], src=c_tile)
    return out


@pytest.fixture
def ab():
    rng = np.random.default_rng(7)
    return rng.random((512, 96), dtype=np.float32), rng.random((512, 96), dtype=np.float32)


def test_tensor_add_lnc1_matches_numpy(ab):
    a, b = ab
    np.testing.assert_array_equal(nki.jit(tensor_add)(a, b), a + b)


@pytest.mark.parametrize("key", ["fn", "func"])
def test_jit_takes_the_kernel_by_keyword(ab, key):
    # the current API names the parameter ``fn``, the classic one ``func``; before, ``fn=``
    # fell into the options and nki.jit returned a decorator, not the kernel
    a, b = ab
    k = nki.jit(**{key: tensor_add})
    assert isinstance(k, nki.Kernel)
    np.testing.assert_array_equal(k(a, b), a + b)
    np.testing.assert_array_equal(nki.simulate_kernel(k[2], a, b), a + b)


def test_tensor_add_lnc2_runs_on_two_cores_and_matches_numpy(ab):
    a, b = ab
    k = nki.jit(tensor_add)
    np.testing.assert_array_equal(k[2](a, b), a + b)
    assert str(k.last_ir.grid) == "(nc(2))"


def test_a_launch_configures_in_either_order(ab):
    # kernel[2].configure(...) is kernel.configure(...)[2]: the settings and the grid both hold
    a, b = ab
    k = nki.jit(tensor_add)
    for launch in (k[2].configure(checks="full"), k.configure(checks="full")[2]):
        np.testing.assert_array_equal(launch(a, b), a + b)
        assert str(launch.kernel.last_ir.grid) == "(nc(2))"
        assert launch.kernel.config().checks == "full"
    assert k.config().checks != "full"


def test_simulate_entry_point_takes_kernel_and_lnc_launch(ab):
    a, b = ab
    k = nki.jit(tensor_add)
    np.testing.assert_array_equal(nki.simulate(k)(a, b), a + b)
    np.testing.assert_array_equal(nki.simulate(k[2])(a, b), a + b)


def test_vllm_entry_point_takes_args_kwargs_and_lnc(ab):
    # nki.simulator.simulate_kernel(func, args, kwargs, _lnc): vLLM's Neuron CPU mode
    import nki.simulator

    a, b = ab
    k = nki.jit(tensor_add)
    got = nki.simulator.simulate_kernel(k, (a,), {"b_input": b}, 2)
    np.testing.assert_array_equal(got, a + b)
    assert str(k.last_ir.grid) == "(nc(2))"
    np.testing.assert_array_equal(nki.simulator.simulate_kernel(tensor_add, [a, b], None), a + b)
    np.testing.assert_array_equal(nki.simulator.simulate_kernel(k[2], (a, b), {}, 2), a + b)
    with pytest.raises(NKIError, match="_lnc must be a positive int") as e:
        nki.simulator.simulate_kernel(k, (a, b), {}, "2")  # CALL
    assert e.value.loc.file == __file__
    with pytest.raises(NKIError, match=r"_lnc=1 given for a launch on grid \(2,\)"):
        nki.simulator.simulate_kernel(k[2], (a, b), {}, 1)
    with pytest.raises(NKIError, match="as a tuple and a dict"):
        nki.simulator.simulate_kernel(k, a, {})


def test_meta_tensor_is_the_traced_tensor_type():
    import nki.meta

    seen = []

    @nki.jit
    def kernel(a: nki.meta.tensor):
        seen.append(isinstance(a, nki.meta.tensor))
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        return out

    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(kernel(a), a)
    assert seen == [True] and nki.meta.tensor is nki.tensor


def test_compile_and_specialization_configs_are_checked_and_ignored(ab):
    from nki.compiler import AddressRotation, CompileConfig, SpecializationConfig

    a, b = ab
    cfg = CompileConfig(address_rotation=AddressRotation.DISABLE, barrier_check=True)
    spec = SpecializationConfig(allow_nested_config_override=True)
    k = nki.jit(tensor_add, compile_config=cfg, specialization_config=spec)
    np.testing.assert_array_equal(k(a, b), a + b)
    assert cfg.prefetch_auto is False and cfg.nki_alloc_fallback is True
    assert cfg.dead_code_elim is None  # (the compiler's default)
    with pytest.raises(NKIError, match="compile_config must be an nki.compiler.CompileConfig") as e:
        nki.jit(tensor_add, compile_config={"barrier_check": True})  # CONFIG
    assert e.value.code == "err_invalid_config" and e.value.loc.file == __file__
    with pytest.raises(NKIError, match="CompileConfig.prefetch_auto must be True or False"):
        CompileConfig(prefetch_auto="yes")
    with pytest.raises(NKIError, match="address_rotation must be an nki.compiler.Address"):
        CompileConfig(address_rotation="auto")


def test_logical_nc_config_env_sets_the_default_lnc(ab, monkeypatch):
    a, b = ab
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "2")
    k = nki.jit(tensor_add)
    np.testing.assert_array_equal(k(a, b), a + b)
    assert str(k.last_ir.grid) == "(nc(2))"


def test_lnc2_on_a_single_core_target_is_a_located_error(ab):
    a, b = ab
    k = nki.jit(tensor_add, api="current", platform_target="trn1")
    with pytest.raises(NKIError) as ei:
        k[2](a, b)  # launch line
    assert ei.value.code == "err_invalid_grid"
    assert "trn1" in str(ei.value) and "must be 1" in str(ei.value)
    assert ei.value.loc.file == __file__


def test_lnc_above_two_is_an_error(ab):
    a, b = ab
    with pytest.raises(NKIError, match=r"kernel\[4\]"):
        nki.jit(tensor_add, api="current")[4](a, b)


def k_cores_race(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a[0:128, :])
    if nl.program_id(0) == 1:
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=out, src=t)  # ERR
    return out


def test_two_cores_writing_different_values_to_one_output_is_a_race_at_the_kernel_line():
    a = np.ones((128, 64), np.float32)
    e = expect(k_cores_race, a, code="err_core_race", grid=2, api="current", values=["hbm0"])
    assert "core 0" in str(e) and "core 1" in str(e) and "different values" in str(e)


def k_cores_same_values(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a[0:128, :])
    nisa.dma_copy(dst=out, src=t)
    return out


def test_two_cores_storing_the_same_values_to_one_output_is_no_race():
    # the element ends the same whichever write lands last (AWS's kernels rely on it)
    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    np.testing.assert_array_equal(nki.jit(k_cores_same_values, api="current")[2](a), a)


def scale_in_place(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.tensor_scalar(t, t, nl.multiply, 2.0)
    nisa.dma_copy(dst=b, src=t)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_inputs_a_current_kernel_writes_are_written_back_to_the_caller():
    a = np.arange(32, dtype=np.float32).reshape(8, 4)
    b = np.zeros((8, 4), np.float32)
    out = nki.jit(scale_in_place)(a, b)
    np.testing.assert_array_equal(out, 2 * a)
    np.testing.assert_array_equal(b, 2 * a)
    np.testing.assert_array_equal(a, np.arange(32, dtype=np.float32).reshape(8, 4))


def branch_on_core(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    if nl.program_id(0) == 0 and nl.program_ndim() == 0:  # LNC=1: a plain int
        nisa.tensor_scalar(t, t, nl.add, 1.0)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_program_id_is_a_python_int_at_lnc1():
    a = np.zeros((8, 4), np.float32)
    np.testing.assert_array_equal(nki.jit(branch_on_core)(a), a + 1)


def branch_on_core_lnc2(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    if nl.program_id(0) == 0:
        nisa.dma_copy(dst=out, src=t)
    return out


def test_python_branch_on_program_id_at_lnc2_runs_per_core():
    a = np.arange(32, dtype=np.float32).reshape(8, 4)
    k = nki.jit(branch_on_core_lnc2)
    np.testing.assert_array_equal(k[2](a), a)  # core 0 writes, core 1 does not
    assert len(k.last_ir.cores) == 2


def k_uninitialised(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    never_written = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    nisa.tensor_tensor(t, t, never_written, nl.add)  # POISON
    nisa.dma_copy(out, t)  # ERR
    return out


def test_uninitialised_read_in_a_current_kernel_is_reported_with_its_origin():
    from helpers import line_of

    e = expect(
        k_uninitialised, np.ones((8, 4), np.float32), code="err_uninitialized_read", checks="full"
    )
    assert f":{line_of(k_uninitialised, '# POISON')}" in str(e)
