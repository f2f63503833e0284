"""Dynamic checks (checks='full'): uninitialised reads; shuffled order; SimConfig settings."""

import numpy as np
import pytest

import nki
import nki.language as nl
from nki.errors import NKIError, NKIRuntimeError
from simulator.config import SimConfig

from .util import expect, line_of, rand


def k_uninit(a):
    out = nl.ndarray((128, 16), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
    t[:, 0:8] = nl.load(a)  # columns 8..15 are never written
    u = nl.exp(t)  # ERR
    nl.store(out, u)
    return out


def test_uninitialised_read_reported_at_reading_line_with_instance_and_core():
    e = expect(
        k_uninit,
        rand((128, 8)),
        checks="full",
        cls=NKIRuntimeError,
        code="err_uninitialized_read",
        values=["uninitialised", "(0, 8)"],
    )
    assert e.instance == () and e.core == 0
    assert "physical core 0" in str(e)


def test_uninitialised_read_is_nan_without_full_checks():
    out = nki.jit(k_uninit, checks="static")(rand((128, 8)))
    assert np.isnan(out[:, 8:]).all() and not np.isnan(out[:, :8]).any()


def k_uninit_grid(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    t[0:64, :] = nl.load(a[i * 128 : i * 128 + 64, :])
    nl.store(out[i * 128 : (i + 1) * 128, :], t)  # ERR
    return out


def test_uninitialised_read_in_grid_names_the_instance_and_core():
    e = expect(
        k_uninit_grid,
        rand((256, 8)),
        grid=nl.spmd_dim(1, nl.nc(2)),
        checks="full",
        cls=NKIRuntimeError,
        code="err_uninitialized_read",
        values=["grid instance"],
    )
    assert e.instance in ((0,), (1,)) and e.core == e.instance[0]


def k_psum_accumulate_fresh(a, b):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
    acc += nl.matmul(nl.load(a), nl.load(b), transpose_x=True)  # ERR
    nl.store(out, nl.copy(acc))
    return out


def test_accumulating_into_fresh_psum_is_an_uninitialised_read():
    expect(
        k_psum_accumulate_fresh,
        rand((128, 128)),
        rand((128, 64)),
        checks="full",
        cls=NKIRuntimeError,
        code="err_uninitialized_read",
    )


# ---- shuffled order -------------------------------------------------------------------------


def k_last_iteration_wins(a):
    # an SBUF loop-carried overwrite (not an HBM write, so not rejected statically): the result
    # depends on the order affine_range iterations run in
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(8):
        t[...] = nl.load(a[i * 128 : (i + 1) * 128, :])
    nl.store(out, t)
    return out


def test_shuffle_reorders_affine_iterations():
    a = np.repeat(np.arange(8, dtype=np.float32), 128)[:, None] * np.ones((1, 8), np.float32)
    in_order = nki.jit(k_last_iteration_wins)(a)
    assert (in_order == 7).all()
    lasts = {float(nki.jit(k_last_iteration_wins, shuffle_seed=s)(a)[0, 0]) for s in range(8)}
    assert len(lasts) > 1  # some seeds end with another iteration
    again = {float(nki.jit(k_last_iteration_wins, shuffle_seed=3)(a)[0, 0]) for _ in range(3)}
    assert len(again) == 1  # seeded: reproducible


def k_tiles(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    j = nl.program_id(1)
    t = nl.load(a[i * 32 : (i + 1) * 32, j * 8 : (j + 1) * 8])
    nl.store(out[i * 32 : (i + 1) * 32, j * 8 : (j + 1) * 8], nl.multiply(t, 2.0))
    return out


def test_shuffle_reorders_instances_and_correct_kernel_is_unaffected():
    a = rand((128, 32))
    k = nki.jit(k_tiles, shuffle_seed=1)
    np.testing.assert_array_equal(k[4, 4](a), 2 * a)
    order = k.last_run.order
    assert sorted(order) == [(i, j) for i in range(4) for j in range(4)]
    assert order != sorted(order)


# ---- configuration --------------------------------------------------------------------------


def test_config_from_environment():
    cfg = SimConfig.from_env(
        {
            "NKI_SIM_CHECKS": "full",
            "NKI_SIM_SHUFFLE_SEED": "5",
            "NEURON_PLATFORM_TARGET_OVERRIDE": "gen2",
            "NKI_PRECISE_FP": "0",
        }
    )
    assert (cfg.checks, cfg.shuffle_seed, cfg.target, cfg.precise_fp) == ("full", 5, "trn1", False)
    assert SimConfig.from_env({}) == SimConfig()
    assert SimConfig().checks == "static"


@pytest.mark.parametrize(
    "bad",
    [{"checks": "paranoid"}, {"backend": "gpu"}, {"shuffle_seed": "x"}, {"target": "trn9"}],
)
def test_config_is_validated(bad):
    with pytest.raises(NKIError):
        SimConfig(**bad)
    with pytest.raises(NKIError):
        SimConfig().with_(**bad)


def test_env_var_applies_to_a_call(monkeypatch):
    monkeypatch.setenv("NKI_SIM_CHECKS", "full")
    with pytest.raises(NKIRuntimeError):
        nki.jit(k_uninit)(rand((128, 8)))
    monkeypatch.setenv("NKI_SIM_CHECKS", "static")
    nki.jit(k_uninit)(rand((128, 8)))


def test_config_per_call():
    k = nki.jit(k_uninit)
    a = rand((128, 8))
    with pytest.raises(NKIRuntimeError) as ei:
        k.configure(checks="full")(a)
    assert ei.value.loc.line == line_of(k_uninit)
    k(a)  # the kernel's own setting (static) is unchanged
    assert k.configure(target="trn1", shuffle_seed=2).config().target == "trn1"
    with pytest.raises(NKIError):
        k.configure(checks="paranoid")
