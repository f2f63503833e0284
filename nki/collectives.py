"""``import nki.collectives``: collectives between the two cores of an LNC=2 launch (current
API); see ``nki/language/core_collectives.py``."""

from .language.core_collectives import (
    ReplicaGroup,
    all_gather,
    all_reduce,
    all_to_all,
    collective_permute,
    rank_id,
    reduce_scatter,
)

__all__ = [
    "ReplicaGroup",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "collective_permute",
    "rank_id",
    "reduce_scatter",
]
