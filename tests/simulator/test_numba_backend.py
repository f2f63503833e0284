"""The Numba backend gives the interpreter's results bit for bit (and NumPy's within the usual
fp32 / bf16 tolerance), reports which backend ran, falls back when it must, and raises the
interpreter's errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIIndexError, NKIRuntimeError
from simulator import launch
from simulator.compiled import backend as numba_backend
from simulator.compiled import budget as numba_budget
from simulator.compiled.codegen import NATIVE
from simulator.config import SimConfig

from backends import REFERENCE, bits, run_backends, same, same_bits
from helpers import BF16


@pytest.fixture(autouse=True)
def _compiled_path(monkeypatch):
    # checks=full and shuffled orders always run in the interpreter; these tests are about the
    # compiled path, so they do not inherit those settings from the environment
    monkeypatch.delenv("NKI_SIM_CHECKS", raising=False)
    monkeypatch.delenv("NKI_SIM_SHUFFLE_SEED", raising=False)


# --------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------


@nki.jit
def add_2d(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    rows, cols = slice(i * 128, (i + 1) * 128), slice(j * 64, (j + 1) * 64)
    nl.store(out[rows, cols], value=nl.add(nl.load(a[rows, cols]), nl.load(b[rows, cols])))
    return out


@nki.jit
def ragged_ops(a, s):
    """affine_range over ragged (masked) row tiles: transcendental and exact ops, a (P, 1)
    broadcast operand, where, free-axis reductions, memset + accumulate, copies."""
    n, m = a.shape
    out = nl.ndarray((n, m), dtype=a.dtype, buffer=nl.shared_hbm)
    red = nl.ndarray((n, 3), dtype=nl.float32, buffer=nl.shared_hbm)
    ip, jf = nl.arange(128)[:, None], nl.arange(m)[None, :]
    j1 = nl.arange(1)[None, :]
    for t in nl.affine_range((n + 127) // 128):
        ok = t * 128 + ip < n
        x = nl.load(a[t * 128 + ip, jf], mask=ok)
        w = nl.load(s[t * 128 + ip, j1], mask=ok)  # (P, 1) scale
        e = nl.multiply(nl.exp(x), w)  # tensor_scalar-like broadcast
        z = nl.where(nl.greater(e, 1.0), nl.tanh(x), nl.subtract(e, x))
        acc = nl.zeros((128, m), dtype=nl.float32)
        acc[...] += z
        acc[...] += nl.sqrt(nl.abs(x))
        nl.store(out[t * 128 + ip, jf], value=acc, mask=ok)
        nl.store(red[t * 128 + ip, j1], value=nl.sum(acc, axis=1), mask=ok)
        nl.store(red[t * 128 + ip, j1 + 1], value=nl.max(x, axis=1), mask=ok)
        nl.store(red[t * 128 + ip, j1 + 2], value=nl.min(x, axis=1), mask=ok)
    return out, red


def ragged_ref(a, s):
    """NumPy model of ``ragged_ops``: tiles keep the input dtype (rounded after every op)."""

    def r(v):
        return np.asarray(v, np.float32).astype(a.dtype).astype(np.float32)

    x, w = a.astype(np.float32), s.astype(np.float32)
    e = r(r(np.exp(x)) * w)
    z = np.where(e > 1.0, r(np.tanh(x)), r(e - x))
    acc = z + r(np.sqrt(r(np.abs(x))))
    red = np.stack([acc.sum(axis=1), x.max(axis=1), x.min(axis=1)], axis=1)
    return acc, red


@nki.jit
def op_sweep(x, y):
    """Every natively compiled op-table row, on special values."""
    names = list(NATIVE)
    out = nl.ndarray((len(names), x.shape[0], x.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(x)
    b = nl.load(y)
    for k, name in enumerate(names):
        fn = getattr(nl, name)
        r = fn(a, b) if name in nisa_binary() else fn(a)
        nl.store(out[k], value=r)  # 0 / 1 results are bool tiles: the store casts
    return out


def nisa_binary() -> set[str]:
    from nki.optable import OPS

    return {n for n in NATIVE if OPS[n].arity == 2}


@nki.jit
def matmul_acc(a, b):
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.zeros((a.shape[1], b.shape[1]), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(a.shape[0] // 128):
        x = nl.load(a[k * 128 : (k + 1) * 128, :])
        y = nl.load(b[k * 128 : (k + 1) * 128, :])
        ps += nisa.nc_matmul(x, y)
    nl.store(out, value=nl.copy(ps))
    return out


@nki.jit
def int_tiles(a, x):
    """int32 tiles (saturating integer semantics) are hosted, fp32 work around them native."""
    out = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    fout = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.full(a.shape, 7, dtype=nl.int32)
    t[...] = nl.add(nl.load(a), t)
    nl.store(out, value=t)
    nl.store(fout, value=nl.multiply(nl.load(x), 2.0))
    return out, fout


def psum_groups(a, b):
    """Classic mode: a PSUM tile allocated per row block; `+=` matmuls form a group that the
    first product starts (overwrites), also when a product is NaN (inf * 0)."""
    out = nl.ndarray((2 * 128, b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        acc = nl.ndarray((128, b.shape[1]), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(a.shape[0] // 128):
            x = nl.load(a[k * 128 : (k + 1) * 128, i * 128 : (i + 1) * 128])
            y = nl.load(b[k * 128 : (k + 1) * 128, :])
            acc += nisa.nc_matmul(x, y)
        nl.store(out[i * 128 : (i + 1) * 128, :], value=nl.copy(acc))
    return out


@nki.jit
def masked_oob(a):
    out = nl.ndarray((256, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.arange(128)[:, None], nl.arange(64)[None, :]
    for t in nl.sequential_range(2):
        x = nl.load(a[t * 100 + ip, jf], mask=(ip < 120))  # t=1 reads rows 200..219 of 200
        nl.store(out[t * 128 + ip, jf], value=x, mask=(ip < 120))
    return out


@nki.jit
def bad_transpose(a, b):
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    p = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
    p[...] = nisa.nc_matmul(nl.load(a), nl.load(b), is_transpose=True)
    nl.store(out, value=nl.copy(p))
    return out


# --------------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_tensor_add_grid(dtype):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 128)).astype(dtype)
    b = rng.standard_normal((256, 128)).astype(dtype)
    r = run_backends(add_2d, (2, 2), a, b, checks="static", ran=("numba", REFERENCE))
    ref, got = r[REFERENCE], r["numba"]
    assert same_bits(got, ref)
    expect = (a.astype(np.float32) + b.astype(np.float32)).astype(dtype)
    np.testing.assert_array_equal(bits(got), bits(expect))  # one rounding, like NumPy


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_ragged_tiles_transcendentals_reductions(dtype):
    rng = np.random.default_rng(1)
    n, m = 300, 48  # 3 tiles of 128 rows, the last one masked
    a = rng.standard_normal((n, m)).astype(dtype)
    s = rng.uniform(0.5, 2.0, (n, 1)).astype(dtype)
    r = run_backends(ragged_ops, None, a, s, checks="static", ran=("numba", REFERENCE))
    (r_out, r_red), (g_out, g_red) = r[REFERENCE], r["numba"]
    assert same_bits(g_out, r_out)
    assert same_bits(g_red, r_red)
    e_out, e_red = ragged_ref(a, s)
    tol = 1e-5 if dtype == np.float32 else 2e-2
    np.testing.assert_allclose(g_out.astype(np.float32), e_out, rtol=tol, atol=tol)
    np.testing.assert_allclose(g_red[:, 1:], e_red[:, 1:], rtol=0, atol=0)  # max / min exact
    np.testing.assert_allclose(g_red[:, 0], e_red[:, 0], rtol=tol * 10, atol=tol * 10)


def test_native_ops_bit_exact_on_special_values():
    special = np.array(
        [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, np.inf, -np.inf, np.nan, 1e-45, -1e-40, 3e38, 7.0],
        dtype=np.float32,
    )
    x = np.repeat(special[None, :], len(special), axis=0)
    y = x.T.copy()  # every pair of special values
    r = run_backends(op_sweep, None, x, y, checks="static", ran=("numba", REFERENCE), compare=same)
    ref, got = r[REFERENCE], r["numba"]
    assert np.array_equal(ref, got, equal_nan=True)
    # the sign of zero too, except np.maximum / np.minimum / relu of (+0, -0) pairs, which
    # SIMD NumPy resolves either way
    names = list(NATIVE)
    for k, name in enumerate(names):
        if name in ("maximum", "minimum", "relu"):
            continue
        assert np.array_equal(np.signbit(ref[k]), np.signbit(got[k])), name


def test_matmul_accumulate_runs_hosted():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((384, 128)).astype(np.float32)
    b = rng.standard_normal((384, 96)).astype(np.float32)
    r = run_backends(matmul_acc, None, a, b, checks="static", ran=("numba", REFERENCE))
    ref, got = r[REFERENCE], r["numba"]
    assert same_bits(got, ref)
    np.testing.assert_allclose(got, a.T @ b, rtol=1e-4, atol=1e-4)
    p, _ = numba_backend.plan(r.kernel("numba").last_ir, SimConfig())
    assert p is not None and p.hosted_ops == ["isa.nc_matmul"]


def test_integer_tiles_are_hosted():
    a = np.array([[2**31 - 3] * 64, [-(2**31)] * 64] * 64, dtype=np.int32)
    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    r = run_backends(int_tiles, None, a, x, checks="static", ran=("numba", REFERENCE))
    (r_i, r_f), (g_i, g_f) = r[REFERENCE], r["numba"]
    assert same_bits(g_i, r_i)
    assert same_bits(g_f, r_f)
    assert g_i[0, 0] == 2**31 - 1 and g_i[1, 0] == -(2**31) + 7  # saturates, no wrap-around
    p, _ = numba_backend.plan(r.kernel("numba").last_ir, SimConfig())
    assert p is not None and p.hosted_ops and p.native_work > 0


def test_classic_psum_groups_restart_at_each_allocation():
    from nki.classic import classic_mode, set_classic_mode

    before = classic_mode()
    set_classic_mode(True)
    try:
        kernel = nki.jit(psum_groups)
        rng = np.random.default_rng(4)
        a = rng.standard_normal((256, 256)).astype(np.float32)
        b = rng.standard_normal((256, 64)).astype(np.float32)
        a[0, 3] = np.inf  # the first product of row 3 is NaN where b[0] has a zero
        b[0, :8] = 0.0
        r = run_backends(kernel, None, a, b, checks="static", ran=("numba", REFERENCE))
        ref, got = r[REFERENCE], r["numba"]
    finally:
        set_classic_mode(before)
    assert same_bits(got, ref)
    assert np.isnan(got[3, :8]).all() and np.isfinite(got[128:]).all()


@pytest.mark.filterwarnings("ignore::nki.errors.NKIWarning")  # writes part of its output
def test_masked_out_of_bounds_error_matches_interpreter():
    a = np.zeros((200, 64), dtype=np.float32)
    msgs = []
    for backend in ("numpy", "numba"):
        with pytest.raises(NKIIndexError) as ei:
            masked_oob.configure(backend=backend)(a)
        msgs.append(str(ei.value))
    assert msgs[0] == msgs[1]
    assert "index range [100, 219]" in msgs[1] and "line" not in msgs[1][:0]


def test_hosted_instruction_error_matches_interpreter():
    a = np.ones((128, 128), dtype=np.float32)
    msgs = []
    for backend in ("numpy", "numba"):
        with pytest.raises(NKIRuntimeError) as ei:
            bad_transpose.configure(backend=backend)(a, a)
        msgs.append(str(ei.value))
    assert msgs[0] == msgs[1] and "identity" in msgs[0]


@pytest.mark.parametrize(
    "setting", [{"checks": "full"}, {"shuffle_seed": 3}], ids=["checks_full", "shuffle"]
)
def test_numba_falls_back_with_a_warning(setting):
    a = np.ones((256, 128), dtype=np.float32)
    k = add_2d.configure(backend="numba", **setting)
    with pytest.warns(numba_backend.BackendFallbackWarning, match="NumPy interpreter") as w:
        out = k[2, 2](a, a)
    assert w[0].filename == __file__  # the warning points at the caller, not at nki-sim
    assert k.last_run.backend == "numpy"
    np.testing.assert_array_equal(out, a + a)


def test_unchecked_out_of_bounds_kernel_is_never_compiled():
    """checks='none' skips the static bounds check; compiled code does not bounds-check, so a
    kernel failing it runs on the interpreter, which reports the access."""
    a = np.ones((200, 128), dtype=np.float32)  # add_2d[2, 2] reads rows up to 255
    k = add_2d.configure(backend="numba", checks="none")
    with pytest.warns(numba_backend.BackendFallbackWarning, match="static bounds check"):
        with pytest.raises(NKIIndexError, match="out-of-bound"):
            k[2, 2](a, a)


def test_auto_decides_by_the_cost_model(monkeypatch, tmp_path):
    monkeypatch.setenv("NKI_SIM_CACHE_DIR", str(tmp_path))  # not compiled yet, not on disk
    monkeypatch.setenv(numba_budget.ENV, "inf")  # (test_numba_compile_budget: with a budget)
    monkeypatch.setattr(numba_backend, "_FUNCS", {})
    # auto's choice between compiling and interpreting (the batched backend would run it first)
    monkeypatch.setattr(
        launch, "BACKENDS", tuple(b for b in launch.BACKENDS if b.backend.name != "batched")
    )
    a = np.ones((256, 128), dtype=np.float32)
    k = add_2d.configure(backend="auto")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # auto never warns
        k[2, 2](a, a)  # 4 instances x (2 loads, add, store) of 128 x 64 tiles: a compile
        assert k.last_run.backend == "numpy"
        p, _ = numba_backend.plan(k.last_ir, k.config())
        assert (p.work, p.native_work, p.native_elements) == (16, 16, 16 * 128 * 64)
        interp, compiled = numba_backend.estimate(p)
        assert interp == pytest.approx(16 * 50e-6 + 16 * 128 * 64 * 0.5e-9)
        assert compiled == pytest.approx(16 * 128 * 64 * 2.5e-9)
        monkeypatch.setattr(numba_backend, "INTERP_PER_EXEC", 1.0)  # a very slow interpreter
        k[2, 2](a, a)
        assert k.last_run.backend == "numba"
        kf = k.configure(checks="full")
        kf[2, 2](a, a)
        assert kf.last_run.backend == "numpy"
    # big tiles: compiled element loops lose to vectorised NumPy whatever the compile cost
    monkeypatch.setattr(numba_backend, "INTERP_PER_EXEC", 50e-6)
    monkeypatch.setattr(numba_backend, "DRIVER_BASE", 0.0)
    monkeypatch.setattr(numba_backend, "DRIVER_PER_INSTR", 0.0)
    monkeypatch.setattr(numba_backend, "KERNEL_COMPILE", 0.0)

    @nki.jit(backend="auto")
    def add_big(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), nl.load(b)))
        return out

    big = np.ones((128, 8192), dtype=np.float32)
    np.testing.assert_array_equal(add_big(big, big), big + big)
    assert add_big.last_run.backend == "numpy"
    use, why = numba_backend.choose(add_big.last_ir, add_big.config())
    assert not use and "does not pay off" in why


def test_disk_cache_files(tmp_path, monkeypatch):
    from simulator.compiled import kernels as numba_kernels

    monkeypatch.setenv("NKI_SIM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(numba_budget.ENV, "inf")  # everything compiled at the first launch
    monkeypatch.setattr(numba_backend, "_FUNCS", {})
    monkeypatch.setattr(numba_kernels, "_MODULES", {})  # nothing compiled in this process
    a = np.ones((256, 128), dtype=np.float32)
    k = add_2d.configure(backend="numba")
    k[2, 2](a, a)
    drivers = [
        f for f in (tmp_path / "numba").glob("nki_*.py") if "driver of kernel" in f.read_text()
    ]
    assert len(drivers) == 1 and "@njit(cache=True" in drivers[0].read_text()
    p, _ = numba_backend.plan(k.last_ir, k.config())
    kernels = list((tmp_path / "numba").glob("nki_k_*.py"))
    assert len(kernels) == len(p.kernels) == 2  # the copy (load, store) and the add kernel
    cached = {f.name.split(".")[0] for f in (tmp_path / "numba" / "__pycache__").glob("*.nbi")}
    assert cached == {f.stem for f in kernels + drivers}


_CACHE_SCRIPT = """
import numpy as np, nki, nki.language as nl
from simulator import interpreter, launch
from simulator.compiled import backend as numba_backend

