"""Resource guards: the capacity check is linear in the number of allocations, the Numba backend
compiles huge unrolled kernels in linear time, repairs a corrupted disk-cache entry, and a
launch whose host memory would exceed what is available is a located NKIError before anything
is allocated."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import nki
import nki.language as nl
import simulator.checks.capacity as capacity
import simulator.compiled.backend as nb
from nki.errors import NKIMemoryError

from helpers import line_of


def unrolled_adds(a, n):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    for _ in nl.static_range(n):
        t = nl.add(t, 1.0)
    nl.store(out, t)
    return out


def test_capacity_check_reads_each_live_range_a_bounded_number_of_times(monkeypatch):
    reads = [0]

    class Counted(capacity._Live):
        def __getattribute__(self, name):
            if name in ("start", "end"):
                reads[0] += 1
            return object.__getattribute__(self, name)

    real = capacity.live_ranges

    def counted(ir):
        return [Counted(lv.decl, lv.start, lv.end, lv.loc) for lv in real(ir)]

    monkeypatch.setattr(capacity, "live_ranges", counted)
    n = 3000
    k = nki.jit(unrolled_adds)
    got = k(np.zeros((128, 4), np.float32), n)
    np.testing.assert_array_equal(got, np.full((128, 4), n, np.float32))
    # each of the ~n + 2 SBUF tiles is looked at a few times, not once per other tile
    assert 0 < reads[0] < 20 * n, reads[0]


def test_capacity_overflow_still_lists_the_live_tiles():
    def too_big(a):
        out = nl.ndarray((128, 4), dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.load(a[:, 0:40000])
        y = nl.load(a[:, 0:40000])  # ERR
        nl.store(out, nl.add(x[:, 0:4], y[:, 0:4]))
        return out

    with pytest.raises(NKIMemoryError) as ei:
        nki.jit(too_big)(np.zeros((128, 40000), np.float32))
    e = ei.value
    assert e.code == "err_sbuf_capacity_exceeded"
    assert e.loc.line == line_of(too_big)
    assert "320000 bytes per partition requested" in str(e)
    assert str(e).count("160000 B") == 2


def test_numba_compiles_large_unrolled_kernels_without_a_size_limit():
    """Compile time grows linearly: a kernel over ``PY_DRIVER_MIN`` instructions runs its
    driver as plain Python, each instruction one call of a shared compiled library kernel."""
    from simulator.compiled.codegen import PY_DRIVER_MIN

    k = nki.jit(unrolled_adds, backend="numba")
    a = np.zeros((128, 4), np.float32)
    n = PY_DRIVER_MIN + 100
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        got = k(a, n)
    assert k.last_run.backend == "numba"
    np.testing.assert_array_equal(got, np.full((128, 4), n, np.float32))
    p, _ = nb.plan(k.last_ir, k.config())
    assert p.python and len(p.instrs) == n + 2 and len(p.kernels) == 2


def small_add(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), 2.0))
    return out


def test_corrupted_numba_disk_cache_is_deleted_and_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("NKI_SIM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("NKI_SIM_COMPILE_BUDGET", "inf")  # the driver compiled at the first launch
    a = np.arange(512, dtype=np.float32).reshape(128, 4)
    k = nki.jit(small_add, backend="numba")
    np.testing.assert_array_equal(k(a), a + 2)
    assert k.last_run.backend == "numba"
    files = sorted((tmp_path / "numba" / "__pycache__").glob("nki_*"))
    assert files, "numba wrote no cache entry"
    for f in files:
        f.write_bytes(b"garbage")
    # a new process: nothing compiled in memory, only the disk cache
    nb.forget_compiled()
    with pytest.warns(nb.CacheRepairedWarning, match="could not be loaded"):
        got = nki.jit(small_add, backend="numba")(a)
    np.testing.assert_array_equal(got, a + 2)
    rebuilt = sorted((tmp_path / "numba" / "__pycache__").glob("nki_*"))
    assert rebuilt and all(f.read_bytes() != b"garbage" for f in rebuilt)
    nb.forget_compiled()  # and the next load from the repaired cache works silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        k2 = nki.jit(small_add, backend="numba")
        np.testing.assert_array_equal(k2(a), a + 2)
    assert k2.last_run.backend == "numba"


@pytest.mark.filterwarnings("ignore::nki.errors.NKIWarning")  # writes part of its output
def test_host_memory_is_checked_cumulatively_before_allocating(monkeypatch):
    def private_scratch(a):
        out = nl.ndarray((64, 128), dtype=a.dtype, buffer=nl.shared_hbm)
        tmp = nl.ndarray((1024, 2048), dtype=nl.float32, buffer=nl.private_hbm)  # ERR
        i = nl.program_id(0)
        nl.store(tmp[0:1, 0:128], nl.load(a[i : i + 1, :]))
        nl.store(out[i : i + 1, :], nl.load(tmp[0:1, 0:128]))
        return out

    # 64 instances x 8 MiB of private HBM = 512 MiB, each tensor far below the per-tensor limit
    monkeypatch.setattr(capacity, "host_available_bytes", lambda: 300 << 20)
    a = np.ones((64, 128), np.float32)
    with pytest.raises(NKIMemoryError) as ei:
        nki.jit(private_scratch)[64](a)
    e = ei.value
    assert e.code == "err_host_memory_exhausted"
    assert e.loc is not None and e.loc.line == line_of(private_scratch)
    # the private tensor and one (1, 128) tile: the first is dead when the second is allocated
    per_instance = 1024 * 2048 * 4 + 128 * 4
    assert f"64 instance(s) x {per_instance} bytes of private HBM" in str(e), str(e)
    assert f"only {300 << 20} bytes are available" in str(e)
    # 4 instances (32 MiB) fit
    np.testing.assert_array_equal(nki.jit(private_scratch)[4](a)[:4], a[:4])
