"""Performance estimates without hardware: a per-engine cost model (:mod:`.table`,
:mod:`.model`, :mod:`.masks`), the compiler's rewrites of the program (:mod:`.compiler`), a
list scheduler over the kernel IR (:mod:`.scheduler`), the report and lints (:mod:`.report`)
and timeline exports (:mod:`.export`). ``nki.estimate`` (``nki/estimates.py``)
traces a launch from shapes and calls :func:`estimate_ir`."""

from .report import Report, estimate_ir

__all__ = ["Report", "estimate_ir"]
