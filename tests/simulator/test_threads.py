"""Thread control: each launch decides its BLAS threads from its matmul work and the cores free
(one thread for kernels without much matmul work, never more than the environment allows),
an explicit setting fixes the count, the pools come back as they were, and the results are the
same bits with any count."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import nki
import nki.language as nl
from nki.errors import NKIError
from nki.kernels import matmul_kernel
from simulator import threads
from simulator.config import SimConfig


@nki.jit
def add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
    return out


RNG = np.random.default_rng(5)
OTHERS_NOW = threads._OTHERS.now  # (the real reading: the fixture below replaces it)


@pytest.fixture(autouse=True)
def load_average_decides(monkeypatch):
    """The other processes' CPU time is not read unless a test says so: the load average the
    tests set decides."""
    monkeypatch.setattr(threads._OTHERS, "now", lambda: None)


def _mm_inputs(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    return (
        RNG.standard_normal((m, k)).astype(np.float32),
        RNG.standard_normal((k, n)).astype(np.float32),
    )


def test_matmul_work_counts_every_product():
    a, b = _mm_inputs(256, 512, 1024)
    matmul_kernel(a, b)
    total, largest = threads.matmul_work(matmul_kernel.last_ir)
    assert largest == 128 * 128 * 512
    assert total == 256 * 512 * 1024  # (M / 128) x (K / 128) x (N / 512) products


def test_decision_from_work_and_free_cores(monkeypatch):
    a, b = _mm_inputs(1024, 1024, 1024)
    matmul_kernel(a, b)
    big = matmul_kernel.last_ir
    add(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32))
    assert threads.decide(add.last_ir, None) == 1  # no matmul: nothing for BLAS to split
    monkeypatch.setattr(threads, "free_cores", lambda: 16)
    assert threads.decide(big, None) == 16  # every free core: 1024^3 is 64 threads' work
    monkeypatch.setattr(threads, "free_cores", lambda: 256)
    assert threads.decide(big, None) == 1024**3 // threads.WORK_PER_THREAD  # 64
    assert threads.decide(big, 3) == 3  # an explicit setting
    monkeypatch.setattr(threads, "free_cores", lambda: 1)  # a busy machine: one thread
    assert threads.decide(big, None) == 1


def test_free_cores_subtract_the_load_of_other_processes(monkeypatch):
    monkeypatch.setattr(threads, "cores", lambda: 16)
    monkeypatch.setattr(threads._OWN, "now", lambda: 1.0)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (5.2, 0.0, 0.0))
    assert threads.free_cores() == 12  # 4 cores busy with other work
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (40.0, 0.0, 0.0))
    assert threads.free_cores() == 1


def test_free_cores_from_the_cpu_time_other_processes_take(monkeypatch):
    """Where the system tells the machine's busy CPU time, the other processes' share of it
    (the machine's less this process's) decides, rounded to the nearest core (``partly``: down),
    whatever the load average says."""
    monkeypatch.setattr(threads, "cores", lambda: 2)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (9.0, 0.0, 0.0))
    for others, free, partly in ((0.0, 2, 2), (0.3, 2, 2), (0.7, 1, 2), (1.0, 1, 1), (5.0, 1, 1)):
        monkeypatch.setattr(threads._OTHERS, "now", lambda o=others: o)
        assert threads.free_cores() == free
        assert threads.free_cores(partly=True) == partly


def test_other_processes_cpu_time_is_the_machines_less_this_processs():
    use = threads._OthersUse()
    assert use.update(10.0, 100.0, 5.0) is None  # (one reading: no rate yet)
    # half a second: the machine busy 1.2 s (1.0 of them this process's threads)
    assert use.update(10.5, 101.2, 6.0) == pytest.approx(0.4)
    assert use.update(11.0, 101.7, 6.5) == 0.0  # all of it this process's
    # a reading within the window changes nothing (one 10 ms tick over 1 ms would be 10 cores)
    assert use.update(11.001, 101.71, 6.5) == 0.0
    assert use.update(11.5, 102.7, 7.0) == pytest.approx(1.0)  # (from the reading at 11.0)


def test_a_change_of_cores_starts_the_readings_again(monkeypatch):
    """Readings summed over other cores (the process's affinity changed) are not compared: the
    next rate comes from two readings of the same cores."""
    clock = {"wall": 0.0}
    cores = {"now": {0, 1}}
    busy = {frozenset({0, 1}): 100.0, frozenset({0}): 40.0}

    class FakeTime:
        @staticmethod
        def monotonic() -> float:
            return clock["wall"]

        @staticmethod
        def process_time() -> float:
            return 0.0  # (this process idle)

    monkeypatch.setattr(threads, "time", FakeTime)
    monkeypatch.setattr(threads, "_affinity", lambda: set(cores["now"]))
    monkeypatch.setattr(threads, "machine_busy_seconds", lambda cpus=None: busy[frozenset(cpus)])
    use = threads._OthersUse()
    assert use.now() is None
    clock["wall"], busy[frozenset({0, 1})] = 1.0, 100.5
    assert use.now() == pytest.approx(0.5)
    cores["now"] = {0}  # (40 s busy on core 0 alone: not 60 s less than before)
    clock["wall"] = 2.0
    assert use.now() == pytest.approx(0.5)  # (the last rate, the new cores' first reading)
    clock["wall"], busy[frozenset({0})] = 3.0, 40.25
    assert use.now() == pytest.approx(0.25)


def test_without_machine_time_the_load_average_decides(monkeypatch):
    """Where the system does not tell the machine's CPU time (not Linux), it is asked once and
    the load average less this process's use decides; a read that fails after one that worked
    falls back for that launch only."""
    asked = []
    monkeypatch.setattr(threads, "machine_busy_seconds", lambda cpus=None: asked.append(1))
    use = threads._OthersUse()
    assert use.now() is None and use.now() is None and len(asked) == 1
    # (a read failing after one that worked is asked again next time)
    once = threads._OthersUse()
    monkeypatch.setattr(threads, "machine_busy_seconds", lambda cpus=None: 100.0)
    once.now()
    monkeypatch.setattr(threads, "machine_busy_seconds", lambda cpus=None: asked.append(1))
    once.last = (once.last[0] - 1.0, *once.last[1:])  # (the window has passed)
    assert once.now() is None and not once.unknown and len(asked) == 2
    monkeypatch.setattr(threads, "_OTHERS", use)
    monkeypatch.setattr(threads, "cores", lambda: 4)
    monkeypatch.setattr(threads._OWN, "now", lambda: 1.0)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (3.2, 0.0, 0.0))
    assert threads.free_cores() == 2  # (2.2 cores busy with other work)


@pytest.mark.skipif(
    threads.machine_busy_seconds() is None, reason="no machine CPU time (not Linux)"
)
def test_a_busy_process_is_seen_at_once():
    """Linux: a process spinning on a core counts as about one core busy within a moment of its
    start (the load average takes a minute), and less soon after it ends (other jobs of the
    machine only raise every reading)."""
    import subprocess
    import sys

    a = RNG.standard_normal((512, 512)).astype(np.float32)

    def readings(seconds: float) -> list[float]:
        out = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            a @ a  # (BLAS's threads spin a while after a product: this process's own)
            got = OTHERS_NOW()
            assert got is None or got >= 0.0
            if got is not None:
                out.append(got)
            time.sleep(0.01)
        return out

    readings(0.3)  # (a first reading to measure from)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        during = readings(1.5)
    finally:
        busy.kill()
        busy.wait()
    after = readings(1.5)
    peak = max(during)
    assert peak >= 0.6
    assert min(after) < peak


@pytest.mark.skipif(
    threads.machine_busy_seconds() is None, reason="no machine CPU time (not Linux)"
)
def test_this_processs_blas_threads_are_not_others():
    """Products on every BLAS thread of this process (spinning between them) read as no more
    other processes' use than this process sleeping does."""
    a = RNG.standard_normal((512, 512)).astype(np.float32)

    def mean_reading(seconds: float, work: bool) -> float:
        got = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if work:
                a @ a
            else:
                time.sleep(0.02)
            r = OTHERS_NOW()
            if r is not None and (not got or r != got[-1]):
                got.append(r)
        return sum(got) / max(1, len(got))

    # (other processes' own load comes and goes: up to three idle / busy pairs, back to back;
    # counting this process's threads as others reads about a core more in every pair)
    excess = []
    with threadpool_limits(threads.cores(), user_api="blas"):
        mean_reading(0.3, False)  # (a reading to measure from)
        for _ in range(3):
            idle = mean_reading(1.0, False)
            busy = mean_reading(1.0, True)
            excess.append(busy - idle)
            if excess[-1] <= 0.4:
                break
    assert min(excess) <= 0.4, excess


class _Pool:
    def __init__(self, n: int) -> None:
        self.n, self.calls, self.reads = n, [], 0

    def get_num_threads(self) -> int:
        self.reads += 1
        return self.n

    def set_num_threads(self, n: int) -> None:
        self.calls.append(n)
        self.n = n


def test_pools_are_limited_for_the_launch_and_restored(monkeypatch):
    pool = _Pool(8)
    monkeypatch.setattr(threads, "_POOLS", [pool])
    monkeypatch.setattr(threads, "_SPLITS", [False])  # (a BLAS whose bits ignore its threads)
    with threads.blas_limit(2):
        assert pool.n == 2
        with threads.blas_limit(4):  # a second launch at once: the smaller limit holds
            assert pool.n == 2
        assert pool.n == 2
    assert pool.n == 8
    env_one = _Pool(1)  # OPENBLAS_NUM_THREADS=1: never raised by a decision
    monkeypatch.setattr(threads, "_POOLS", [env_one])
    with threads.blas_limit(4):
        assert env_one.n == 1
    with threads.blas_limit(4, exact=True):  # an explicit setting is what it says
        assert env_one.n == 4
    assert env_one.n == 1


def test_the_pools_are_read_once_and_set_only_where_the_limit_differs(monkeypatch):
    """The first launch in reads the pools (launches running at once share its reading), a
    pool already at the launch's limit is never set, and the last one out restores exactly
    what the launches changed, also after an explicit count raised a pool above it."""
    at_one, at_eight = _Pool(1), _Pool(8)
    monkeypatch.setattr(threads, "_POOLS", [at_one, at_eight])
    monkeypatch.setattr(threads, "_SPLITS", [False])
    with threads.blas_limit(1):
        with threads.blas_limit(1):
            assert (at_one.n, at_eight.n) == (1, 1)
        with threads.blas_limit(3, exact=True):  # (the smaller limit of the two holds)
            assert (at_one.n, at_eight.n) == (1, 1)
    assert (at_one.n, at_eight.n) == (1, 8)
    assert (at_one.reads, at_eight.reads) == (1, 1)
    assert (at_one.calls, at_eight.calls) == ([], [1, 8])
    with threads.blas_limit(2, exact=True):
        assert (at_one.n, at_eight.n) == (2, 2)
    assert (at_one.n, at_eight.n) == (1, 8)
    assert (at_one.calls, at_eight.calls) == ([2, 1], [1, 8, 2, 8])


def test_a_blas_whose_bits_depend_on_its_threads_stays_on_one(monkeypatch):
    pool = _Pool(8)
    monkeypatch.setattr(threads, "_POOLS", [pool])
    monkeypatch.setattr(threads, "_SPLITS", [True])
    with threads.blas_limit(2, exact=True):
        assert pool.n == 1
    with threads.blas_limit(4):
        assert pool.n == 1
    assert pool.n == 8


def test_the_split_probe_compares_one_and_two_threads():
    a = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)
    b = np.random.default_rng(0).standard_normal((128, 512)).astype(np.float32)
    with threadpool_limits(1, user_api="blas"):
        one = a.T @ b
    with threadpool_limits(2, user_api="blas"):
        two = a.T @ b
    if not np.array_equal(one, two):  # (this machine's BLAS: the probe must say so)
        assert threads.blas_splits_sums()