@nki.jit(backend="numba")
def add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
    return out

a = np.ones((128, 32), dtype=np.float32)
assert (add(a, a) == 2).all() and add.last_run.backend == "numba"
from simulator.compiled import kernels as numba_kernels
hits = misses = 0
for mod in numba_kernels._MODULES.values():
    fn = getattr(mod, "kern", None) or mod.nki_kernel
    hits, misses = hits + len(fn.stats.cache_hits), misses + len(fn.stats.cache_misses)
print(len(numba_kernels._MODULES), hits, misses)
"""


def test_second_process_loads_compiled_code_from_disk(tmp_path):
    import os
    import subprocess
    import sys

    # everything compiled at the first launch
    env = {**os.environ, "NKI_SIM_CACHE_DIR": str(tmp_path), numba_budget.ENV: "inf"}
    script = tmp_path / "k.py"
    script.write_text(_CACHE_SCRIPT)
    runs = [
        subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
        for _ in range(2)
    ]
    for r in runs:
        assert r.returncode == 0, r.stderr
    # a driver and two library kernels (copy, add), compiled, then loaded from the disk cache
    assert runs[0].stdout.split() == ["3", "0", "3"]
    assert runs[1].stdout.split() == ["3", "1", "0"]  # the driver, its kernels linked in


def test_config_accepts_numba():
    assert SimConfig(backend="numba").backend == "numba"
    assert SimConfig.from_env({"NKI_SIM_BACKEND": "numba"}).backend == "numba"


def test_bf16_rounding_helper():
    from numba import njit

    from simulator.compiled.rt import to_bf16

    rng = np.random.default_rng(3)

    @njit
    def round_all(x, out):
        for i in range(x.shape[0]):
            out[i] = to_bf16(x[i])

    bits = rng.integers(0, 2**32, 1 << 16, dtype=np.uint64).astype(np.uint32)
    bits[:6] = [0x7F800000, 0xFF800000, 0x7FC00001, 0xFFA00000, 0x3F808000, 0x3F818000]
    x = bits.view(np.float32)
    out = np.empty(x.shape, np.uint16)
    round_all(x, out)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(out, x.astype(BF16).view(np.uint16))


_INTERRUPT_SCRIPT = """
import time
import numpy as np, nki, nki.language as nl
import simulator.compiled.backend as nb

