"""Threads launching kernels on the Numba backend from a cold disk cache: run as a script
(``python numba_threads.py``, with ``NKI_SIM_CACHE_DIR`` set to a fresh directory) by
``test_numba_threads.py``. Each thread builds and runs the same kernels on its own shapes, so
threads import generated modules, write cache files and compile library kernels and drivers at
the same time. Prints ``ok`` when every launch ran compiled with NumPy's results; otherwise
the failures, and exits 1."""

from __future__ import annotations

import sys
import threading
import traceback
import warnings

import numpy as np

import nki
import nki.language as nl


@nki.jit
def scale_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[1] // 8):
        c = slice(i * 8, (i + 1) * 8)
        nl.store(out[:, c], value=nl.add(nl.multiply(nl.load(a[:, c]), 2.0), nl.load(b[:, c])))
    return out


@nki.jit
def exp_rows(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.sequential_range(a.shape[0] // 32):
        r = slice(i * 32, (i + 1) * 32)
        nl.store(out[r, :], value=nl.exp(nl.load(a[r, :])))
    return out


def main(n_threads: int = 8) -> int:
    failures: list[str] = []
    barrier = threading.Barrier(n_threads)

    def run(t: int) -> None:
        rng = np.random.default_rng(t)
        shape = (32 * (1 + t % 2), 16)  # two shapes: threads build the same drivers at once
        a = rng.standard_normal(shape).astype(np.float32)
        b = rng.standard_normal(shape).astype(np.float32)
        cases = [
            (scale_add, (a, b), a * np.float32(2) + b),
            (exp_rows, (a,), np.exp(a)),
        ]
        barrier.wait(timeout=60)
        for k, args, want in cases:
            mine = k.configure(backend="numba")  # this thread's last_run
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")  # a fallback warns: fail on it
                    got = mine(*args)
            except Exception as e:  # noqa: BLE001 - collected and reported below
                where = "".join(traceback.format_exc(limit=-12))  # (where it failed: rare races)
                failures.append(f"thread {t} {k.__name__}: {type(e).__name__}: {e}\n{where}")
                continue
            if mine.last_run.backend != "numba":
                failures.append(f"thread {t} {k.__name__}: ran on {mine.last_run.backend}")
            elif not np.allclose(got, want, rtol=1e-6, atol=1e-6):
                failures.append(f"thread {t} {k.__name__}: wrong result")

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    threads = [threading.Thread(target=run, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    sys.setswitchinterval(old)
    if any(th.is_alive() for th in threads):
        failures.append("a thread did not finish")
    print("\n".join(failures) if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 8))
