"""``nki.collectives`` between the two cores of one LNC=2 launch (current API).

The ranks of a collective are the physical cores of the ``kernel[2]`` launch (rank = core =
``nl.program_id(0)``); a :class:`ReplicaGroup` splits them into disjoint groups that each run
the collective among themselves. Collectives across devices (more ranks) are not simulated.
Each call takes lists of tensors (all in HBM or all in SBUF) and records one meeting of the
cores per (source, destination) pair; the simulator checks at run time that both cores reach
the same collective with the same groups and parameters (``simulator/isa/sync.py``). A
collective whose result on each core needs the other core's data orders the cores' shared-HBM
accesses like ``nisa.core_barrier`` (``simulator/core_races.py``)."""

from __future__ import annotations

from typing import Any

from ..errors import NKIError, arguments_checked, user_loc
from ..ir import HBM_BUFFERS
from ..optable import lookup
from ..tracer import emit, note_generation, operand, request_per_core, state

__all__ = [
    "ReplicaGroup",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "collective_permute",
    "rank_id",
    "reduce_scatter",
]

REDUCE_OPS = ("add", "minimum", "maximum")


class ReplicaGroup:
    """Disjoint groups of ranks, e.g. ``ReplicaGroup([[0, 1]])`` (both cores together) or
    ``ReplicaGroup([[0], [1]])`` (each core alone)."""

    def __init__(self, groups: Any) -> None:
        try:
            self.groups = tuple(tuple(int(r) for r in g) for g in groups)
        except (TypeError, ValueError):
            raise NKIError(
                f"ReplicaGroup({groups!r}): expected a list of rank lists, e.g. [[0, 1]]",
                code="err_invalid_argument",
                loc=user_loc(),
            ) from None
        flat = [r for g in self.groups for r in g]
        if len(flat) != len(set(flat)) or any(not g for g in self.groups):
            raise NKIError(
                f"ReplicaGroup({groups!r}): the rank lists must be non-empty and disjoint",
                code="err_invalid_argument",
                loc=user_loc(),
            )

    def __repr__(self) -> str:
        return f"ReplicaGroup({[list(g) for g in self.groups]})"


@arguments_checked("nki.collectives.rank_id")
def rank_id() -> int:
    """This core's rank in the LNC=2 launch (its ``nl.program_id(0)``; 0 without LNC)."""
    st = state("nki.collectives.rank_id")
    note_generation("current", "nki.collectives.rank_id")
    return st.core if st.core is not None else 0


def _setup(api: str) -> tuple[int, int]:
    """(this core, number of cores): restarts the trace per core on a ``kernel[2]`` launch."""
    note_generation("current", api)
    request_per_core(api)
    st = state(api)
    if st.core is None:
        raise NKIError(
            f"'{api}' runs between the cores of an LNC=2 launch (kernel[2](...)); nki-sim does "
            "not simulate collectives across devices",
            code="err_unsupported_instruction_for_target",
            loc=user_loc(),
        )
    return st.core, st.grid_shape[0]


