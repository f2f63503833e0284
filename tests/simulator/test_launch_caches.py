"""What a launch keeps between launches to stay cheap (the environment's settings parsed per
value, the plain binding of arguments, the per-kernel layout and run records of a launch, the
checks that passed, the batched backend's walk, view layouts and masks' selections) never hands
a launch another launch's answer: a changed environment variable, check setting, shape, dtype,
grid or keyword gives the new behaviour (results checked against NumPy, errors by code and
line), also with launches from several threads."""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest
import torch

import nki
import nki.language as nl
from frontends.torch_tensors import launch as torch_launch
from nki import binding
from nki.errors import NKITypeError
from nki.jit import Launch
from simulator.config import SimConfig

BF16 = ml_dtypes.bfloat16


@nki.jit
def mul_add(a, b, scale=2.0):
    """(a * b) * scale + a, row tiles of 128 with a tail mask (the last tile may be partial)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    rows, cols = a.shape
    for t in nl.affine_range((rows + 127) // 128):
        i = t * 128 + nl.arange(128)[:, None]
        j = nl.arange(cols)[None, :]
        x = nl.load(a[i, j], mask=i < rows)
        y = nl.load(b[i, j], mask=i < rows)
        prod = nl.multiply(nl.multiply(x, y), scale)
        nl.store(out[i, j], value=nl.add(prod, x), mask=i < rows)
    return out


@nki.jit
def grid_scale(a):
    """Each grid instance scales its own 32-row block by its instance number plus one."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    p = nl.program_id(0)
    i = p * 32 + nl.arange(32)[:, None]
    j = nl.arange(a.shape[1])[None, :]
    nl.store(out[i, j], value=nl.multiply(nl.load(a[i, j]), p + 1))
    return out


def _ref(a: np.ndarray, b: np.ndarray, scale: float, exact: bool = True) -> np.ndarray:
    """NumPy's mul_add in fp32: ``a * b`` is a tile of the inputs' dtype, rounded to it when
    ``exact`` (real storage) or kept in fp32 (fast fp); the float scalar makes the rest fp32,
    rounded by the store."""
    dt = a.dtype

    def r(v: np.ndarray) -> np.ndarray:
        return v.astype(dt).astype(np.float32) if exact else v

    x, y = a.astype(np.float32), b.astype(np.float32)
    prod = r(x * y) * np.float32(scale)
    return (prod + x).astype(dt)


def _data(shape: tuple[int, int], dtype: object, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape).astype(np.float32).astype(dtype)
    b = rng.standard_normal(shape).astype(np.float32).astype(dtype)
    return a, b


def test_changed_shapes_and_dtypes_between_launches_give_their_own_results():
    # the same kernel, launched again and again: each shape / dtype (and a partial tail tile,
    # whose mask is not always true) is traced, laid out and masked for itself
    for shape, dtype in [((256, 64), np.float32), ((200, 64), np.float32),
                         ((256, 64), np.float32), ((64, 32), np.float16),
                         ((200, 64), np.float32), ((130, 16), BF16)]:  # fmt: skip
        a, b = _data(shape, dtype, seed=shape[0])
        for _ in range(2):  # (the second launch takes what the first one kept)
            got = mul_add(a, b)
            assert got.dtype == np.dtype(dtype) and got.shape == shape
            np.testing.assert_array_equal(got, _ref(a, b, 2.0))


def test_a_changed_environment_variable_is_seen_by_the_next_launch(monkeypatch):
    a, b = _data((128, 64), BF16, seed=1)
    monkeypatch.delenv("NKI_PRECISE_FP", raising=False)
    exact = _ref(a, b, 3.0, exact=True)
    fast = _ref(a, b, 3.0, exact=False)
    assert not np.array_equal(exact, fast)  # (the data tells the two apart)
    np.testing.assert_array_equal(mul_add(a, b, 3.0), exact)
    monkeypatch.setenv("NKI_PRECISE_FP", "0")
    assert SimConfig.from_env().precise_fp is False
    np.testing.assert_array_equal(mul_add(a, b, 3.0), fast)
    monkeypatch.setenv("NKI_PRECISE_FP", "1")
    np.testing.assert_array_equal(mul_add(a, b, 3.0), exact)
    # through the torch launcher too
    lk = Launch(mul_add, mul_add.default_grid)
    ta, tb = (torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) for v in (a, b))
    monkeypatch.setenv("NKI_PRECISE_FP", "0")
    got = torch_launch(lk, (ta, tb, 3.0), {})
    np.testing.assert_array_equal(got.view(torch.int16).numpy().view(BF16), fast)
    monkeypatch.delenv("NKI_PRECISE_FP")
    got = torch_launch(lk, (ta, tb, 3.0), {})
    np.testing.assert_array_equal(got.view(torch.int16).numpy().view(BF16), exact)


