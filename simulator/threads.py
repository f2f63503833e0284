"""How many threads BLAS may use while a launch runs.

NumPy's BLAS (OpenBLAS, MKL) starts one thread per core by default. Over-subscribed (a machine
whose cores other processes keep busy) those threads spin waiting for each other and a tiled
matmul kernel runs tens of times slower than on one thread; on an idle many-core machine the
same threads are what makes a large matmul fast. So the simulator decides, per launch, from
the kernel's matrix work and the cores free now, and sets the BLAS pools (``threadpoolctl``)
for the launch only, restoring them after it:

* a kernel without matmuls, or whose matmul work is small, runs with 1 thread;
* otherwise ``min(cores free, work / WORK_PER_THREAD)``, where the cores free are the cores
  this process may use minus those other processes keep busy: on Linux the machine's busy CPU
  time less this process's over the last quarter second or more (a BLAS thread sharing its
  core with another process slowed a product 7x here, so a new load must count within a
  moment); elsewhere the 1-minute load average less this process's recent CPU use.

``SimConfig.threads`` / ``$NKI_SIM_THREADS`` (a positive integer) fixes the count instead;
``auto`` (the default) decides as above. Whatever the environment says
(``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``), a launch never uses more BLAS threads than
this decision. BLAS usually partitions a product's output among its threads, never the sum
over the contraction, so results are bit-identical with any thread count; where this machine's
BLAS does not (``blas_splits_sums``, probed once per process), launches keep it on one thread
and use more cores only through ``run_blocks``.

Independent blocks of one large product (``run_blocks``: the batched backend's stacked tile
products, and the per-position gemms of a batch that does not stack) run on the calling thread
and workers of this process instead, each calling BLAS on one thread and taking one block at a
time. They never wait for each other inside BLAS, so a core other processes keep busy only part
of the time still helps: in ``auto`` they take the cores not fully busy
(``free_cores(partly=True)``), never more than the cores and the environment allow; a fixed
count fixes them too."""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any, TypeVar

from nki.ir import Access, KernelIR

ENV = "NKI_SIM_THREADS"
MATMUL_OPS = frozenset({"matmul", "nc_matmul", "nc_matmul_mx", "nc_transpose"})
WORK_PER_THREAD = 1 << 24  # multiply-adds a thread should get before one more pays off
ITEM_MIN = 1 << 20  # below this per product, BLAS runs one thread anyway: keep it so
# multiply-adds below which a launch's products all run on one BLAS thread whatever the pools'
# setting (OpenBLAS threads a gemm from 65536 x 4): its pools are left alone
SERIAL_MAX = 1 << 18


def _affinity() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def cores() -> int:
    """The cores this process may run on."""
    mine = _affinity()
    return max(1, len(mine) if mine is not None else os.cpu_count() or 1)


_WORK: dict[int, tuple[KernelIR, int, int]] = {}  # id(ir) -> (ir, total, largest product)


def matmul_work(ir: KernelIR) -> tuple[int, int]:
    """(multiply-adds of every matmul the launch executes, those of its largest one), from the
    operand sizes (a product of (M, K) by (K, N) into (M, N): sqrt of the three sizes' product
    is M * K * N) and the executions (grid instances x enclosing loop trips)."""
    hit = _WORK.get(id(ir))
    if hit is not None and hit[0] is ir:
        return hit[1], hit[2]
    total = largest = 0
    grid = math.prod(ir.grid.shape) if ir.grid.shape else 1
    for instr, loops in ir.instructions():
        if instr.op not in MATMUL_OPS or instr.dst is None:
            continue
        sizes = [math.prod(a.shape) for a in (*instr.srcs[:2], instr.dst) if isinstance(a, Access)]
        if len(sizes) < 3:
            continue
        one = math.isqrt(math.prod(sizes))
        runs = grid * math.prod(1 if lp.is_runtime else lp.trip_count for lp in loops)
        total += one * runs
        largest = max(largest, one)
    if len(_WORK) > 512:
        _WORK.clear()
    _WORK[id(ir)] = (ir, total, largest)
    return total, largest


class _OwnUse:
    """This process's CPU use (cores busy) over the last second or so."""

    def __init__(self) -> None:
        self.wall, self.cpu, self.rate = time.monotonic(), time.process_time(), 1.0

    def now(self) -> float:
        wall = time.monotonic()
        if wall - self.wall > 0.5:  # (reading the process's CPU time may be slow: rarely)
            cpu = time.process_time()
            self.rate = (cpu - self.cpu) / (wall - self.wall)
            self.wall, self.cpu = wall, cpu
        return max(1.0, self.rate)


