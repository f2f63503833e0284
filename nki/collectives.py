"""``import nki.collectives``: collectives between the two cores of an LNC=2 launch (current
API); see ``nki/language/core_collectives.py``."""

from .language import core_collectives
from .language.core_collectives import *  # noqa: F403 (exactly the names of its __all__)

__all__ = core_collectives.__all__