def _group(replica_group: Any, core: int, cores: int, api: str) -> tuple[tuple[int, ...], ...]:
    if not isinstance(replica_group, ReplicaGroup):
        replica_group = ReplicaGroup(replica_group)
    groups = replica_group.groups
    bad = [r for g in groups for r in g if not 0 <= r < cores]
    if bad:
        raise NKIError(
            f"'{api}' {replica_group}: ranks {bad} are not cores of this launch (0..{cores - 1})",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    if not any(core in g for g in groups):
        raise NKIError(
            f"'{api}' {replica_group}: core {core} is in no group",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    return groups


def _pairs(srcs: Any, dsts: Any, api: str, hbm_only: bool) -> list[tuple[Any, Any, Any, Any]]:
    if not isinstance(srcs, (list, tuple)) or not isinstance(dsts, (list, tuple)):
        raise NKIError(
            f"'{api}' takes lists of tensors: srcs=[...], dsts=[...]",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    if len(srcs) != len(dsts) or not srcs:
        raise NKIError(
            f"'{api}' needs as many destinations as sources (got {len(srcs)} and {len(dsts)})",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    out = []
    for s, d in zip(srcs, dsts):
        sa, ts = operand(s, api, "srcs")
        da, td = operand(d, api, "dsts")
        out.append((sa, ts, da, td))
    spaces = {
        "hbm" if t.buffer in HBM_BUFFERS else t.buffer for _, ts, _, td in out for t in (ts, td)
    }
    if len(spaces) > 1 or spaces - {"hbm", "sbuf"} or (hbm_only and spaces != {"hbm"}):
        want = "all in HBM" if hbm_only else "all in HBM or all in SBUF"
        raise NKIError(
            f"'{api}' tensors must be {want}; got {sorted(spaces)}",
            code="err_unsupported_memory",
            loc=user_loc(),
        )
    return out


def _op(op: Any, api: str) -> str:
    name = lookup(op).name
    if name not in REDUCE_OPS:
        raise NKIError(
            f"'{api}' op={name}: supported reductions are nl.add, nl.minimum and nl.maximum",
            code="err_unsupported_op",
            loc=user_loc(),
        )
    return name


def _dim(dim: Any, rank: int, sbuf: bool, api: str) -> int:
    allowed = (0, 1) if sbuf else (0,)
    if dim not in allowed or isinstance(dim, bool) or (sbuf and rank != 2 and dim == 1):
        raise NKIError(
            f"'{api}' collective_dim={dim!r}: supported is {' or '.join(map(str, allowed))}"
            + (" (1 only for 2-D SBUF tiles)" if sbuf else ""),
            code="err_invalid_argument",
            loc=user_loc(),
        )
    return int(dim)


def _shape_error(api: str, src: Any, dst: Any, want: tuple[int, ...], why: str) -> NKIError:
    return NKIError(
        f"'{api}': a source of shape {list(src.shape)} gives a destination of shape "
        f"{list(want)} ({why}), got {list(dst.shape)}",
        code="err_free_size_mismatch",
        loc=user_loc(),
    )


def _emit(
    name: str, api: str, pairs: list, groups: Any, core: int, extra: tuple, shape_of: Any
) -> None:
    n = len(next(g for g in groups if core in g))
    for sa, _, da, _ in pairs:
        want, why = shape_of(tuple(sa.shape), n)
        if want is not None and tuple(da.shape) != want:
            raise _shape_error(api, sa, da, want, why)
        attrs = (("groups", groups),) + extra
        emit("lnc", name, da, (sa,), attrs=attrs, api=api)


def _same(shape: tuple[int, ...], n: int) -> tuple[tuple[int, ...], str]:
    return shape, "the same shape"


def _scaled(dim: int, up: bool) -> Any:
    def shape_of(shape: tuple[int, ...], n: int) -> tuple[tuple[int, ...] | None, str]:
        s = list(shape)
        if up:
            s[dim] *= n
            return tuple(s), f"dimension {dim} times the {n} ranks of the group"
        if s[dim] % n:
            return (None, "")
        s[dim] //= n
        return tuple(s), f"dimension {dim} split over the {n} ranks of the group"

    return shape_of


def _divisible(api: str, pairs: list, dim: int, groups: Any, core: int) -> None:
    n = len(next(g for g in groups if core in g))
    for sa, _, _, _ in pairs:
        if sa.shape[dim] % n:
            raise NKIError(
                f"'{api}': dimension {dim} of the source ({sa.shape[dim]}) must split evenly "
                f"over the {n} ranks of the group",
                code="err_free_size_mismatch",
                loc=user_loc(),
            )


@arguments_checked("nki.collectives.all_reduce")
def all_reduce(
    srcs: Any, dsts: Any, replica_group: Any, op: Any, priority: Any = None, name: Any = None
) -> None:
    """``dsts[i] = op`` over the group's ranks of their ``srcs[i]`` (fp32 math).

    Constraints: a ``kernel[2]`` launch; tensors all in HBM or all in SBUF; each destination
    the shape of its source; ``op`` one of ``nl.add``, ``nl.minimum``, ``nl.maximum``."""
    api = "nki.collectives.all_reduce"
    core, cores = _setup(api)
    pairs = _pairs(srcs, dsts, api, hbm_only=False)
    groups = _group(replica_group, core, cores, api)
    _emit("all_reduce", api, pairs, groups, core, (("op", _op(op, api)),), _same)


@arguments_checked("nki.collectives.all_gather")
def all_gather(
    srcs: Any,
    dsts: Any,
    replica_group: Any,
    collective_dim: Any,
    priority: Any = None,
    name: Any = None,
) -> None:
    """``dsts[i]`` = the group's ``srcs[i]`` concatenated in rank-list order along
    ``collective_dim`` (0; 0 or 1 for 2-D SBUF tiles)."""
    api = "nki.collectives.all_gather"
    core, cores = _setup(api)
    pairs = _pairs(srcs, dsts, api, hbm_only=False)
    groups = _group(replica_group, core, cores, api)
    sbuf = pairs[0][1].buffer == "sbuf"
    dim = _dim(collective_dim, len(pairs[0][0].shape), sbuf, api)
    _emit("all_gather", api, pairs, groups, core, (("dim", dim),), _scaled(dim, True))


@arguments_checked("nki.collectives.reduce_scatter")
def reduce_scatter(
    srcs: Any,
    dsts: Any,
    replica_group: Any,
    collective_dim: Any,
    op: Any,
    priority: Any = None,
    name: Any = None,
) -> None:
    """Reduce ``srcs[i]`` over the group with ``op``, split the result along
    ``collective_dim`` into one chunk per rank, and give the k-th rank of the group the k-th
    chunk in ``dsts[i]``."""
    api = "nki.collectives.reduce_scatter"
    core, cores = _setup(api)
    pairs = _pairs(srcs, dsts, api, hbm_only=False)
    groups = _group(replica_group, core, cores, api)
    sbuf = pairs[0][1].buffer == "sbuf"
    dim = _dim(collective_dim, len(pairs[0][0].shape), sbuf, api)
    _divisible(api, pairs, dim, groups, core)
    extra = (("dim", dim), ("op", _op(op, api)))
    _emit("reduce_scatter", api, pairs, groups, core, extra, _scaled(dim, False))


@arguments_checked("nki.collectives.all_to_all")
def all_to_all(
    srcs: Any,
    dsts: Any,
    replica_group: Any,
    collective_dim: Any,
    priority: Any = None,
    name: Any = None,
) -> None:
    """Split ``srcs[i]`` along ``collective_dim`` (0) into one chunk per rank: chunk j goes to
    the j-th rank of the group, which places what the k-th rank sent at chunk k of
    ``dsts[i]``. HBM tensors only."""
    api = "nki.collectives.all_to_all"
    core, cores = _setup(api)
    pairs = _pairs(srcs, dsts, api, hbm_only=True)
    groups = _group(replica_group, core, cores, api)
    dim = _dim(collective_dim, len(pairs[0][0].shape), False, api)
    _divisible(api, pairs, dim, groups, core)
    _emit("all_to_all", api, pairs, groups, core, (("dim", dim),), _same)


@arguments_checked("nki.collectives.collective_permute")
def collective_permute(
    srcs: Any, dsts: Any, source_target_pairs: Any, priority: Any = None, name: Any = None
) -> None:
    """For each ``(source, target)`` rank pair, the target's ``dsts[i]`` receives the
    source's ``srcs[i]``; a rank no pair targets keeps its ``dsts``. HBM tensors only; each
    rank is a source at most once and a target at most once."""
    api = "nki.collectives.collective_permute"
    core, cores = _setup(api)
    pairs = _pairs(srcs, dsts, api, hbm_only=True)
    try:
        stp = tuple((int(s), int(t)) for s, t in source_target_pairs)
    except (TypeError, ValueError):
        stp = None
    if (
        stp is None
        or any(not (0 <= r < cores) for p in stp for r in p)
        or len({s for s, _ in stp}) != len(stp)
        or len({t for _, t in stp}) != len(stp)
    ):
        raise NKIError(
            f"'{api}' source_target_pairs={source_target_pairs!r}: expected (source, target) "
            f"rank pairs among cores 0..{cores - 1}, each rank a source and a target at most once",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    _emit("collective_permute", api, pairs, ((0, 1),), core, (("pairs", stp),), _same)