def test_a_changed_checks_setting_in_the_environment_is_seen(monkeypatch):
    @nki.jit
    def reads_uninitialised(a):
        never_written = nl.ndarray((a.shape[0], 8), dtype=nl.float32, buffer=nl.sbuf)
        result = nl.multiply(nl.load(a[:, 0:8]), never_written)
        out = nl.ndarray((a.shape[0], 8), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=result)
        return out

    a = np.ones((16, 16), np.float32)
    monkeypatch.setenv("NKI_SIM_CHECKS", "static")
    assert np.isnan(reads_uninitialised(a)).all()  # (fresh SBUF holds NaN)
    monkeypatch.setenv("NKI_SIM_CHECKS", "full")
    with pytest.raises(nki.errors.NKIError) as e:
        reads_uninitialised(a)
    assert "uninitiali" in str(e.value)
    monkeypatch.setenv("NKI_SIM_CHECKS", "static")
    assert np.isnan(reads_uninitialised(a)).all()


def test_grids_of_other_sizes_get_their_own_batched_views():
    a = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    for n in (4, 2, 4, 1, 3):
        got = grid_scale[n](a[: 32 * n])
        want = a[: 32 * n] * np.repeat(np.arange(1, n + 1, dtype=np.float32), 32)[:, None]
        np.testing.assert_array_equal(got, want)


def test_plain_binding_matches_signature_binding_and_its_errors():
    a, b = _data((128, 8), np.float32, seed=3)
    want = _ref(a, b, 2.0)
    for args, kwargs in [((a, b), {}), ((a,), {"b": b}), ((), {"b": b, "a": a}),
                         ((a, b), {"scale": 2.0}), ((a, b, 2.0), {})]:  # fmt: skip
        np.testing.assert_array_equal(mul_add(*args, **kwargs), want)
        bound = mul_add.bind(args, kwargs)
        assert bound.arguments == mul_add.signature.bind(*args, **kwargs).arguments
    for args, kwargs, words in [
        ((a, b, 2.0, 1), {}, "too many positional arguments"),
        ((a,), {}, "missing a required argument: 'b'"),
        ((a, b), {"c": 1}, "unexpected keyword argument 'c'"),
        ((a, b), {"a": a}, "multiple values for argument 'a'"),
    ]:
        with pytest.raises(NKITypeError, match=words) as e:
            mul_add(*args, **kwargs)
        assert e.value.code == "err_invalid_argument"
        assert "bad arguments for kernel 'mul_add'" in str(e.value)


def test_launches_from_several_threads_with_other_shapes_agree_with_numpy():
    shapes = [(256, 32), (200, 16), (128, 64), (64, 8)]
    errors: list[BaseException] = []

    def work(shape: tuple[int, int]) -> None:
        try:
            for k in range(10):
                a, b = _data(shape, np.float32, seed=k)
                np.testing.assert_array_equal(mul_add(a, b), _ref(a, b, 2.0))
        except BaseException as e:  # (reported by the main thread)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in shapes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_batched_plans_belong_to_their_kernel_and_stay_bounded(monkeypatch):
    from simulator.batched import plan as plans

    a = np.random.default_rng(5).standard_normal((200, 16)).astype(np.float32)
    np.testing.assert_allclose(mul_add(a, a), a * a * 2.0 + a, rtol=1e-6)
    ir_a = mul_add.last_ir
    np.testing.assert_allclose(mul_add(a[:64], a[:64]), a[:64] ** 2 * 2.0 + a[:64], rtol=1e-6)
    ir_b = mul_add.last_ir
    assert ir_a is not ir_b
    cfg = SimConfig()
    plan_a = plans.plan(ir_a, cfg)
    # an entry under B's id that holds another IR (as after an id is reused) is not B's plan
    monkeypatch.setitem(plans._PLANS, id(ir_b), (ir_a, cfg.precise_fp, plan_a))
    assert plans.plan(ir_b, cfg) is not plan_a
    assert plans._PLANS[id(ir_b)][0] is ir_b
    # past _MAX_PLANS entries the cache starts again
    np.testing.assert_allclose(mul_add(a[:8], a[:8]), a[:8] ** 2 * 2.0 + a[:8], rtol=1e-6)
    ir_c = mul_add.last_ir
    monkeypatch.setattr(plans, "_PLANS", {})
    monkeypatch.setattr(plans, "_MAX_PLANS", 2)
    plans.plan(ir_a, cfg)
    plans.plan(ir_b, cfg)
    assert len(plans._PLANS) == 2
    plans.plan(ir_c, cfg)
    assert list(plans._PLANS) == [id(ir_c)]


