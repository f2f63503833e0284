"""``nki.collectives`` between the two cores of one LNC=2 launch (current API).

The ranks of a collective are the physical cores of the ``kernel[2]`` launch (rank = core =
``nl.program_id(0)``); a :class:`ReplicaGroup` splits them into disjoint groups that each run
the collective among themselves. Collectives across devices (more ranks) are not simulated.
Each call takes lists of tensors (all in HBM or all in SBUF) and records one meeting of the
cores per (source, destination) pair; the simulator checks at run time that both cores reach
the same collective with the same groups and parameters (``simulator/isa/collectives.py``). The
ring collectives (``collective_permute_implicit*``) send to the next rank of the caller's group and
receive from the previous one; in a group of the two cores that is a swap. The ``_v``
collectives are documented for rank lists of four ranks or several devices, which two cores
cannot form: calling them is a located error. A
collective whose result on each core needs the other core's data orders the cores' shared-HBM
accesses like ``nisa.core_barrier`` (``simulator/checks/lnc_races.py``)."""

from __future__ import annotations

from typing import Any

from ..errors import NKIError, arguments_checked, user_loc
from ..ir import HBM_BUFFERS, Access
from ..optable import lookup
from ..symbolic import Scalar
from ..tracer import emit, new_tensor, note_generation, operand, request_per_core, state
from .loops import int_register, new_register, set_register

