"""NumPy's own OpenBLAS ``sgemm`` called directly (``ctypes``), for what ``np.matmul`` cannot
do: ``C += A @ B`` into a strided fp32 tile in one call (BLAS's ``beta = 1``), which saves the
product's separate array and the pass that adds it (``gemm.accumulate`` adds a PSUM
accumulation's products so).

Only the OpenBLAS that NumPy itself loaded is used (found through ``threadpoolctl``, under
NumPy's directory), so the kernels are the ones ``np.matmul`` runs; whether they give the
reference's bits (a tile's gemm, then an fp32 add) is ``gemm``'s probe to decide. With another
BLAS (MKL, Accelerate) or none found, ``sgemm()`` is None and callers keep NumPy's path."""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable

import numpy as np

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112

# (cblas_sgemm, the build's configuration string, integer width) in the OpenBLAS builds NumPy's
# wheels bundle; the configuration must agree on the width (``USE64BITINT``) before a call
_SYMBOLS = (
    ("scipy_cblas_sgemm64_", "scipy_openblas_get_config64_", ctypes.c_int64),  # NumPy 2
    ("cblas_sgemm64_", "openblas_get_config64_", ctypes.c_int64),  # NumPy 1.2x
    ("scipy_cblas_sgemm", "scipy_openblas_get_config", ctypes.c_int32),
    ("cblas_sgemm", "openblas_get_config", ctypes.c_int32),
)

Sgemm = Callable[[bool, int, int, int, int, int, int, int, int, int], None]
_FOUND: dict[str, Sgemm | None] = {}
_LOCK = threading.Lock()


def sgemm() -> Sgemm | None:
    """``f(trans_a, m, n, k, a, lda, b, ldb, c, ldc)``: ``C += op(A) @ B`` in fp32, row-major,
    ``a``, ``b``, ``c`` addresses of fp32 data (``op(A)`` is (m, k): A itself, or with
    ``trans_a`` the transpose of (k, m) storage; B is (k, n); C (m, n) with row stride ``ldc``
    elements). None when NumPy's BLAS is not an OpenBLAS this can call."""
    if "f" not in _FOUND:
        with _LOCK:
            if "f" not in _FOUND:
                _FOUND["f"] = _load()
    return _FOUND["f"]


def _load() -> Sgemm | None:
    try:
        from threadpoolctl import ThreadpoolController

        libs = ThreadpoolController().select(internal_api="openblas").lib_controllers
    except Exception:  # (no threadpoolctl, or it cannot inspect this process)
        return None
    home = os.path.dirname(os.path.dirname(os.path.realpath(np.__file__)))
    for lib in libs:
        if not getattr(lib, "filepath", None):
            continue
        path = os.path.realpath(lib.filepath)
        if not path.startswith(os.path.join(home, "numpy")):
            continue  # (not numpy.libs/ nor numpy/.dylibs/: an OpenBLAS another package loaded)
        try:
            dll = ctypes.CDLL(path)
        except OSError:
            continue
        for name, config, idx in _SYMBOLS:
            fn, conf = getattr(dll, name, None), getattr(dll, config, None)
            if fn is None or conf is None:
                continue
            conf.restype = ctypes.c_char_p
            wide = b"USE64BITINT" in (conf() or b"")
            if wide == (idx is ctypes.c_int64):  # (else calls would pass the wrong integers)
                return _bound(fn, idx)
    return None


def _bound(fn: ctypes._CFuncPtr, idx: type) -> Sgemm:  # type: ignore[name-defined]
    e, f, p = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
    fn.argtypes = [e, e, e, idx, idx, idx, f, p, idx, p, idx, f, p, idx]
    fn.restype = None

    def call(
        trans_a: bool, m: int, n: int, k: int, a: int, lda: int, b: int, ldb: int, c: int,
        ldc: int,
    ) -> None:  # fmt: skip
        fn(_ROW_MAJOR, _TRANS if trans_a else _NO_TRANS, _NO_TRANS, m, n, k, 1.0, a, lda, b, ldb,
           1.0, c, ldc)  # fmt: skip

    return call