def test_launches_whose_products_blas_never_threads_leave_the_pools_alone(monkeypatch):
    pool = _Pool(8)
    monkeypatch.setattr(threads, "_POOLS", [pool])
    a, b = _mm_inputs(2, 128, 128)  # 32768 multiply-adds: one BLAS thread whatever the pools
    np.testing.assert_allclose(matmul_kernel(a, b), a @ b, rtol=1e-5, atol=1e-5)
    assert (pool.reads, pool.calls) == (0, [])
    a, b = _mm_inputs(128, 128, 256)  # 4 Mi multiply-adds: the launch's decision holds
    np.testing.assert_allclose(matmul_kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
    # (read by the launch's decision and by the layout probe's key, ``gemm.agrees``: the
    # stationary operand is a transposed view of a large product)
    assert pool.reads == 2 and pool.calls == [1, 8]


def test_results_are_the_same_bits_with_any_thread_count():
    before = threads.blas_threads_now()
    a, b = _mm_inputs(256, 256, 1024)
    one = matmul_kernel.configure(threads=1)
    two = matmul_kernel.configure(threads=2)
    want = one(a, b)
    assert one.last_run.threads == 1
    got = two(a, b)
    assert two.last_run.threads == 2
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_allclose(want, a @ b, rtol=1e-4, atol=1e-4)
    assert threads.blas_threads_now() == before  # the pools are back as they were


def test_thread_setting_is_validated():
    assert SimConfig(threads=4).threads == 4
    assert SimConfig.from_env({"NKI_SIM_THREADS": "3"}).threads == 3
    assert SimConfig.from_env({"NKI_SIM_THREADS": "auto"}).threads is None
    for bad in (0, -1, 2.5, True):
        with pytest.raises(NKIError, match="SimConfig.threads must be a positive int") as e:
            SimConfig(threads=bad)
        assert e.value.code == "err_invalid_config"
    with pytest.raises(NKIError, match="NKI_SIM_THREADS must be 'auto' or a positive integer"):
        SimConfig.from_env({"NKI_SIM_THREADS": "many"})


def test_blocks_run_on_workers_with_blas_on_one_thread_each():
    """``run_blocks`` on a launch given two threads: every block runs once, on this thread or
    the process's worker, each with BLAS on one thread; the pools come back as they were; a
    block's error reaches the caller (after which the pools are back too)."""
    done: dict[int, tuple[str, list[int]]] = {}
    me = threading.current_thread().name

    def block(i: int) -> None:
        done[i] = (threading.current_thread().name, threads.blas_threads_now())
        time.sleep(0.005)  # (long enough for the worker to take some)

    with threadpool_limits(2, user_api="blas"):
        before = threads.blas_threads_now()
        threads.run_blocks(block, list(range(8)), work=1 << 30)
        assert threads.blas_threads_now() == before == [2] * len(before)
        assert sorted(done) == list(range(8))
        assert all(n == [1] * len(n) for _, n in done.values())
        names = {name for name, _ in done.values()}
        assert me in names and len(names) == 2
        assert all(x.startswith("nki-sim") for x in names - {me})

        def fails(i: int) -> None:
            if i == 3:
                raise ValueError("block 3")

        with pytest.raises(ValueError, match="block 3"):
            threads.run_blocks(fails, list(range(8)), work=1 << 30)
        assert threads.blas_threads_now() == before
        # a failing block: the blocks not started are dropped, and the error reaches the caller
        # only when no block runs any more (none writes the launch's storage afterwards)
        finished: list[int] = []

        def slow_or_fails(i: int) -> None:
            if i == 0:
                raise ValueError("block 0")
            time.sleep(0.05)
            finished.append(i)

        with pytest.raises(ValueError, match="block 0"):
            threads.run_blocks(slow_or_fails, list(range(8)), work=1 << 30)
        seen = len(finished)
        time.sleep(0.3)
        assert len(finished) == seen < 7
        done.clear()
        threads.run_blocks(block, list(range(4)), work=1000)  # (little work: this thread)
        assert {name for name, _ in done.values()} == {threading.current_thread().name}


def test_workers_take_the_cores_other_processes_keep_busy_part_of_the_time(monkeypatch):
    """In a launch, ``auto`` runs blocks on the cores not fully busy (BLAS itself gets only the
    cores free: load 0.7 of other processes on 2 cores leaves BLAS one thread and the workers
    two); a fixed count fixes the workers; the environment's limit holds."""
    monkeypatch.setattr(threads, "cores", lambda: 2)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (0.7, 0.7, 0.7))
    monkeypatch.setattr(threads._OWN, "now", lambda: 0.0)
    assert threads.free_cores() == 1 and threads.free_cores(partly=True) == 2
    seen: set[str] = set()

    def block(i: int) -> None:
        seen.add(threading.current_thread().name)
        time.sleep(0.005)  # (long enough for a worker to take some)

    def on_workers(n: int, exact: bool) -> bool:
        """Whether blocks ran on workers too (else all on this thread)."""
        seen.clear()
        with threads.blas_limit(n, exact=exact):
            threads.run_blocks(block, list(range(16)), work=1 << 30)
        others = seen - {threading.current_thread().name}
        assert all(name.startswith("nki-sim") for name in others), seen
        return bool(others)

    with threadpool_limits(2, user_api="blas"):
        assert threads.blas_threads_now()[0] == 2
        assert on_workers(1, exact=False)
        assert not on_workers(1, exact=True)
        monkeypatch.setattr(threads.os, "getloadavg", lambda: (1.5, 1.5, 1.5))
        assert not on_workers(2, exact=False)  # (one core fully busy)
    with threadpool_limits(1, user_api="blas"):  # (as with OPENBLAS_NUM_THREADS=1)
        monkeypatch.setattr(threads.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
        assert not on_workers(1, exact=False)


def test_a_launch_from_any_thread_limits_an_openblas_pool():
    """OpenBLAS pools on their own threads are set through OpenBLAS's C functions: a launch
    from a second thread limits them while the main thread controls them for threadpoolctl
    (whose controller then ignores other threads), and the pools come back as they were."""
    direct = [p for p in threads._pools() if isinstance(p, threads._OpenBLAS)]
    if not direct:
        pytest.skip("NumPy's BLAS here is not OpenBLAS on its own threads")
    seen: list[list[int]] = []

    def launch() -> None:
        with threads.blas_limit(1):
            seen.append([p.get_num_threads() for p in direct])

    with threadpool_limits(2, user_api="blas"):  # (this thread now controls the pools)
        worker = threading.Thread(target=launch)
        worker.start()
        worker.join()
        assert seen == [[1] * len(direct)]
        assert [p.get_num_threads() for p in direct] == [2] * len(direct)