__all__ = [
    "ReplicaGroup",
    "all_gather",
    "all_gather_v",
    "all_reduce",
    "all_to_all",
    "all_to_all_v",
    "collective_permute",
    "collective_permute_implicit",
    "collective_permute_implicit_current_processing_rank_id",
    "collective_permute_implicit_reduce",
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
def rank_id(name: Any = None) -> int:
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
    if len(out) > 1 and spaces == {"sbuf"}:
        raise NKIError(
            f"'{api}' with {len(out)} tensors per list (coalesced): supported only for HBM "
            "tensors; pass SBUF tiles one per call",
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


# ---- ring collectives: each rank sends to the next rank of its group --------------------------
MAX_CHANNELS = 4  # the documented maximum (replica groups holding every device of a node)


def _one_per_channel(by_channel: Any, api: str, role: str) -> list[Any]:
    """The tensors of ``[[t0], [t1], ...]`` (one inner list of exactly one tensor per channel)."""
    ok = isinstance(by_channel, (list, tuple)) and by_channel
    ok = ok and all(isinstance(c, (list, tuple)) and len(c) == 1 for c in by_channel)
    if not ok:
        raise NKIError(
            f"'{api}' {role} must be a list with one list of exactly one tensor per channel, "
            f"e.g. [[t]]; got {by_channel!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    return [c[0] for c in by_channel]


def _channels(channel_ids: Any, n: int, api: str) -> None:
    ids = list(channel_ids) if isinstance(channel_ids, (list, tuple)) else None
    if ids != list(range(n)) or n > MAX_CHANNELS:
        raise NKIError(
            f"'{api}' channel_ids={channel_ids!r}: expected consecutive ids from 0, one per "
            f"channel of the tensor lists ({n}), at most {MAX_CHANNELS}",
            code="err_invalid_argument",
            loc=user_loc(),
        )


@arguments_checked("nki.collectives.collective_permute_implicit")
def collective_permute_implicit(
    srcs_by_channel: Any,
    dsts_by_channel: Any,
    replica_group: Any,
    channel_ids: Any = (0,),
    priority: Any = None,
    name: Any = None,
) -> None:
    """On every channel, send ``srcs_by_channel[c][0]`` to the next rank of this core's group
    (in rank-list order, wrapping) and receive the previous rank's into
    ``dsts_by_channel[c][0]``. Constraints: a ``kernel[2]`` launch; one tensor per channel;
    ``channel_ids`` = ``[0, 1, ...]`` (at most 4); each destination the shape of its source;
    tensors all in HBM or all in SBUF."""
    api = "nki.collectives.collective_permute_implicit"
    core, cores = _setup(api)
    srcs = _one_per_channel(srcs_by_channel, api, "srcs_by_channel")
    dsts = _one_per_channel(dsts_by_channel, api, "dsts_by_channel")
    _channels(channel_ids, len(srcs), api)
    # one tensor per channel: channels are separate transfers, not a coalesced list
    pairs = [p for s, d in zip(srcs, dsts) for p in _pairs([s], [d], api, hbm_only=False)]
    groups = _group(replica_group, core, cores, api)
    _emit("permute_implicit", api, pairs, groups, core, (), _same)


@arguments_checked("nki.collectives.collective_permute_implicit_reduce")
def collective_permute_implicit_reduce(
    srcs0_by_channel: Any,
    srcs1_by_channel: Any,
    dsts_by_channel: Any,
    replica_group: Any,
    op: Any,
    channel_ids: Any = (0,),
    priority: Any = None,
    name: Any = None,
) -> None:
    """On every channel, reduce this core's ``op(srcs0[c][0], srcs1[c][0])`` (fp32 math), send
    it to the next rank of the group and receive the previous rank's reduction into
    ``dsts_by_channel[c][0]``. ``op``: ``nl.add``, ``nl.minimum`` or ``nl.maximum``; the three
    tensors of a channel have one shape; the constraints of
    :func:`collective_permute_implicit` otherwise."""
    api = "nki.collectives.collective_permute_implicit_reduce"
    core, cores = _setup(api)
    s0 = _one_per_channel(srcs0_by_channel, api, "srcs0_by_channel")
    s1 = _one_per_channel(srcs1_by_channel, api, "srcs1_by_channel")
    dsts = _one_per_channel(dsts_by_channel, api, "dsts_by_channel")
    if not len(s0) == len(s1) == len(dsts):
        raise NKIError(
            f"'{api}' needs as many channels in srcs0, srcs1 and dsts (got {len(s0)}, "
            f"{len(s1)} and {len(dsts)})",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    _channels(channel_ids, len(dsts), api)
    left = [p for s, d in zip(s0, dsts) for p in _pairs([s], [d], api, hbm_only=False)]
    right = [p for s, d in zip(s1, dsts) for p in _pairs([s], [d], api, hbm_only=False)]
    groups = _group(replica_group, core, cores, api)
    reduce = _op(op, api)
    for (a0, _, da, _), (a1, _, _, _) in zip(left, right):
        for a in (a0, a1):
            if tuple(a.shape) != tuple(da.shape):
                raise _shape_error(api, a, da, tuple(a.shape), "the same shape")
        attrs = (("groups", groups), ("op", reduce))
        emit("lnc", "permute_implicit_reduce", da, (a0, a1), attrs=attrs, api=api)


@arguments_checked("nki.collectives.collective_permute_implicit_current_processing_rank_id")
def collective_permute_implicit_current_processing_rank_id(
    iteration_id: Any, replica_group: Any, channel_id: Any = 0, name: Any = None
) -> Any:
    """A register holding the rank whose data a ring collective step ``iteration_id`` works on:
    this core's own rank at step 0, then the previous rank of the group, and so on around the
    ring. ``iteration_id``: an int, a loop iterator, or a register / int32 NkiScalar."""
    api = "nki.collectives.collective_permute_implicit_current_processing_rank_id"
    core, cores = _setup(api)
    groups = _group(replica_group, core, cores, api)
    ring = next(g for g in groups if core in g)
    if not isinstance(channel_id, int) or isinstance(channel_id, bool):
        raise NKIError(
            f"'{api}' channel_id={channel_id!r} must be an int",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    pos = ring.index(core)
    if isinstance(iteration_id, int) and not isinstance(iteration_id, bool):
        return int_register(ring[(pos - iteration_id) % len(ring)])
    if isinstance(iteration_id, Scalar):  # a loop iterator: materialise it in a register
        step = new_register(api)
        set_register(step, iteration_id.aff, api)
        src: Access = step.access_()
    else:
        src, t = operand(iteration_id, api, "iteration_id")
        if t.buffer != "sbuf" or t.decl.dtype != "int32" or tuple(src.shape) not in ((1,), (1, 1)):
            raise NKIError(
                f"'{api}' iteration_id must be an int, a loop iterator or an int32 register; "
                f"got {list(src.shape)} {t.decl.dtype} in {t.buffer}",
                code="err_unsupported_operand",
                loc=user_loc(),
            )
    out = new_tensor((1, 1), "int32", "sbuf", api=api)
    attrs = (("ring", ring), ("pos", pos))
    emit("nkiscalar", "ring_rank", out.access_(), (src,), attrs=attrs, api=api)
    return out


def _not_two_ranks(api: str, need: str) -> NKIError:
    return NKIError(
        f"'{api}' is documented for {need}; the ranks nki-sim simulates are the two cores of "
        "one LNC=2 launch, which cannot form them",
        code="err_unsupported_instruction_for_target",
        loc=user_loc(),
    )


@arguments_checked("nki.collectives.all_to_all_v")
def all_to_all_v(
    srcs: Any,
    dsts: Any,
    replica_group: Any,
    metadata_tensor: Any,
    recv_counts_known: Any = False,
    has_rdispls: Any = False,
    priority: Any = None,
    name: Any = None,
) -> None:
    """Variable-length all-to-all over flat HBM buffers. Documented only for rank lists that
    span several devices, so within nki-sim (two cores) every call is a located error."""
    note_generation("current", "nki.collectives.all_to_all_v")
    raise _not_two_ranks(
        "nki.collectives.all_to_all_v", "replica groups spanning more than one device"
    )


@arguments_checked("nki.collectives.all_gather_v")
def all_gather_v(
    srcs: Any,
    dsts: Any,
    replica_group: Any,
    metadata_tensor: Any,
    recv_counts_known: Any = False,
    has_rdispls: Any = False,
    priority: Any = None,
    name: Any = None,
) -> None:
    """Variable-length all-gather over flat HBM buffers. Documented only for rank lists of
    exactly four ranks, so within nki-sim (two cores) every call is a located error."""
    note_generation("current", "nki.collectives.all_gather_v")
    raise _not_two_ranks("nki.collectives.all_gather_v", "rank lists of exactly four ranks")
