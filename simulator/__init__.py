"""Executors for the nki-sim kernel IR: the NumPy reference interpreter and the Numba backend,
the memory model, numerics, static checks and launching (``launch.py``)."""

from nki.targets import TARGETS, Target, get_target

from .config import SimConfig
from .launch import RunInfo, run

__all__ = ["SimConfig", "RunInfo", "run", "TARGETS", "Target", "get_target"]
