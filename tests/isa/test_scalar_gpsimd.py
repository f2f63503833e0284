"""activation / activation_reduce and the GpSimd instructions against NumPy."""

import numpy as np
import pytest
from helpers import BF16, close, expect_error, f32, rand, run
from helpers import hbm_out as _out

import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError, NKIMemoryError, NKITypeError

DTS = [np.float32, BF16]


def k_act(x, bias, scale_vec, op):
    out = _out(x.shape, x.dtype)
    r = nisa.activation(op, nl.load(x), bias=nl.load(bias), scale=nl.load(scale_vec))
    nl.store(out, r)
    return out


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize(
    "op,ref",
    [
        (nl.exp, np.exp),
        (np.tanh, np.tanh),
        (nl.relu, lambda v: np.maximum(v, 0)),
        (nl.copy, lambda v: v),
        (nl.sigmoid, lambda v: 1 / (1 + np.exp(-v))),
    ],
)
def test_activation_scale_bias(dt, op, ref):
    x = rand((128, 64), dt)
    b, s = rand((128, 1)), rand((128, 1))
    close(run(k_act, x, b, s, op), ref(f32(x) * s + b), dt, rtol=2e-2 if dt == BF16 else 1e-5)


def k_act_reduce(x, scale):
    out = _out(x.shape, x.dtype)
    red = _out((x.shape[0], 1), nl.float32)
    acc = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    t = nl.load(x)
    r = nisa.activation_reduce(nl.exp, t, reduce_op=nl.add, reduce_res=acc, scale=scale)
    nl.store(out, r)
    nl.store(red, acc)
    return out, red


@pytest.mark.parametrize("dt", DTS)
def test_activation_reduce(dt):
    x = rand((64, 100), dt)
    got, red = run(k_act_reduce, x, 0.5)
    e = np.exp(f32(x) * 0.5)
    close(got, e, dt)
    np.testing.assert_allclose(red[:, 0], e.sum(axis=1), rtol=1e-5)


def k_act_accum(x):
    """Accumulate across two activations in the Scalar engine's registers."""
    red = _out((x.shape[0], 1), nl.float32)
    acc = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    t = nl.load(x)
    nisa.activation(nl.copy, t, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.activation(
        nl.square, t, reduce_op=nl.add, reduce_res=acc, reduce_cmd=nisa.reduce_cmd.reduce
    )
    nl.store(red, acc)
    return red


def test_activation_reduce_cmd_accumulates():
    x = rand((32, 16))
    got = run(k_act_accum, x)
    np.testing.assert_allclose(got[:, 0], x.sum(1) + (x * x).sum(1), rtol=1e-5, atol=1e-5)


def k_act_idle(x, reset_first):
    """reduce_cmd=idle leaves the registers alone: reduce_res reads what is there."""
    red = _out((x.shape[0], 1), nl.float32)
    acc = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    t = nl.load(x)
    if reset_first:
        nisa.activation(nl.copy, t, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.activation(nl.exp, t, reduce_op=nl.add, reduce_res=acc)  # default reduce_cmd=idle
    nl.store(red, acc)
    return red


def test_activation_idle_reads_registers():
    x = rand((8, 4))
    np.testing.assert_allclose(run(k_act_idle, x, True)[:, 0], x.sum(1), rtol=1e-6, atol=1e-6)
    assert np.isnan(run(k_act_idle, x, False)).all()  # never reset: undefined -> NaN


def k_act_max(x):
    red = _out((x.shape[0], 1), nl.float32)
    acc = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    rr = nisa.reduce_cmd.reset_reduce
    nisa.activation(nl.exp, nl.load(x), reduce_op=nl.max, reduce_res=acc, reduce_cmd=rr)  # ERR
    nl.store(red, acc)
    return red


def test_activation_reduce_op_trn1_vs_trn2():
    x = rand((16, 8))
    np.testing.assert_allclose(run(k_act_max, x, target="trn2")[:, 0], np.exp(x).max(1), rtol=1e-6)
    expect_error(
        k_act_max,
        x,
        target="trn1",
        cls=NKIError,
        code="err_unsupported_reduce_op",
        fragments=["maximum", "trn1", "add"],
    )


def k_recip_bias(x, bias):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.activation(nl.reciprocal, nl.load(x), bias=nl.load(bias)))  # ERR
    return out


def test_reciprocal_activation_bias_trn2_only():
    x, b = rand((16, 8), lo=1, hi=2), rand((16, 1))
    close(run(k_recip_bias, x, b, target="trn2"), 1.0 / (x + b))
    expect_error(
        k_recip_bias,
        x,
        b,
        target="trn1",
        cls=NKIError,
        code="err_activation_bias_unsupported",
        fragments=["reciprocal", "trn1"],
    )


def k_act_bad_bias(x, bias):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.activation(nl.exp, nl.load(x), bias=nl.load(bias)))  # ERR
    return out


