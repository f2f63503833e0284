"""Executors for the nki-sim kernel IR: the NumPy reference interpreter, numerics, the memory
model, targets and checks."""

from nki.targets import TARGETS, Target, get_target

from .config import SimConfig
from .interpreter import RunInfo, run

__all__ = ["SimConfig", "RunInfo", "run", "TARGETS", "Target", "get_target"]
