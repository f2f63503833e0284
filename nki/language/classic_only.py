"""The ``nl`` names that exist in the classic NKI API only (``neuronxcc.nki``): calling one in a
kernel whose generation is not decided makes it a classic-API kernel, as ``mask=``, a classic
``nisa`` call or a launch grid other than ``kernel[lnc]`` do (see
``nki.tracer.note_generation``). Everything else in ``nl`` means the same in both generations or
belongs to the current API."""

from __future__ import annotations

import functools
from typing import Any

from ..errors import is_internal_frame
from ..symbolic import mgrid as _mgrid
from ..tracer import generation, note_generation

# name -> what the classic API has it for (docs/guides/porting.md has the current API's forms)
CLASSIC_ONLY = {
    "arange": "affine index arrays",
    "loop_reduce": "reductions across loop iterations",
    "atomic_rmw": "atomic read-modify-write of HBM",
    "all_reduce": "reductions across SPMD instances",
    "static_cast": "dtype conversion",
}


def _marked(fn: Any, name: str) -> Any:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not is_internal_frame():  # nki-sim's own uses (the current iota) decide nothing
            _decide(f"nl.{name}")
        return fn(*args, **kwargs)

    return call


def mark(namespace: dict[str, Any]) -> None:
    """Replace the classic-only functions of ``namespace`` (``nki.language``'s) by wrappers that
    decide the kernel's generation first."""
    for name in CLASSIC_ONLY:
        namespace[name] = _marked(namespace[name], name)
    namespace["mgrid"] = ClassicMGrid()


class ClassicMGrid:
    """``nl.mgrid[0:128, 0:512]``: affine index arrays over a tile (classic API only), one per
    axis broadcast to the grid's shape as NumPy's ``mgrid``; each key is a slice with int bounds
    (``err_unsupported_index_expression`` otherwise)."""

    def __getitem__(self, key: object) -> Any:
        if not is_internal_frame():
            _decide("nl.mgrid")
        return _mgrid[key]


def _decide(what: str) -> None:
    """An undecided kernel becomes classic; a current one keeps going (its masks and other
    classic constructs are reported where they are used)."""
    if generation() != "current":
        note_generation("classic", f"{what} (classic API only)")