def k_act_bad_scale(x, scale):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.activation(nl.exp, nl.load(x), scale=nl.load(scale)))  # ERR
    return out


def test_activation_operand_dtype_rules():
    x = rand((16, 8))
    expect_error(
        k_act_bad_bias,
        x,
        np.ones((16, 1), np.int32),
        cls=NKITypeError,
        code="err_activation_bias_invalid_type",
        fragments=["bias", "int32"],
    )
    expect_error(
        k_act_bad_scale,
        x,
        np.ones((16, 1), BF16),
        cls=NKITypeError,
        code="err_activation_scale_invalid_type",
        fragments=["scale", "bfloat16"],
    )


# ---- GpSimd ----------------------------------------------------------------------------------


def k_iota(n, dtype):
    out = _out((64, 48), dtype)
    i_p = nl.arange(64)[:, None]
    i_f = nl.arange(48)[None, :]
    for k in nl.affine_range(n.shape[0]):
        nl.store(out, nisa.iota(i_p * 100 - 2 * i_f + 7 + k, dtype=dtype))
    return out


@pytest.mark.parametrize("dt", [nl.int32, nl.float32, nl.bfloat16])
def test_iota(dt):
    got = run(k_iota, np.zeros((1, 1), np.float32), dt)
    p, f = np.mgrid[0:64, 0:48]
    want = (p * 100 - 2 * f + 7).astype(np.float32)
    np.testing.assert_array_equal(f32(got), f32(want.astype(dt.np)))


def k_iota_pid(x):
    # a scalar expression (a program id plus a loop iterator) gives a [1, 1] tile, as vLLM's
    # paged attention builds its head index
    out = nl.ndarray((4, 3), dtype=nl.int32, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    for j in nl.affine_range(3):
        t = nisa.iota(10 * i + j, dtype=nl.int32).reshape((1, 1))
        nl.store(out[i : i + 1, j : j + 1], t)
    return out


def test_iota_of_a_scalar_expression():
    import nki

    got = nki.jit(k_iota_pid)[4](np.zeros((1, 1), np.float32))
    want = 10 * np.arange(4)[:, None] + np.arange(3)[None, :]
    np.testing.assert_array_equal(got, want)


def k_memset(v, dtype):
    out = _out((32, 16), dtype)
    nl.store(out, nisa.memset((32, 16), v, dtype))
    return out


def test_memset():
    np.testing.assert_array_equal(run(k_memset, 3.5, nl.float32), np.full((32, 16), 3.5))
    np.testing.assert_array_equal(run(k_memset, 7, nl.int16), np.full((32, 16), 7, np.int16))
    np.testing.assert_array_equal(
        f32(run(k_memset, 1.00390625, nl.bfloat16)), f32(np.full((32, 16), 1.00390625, BF16))
    )


def k_causal(x):
    out = _out(x.shape, x.dtype)
    i_q = nl.arange(x.shape[0])[:, None]
    i_k = nl.arange(x.shape[1])[None, :]
    nl.store(out, nisa.affine_select(i_q >= i_k, nl.load(x), -9984.0))
    return out


def k_band(x):
    out = _out(x.shape, x.dtype)
    i_q, i_k = nl.mgrid[0 : x.shape[0], 0 : x.shape[1]]
    nl.store(out, nisa.affine_select((i_q - i_k + 2 >= 0) & (i_k - i_q + 2 >= 0), nl.load(x), 0.0))
    return out


@pytest.mark.parametrize("dt", DTS)
def test_affine_select_masks(dt):
    x = rand((64, 64), dt)
    q, k = np.mgrid[0:64, 0:64]
    np.testing.assert_array_equal(
        f32(run(k_causal, x)), np.where(q >= k, f32(x), f32(np.float32(-9984.0).astype(dt)))
    )
    np.testing.assert_array_equal(f32(run(k_band, x)), np.where(abs(q - k) <= 2, f32(x), 0.0))


def k_part_reduce(x, op):
    out = _out((1, x.shape[1]), x.dtype)
    nl.store(out, nisa.tensor_partition_reduce(op, nl.load(x)))
    return out


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("op,ref", [(np.add, np.sum), (nl.maximum, np.max)])
def test_tensor_partition_reduce(dt, op, ref):
    x = rand((128, 20), dt)
    close(
        run(k_part_reduce, x, op),
        ref(f32(x), axis=0, keepdims=True),
        dt,
        rtol=2e-2 if dt == BF16 else 1e-4,
        atol=5e-2 if dt == BF16 else 1e-4,
    )


def k_gather(src, idx, n, nvalid):
    g = nisa.local_gather(nl.load(src), nl.load(idx), num_elem_per_idx=n, num_valid_indices=nvalid)
    out = _out(g.shape, src.dtype)
    nl.store(out, g)
    return out


def test_local_gather():
    src = rand((32, 64, 4))
    per_core = np.random.default_rng(2).integers(0, 64, size=(16, 3)).astype(np.uint16)
    idx = np.tile(per_core, (2, 1))
    got = run(k_gather, src, (idx * 4).astype(np.uint16), 4, 40)
    want = np.empty((32, 40, 4), np.float32)
    for c in range(2):
        ind = idx[c * 16 : (c + 1) * 16].flatten(order="F")[:40]
        want[c * 16 : (c + 1) * 16] = src[c * 16 : (c + 1) * 16][:, ind, :]
    np.testing.assert_array_equal(got, want)


def k_gpsimd_psum(x):
    out = _out(x.shape, x.dtype)
    ps = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum)
    ps[...] = nl.load(x)
    nl.store(out, nisa.tensor_copy(ps, engine=nisa.gpsimd_engine))  # ERR
    return out