@nki.jit(backend="numba")
def spin(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.sequential_range(50_000_000):
        nl.store(out, value=nl.add(nl.load(a), 1.0))
    return out

real = nb.prepare

def prepare(*a):
    got = real(*a)
    assert not got[2], "the driver runs compiled"
    print("running", flush=True)  # compiled: what follows is the compiled loop
    return got

nb.prepare = prepare
spin(np.zeros((128, 8), np.float32))
print("done", flush=True)
"""


def test_compiled_loop_stops_on_ctrl_c(tmp_path):
    """SIGINT during a long compiled loop: KeyboardInterrupt (raised by the backend when the
    loop's poll sees the signal) within a few seconds, not after the loop ends."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "spin.py"
    script.write_text(_INTERRUPT_SCRIPT)
    env = {**os.environ, numba_budget.ENV: "inf"}  # the driver compiled at the first launch
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "running"
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        t0 = time.perf_counter()
        out, err = proc.communicate(timeout=30)
        elapsed = time.perf_counter() - t0
    finally:
        proc.kill()
    assert proc.returncode != 0 and "done" not in out
    assert err.rstrip().endswith("KeyboardInterrupt"), err[-2000:]
    assert "compiled/backend.py" in err  # raised where the backend saw the polled signal
    assert elapsed < 5.0, elapsed


@nki.jit
def row_scan(a):
    out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for i in nl.sequential_range(a.shape[1] // 8):
        x = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a[:, nl.ds(i * 8, 8)])
        nisa.tensor_tensor(dst=acc, data1=acc, data2=x, op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_auto_takes_a_warm_numba_kernel_at_fewer_steps(monkeypatch):
    # a sequential loop below the batched backend's switch to Numba (SERIAL_STEPS) stays batched
    # while its Numba code is not compiled; once it is, the lower WARM_SERIAL_STEPS applies
    from simulator.batched import backend as batched

    monkeypatch.setattr(batched, "WARM_SERIAL_STEPS", 16)
    a = np.random.default_rng(0).standard_normal((128, 8 * 40)).astype(np.float32)
    want = a.reshape(128, 40, 8).sum(axis=1, dtype=np.float32)
    cold = nki.jit(row_scan.fn, backend="auto")
    np.testing.assert_allclose(cold(a), want, rtol=1e-5, atol=1e-5)
    assert cold.last_run.backend == "batched"
    numba = nki.jit(row_scan.fn, backend="numba")
    numba(a)
    assert numba.last_run.backend == "numba"
    warm = nki.jit(row_scan.fn, backend="auto")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(warm(a), numba(a))
    assert warm.last_run.backend == "numba"
