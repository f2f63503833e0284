"""Performance estimates without hardware: a per-engine cost model (:mod:`.table`,
:mod:`.model`), a list scheduler over the kernel IR (:mod:`.scheduler`), the report and lints
(:mod:`.report`) and timeline exports (:mod:`.export`)."""

from .entry import estimate, record_launches, shape_only, trace_launch
from .report import Report, estimate_ir

__all__ = ["Report", "estimate", "estimate_ir", "record_launches", "shape_only", "trace_launch"]