_OWN = _OwnUse()
WINDOW = 0.25  # seconds of wall time a reading of the other processes' use spans at least
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_busy_seconds(cpus: set[int] | None = None) -> float | None:
    """The CPU seconds the cores ``cpus`` (None: every core) have spent busy since boot
    (Linux's ``/proc/stat``: user, nice, system, interrupts, and time the hypervisor gave to
    others); None where unknown."""
    total, seen = 0, False
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if not line.startswith(b"cpu"):
                    break  # (the cores' lines come first)
                name, *fields = line.split()
                core = name[3:]  # (b"" for the line of every core)
                if (not core) if cpus is None else core.isdigit() and int(core) in cpus:
                    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
                    total += user + nice + system + irq + softirq + steal
                    seen = True
    except (OSError, ValueError):
        return None
    return total / _TICK if seen else None


class _OthersUse:
    """The cores other processes kept busy over the last ``WINDOW`` seconds or more: the
    machine's busy CPU time less this process's (all its threads, BLAS's spinning ones
    included), per second of wall time. Both come from the kernel's accounting, so this
    process's own threads never count as others (a count of the threads runnable now, read in
    two steps, counts some of this process's own while BLAS runs here)."""

    def __init__(self) -> None:
        self.last: tuple[float, float, float] | None = None  # (wall, machine busy, own cpu)
        self.rate: float | None = None
        self.lock = threading.Lock()
        self.unknown = False  # (the system does not tell the machine's time: not read again)
        self.cpus: set[int] | None = None  # the cores the last reading summed

    def now(self) -> float | None:
        wall = time.monotonic()
        if self.last is not None and wall - self.last[0] < WINDOW:
            return self.rate
        if self.unknown:
            return None
        with self.lock:  # (launches in several threads: one reading per window)
            cpus = _affinity()  # (the cores this process may run on now)
            busy = machine_busy_seconds(cpus)
            if busy is None:  # (none ever read: the system does not tell; else a failed read)
                self.unknown = self.last is None
                return None
            if cpus != self.cpus:  # (other cores: the previous reading does not compare)
                self.cpus, self.last = cpus, None
            return self.update(time.monotonic(), busy, time.process_time())

    def update(self, wall: float, busy: float, own: float) -> float | None:
        """Take a reading (seconds of wall time, of the machine busy, of this process's CPU):
        the other processes' cores busy since the previous one (None: this is the first). A
        reading less than ``WINDOW`` after the previous one changes nothing (the machine's
        time counts in ticks of 10 ms: a short window would magnify one tick)."""
        if self.last is not None:
            w0, b0, o0 = self.last
            if wall - w0 < WINDOW:
                return self.rate
            self.rate = max(0.0, ((busy - b0) - (own - o0)) / (wall - w0))
        self.last = (wall, busy, own)
        return self.rate


_OTHERS = _OthersUse()
_OTHERS.now()  # (the first reading: the first launch's spans the time since the import)


def others_busy() -> float:
    """The cores other processes keep busy: measured over the last quarter second or more
    where the system says (``_OthersUse``); elsewhere the 1-minute load average less this
    process's recent CPU use (a new load reaches it only over a minute)."""
    got = _OTHERS.now()
    if got is not None:
        return got
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0
    return max(0.0, load - _OWN.now())


def free_cores(partly: bool = False) -> int:
    """The cores not kept busy by other processes (at least 1): ``others_busy`` rounded to the
    nearest core, or with ``partly`` rounded down (a core other processes keep busy only part
    of the time counts as free)."""
    n = cores()
    others = others_busy()
    busy = math.floor(others if partly else others + 0.5)
    return max(1, min(n, n - busy))