def k_gpsimd_into_psum(x):
    out = _out(x.shape, x.dtype)
    ps = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum)
    i_p, i_f = nl.mgrid[0 : x.shape[0], 0 : x.shape[1]]
    ps[...] = nisa.affine_select(i_p >= i_f, nl.load(x), 0.0)  # ERR
    nl.store(out, ps)
    return out


def test_gpsimd_cannot_touch_psum():
    x = rand((16, 16))
    expect_error(
        k_gpsimd_psum,
        x,
        cls=NKIMemoryError,
        code="err_unsupported_memory",
        fragments=["GpSimd", "PSUM", "'src'", "nisa.tensor_copy"],
    )
    expect_error(
        k_gpsimd_into_psum,
        x,
        cls=NKIMemoryError,
        code="err_unsupported_memory",
        fragments=["GpSimd", "PSUM", "nisa.affine_select"],
    )


def test_nc_version_follows_target(monkeypatch):
    seen = {}

    def k(x):
        seen["v"] = nisa.get_nc_version()
        out = _out(x.shape, x.dtype)
        nl.store(out, nl.load(x))
        return out

    x = rand((4, 4))
    for tgt, want in (
        ("trn1", nisa.nc_version.gen2),
        ("gen3", nisa.nc_version.gen3),
        ("trn3", nisa.nc_version.gen4),
    ):
        run(k, x, target=tgt)
        assert seen["v"] == want
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "gen2")
    assert nisa.get_nc_version() == nisa.nc_version.gen2
    import nki

    nki.jit(k)(x)
    assert seen["v"] == nisa.nc_version.gen2
    from simulator.config import SimConfig

    launch = nki.jit(k)[1]
    launch.run_numpy(x, _config=SimConfig(target="trn3"))  # a SimConfig selects the target too
    assert seen["v"] == nisa.nc_version.gen4


def test_engine_enum_and_aliases():
    assert nisa.engine.tensor == 1 and nisa.engine.vector == 5 and nisa.engine.gpsimd == 3
    assert nisa.vector_engine is nisa.engine.vector and nisa.unknown_engine == 0
    assert {c.name for c in nisa.reduce_cmd} >= {"idle", "reset", "reduce", "reset_reduce"}
    assert {m.name for m in nisa.oob_mode} == {"error", "skip"}
    assert {m.name for m in nisa.dge_mode} == {"none", "swdge", "hwdge", "unknown"}
