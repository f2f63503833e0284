"""Dynamic checks (checks='full'): uninitialised reads; shuffled order; SimConfig settings."""

import numpy as np
import pytest

import nki
import nki.language as nl
from nki.errors import NKIError, NKIRuntimeError
from simulator.config import SimConfig

from helpers import expect, line_of
from helpers import randn as rand


def k_uninit(a):
    out = nl.ndarray((128, 16), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
    t[:, 0:8] = nl.load(a)  # columns 8..15 are never written
    u = nl.exp(t)  # computing on garbage lanes is harmless until the garbage is used
    nl.store(out, u)  # ERR
    return out


def test_uninitialised_read_reported_at_reading_line_with_instance_and_core():
    e = expect(
        k_uninit,
        rand((128, 8)),
        checks="full",
        cls=NKIRuntimeError,
        code="err_uninitialized_read",
        values=["uninitialised", "(0, 8)", f"at line {line_of(k_uninit, '# computing')}"],
    )
    assert e.instance == () and e.core == 0
    assert e.related and e.related[0][1].line == line_of(k_uninit, "# computing")
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
    acc += nl.matmul(nl.load(a), nl.load(b), transpose_x=True)  # accumulates onto garbage
    nl.store(out, nl.copy(acc))  # ERR
    return out


def test_accumulating_into_fresh_psum_is_an_uninitialised_read():
    e = expect(
        k_psum_accumulate_fresh,
        rand((128, 128)),
        rand((128, 64)),
        checks="full",
        cls=NKIRuntimeError,
        code="err_uninitialized_read",
        values=[f"at line {line_of(k_psum_accumulate_fresh, '# accumulates')}"],
    )
    assert e.related[0][1].line == line_of(k_psum_accumulate_fresh, "# accumulates")


# ---- shuffled order -------------------------------------------------------------------------


def k_last_iteration_wins(a):
    # an SBUF loop-carried overwrite (rejected statically; run with checks="none" here): the
    # result depends on the order affine_range iterations run in
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(8):
        t[...] = nl.load(a[i * 128 : (i + 1) * 128, :])
    nl.store(out, t)
    return out


def test_shuffle_reorders_affine_iterations():
    a = np.repeat(np.arange(8, dtype=np.float32), 128)[:, None] * np.ones((1, 8), np.float32)

    def run(**opts):  # (classic: a current-API loop rewriting `t` keeps program order)
        return nki.jit(k_last_iteration_wins, checks="none", api="classic", **opts)(a)

    in_order = run()
    assert (in_order == 7).all()
    lasts = {float(run(shuffle_seed=s)[0, 0]) for s in range(8)}
    assert len(lasts) > 1  # some seeds end with another iteration
    again = {float(run(shuffle_seed=3)[0, 0]) for _ in range(3)}
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


def test_config_per_call(monkeypatch):
    monkeypatch.delenv("NKI_SIM_CHECKS", raising=False)  # the kernel's default: static
    k = nki.jit(k_uninit)
    a = rand((128, 8))
    with pytest.raises(NKIRuntimeError) as ei:
        k.configure(checks="full")(a)
    assert ei.value.loc.line == line_of(k_uninit)
    k(a)  # the kernel's own setting (static) is unchanged
    assert k.configure(target="trn1", shuffle_seed=2).config().target == "trn1"
    with pytest.raises(NKIError):
        k.configure(checks="paranoid")


def k_reads_previous_block(x):
    # instance i adds the last row written by instance i-1 (an HBM read-after-write between
    # instances: correct only if instances run in order, which the hardware does not promise)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    ip, jf = nl.mgrid[0:128, 0:4]
    t = nl.load(x[i * 128 + ip, jf])
    prev = nl.load(out[i * 128 - 1 + 0 * ip, jf], mask=(i > 0))  # ERR
    nl.store(out[i * 128 + ip, jf], nl.add(t, prev, mask=(i > 0)), mask=(i > 0))
    nl.store(out[i * 128 + ip, jf], t, mask=(i < 1))
    return out


def test_uninitialised_hbm_read_between_instances_is_caught_when_the_order_changes():
    x = rand((512, 4))
    k = nki.jit(k_reads_previous_block, checks="full")
    got = k[4](x)  # in launch order every read follows the write it needs
    ref = x.copy()
    for b in range(1, 4):
        ref[b * 128 : (b + 1) * 128] += ref[b * 128 - 1]
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    e = expect(
        k_reads_previous_block,
        x,
        grid=4,
        checks="full",
        shuffle_seed=3,
        cls=NKIRuntimeError,
        code="err_uninitialized_read",
        values=["uninitialised", "grid instance"],
    )
    assert e.instance is not None and e.instance[0] > 0


def k_reads_own_output(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[:, 0:4], nl.load(a[:, 0:4]))
    t = nl.load(out)  # ERR
    nl.store(out, nl.exp(t))
    return out


def test_reading_unwritten_output_hbm_is_an_uninitialised_read():
    expect(
        k_reads_own_output,
        rand((128, 8)),
        checks="full",
        cls=NKIRuntimeError,
        code="err_uninitialized_read",
        values=["'out' element (0, 4)"],
    )


def k_ragged_masked_loads_unmasked_compute(a, b):
    # the classic pattern: only loads and stores are masked; the add also runs on the garbage
    # rows of the last tile, which are never stored
    n, m = a.shape
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:m]
    for t in nl.affine_range((n + 127) // 128):
        rows = t * 128 + ip
        x = nl.load(a[rows, jf], mask=(rows < n))
        y = nl.load(b[rows, jf], mask=(rows < n))
        z = nl.multiply(nl.add(x, y), 2.0)
        nl.store(out[rows, jf], z, mask=(rows < n))
    return out


def test_full_checks_accept_compute_on_masked_off_lanes_that_are_never_stored():
    a, b = rand((200, 8)), rand((200, 8), seed=1)
    got = nki.jit(k_ragged_masked_loads_unmasked_compute, checks="full")(a, b)
    np.testing.assert_allclose(got, (a + b) * 2, rtol=1e-6)


def k_reduce_over_garbage(a):
    out = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:16]
    x = nl.load(a[ip, jf], mask=(jf < 8))  # columns 8..15 stay uninitialised
    y = nl.exp(x)  # computes on the garbage lanes
    s = nl.sum(y, axis=1, keepdims=True)  # every row sums some garbage
    nl.store(out, s)  # ERR
    return out