def decide(ir: KernelIR, setting: int | None) -> int:
    """The BLAS threads for a launch of ``ir`` (``setting``: a fixed count, None: auto)."""
    n = fixed(ir, setting)
    if n is not None:
        return n
    return int(min(matmul_work(ir)[0] // WORK_PER_THREAD, free_cores()))


def fixed(ir: KernelIR, setting: int | None) -> int | None:
    """``decide``'s answer when it does not depend on the cores free now (a fixed setting, or
    too little matmul work for a second thread); None otherwise."""
    if setting is not None:
        return setting
    total, largest = matmul_work(ir)
    if largest < ITEM_MIN or total // WORK_PER_THREAD < 2:
        return 1
    return None


# ---- the BLAS pools ---------------------------------------------------------------------------

_LOCK = threading.Lock()
_POOLS: list[Any] | None = None  # threadpoolctl's BLAS library controllers (found once)
# the launches running now: how many, their limit, the pools' counts before them and now,
# whether one is an explicit setting, the smallest explicit count, whether one is auto
_ACTIVE: dict[str, Any] = {"count": 0, "limit": 0, "saved": (), "now": (), "fixed": False,
                           "exact_min": None, "auto": False}  # fmt: skip


def _pools() -> list[Any]:
    global _POOLS
    if _POOLS is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # (a dependency; without it the pools are left as they are)
            _POOLS = []
        else:
            found = ThreadpoolController().select(user_api="blas").lib_controllers
            _POOLS = [_direct(p) or p for p in found]
    return _POOLS


_SPLITS: list[bool] = []  # (once per process) whether BLAS's bits depend on its threads


def blas_splits_sums() -> bool:
    """Whether a product on two BLAS threads has other bits than on one, on this machine (some
    OpenBLAS builds switch kernels by the size of each thread's share: seen on an AMD EPYC with
    OpenBLAS 0.3.31). Probed once per process on a few products; launches then keep BLAS on
    one thread (``blas_limit``), and only ``run_blocks``' fixed blocks use more cores."""
    if not _SPLITS:
        pools = _pools()
        splits = False
        if pools:
            import numpy as np

            rng = np.random.default_rng(0)
            saved = [p.get_num_threads() for p in pools]
            try:
                for k, m, n in ((128, 128, 512), (256, 256, 1024)):
                    a = rng.standard_normal((k, m)).astype(np.float32)
                    b = rng.standard_normal((k, n)).astype(np.float32)
                    got = []
                    for count in (1, 2):
                        for p in pools:
                            p.set_num_threads(count)
                        got.append(a.T @ b)
                    splits = splits or not np.array_equal(got[0], got[1])
            finally:
                for p, was in zip(pools, saved):
                    p.set_num_threads(was)
        _SPLITS.append(splits)
    return _SPLITS[0]


class _OpenBLAS:
    """An OpenBLAS pool with its own (pthreads) thread pool, read and set through its C
    functions: threadpoolctl's controller takes a few microseconds per call in Python (and
    lets only the first thread that set a limit set one again), and a launch reads and sets
    the pools each time it runs. The module's lock orders the launches' calls."""

    def __init__(self, get: Callable[[], int], put: Callable[[int], None]) -> None:
        self.get_num_threads, self._put = get, put

    def set_num_threads(self, n: int) -> None:
        self._put(n)


def _direct(pool: Any) -> _OpenBLAS | None:
    """``pool`` as an ``_OpenBLAS`` when it is OpenBLAS on its own threads and threadpoolctl
    names its C functions (else None: the controller is used as it is)."""
    symbol = getattr(pool, "_get_symbol", None)
    if getattr(pool, "internal_api", None) != "openblas" or symbol is None:
        return None
    if getattr(pool, "threading_layer", None) != "pthreads":
        return None
    try:
        get, put = symbol("openblas_get_num_threads"), symbol("openblas_set_num_threads")
    except Exception:  # (another threadpoolctl's private API)
        return None
    if get is None or put is None:
        return None
    return _OpenBLAS(get, put)


def blas_threads_now() -> list[int]:
    """The thread count of each BLAS pool NumPy loaded (for reports and benchmarks)."""
    return [p.get_num_threads() for p in _pools()]


class blas_limit:  # noqa: N801 (used as a function: ``with blas_limit(n): ...``)
    """Run the block with every BLAS pool limited to ``n`` threads (never more than the pool
    had: ``OPENBLAS_NUM_THREADS=1`` stays 1), or set to ``n`` when ``exact`` (an explicit
    setting); the pools are restored afterwards. Launches from several threads share the
    pools: the first one in sets the limit (the smallest asked for while several run), the
    last one out restores the pools. The pools are read once, by the first one in (while
    launches run, only they and ``run_blocks``, which restores what it found, change them)."""

    def __init__(self, n: int, exact: bool = False) -> None:
        self.n, self.exact = n, exact

    def __enter__(self) -> None:
        pools = _pools()
        if not pools:
            return
        n, exact = self.n, self.exact
        single = blas_splits_sums()  # (then BLAS stays on one thread: the same bits)
        with _LOCK:
            if _ACTIVE["count"] == 0:
                saved = tuple([p.get_num_threads() for p in pools])
                _ACTIVE["saved"] = _ACTIVE["now"] = saved
                _ACTIVE["limit"], _ACTIVE["fixed"] = n, exact
                _ACTIVE["exact_min"] = n if exact else None
                _ACTIVE["auto"] = not exact
            else:
                _ACTIVE["limit"] = min(_ACTIVE["limit"], n)
                _ACTIVE["fixed"] = _ACTIVE["fixed"] or exact
                if exact:
                    was = _ACTIVE["exact_min"]
                    _ACTIVE["exact_min"] = n if was is None else min(was, n)
                else:
                    _ACTIVE["auto"] = True
            _ACTIVE["count"] += 1
            limit, now = _ACTIVE["limit"], list(_ACTIVE["now"])
            for i, (p, was) in enumerate(zip(pools, _ACTIVE["saved"])):
                want = 1 if single else limit if exact else min(limit, was)
                if now[i] != want:
                    p.set_num_threads(want)
                    now[i] = want
            _ACTIVE["now"] = tuple(now)

    def __exit__(self, *exc: object) -> None:
        pools = _pools()
        if not pools:
            return
        with _LOCK:
            _ACTIVE["count"] -= 1
            if _ACTIVE["count"] == 0:
                for p, was, now in zip(pools, _ACTIVE["saved"], _ACTIVE["now"]):
                    if now != was:
                        p.set_num_threads(was)
                _ACTIVE["now"] = _ACTIVE["saved"]


# ---- independent blocks of work on the launch's threads ---------------------------------------

T = TypeVar("T")
_WORKERS: dict[int, ThreadPoolExecutor] = {}


def _workers() -> int:
    """The workers for independent blocks now: in a launch, its explicit thread count, or the
    cores other processes do not keep fully busy (workers never wait for each other, so a
    core that is busy part of the time still helps), within what the launches running allow
    (an explicit count, else as many as the cores and the environment allow: BLAS's pools
    before the launch, ``OPENBLAS_NUM_THREADS=1`` stays one); outside a launch, BLAS's
    threads."""
    with _LOCK:
        active, fixed = _ACTIVE["count"] > 0, _ACTIVE["fixed"]
        exact_min, auto, saved = _ACTIVE["exact_min"], _ACTIVE["auto"], _ACTIVE["saved"]
    if not active:
        return max(blas_threads_now(), default=1)
    allowed = [exact_min] if exact_min is not None else []
    if auto:
        allowed.append(min(cores(), max(saved, default=1)))
    return min(allowed) if fixed else min(*allowed, free_cores(partly=True))


def run_blocks(fn: Callable[[T], None], blocks: Sequence[T], work: int) -> None:
    """``fn(block)`` for every block (independent blocks: each writes its own part of a result,
    so the order does not matter). When the work (multiply-adds) is worth more than one thread
    and several cores are free, the blocks run on that many threads: this one and workers of
    this process (``_workers``), each calling BLAS on one thread (``fn`` runs NumPy calls that
    release the GIL). Blocks are handed out one at a time, so a thread the OS leaves waiting (a
    core another process keeps busy) delays only the block it took, where BLAS's threads, each
    given its share up front, would wait for each other at every call. Else in order on this
    thread."""
    n = min(len(blocks), _workers())
    if n < 2 or work < 2 * WORK_PER_THREAD:
        for b in blocks:
            fn(b)
        return
    with _blas_single():
        pool = _WORKERS.get(n - 1)
        if pool is None:
            pool = _WORKERS.setdefault(
                n - 1, ThreadPoolExecutor(n - 1, thread_name_prefix="nki-sim")
            )
        queue = _Blocks(blocks)
        futures = [pool.submit(queue.drain, fn) for _ in range(n - 1)]
        try:
            queue.drain(fn)
        finally:
            # (an interrupt here hands out no more blocks; the launch goes on, or reports the
            # error, only once no block of it is running: none writes its storage afterwards)
            queue.stop()
            wait(futures)
        queue.raise_first()


class _Blocks:
    """``run_blocks``' blocks, handed out one at a time to the threads running them; after a
    failing block (or ``stop``) none is."""

    def __init__(self, blocks: Sequence[Any]) -> None:
        self.blocks, self.next, self.stopped = blocks, 0, False
        self.errors: list[tuple[int, BaseException]] = []
        self.lock = threading.Lock()

    def _take(self) -> int | None:
        with self.lock:
            if self.stopped or self.next >= len(self.blocks):
                return None
            self.next += 1
            return self.next - 1

    def drain(self, fn: Callable[[Any], None]) -> None:
        while (i := self._take()) is not None:
            try:
                fn(self.blocks[i])
            except BaseException as e:  # (KeyboardInterrupt too: the caller re-raises it)
                with self.lock:
                    self.errors.append((i, e))
                    self.stopped = True
                return

    def stop(self) -> None:
        with self.lock:
            self.stopped = True

    def raise_first(self) -> None:
        """Re-raise the error of the first failing block, in block order."""
        if self.errors:
            raise min(self.errors, key=lambda ie: ie[0])[1]


_SINGLE: dict[str, Any] = {"count": 0, "saved": ()}


@contextmanager
def _blas_single() -> Iterator[None]:
    """The block with every BLAS pool at one thread; the first block in (of several running in
    threads of this process) sets it, the last one out restores the pools."""
    pools = _pools()
    with _LOCK:
        if _SINGLE["count"] == 0:
            _SINGLE["saved"] = tuple(p.get_num_threads() for p in pools)
            for p in pools:
                p.set_num_threads(1)
        _SINGLE["count"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _SINGLE["count"] -= 1
            if _SINGLE["count"] == 0:
                for p, was in zip(pools, _SINGLE["saved"]):
                    p.set_num_threads(was)