@nki.jit
def triangle_rows(a):
    """Row tile t keeps the columns below t * 8 + its row (a mask that changes with the
    sequential iterator and the partition: no box) and the rest is -1; ragged rows past n."""
    n, d = a.shape
    out = nl.ndarray((n, d), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(32)[:, None]
    i_f = nl.arange(d)[None, :]
    for t in nl.sequential_range((n + 31) // 32):
        r = t * 32 + i_p
        x = nl.load(a[r, i_f], mask=r < n)
        nl.store(out[r, i_f], nl.full((32, d), -1.0, dtype=a.dtype), mask=r < n)
        nl.store(out[r, i_f], x, mask=(r < n) & (i_f < t * 8 + i_p))
    return out


def _triangle_ref(a: np.ndarray) -> np.ndarray:
    n, d = a.shape
    rows = np.arange(n)[:, None]
    keep = np.arange(d)[None, :] < (rows // 32) * 8 + rows % 32
    return np.where(keep, a, np.float32(-1))


def test_kept_selections_follow_the_batch_state_and_stay_bounded(monkeypatch):
    from simulator.batched import masks

    a = np.random.default_rng(7).standard_normal((100, 48)).astype(np.float32)
    for rows in (100, 64, 100, 37):
        for _ in range(2):  # (the second launch takes the selections the first one kept)
            np.testing.assert_array_equal(triangle_rows(a[:rows]), _triangle_ref(a[:rows]))
    kept = [sel for _, sel in masks._MASKS.values() if sel is not None]
    assert kept and not any(sel.flags.writeable for sel in kept)  # (shared: never written)
    # a small byte budget: the table starts again instead of growing, results unchanged
    monkeypatch.setattr(masks, "_MASKS_BYTES", 40_000)
    monkeypatch.setattr(masks, "_MASKS", {})
    monkeypatch.setattr(masks, "_SEL_BOXES", {})
    monkeypatch.setattr(masks, "_mask_bytes", [0])
    for rows in (100, 64, 37):
        np.testing.assert_array_equal(triangle_rows(a[:rows]), _triangle_ref(a[:rows]))
        sizes = [0 if sel is None else sel.nbytes for _, sel in masks._MASKS.values()]
        assert sum(sizes) <= 40_000 and max(sizes) <= 4_000
        assert masks._mask_bytes[0] == sum(sizes)


@nki.jit
def program_scale(a, program):
    """Multiplies by the product of the scalars in ``program`` (a compile-time tuple)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    for c in program[0]:
        x = nl.multiply(x, c)
    nl.store(out, value=x)
    return out


def test_compile_time_tuples_keep_their_trace_key_only_while_they_cannot_change():
    a = np.ones((4, 8), np.float32)
    zero = ((0.0,),)
    assert np.signbit(program_scale(a, zero)).sum() == 0
    np.testing.assert_array_equal(np.signbit(program_scale(a, ((-0.0,),))), True)
    assert np.signbit(program_scale(a, zero)).sum() == 0  # (0.0 and -0.0 trace apart)
    assert binding._TUPLE_KEYS[id(zero)][0] is zero
    # a tuple holding a list may change between launches: its key is made each time
    scalars = [2.0]
    held = (scalars,)
    np.testing.assert_array_equal(program_scale(a, held), 2 * a)
    assert id(held) not in binding._TUPLE_KEYS
    scalars[0] = 3.0
    np.testing.assert_array_equal(program_scale(a, held), 3 * a)


def test_a_compile_time_tuples_key_is_hashed_once_and_pickles_as_its_content():
    import pickle

    k = nki.jit(program_scale.fn)
    a = np.ones((4, 8), np.float32)
    first, second = ((2.0, 3.0),), tuple([tuple([2.0, 3.0])])  # equal, distinct objects
    assert first is not second and first == second
    np.testing.assert_array_equal(k(a, first), 6 * a)
    np.testing.assert_array_equal(k(a, second), 6 * a)
    assert k.trace_count == 1  # (equal tuples share one trace)
    key = binding._TUPLE_KEYS[id(first)][1]
    assert isinstance(key, binding.HashedKey) and key.__dict__["h"] == hash(tuple(key))
    # (the torch backend keeps trace caches on disk: a key comes back as its content and is
    # hashed afresh, so it finds its entry in a process whose string hashes differ)
    assert binding._TUPLE_KEYS[id(second)][1] is key  # (one key object per content)
    assert b"0x" in pickle.dumps(key) and str(key.__dict__["h"]).encode() not in pickle.dumps(key)
    assert pickle.loads(pickle.dumps(key)) is key  # (unpickled: this process's key)
    binding._CANONICAL.clear()  # (as in another process: an equal key, hashed afresh)
    other = pickle.loads(pickle.dumps({key: "ir"}))
    (got,) = other
    assert got == key and got is not key and other[tuple(key)] == "ir"
    np.testing.assert_array_equal(k(a, ((2.0, -3.0),)), -6 * a)  # another program: traced
    assert k.trace_count == 2


def _every_instance_writes_all(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a))  # (a write race between the grid's instances)
    return out


def test_what_a_launch_keeps_per_setting_never_skips_a_check_of_another(monkeypatch):
    """Each launch of one traced kernel under "static" reports its race, whatever launches
    under "none" (which run it) came between, through configure() and the environment."""
    racy = nki.jit(_every_instance_writes_all, api="classic")
    a = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    loose = racy.configure(checks="none")
    for _ in range(2):
        with pytest.raises(nki.errors.NKIError) as e:
            racy[2](a)
        assert e.value.code == "err_spmd_write_race"
        assert e.value.loc.line == _every_instance_writes_all.__code__.co_firstlineno + 2
        np.testing.assert_array_equal(loose[2](a), a)  # (the same values written twice)
        monkeypatch.setenv("NKI_SIM_CHECKS", "none")
        np.testing.assert_array_equal(racy[2](a), a)
        monkeypatch.setenv("NKI_SIM_CHECKS", "static")


def test_the_host_memory_check_is_kept_only_for_launches_too_small_to_read_it(monkeypatch):
    """A launch below ``HOST_CHECK_MIN_BYTES`` never needs the host's memory: after its first
    pass it is not asked again. A larger one asks at every launch (the memory available
    changes): the launch after the memory shrank is refused, located at the tensor."""
    from simulator.checks import capacity

    calls: list[int] = []
    avail = [1 << 40]

    def available() -> int:
        calls.append(1)
        return avail[0]

    monkeypatch.setattr(capacity, "host_available_bytes", available)
    a, b = _data((64, 32), np.float32, seed=9)
    for _ in range(3):
        np.testing.assert_array_equal(mul_add(a, b), _ref(a, b, 2.0))
    assert calls == []  # (a few KiB: below the threshold)
    monkeypatch.setattr(capacity, "HOST_CHECK_MIN_BYTES", 1024)
    c, d = _data((64, 48), np.float32, seed=10)  # (another trace: its own start rows)
    for n in (1, 2):
        np.testing.assert_array_equal(mul_add(c, d), _ref(c, d, 2.0))
        assert len(calls) == n
    avail[0] = 2048
    with pytest.raises(nki.errors.NKIMemoryError) as e:
        mul_add(c, d)
    assert e.value.code == "err_host_memory_exhausted"
    assert "only 2048 bytes are available" in str(e.value)


def test_torch_launches_from_several_threads_run_and_report_their_own_trace():
    """The IR a torch launch reports is its own (another thread's launch of the same kernel
    with other shapes may have replaced ``Kernel.last_ir`` meanwhile)."""
    from frontends.torch_tensors import launch_traced

    lk = Launch(mul_add, mul_add.default_grid)
    errors: list[BaseException] = []

    def work(rows: int) -> None:
        try:
            for k in range(10):
                a, b = _data((rows, 16), np.float32, seed=k)
                got, ir = launch_traced(lk, (torch.from_numpy(a), torch.from_numpy(b)), {})
                assert ir.tensor("a").shape == (rows, 16)
                np.testing.assert_array_equal(got.numpy(), _ref(a, b, 2.0))
        except BaseException as e:  # (reported by the main thread)
            errors.append(e)

    workers = [threading.Thread(target=work, args=(r,)) for r in (256, 200, 64, 8)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert not errors, errors[0]


def test_the_torch_backends_configured_kernel_follows_its_options():
    """``common.configured`` (the torch backend's target / checks options applied to a
    kernel): one copy per kernel and options, another for other options, the kernel itself
    with none; each copy launches under its own options."""
    from frontends.common import configured

    racy = nki.jit(_every_instance_writes_all, api="classic")
    a = np.ones((128, 8), np.float32)
    assert configured(racy, None, None) is racy
    loose = configured(racy, None, "none")
    assert configured(racy, None, "none") is loose and loose.config().checks == "none"
    strict = configured(racy, "trn2", "static")
    assert strict is not loose and strict.config().target == "trn2"
    np.testing.assert_array_equal(loose[2](a), a)
    with pytest.raises(nki.errors.NKIError) as e:
        strict[2](a)
    assert e.value.code == "err_spmd_write_race"
    assert strict.last_run is None and loose.last_run.target == racy.config().target