def test_reduction_over_poisoned_lanes_is_reported_where_the_sums_are_stored():
    expect(
        k_reduce_over_garbage,
        rand((128, 16)),
        checks="full",
        cls=NKIRuntimeError,
        code="err_uninitialized_read",
        values=[
            f"from uninitialised memory at line {line_of(k_reduce_over_garbage, '# computes')}"
        ],
    )


def k_ragged_row_softmax(a):
    # the last rows of the tile are never loaded: exp and the row sums compute garbage there,
    # but each row's sum depends on that row only and the garbage rows are never stored
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0 : a.shape[1]]
    t = nl.load(a[ip, jf], mask=(ip < a.shape[0]))
    e = nl.exp(t)
    s = nl.sum(e, axis=[1])
    nl.store(out[ip, jf], value=e / s, mask=(ip < a.shape[0]))
    return out


def k_narrow_matmul(x, w):
    # columns >= N of the moving tile are never loaded; output column j uses moving column j
    # only, and those columns are never stored
    n = w.shape[1]
    out = nl.ndarray((128, n), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:512]
    wt = nl.ndarray((128, 512), dtype=w.dtype, buffer=nl.sbuf)
    wt[ip, jf] = nl.load(w[ip, jf], mask=(jf < n))
    ps = nl.matmul(nl.load(x), wt, transpose_x=True)
    nl.store(out[ip, jf], value=nl.copy(ps, dtype=x.dtype), mask=(jf < n))
    return out


def k_narrow_contraction(x, w):
    # rows >= 100 of both operands (the contraction axis) are never loaded: every output
    # element sums garbage products
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:128]
    xt = nl.load(x[ip, jf], mask=(ip < 100))
    ip2, jf2 = nl.mgrid[0:128, 0:64]
    wt = nl.load(w[ip2, jf2], mask=(ip2 < 100))
    ps = nl.matmul(xt, wt, transpose_x=True)  # sums garbage products
    nl.store(out, ps)  # ERR
    return out


def test_garbage_rows_and_columns_that_never_reach_hbm_pass_full_checks():
    a = rand((100, 64))
    got = nki.jit(k_ragged_row_softmax, checks="full")(a)
    e = np.exp(a.astype(np.float64))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-5)
    x, w = rand((128, 128), seed=1), rand((128, 384), seed=2)
    got = nki.jit(k_narrow_matmul, checks="full")(x, w)
    np.testing.assert_allclose(got, x.T.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)


def test_garbage_on_the_contraction_axis_is_reported():
    expect(
        k_narrow_contraction,
        rand((128, 128)),
        rand((128, 64)),
        checks="full",
        cls=NKIRuntimeError,
        code="err_uninitialized_read",
        values=[f"at line {line_of(k_narrow_contraction, '# sums garbage')}"],
    )
